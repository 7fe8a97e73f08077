"""Writing one row of an archive's array chunked by single rows, the commonest small write
(a recorder storing each time step's pose, sweep or feature row as it arrives).

The general path of :meth:`Array.write` plans a region, broadcasts the data, starts a batch
encoder and packs a batch of one record: ~55 us a row of 4 KB, of which Blosc takes ~6. A
row writer binds everything a row needs once (the compressor, the key's parts, the
archive's store) and per row only checks the index and the data, encodes and appends the
record.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .._codecs import SMALL_CHUNK_BYTES, blosc_compressor
from ..errors import RecordExistsError
from ._compression import BloscCompression

__all__ = ["RowWriter", "row_writer"]

#: ``write_rows(index or window, data)``: True once the row, or the rows of a window
#: ``slice(start, stop)`` of at most ``_WINDOW_ROWS``, are stored; False where the general
#: path must decide (an index out of bounds, data that isn't the rows' shape: broadcasting
#: and errors stay there).
RowWriter = Callable[[int | slice, Any], bool]

#: Windows of at most this many rows are written row by row (~18 us a 4 KB Blosc row);
#: larger blocks take the general path, whose batches cost less a row from about there.
_WINDOW_ROWS = 32


def row_writer(
    *,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    dtype: np.dtype[Any],
    compression: BloscCompression | None,
    row_key: Callable[[int], str],
    contains: Callable[[str], bool],
    store: Callable[[str, bytes | memoryview], None],
    where: str,
) -> RowWriter | None:
    """The row writer of an array of ``shape`` whose chunks are single whole rows, storing
    records of ``dtype`` (stored byte order) with ``store(key, record)`` once ``contains``
    said no record has the key; None for other chunkings (a row isn't one whole chunk)."""
    if not shape or chunks[0] != 1 or chunks[1:] != shape[1:] or dtype.hasobject or not dtype.itemsize:
        return None
    rows, row_shape = shape[0], shape[1:]
    c = compression
    small = math.prod(row_shape) * dtype.itemsize <= SMALL_CHUNK_BYTES  # rows are compressed on the writer's thread
    compress = (
        None
        if c is None
        else blosc_compressor(c.cname, c.clevel, c.shuffle_id, c.blocksize, dtype.itemsize, small=small)
    )
    asarray, uint8 = np.asarray, np.uint8

    def write_rows(selection: int | slice, data: Any) -> bool:
        if type(selection) is int:
            start = selection + rows if selection < 0 else selection
            stop, shape_given = start + 1, row_shape
            if not 0 <= start < rows:
                return False
        else:
            start, stop, step = selection.indices(rows)  # type: ignore[union-attr]
            if step != 1 or not 0 < stop - start <= _WINDOW_ROWS:
                return False
            shape_given = (stop - start, *row_shape)
        values = asarray(data, dtype)  # cast as the general path casts
        if values.shape != shape_given:
            return False
        keys = list(map(row_key, range(start, stop)))
        # Looked up before anything is encoded or written: a rejected write changes nothing.
        for key in keys:
            if contains(key):
                raise RecordExistsError(key, f"{where}: chunk record {key!r} exists already")
        raw = (values if values.flags.c_contiguous else values.copy()).reshape(len(keys), -1).view(uint8)
        # Uncompressed rows go as views: the archive has them in its buffer or file when
        # ``store`` returns, before the caller can change the values.
        for key, row in zip(keys, raw, strict=True):
            store(key, memoryview(row) if compress is None else compress(row))  # type: ignore[arg-type]
        return True

    return write_rows
