"""``Backend``: reads selections of zarr arrays into numpy arrays.

Complete reads of arrays stored as one uncompressed chunk in an archive are views of the
chunk record (no copy); blobs are their record. Everything else is decoded by zarr-python
for now; the contract of every path is equality with zarr-python's result.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._concurrency import run_in_worker
from ..archive import IndexedTarArchive
from ..store._zarr_compat import (
    SelectionKind,
    ZarrArray,
    blosc_config,
    chunk_key,
    read_selection,
    selection_kind,
    selection_shape,
)

__all__ = ["Backend", "default_backend"]

NDArray = np.ndarray[Any, Any]


def _archive_of(array: ZarrArray) -> IndexedTarArchive | None:
    archive = getattr(array.store, "archive", None)
    return archive if isinstance(archive, IndexedTarArchive) else None


def _native_layout(array: ZarrArray) -> bool:
    """True if a chunk record's bytes are the array's elements as numpy lays them out."""
    metadata = array.metadata
    if metadata.zarr_format == 2:
        return bool(metadata.order == "C")
    dtype = array.dtype
    return isinstance(dtype, np.dtype) and (dtype.itemsize == 1 or dtype.byteorder in ("<", "=", "|"))


class Backend:
    """Reads (selections of) arrays: :meth:`read` for values, :meth:`blob` for blobs."""

    def plan(self, array: ZarrArray, selection: Any) -> tuple[SelectionKind, tuple[int, ...]]:
        """How a selection is read and the shape it gives (zarr-python's errors for invalid
        selections)."""
        kind = selection_kind(array, selection)
        return kind, selection_shape(array, selection, kind)

    def _single_record(self, array: ZarrArray) -> bytes | None:
        """The record of an array stored as one uncompressed chunk of native layout, if it
        lies in an archive (None otherwise, or if the chunk isn't stored)."""
        if tuple(array.chunks) != tuple(max(1, size) for size in array.shape) or blosc_config(array) is not None:
            return None
        archive = _archive_of(array)
        if archive is None or not _native_layout(array):
            return None
        key = chunk_key(array, (0,) * array.ndim)
        if key not in archive:
            return None
        record = archive.read(key)
        dtype = np.dtype(array.dtype)
        if len(record) != math.prod(array.chunks) * dtype.itemsize:
            return None
        return record

    def read(self, array: ZarrArray, selection: Any = Ellipsis, out: NDArray | None = None) -> NDArray:
        """The values of ``array[selection]``, in ``out`` if given (validated by the caller)."""
        kind, shape = self.plan(array, selection)
        if kind == "basic" and shape == tuple(array.shape) and math.prod(shape) > 0:
            record = self._single_record(array)
            if record is not None:
                view = np.frombuffer(record, dtype=np.dtype(array.dtype)).reshape(array.shape)
                if out is None:
                    return view
                out[...] = view
                return out
        return read_selection(array, selection, kind, out)

    async def read_async(self, array: ZarrArray, selection: Any = Ellipsis, out: NDArray | None = None) -> NDArray:
        """:meth:`read` without blocking the running loop."""
        return await run_in_worker(self.read, array, selection, out)

    def blob(self, array: ZarrArray) -> bytes:
        """The bytes of a blob array (0-d fixed bytes, or 1-d uint8): its record if stored as
        one uncompressed chunk, one copy otherwise. TypeError for other arrays."""
        dtype = np.dtype(array.dtype)
        is_blob = (array.ndim == 0 and dtype.kind == "S") or (array.ndim == 1 and dtype == np.uint8)
        if not is_blob:
            raise TypeError(f"array {array.path!r} of dtype {dtype} and shape {array.shape} is no binary blob")
        record = self._single_record(array)
        if record is not None:
            return record
        return self.read(array).tobytes()

    async def blob_async(self, array: ZarrArray) -> bytes:
        """:meth:`blob` without blocking the running loop."""
        return await run_in_worker(self.blob, array)


_DEFAULT = Backend()


def default_backend() -> Backend:
    """The backend arrays use unless given another."""
    return _DEFAULT
