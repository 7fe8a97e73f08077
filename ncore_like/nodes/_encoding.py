"""Encoding arrays into chunk records without a store (``EncodedArray``).

A chunk record is the chunk's elements in C order (zarr format 3: little-endian), padded
to the full chunk shape with the fill value at the array's edges, then Blosc-compressed
when a compression is set. That is what zarr-python stores for the node metadata that
:func:`~ncore_like._compat.write_array_metadata` writes, so arrays encoded here on
worker threads and arrays written through zarr-python are byte-identical.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from types import EllipsisType
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from .. import _compat
from .._buffers import POOLED_BYTES, new_result
from .._codecs import BLOSC_MAX_OVERHEAD, blosc_compress, blosc_compressor, blosc_compressor_into
from .._concurrency import encode_pool, in_worker_thread, ordered_map, worker_threads
from .._defaults import ENCODE_AHEAD_BYTES, ENCODE_BATCH_BYTES, INLINE_ENCODE_CHUNK_BYTES
from ._compression import BloscCompression

__all__ = [
    "DEFAULT_COMPRESSION",
    "ChunksLike",
    "EncodedArray",
    "chunk_grid_shape",
    "chunk_regions",
    "default_fill_value",
    "encode_chunk",
    "encode_chunk_batches",
    "encode_chunks",
    "prepare_values",
    "resolve_chunks",
    "storage_dtype",
]

ZarrFormat = Literal[2, 3]
ChunksLike = tuple[int, ...] | Literal["single", "auto"]
DEFAULT_COMPRESSION = BloscCompression()


def storage_dtype(dtype: npt.DTypeLike, zarr_format: ZarrFormat) -> np.dtype[Any]:
    """The dtype stored: as given in format 2; little-endian in format 3 (whose bytes codec
    fixes the byte order)."""
    resolved = np.dtype(dtype)
    if resolved.hasobject or resolved.kind in "OV" or resolved.fields is not None:
        raise ValueError(f"unsupported dtype {resolved} (object, void and structured dtypes can't be stored)")
    if zarr_format == 3 and resolved.itemsize > 1 and resolved.byteorder == ">":
        resolved = resolved.newbyteorder("<")
    return resolved


def default_fill_value(dtype: np.dtype[Any]) -> Any:
    """The fill value written for a dtype unless one is given: zero, False, or empty bytes."""
    if dtype.kind == "S":  # not a blob's worth of zeros to get there (~30 us for 100 KB)
        return np.bytes_(b"")
    return np.zeros((), dtype=dtype)[()]


def resolve_chunks(chunks: ChunksLike, shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The chunk shape of ``"single"``, ``"auto"`` or a tuple, with zero sizes clamped to 1."""
    if chunks == "single":
        resolved = shape
    elif chunks == "auto":
        resolved = _compat.guess_chunks(shape, itemsize) if shape else ()
    else:
        if not isinstance(chunks, tuple) or len(chunks) != len(shape):
            raise ValueError(f"chunks {chunks!r} don't match the {len(shape)}-dimensional shape {shape}")
        if not all(isinstance(size, int | np.integer) and size >= 0 for size in chunks):
            raise ValueError(f"chunk sizes must be non-negative integers, got {chunks!r}")
        resolved = chunks
    return tuple(max(1, int(size)) for size in resolved)


