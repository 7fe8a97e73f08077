"""From an array and a selection to the chunks to read and where each lands (pure).

:func:`chunk_layout` decides whether the fast path understands an array's chunks (raw or
Blosc-compressed C-order elements in an indexed tar archive) and names the reason when it
doesn't; :func:`plan_read` maps a selection to one :class:`ChunkTask` per touched chunk.
Ints, unit-step slices and Ellipsis (the selections of most reads: a row, a frame, a
block) are planned directly from the chunk layout (:func:`plan_basic`), which costs a few
microseconds instead of zarr-python's indexer machinery; selections come canonical
(:func:`~._selection.canonical`: every integer an ``int``); anything else, and every invalid
selection, goes through zarr-python's own indexers, so selections mean (and fail) exactly as
in zarr-python.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import numpy as np

from .. import _compat
from ..archive import IndexedTarArchive
from ..store import is_itar_zarr_store
from ..store._documents import ChunkKeys, bytes_like_dtype
from ..store._metadata import ArrayView
from ._selection import Dim, basic_dims, canonical

__all__ = [
    "ArraySource",
    "ChunkLayout",
    "ChunkTask",
    "ReadPlan",
    "bytes_like",
    "chunk_layout",
    "is_blob",
    "is_bytes_like",
    "plan_basic",
    "plan_read",
    "plan_rows",
    "plan_with_zarr",
]


class ArraySource(Protocol):
    """What the backend reads: an array's metadata view and the archive of its chunks, if
    it has them (the fast path needs nothing else), and zarr-python's array, built when a
    read needs it."""

    @property
    def view(self) -> ArrayView | None: ...

    @property
    def archive(self) -> IndexedTarArchive | None: ...

    @property
    def zarr(self) -> _compat.ZarrArray: ...


def is_bytes_like(array: _compat.ZarrArray) -> bool:
    """True for arrays whose values are a byte string: 0-dimensional fixed-length bytes, or
    one-dimensional ``uint8`` (what :meth:`~ncore_like.Array.read_bytes` reads)."""
    return bytes_like(tuple(array.shape), np.dtype(array.dtype))


def bytes_like(shape: tuple[int, ...], dtype: np.dtype[Any]) -> bool:
    """:func:`is_bytes_like` from an array's shape and dtype."""
    return bytes_like_dtype(shape, dtype.kind, dtype.itemsize)


def is_blob(array: _compat.ZarrArray) -> bool:
    """True for binary blobs as :meth:`~ncore_like.Group.create_bytes_array` stores them: in
    zarr format 2 a 0-dimensional fixed-length bytes array, in format 3 (which has no
    fixed-length bytes) a one-dimensional ``uint8`` array stored as one uncompressed chunk.
    Their one record is the blob itself. (A 1-d ``uint8`` array of format 2 holds numbers;
    it is bytes-like, see :func:`is_bytes_like`, but no blob.)"""
    if not is_bytes_like(array):
        return False
    if array.ndim == 0:
        return True
    if _compat.array_zarr_format(array) != 3 or array.chunks[0] < array.shape[0]:
        return False
    return _compat.blosc_compressor(array) is None


class ChunkLayout:
    """How the chunks of an array are stored (read-only by convention).

    This and the other classes of the read path are plain classes or named tuples, not
    dataclasses: a dataclass's methods are compiled when its module is imported, ~0.7 ms
    each, ~8 ms of a fresh process's first read."""

    def __init__(
        self,
        archive: IndexedTarArchive,
        stored_dtype: np.dtype[Any],
        chunk_shape: tuple[int, ...],
        compressed: bool,
        fill_value: Any,
        shape: tuple[int, ...],
        chunk_key: Callable[[tuple[int, ...]], str],
        dtype: np.dtype[Any],
    ) -> None:
        self.archive = archive
        #: dtype of the elements in a decoded chunk (byte order as stored).
        self.stored_dtype = stored_dtype
        self.chunk_shape = chunk_shape
        self.compressed = compressed
        self.fill_value = fill_value
        #: Shape of the array.
        self.shape = shape
        #: The store key of a chunk by its coordinates.
        self.chunk_key = chunk_key
        #: dtype of the array (of its values read).
        self.dtype = dtype

    @property
    def chunk_nbytes(self) -> int:
        return math.prod(self.chunk_shape) * self.stored_dtype.itemsize

    @functools.cached_property
    def row_rest(self) -> tuple[tuple[Any, ...], tuple[Any, ...], tuple[int, ...]] | None:
        """For arrays whose other dimensions lie in one chunk (rows, frames, sweeps): the
        chunk and output selections of those dimensions and the output shape of one index
        on the first axis (a read of ``array[i]`` is then one chunk, planned at once)."""
        if not self.shape or any(
            size > chunk for size, chunk in zip(self.shape[1:], self.chunk_shape[1:], strict=True)
        ):
            return None
        rest = self.shape[1:]
        return tuple(slice(0, size, 1) for size in rest), tuple(slice(0, size) for size in rest), rest


