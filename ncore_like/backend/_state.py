"""``ArrayState``: what the backend learnt about one array between its reads (the caller
keeps one per array: :class:`~ncore_like.Array` does)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._plan import ChunkLayout, ReadPlan

__all__ = ["ArrayState", "RowReader"]

NDArray = np.ndarray[Any, Any]

#: Reads one row by index into ``out`` (or a new read-only array); None where the general
#: path must decide (an index out of bounds: its error).
RowReader = Callable[[int, NDArray | None], NDArray | None]


class ArrayState:
    """Memoised per array (an archive opened for reading doesn't change). A cache only:
    an array pickles without it (it may hold what doesn't pickle) and starts afresh. (A
    plain class: see :class:`~._plan.ChunkLayout`.)"""

    __slots__ = ("fallback_logged", "last", "layout", "row_reader", "row_shape", "rows_known", "whole_plan")

    def __init__(self) -> None:
        #: The chunk layout of the fast path, or why it doesn't apply; None until asked for.
        self.layout: ChunkLayout | str | None = None
        #: The plan of the whole array (``...``), or why the fast path doesn't apply to it.
        self.whole_plan: ReadPlan | str | None = None
        #: The last other selection and its plan (the same object is the same selection:
        #: selections are immutable), so a read with ``out=`` plans once for the check and
        #: the read.
        self.last: tuple[Any, ReadPlan | str] | None = None
        #: True once :attr:`row_reader` was looked for.
        self.rows_known = False
        #: The reader of single rows of arrays chunked by whole rows (None for other arrays).
        self.row_reader: RowReader | None = None
        #: The number of rows and the shape of one, for arrays with a row reader.
        self.row_shape: tuple[int, tuple[int, ...]] | None = None
        #: True once a fallback to zarr-python was logged (once per array, not per read).
        self.fallback_logged = False