def chunk_grid_shape(shape: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[int, ...]:
    """Chunks per dimension."""
    return tuple(math.ceil(size / chunk) for size, chunk in zip(shape, chunks, strict=True))


Region = tuple[slice | EllipsisType, ...]


def chunk_regions(shape: tuple[int, ...], chunks: tuple[int, ...]) -> Iterator[tuple[tuple[int, ...], Region]]:
    """Every chunk's coordinates and the region of the array it covers (C order), with a
    trailing Ellipsis: indexing a 0-dimensional array with it gives an array, where ``()``
    would give a scalar in native byte order (a big-endian value stored little-endian)."""
    for coords in itertools.product(*map(range, chunk_grid_shape(shape, chunks))):
        yield coords, _region_of(coords, (chunks, shape))


Record = bytes | memoryview


def encode_chunk(
    values: np.ndarray[Any, Any],
    chunks: tuple[int, ...],
    fill_value: Any,
    compression: BloscCompression | None,
    *,
    copy: bool = True,
    reused: bool = False,
) -> Record:
    """The record of one chunk holding ``values`` (smaller than ``chunks`` at the edges).
    ``copy=False``: an uncompressed chunk that is a contiguous part of ``values`` is returned
    as a view of it (for records written before the values can change). ``reused``: a
    large compressed record is a view of memory used again once nothing refers to it (for
    records let go of once written, see :func:`_compressor`)."""
    if values.shape != chunks:
        full = np.full(chunks, fill_value, dtype=values.dtype)
        full[tuple(slice(0, size) for size in values.shape)] = values
        values = full
    # Viewed as bytes: datetimes and other dtypes don't export the buffer protocol (Blosc
    # gets the element size as its typesize).
    raw = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
    if compression is None:
        return raw.tobytes() if copy else memoryview(raw)  # type: ignore[arg-type]
    c, typesize = compression, values.dtype.itemsize
    if reused and raw.size >= POOLED_BYTES:  # smaller ones as ever: no compressor made per chunk
        return _compressor(c, typesize, raw.size, reused=True)(raw)
    return blosc_compress(raw, c.cname, c.clevel, c.shuffle_id, c.blocksize, typesize)


def _compressor(
    compression: BloscCompression, typesize: int, nbytes: int, *, reused: bool
) -> Callable[[np.ndarray[Any, Any]], Record]:
    """The compression of the bytes of chunks of ``nbytes`` into records. Where ``reused``,
    chunks as large as :data:`POOLED_BYTES` are compressed into memory used again once
    nothing refers to the record (:func:`new_result`: new bytes for every record would be
    faulted in by the kernel page by page, a quarter of the CPU time of encoding a volume of
    4 MB chunks), if numcodecs' C function can be reached; else (and smaller chunks, for
    which the call's ~3 us of ctypes would cost more than it saves) into new bytes."""
    c = compression
    if reused and nbytes >= POOLED_BYTES:
        compress_into = blosc_compressor_into(c.cname, c.clevel, c.shuffle_id, c.blocksize, typesize)
        if compress_into is not None:

            def compress(raw: np.ndarray[Any, Any]) -> Record:
                dest = new_result((raw.size + BLOSC_MAX_OVERHEAD,), _BYTE, aligned=True)
                return memoryview(dest)[: compress_into(raw, dest)]  # type: ignore[arg-type]

            return compress
    small = nbytes <= INLINE_ENCODE_CHUNK_BYTES  # encoded inline (see encode_chunk_batches)
    return blosc_compressor(c.cname, c.clevel, c.shuffle_id, c.blocksize, typesize, small=small)


_BYTE = np.dtype(np.uint8)


def encode_chunks(
    values: np.ndarray[Any, Any],
    chunks: tuple[int, ...],
    fill_value: Any,
    compression: BloscCompression | None,
    *,
    copy: bool = True,
    batch_bytes: int = ENCODE_BATCH_BYTES,
    reused: bool = False,
) -> Generator[tuple[tuple[int, ...], Record], None, None]:
    """Every chunk's coordinates and record (see :func:`encode_chunk`), in C order (from
    :func:`encode_chunk_batches`)."""
    batches = encode_chunk_batches(
        values, chunks, fill_value, compression, _pairs, copy=copy, batch_bytes=batch_bytes, reused=reused
    )
    with closing(batches):
        for pairs in batches:
            yield from pairs


def _pairs(coords: list[Coords], records: list[Record]) -> list[tuple[Coords, Record]]:
    return list(zip(coords, records, strict=True))


Coords = tuple[int, ...]
_R = TypeVar("_R")


def encode_chunk_batches(
    values: np.ndarray[Any, Any],
    chunks: tuple[int, ...],
    fill_value: Any,
    compression: BloscCompression | None,
    finish: Callable[[list[Coords], list[Record]], _R],
    *,
    copy: bool = True,
    batch_bytes: int = ENCODE_BATCH_BYTES,
    reused: bool = False,
) -> Generator[_R, None, None]:
    """The records of every chunk (see :func:`encode_chunk`) in C order, in batches of about
    ``batch_bytes`` raw bytes: ``finish(coordinates, records)`` of each batch, called on
    the thread that encoded it (e.g. laying the records out as tar members there).

    Compressed chunks are encoded on the encode pool (a thread per core), a bounded number
    of batches ahead of the consumer (which writes them meanwhile): Blosc releases the GIL,
    so encoding runs on every core. From a thread of a pool, uncompressed, and up to
    ``INLINE_ENCODE_CHUNK_BYTES`` each (small chunks are GIL-bound), they are encoded inline.
    Chunks that are runs of whole rows of C-ordered values (chunk shape ``(k, *shape[1:])``)
    are byte ranges of the values: only the last one may need padding. ``reused``: large
    compressed records are views of memory used again once the consumer has let go of them
    (see :func:`_compressor`).
    """
    shape = tuple(values.shape)
    grid = chunk_grid_shape(shape, chunks)
    chunk_bytes = math.prod(chunks) * values.dtype.itemsize
    per_task = max(1, batch_bytes // max(1, chunk_bytes))
    batches = _batches(itertools.product(*map(range, grid)), per_task)
    if values.ndim and values.dtype.itemsize and chunks[1:] == shape[1:] and values.flags.c_contiguous:
        records_of = _row_records(values, chunks, fill_value, compression, copy, reused)
    else:

        def records_of(batch: list[Coords]) -> list[Record]:
            return [
                encode_chunk(values[region], chunks, fill_value, compression, copy=copy, reused=reused)
                for region in map(_region_of, batch, itertools.repeat((chunks, shape)))
            ]

    def encode(batch: list[Coords]) -> _R:
        return finish(batch, records_of(batch))

    if compression is None or in_worker_thread() or math.prod(grid) <= 1 or chunk_bytes <= INLINE_ENCODE_CHUNK_BYTES:
        yield from map(encode, batches)
        return
    encoded = ordered_map(
        encode_pool(),
        encode,
        batches,
        # Enough batches ahead that no thread waits while the consumer writes one (a 268 MB
        # volume of 4 MB chunks: 245 -> 181 ms with 8 in flight instead of 3).
        max_items=2 * worker_threads(),
        max_bytes=ENCODE_AHEAD_BYTES,
        size=lambda batch: chunk_bytes * len(batch),
    )
    with closing(encoded):
        for _, result in encoded:
            yield result


def _region_of(coords: Coords, layout: tuple[tuple[int, ...], tuple[int, ...]]) -> Region:
    chunks, shape = layout
    region: Region = tuple(
        slice(index * chunk, min((index + 1) * chunk, size))
        for index, chunk, size in zip(coords, chunks, shape, strict=True)
    )
    return (*region, ...)


def _row_records(
    values: np.ndarray[Any, Any],
    chunks: tuple[int, ...],
    fill_value: Any,
    compression: BloscCompression | None,
    copy: bool,
    reused: bool,
) -> Callable[[list[Coords]], list[Record]]:
    """The records of a batch of consecutive chunks of whole rows (C-contiguous values):
    byte ranges of the values, compressed (into reused memory if ``reused``) or as they are
    (copied unless not ``copy``)."""
    raw = values.reshape(-1).view(np.uint8)
    rows = chunks[0]
    step = raw.size // len(values) * rows if len(values) else 0  # bytes a chunk
    whole = len(values) // rows  # chunks without padding
    compress = None if compression is None else _compressor(compression, values.dtype.itemsize, step, reused=reused)

    def records(batch: list[Coords]) -> list[Record]:
        first, stop = batch[0][0], batch[-1][0] + 1
        last = min(stop, whole)
        starts, ends = range(first * step, last * step, step), range((first + 1) * step, (last + 1) * step, step)
        if compress is not None:
            out: list[Record] = list(map(compress, map(raw.__getitem__, map(slice, starts, ends))))
        elif copy:
            out = [raw[start : start + step].tobytes() for start in starts]
        else:
            view = memoryview(raw)  # type: ignore[arg-type]
            out = [view[start : start + step] for start in starts]
        if stop > last:  # the edge chunk, padded
            out.append(encode_chunk(values[last * rows :], chunks, fill_value, compression, copy=copy, reused=reused))
        return out

    return records


_T = TypeVar("_T")


def _batches(items: Iterator[_T], size: int) -> Iterator[list[_T]]:
    """``items`` in lists of ``size`` (the last one shorter)."""
    while batch := list(itertools.islice(items, size)):
        yield batch


def prepare_values(
    data: npt.ArrayLike, dtype: npt.DTypeLike | None, chunks: ChunksLike, zarr_format: ZarrFormat
) -> tuple[np.ndarray[Any, Any], tuple[int, ...]]:
    """The values as stored (:func:`storage_dtype`) and the resolved chunk shape."""
    values = np.asarray(data) if dtype is None else np.asarray(data, dtype=dtype)
    values = values.astype(storage_dtype(values.dtype, zarr_format), copy=False)
    return values, resolve_chunks(chunks, tuple(int(size) for size in values.shape), values.dtype.itemsize)


@dataclass(frozen=True)
class EncodedArray:
    """An array encoded into chunk records by :meth:`encode` (e.g. on worker threads), to be
    stored by :meth:`Group.create_encoded_array`."""

    shape: tuple[int, ...]
    """Shape of the array."""
    dtype: np.dtype[Any]
    """dtype of the array."""
    chunks: tuple[int, ...]
    """Chunk shape (resolved, also for ``"single"`` and ``"auto"``)."""
    compression: BloscCompression | None
    """Blosc compression of the chunks (None: uncompressed)."""
    zarr_format: ZarrFormat
    """zarr format of the records."""
    fill_value: Any
    """Fill value of the node metadata (a numpy scalar of the dtype)."""
    chunk_records: dict[tuple[int, ...], bytes] = field(repr=False)
    """Records of the stored chunks, by chunk coordinates."""

    @classmethod
    def encode(
        cls,
        data: npt.ArrayLike,
        *,
        dtype: npt.DTypeLike | None = None,
        chunks: ChunksLike = "single",
        compression: BloscCompression | None = DEFAULT_COMPRESSION,
        zarr_format: ZarrFormat = 2,
    ) -> EncodedArray:
        """Encodes every chunk of ``data`` as :meth:`Group.create_array` stores them.

        Uses no store, so many arrays can be encoded concurrently on threads (Blosc releases
        the GIL, except for chunks of up to 16 KB, whose compression costs a few
        microseconds) and stored in order afterwards; the chunks of one compressed array are
        encoded on the shared worker pool.

        Args:
            data: The values (their shape is the array's, their dtype too unless ``dtype``).
            dtype: dtype to convert the values to.
            chunks: Chunk shape; ``"single"`` (one chunk, default) or ``"auto"`` (zarr-python's
                heuristic). Zero sizes are clamped to 1.
            compression: Blosc compression, or None for uncompressed chunks.
            zarr_format: zarr format of the group the array will be stored in.
        """
        zarr_format = _compat.check_zarr_format(zarr_format)
        if compression is not None and not isinstance(compression, BloscCompression):
            raise TypeError(f"compression must be a BloscCompression or None, got {type(compression).__name__}")
        values, resolved = prepare_values(data, dtype, chunks, zarr_format)
        fill_value = default_fill_value(values.dtype)
        records = {coords: bytes(record) for coords, record in encode_chunks(values, resolved, fill_value, compression)}
        return cls(tuple(values.shape), values.dtype, resolved, compression, zarr_format, fill_value, records)

    def validate(self, zarr_format: ZarrFormat, where: str) -> None:
        """Raises ValueError unless the encoded array can be stored in a group of
        ``zarr_format``: chunk shape matching the shape, records inside the chunk grid."""
        if self.zarr_format != zarr_format:
            raise ValueError(
                f"{where}: encoded array of zarr format {self.zarr_format} can't be stored in a group of "
                f"zarr format {zarr_format}"
            )
        if len(self.chunks) != len(self.shape) or not all(size > 0 for size in self.chunks):
            raise ValueError(f"{where}: chunks {self.chunks} don't match the shape {self.shape}")
        grid = chunk_grid_shape(self.shape, self.chunks)
        chunk_bytes = math.prod(self.chunks) * self.dtype.itemsize
        for coords, record in self.chunk_records.items():
            if len(coords) != len(grid) or not all(0 <= c < n for c, n in zip(coords, grid, strict=True)):
                raise ValueError(f"{where}: chunk record {coords} lies outside the chunk grid {grid}")
            if self.compression is None and len(record) != chunk_bytes:
                raise ValueError(
                    f"{where}: uncompressed chunk record {coords} has {len(record)} bytes, expected {chunk_bytes}"
                )
