"""From an array and a selection to the chunks to read and where each lands (pure).

:func:`chunk_layout` decides whether the fast path understands an array's chunks (raw or
Blosc-compressed C-order elements in an indexed tar archive) and names the reason when it
doesn't; :func:`plan_read` maps a selection to one :class:`ChunkTask` per touched chunk,
using zarr-python's own indexers so selections mean (and fail) exactly as in zarr-python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._compat import (
    ZarrArray,
    array_zarr_format,
    blosc_compressor,
    chunk_key,
    chunk_projections,
    raw_chunk_layout,
    selection_kind,
)
from ..archive import IndexedTarArchive
from ..store import ItarZarrStore

__all__ = [
    "ChunkLayout",
    "ChunkTask",
    "ReadPlan",
    "chunk_layout",
    "is_blob",
    "is_bytes_like",
    "plan_read",
]


def is_bytes_like(array: ZarrArray) -> bool:
    """True for arrays whose values are a byte string: 0-dimensional fixed-length bytes, or
    one-dimensional ``uint8`` (what :meth:`~ncore_like.Array.read_bytes` reads)."""
    dtype = np.dtype(array.dtype)
    return (array.ndim == 0 and dtype.kind == "S") or (array.ndim == 1 and dtype == np.uint8)


def is_blob(array: ZarrArray) -> bool:
    """True for binary blobs as :meth:`~ncore_like.Group.create_bytes_array` stores them: in
    zarr format 2 a 0-dimensional fixed-length bytes array, in format 3 (which has no
    fixed-length bytes) a one-dimensional ``uint8`` array stored as one uncompressed chunk.
    Their one record is the blob itself. (A 1-d ``uint8`` array of format 2 holds numbers;
    it is bytes-like, see :func:`is_bytes_like`, but no blob.)"""
    if not is_bytes_like(array):
        return False
    if array.ndim == 0:
        return True
    if array_zarr_format(array) != 3 or array.chunks[0] < array.shape[0]:
        return False
    return blosc_compressor(array) is None


@dataclass(frozen=True)
class ChunkLayout:
    """How the chunks of an array are stored."""

    archive: IndexedTarArchive
    stored_dtype: np.dtype[Any]
    """dtype of the elements in a decoded chunk (byte order as stored)."""
    chunk_shape: tuple[int, ...]
    compressed: bool
    fill_value: Any

    @property
    def chunk_nbytes(self) -> int:
        return math.prod(self.chunk_shape) * self.stored_dtype.itemsize


@dataclass(frozen=True)
class ChunkTask:
    """One chunk of a read: its record (None if not stored) and where its values go."""

    key: str
    size: int
    """Stored bytes (0 if not stored)."""
    stored: bool
    chunk_selection: Any
    out_selection: Any
    full: bool
    """True if the selection takes the whole chunk (then it may decode straight into the
    output, when the output region is contiguous)."""


@dataclass(frozen=True)
class ReadPlan:
    """The chunks of a read and the shape of its output."""

    shape: tuple[int, ...]
    tasks: list[ChunkTask]
    drop_axes: tuple[int, ...]

    @property
    def stored_bytes(self) -> int:
        return sum(task.size for task in self.tasks)


def chunk_layout(array: ZarrArray) -> ChunkLayout | str:
    """The layout of an array's chunks, or why the fast path can't read them."""
    store = array.store
    if not isinstance(store, ItarZarrStore):
        return "store is not an indexed tar archive"
    archive = store.archive
    if archive.mode != "r":
        return "archive is opened for writing"
    layout = raw_chunk_layout(array)
    if isinstance(layout, str):
        return layout
    stored_dtype, chunk_shape = layout
    compression = blosc_compressor(array)
    if compression == "other":
        return "codecs other than one Blosc compressor"
    if stored_dtype.hasobject or stored_dtype.kind in "OUTV" or stored_dtype.itemsize == 0:
        return f"dtype {stored_dtype} is not stored as fixed-size elements"
    return ChunkLayout(archive, stored_dtype, chunk_shape, compression is not None, array.fill_value)


def _full_chunk(chunk_selection: Any, chunk_shape: tuple[int, ...]) -> bool:
    """True if a chunk selection takes every element of the chunk."""
    if not isinstance(chunk_selection, tuple):
        return False
    for item, size in zip(chunk_selection, chunk_shape, strict=True):
        if isinstance(item, slice):
            if item.indices(size) != (0, size, 1):
                return False
        elif not (isinstance(item, int | np.integer) and size == 1):
            return False
    return True


def plan_read(array: ZarrArray, layout: ChunkLayout, selection: Any) -> ReadPlan | str:
    """The chunk tasks of ``array[selection]``, or why the fast path doesn't take the
    selection (zarr-python's errors for invalid selections)."""
    kind = selection_kind(array, selection)
    if kind == "fancy":
        if array.ndim != 1:
            return "coordinate or mask selection"
        kind = "orthogonal"  # in one dimension, coordinates and masks select orthogonally
    shape, projections, drop_axes = chunk_projections(array, selection, kind)
    records = layout.archive.records
    tasks = []
    for projection in projections:
        key = chunk_key(array, projection.chunk_coords)
        record = records.get(key)
        tasks.append(
            ChunkTask(
                key=key,
                size=record.size if record is not None else 0,
                stored=record is not None,
                chunk_selection=projection.chunk_selection,
                out_selection=projection.out_selection,
                full=kind == "basic" and _full_chunk(projection.chunk_selection, layout.chunk_shape),
            )
        )
    return ReadPlan(shape, tasks, drop_axes)