class ChunkTask(NamedTuple):
    """One chunk of a read: its record (None if not stored) and where its values go (a
    named tuple: made for every chunk of every read, and cheaper than a dataclass)."""

    key: str
    size: int
    """Stored bytes (0 if not stored)."""
    stored: bool
    chunk_selection: Any
    out_selection: Any
    full: bool
    """True if the selection takes the whole chunk (then it may decode straight into the
    output, when the output region is contiguous)."""


class ReadPlan(NamedTuple):
    """The chunks of a read and the shape of its output."""

    shape: tuple[int, ...]
    tasks: list[ChunkTask]
    drop_axes: tuple[int, ...]

    @property
    def stored_bytes(self) -> int:
        return sum(task.size for task in self.tasks)


def chunk_layout(source: ArraySource) -> ChunkLayout | str:
    """The layout of an array's chunks, or why the fast path can't read them: from its view
    when it has one (no zarr-python node needed), else from zarr-python's metadata."""
    view = source.view
    archive = source.archive
    if view is not None and archive is not None:
        if view.unsupported is not None:
            return view.unsupported
        stored = view.stored_dtype
        if stored.hasobject or stored.kind in "OUTV" or stored.itemsize == 0:
            return f"dtype {stored} is not stored as fixed-size elements"
        if view.blosc is not None and view.blosc.get("shuffle") not in (0, 1, 2):
            return "Blosc with automatic shuffle"
        compressed = view.blosc is not None
        return ChunkLayout(
            archive, stored, view.chunks, compressed, view.fill_value, view.shape, view.chunk_key, view.dtype
        )
    array = source.zarr
    store = array.store
    if not is_itar_zarr_store(store):
        return "store is not an indexed tar archive"
    archive = store.archive
    if archive.mode != "r":
        return "archive is opened for writing"
    layout = _compat.raw_chunk_layout(array)
    if isinstance(layout, str):
        return layout
    stored_dtype, chunk_shape = layout
    compression = _compat.blosc_compressor(array)
    if compression == "other":
        return "codecs other than one Blosc compressor"
    if stored_dtype.hasobject or stored_dtype.kind in "OUTV" or stored_dtype.itemsize == 0:
        return f"dtype {stored_dtype} is not stored as fixed-size elements"
    return ChunkLayout(
        archive,
        stored_dtype,
        chunk_shape,
        compression is not None,
        array.fill_value,
        tuple(array.shape),
        _chunk_keys(array),
        np.dtype(array.dtype),
    )


def _chunk_keys(array: _compat.ZarrArray) -> Callable[[tuple[int, ...]], str]:
    """The chunk keys of a zarr-python array, without zarr-python's per-call machinery for
    the standard encodings."""
    parts = _compat.chunk_key_parts(array)
    return ChunkKeys(*parts) if parts is not None else functools.partial(_compat.chunk_key, array)


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


# Per chunk and dimension: chunk index, selection in the chunk, selection in the output
# (None where an index drops the dimension), whether the whole chunk is taken.
_Entry = tuple[int, Any, Any, bool]


def _task(
    layout: ChunkLayout, coords: tuple[int, ...], chunk_selection: Any, out_selection: Any, full: bool
) -> ChunkTask:
    """The task of the chunk at ``coords``: its key and its record, if stored."""
    key = layout.chunk_key(coords)
    record = layout.archive.records.get(key)
    return ChunkTask(
        key, 0 if record is None else record.size, record is not None, chunk_selection, out_selection, full
    )


def plan_basic(layout: ChunkLayout, selection: Any) -> ReadPlan | None:
    """The plan of a selection of ints, unit-step slices and Ellipsis, made from the chunk
    layout alone (the same tasks as zarr-python's basic indexer); None for other
    selections."""
    if type(selection) is int and layout.row_rest is not None:
        return _plan_row(layout, selection)
    dims = basic_dims(selection, layout.shape)
    if dims is None:
        return None
    chunk_shape = layout.chunk_shape
    if all(_within_one_chunk(dim, chunk) for dim, chunk in zip(dims, chunk_shape, strict=True)):
        return _plan_one_chunk(layout, dims)
    per_dim: list[list[_Entry]] = []
    for dim, chunk in zip(dims, chunk_shape, strict=True):
        if type(dim) is int:
            per_dim.append([(dim // chunk, dim % chunk, None, chunk == 1)])
            continue
        per_dim.append(_slice_entries(dim, chunk))
    shape = tuple(dim[1] - dim[0] for dim in dims if type(dim) is tuple)
    tasks = [
        _task(
            layout,
            tuple(entry[0] for entry in combination),
            tuple(entry[1] for entry in combination),
            tuple(entry[2] for entry in combination if entry[2] is not None),
            all(entry[3] for entry in combination),
        )
        for combination in itertools.product(*per_dim)
    ]
    return ReadPlan(shape, tasks, ())


def _slice_entries(dim: Dim, chunk: int) -> list[_Entry]:
    """The chunks a ``[start, stop)`` range of one dimension touches, as plan entries."""
    start, stop = dim  # type: ignore[misc]
    entries: list[_Entry] = []
    for index in range(start // chunk, -(-stop // chunk) if stop > start else 0):
        low, high = max(start, index * chunk), min(stop, (index + 1) * chunk)
        offset = index * chunk
        entries.append(
            (index, slice(low - offset, high - offset, 1), slice(low - start, high - start), high - low == chunk)
        )
    return entries


def _plan_row(layout: ChunkLayout, index: int) -> ReadPlan | None:
    """:func:`plan_basic` of one int on the first axis of an array whose other dimensions
    lie in one chunk (see :attr:`ChunkLayout.row_rest`): the commonest small read."""
    size = layout.shape[0]
    if index < 0:
        index += size
    if not 0 <= index < size:
        return None  # zarr-python's indexer raises its error
    chunk_selection, out_selection, shape = layout.row_rest  # type: ignore[misc]
    chunk = layout.chunk_shape[0]
    first = index // chunk
    full = chunk == 1 and shape == layout.chunk_shape[1:]
    coords = (first, *(0 for _ in shape))
    return ReadPlan(shape, [_task(layout, coords, (index - first * chunk, *chunk_selection), out_selection, full)], ())


def _within_one_chunk(dim: Dim, chunk: int) -> bool:
    if type(dim) is int:
        return True
    start, stop = dim  # type: ignore[misc]
    return bool(start < stop and start // chunk == (stop - 1) // chunk)


def _plan_one_chunk(layout: ChunkLayout, dims: list[Dim]) -> ReadPlan:
    """:func:`plan_basic` of a selection within one chunk (a row, a frame): the common case,
    written out."""
    coords = []
    chunk_selection: list[Any] = []
    out_selection = []
    shape = []
    full = True
    for dim, chunk in zip(dims, layout.chunk_shape, strict=True):
        if type(dim) is int:
            index = dim // chunk
            chunk_selection.append(dim - index * chunk)
            full = full and chunk == 1
        else:
            start, stop = dim  # type: ignore[misc]
            index = start // chunk
            offset = index * chunk
            chunk_selection.append(slice(start - offset, stop - offset, 1))
            out_selection.append(slice(0, stop - start))
            shape.append(stop - start)
            full = full and stop - start == chunk
        coords.append(index)
    task = _task(layout, tuple(coords), tuple(chunk_selection), tuple(out_selection), full)
    return ReadPlan(tuple(shape), [task], ())


def plan_rows(layout: ChunkLayout, selection: Any) -> ReadPlan | None:
    """The plan of an index list on the first axis (a list or 1-d integer array, as a
    DataLoader batches rows, or a 1-d mask of the axis' length, as ``a[labels == 3]``
    selects), optionally followed by unit-step slices or Ellipsis: one task per chunk
    holding any of the rows, made from the chunk layout; None for other selections (and
    invalid ones: zarr-python's indexers then raise its errors)."""
    items = selection if type(selection) is tuple else (selection,)
    rows = items[0] if items else None
    if not isinstance(rows, list | np.ndarray) or not layout.shape:
        return None
    try:
        indices = np.asarray(rows) if len(rows) else np.empty(0, np.intp)  # numpy reads [] as no rows
    except (ValueError, TypeError):
        return None
    if indices.ndim != 1:
        return None
    if indices.dtype.kind == "b":  # a mask: the rows it marks (zarr-python takes masks of every axis only)
        if len(indices) != layout.shape[0]:
            return None
        indices = np.flatnonzero(indices)
    elif indices.dtype.kind not in "iu":
        return None
    rest = basic_dims((slice(None), *items[1:]), layout.shape)
    if rest is None or not all(type(dim) is tuple for dim in rest[1:]):
        return None
    size, chunk = layout.shape[0], layout.chunk_shape[0]
    indices = np.where(indices < 0, indices + size, indices)
    if len(indices) and (indices.min() < 0 or indices.max() >= size):
        return None
    chunk_of = indices // chunk
    within = indices - chunk_of * chunk
    positions = np.arange(len(indices))
    other = rest[1:]
    shape = (len(indices), *(stop - start for start, stop in other))  # type: ignore[misc]
    tasks = []
    per_dim = [_slice_entries(dim, chunk_) for dim, chunk_ in zip(other, layout.chunk_shape[1:], strict=True)]
    combinations = list(itertools.product(*per_dim))
    if chunk == 1:
        # A chunk per row (lidar sweeps, frames): a task per row taken, so that a row
        # covering its chunk decodes straight into its place in the output.
        for position, first in enumerate(chunk_of.tolist()):
            for combination in combinations:
                tasks.append(
                    _task(
                        layout,
                        (first, *(entry[0] for entry in combination)),
                        (slice(0, 1, 1), *(entry[1] for entry in combination)),
                        (slice(position, position + 1), *(entry[2] for entry in combination)),
                        all(entry[3] for entry in combination),
                    )
                )
        return ReadPlan(shape, tasks, ())
    for first in np.unique(chunk_of).tolist():
        mine = chunk_of == first
        for combination in combinations:
            tasks.append(
                _task(
                    layout,
                    (first, *(entry[0] for entry in combination)),
                    (within[mine], *(entry[1] for entry in combination)),
                    (positions[mine], *(entry[2] for entry in combination)),
                    False,
                )
            )
    return ReadPlan(shape, tasks, ())


def plan_read(source: ArraySource, layout: ChunkLayout, selection: Any) -> ReadPlan | str:
    """The chunk tasks of ``array[selection]``, or why the fast path doesn't take the
    selection (zarr-python's errors for invalid selections)."""
    selection = canonical(selection)
    basic = plan_basic(layout, selection)
    if basic is not None:
        return basic
    rows = plan_rows(layout, selection)
    if rows is not None:
        return rows
    return plan_with_zarr(source.zarr, layout, selection)


def plan_with_zarr(array: _compat.ZarrArray, layout: ChunkLayout, selection: Any) -> ReadPlan | str:
    """:func:`plan_read` through zarr-python's indexers (any selection it takes)."""
    kind = _compat.selection_kind(array, selection)
    if kind == "fancy":
        if array.ndim != 1:
            return "coordinate or mask selection"
        kind = "orthogonal"  # in one dimension, coordinates and masks select orthogonally
    shape, projections, drop_axes = _compat.chunk_projections(array, selection, kind)
    tasks = [
        _task(
            layout,
            tuple(projection.chunk_coords),
            projection.chunk_selection,
            projection.out_selection,
            kind == "basic" and _full_chunk(projection.chunk_selection, layout.chunk_shape),
        )
        for projection in projections
    ]
    return ReadPlan(shape, tasks, drop_axes)
