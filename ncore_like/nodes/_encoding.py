"""Encoding arrays into chunk records without a store (``EncodedArray``).

A chunk record is the chunk's elements in C order (zarr format 3: little-endian), padded
to the full chunk shape with the fill value at the array's edges, then Blosc-compressed
when a compression is set. That is what zarr-python stores for the node metadata that
:func:`~ncore_like._compat.create_array_node` writes, so arrays encoded here on
worker threads and arrays written through zarr-python are byte-identical.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .._codecs import blosc
from .._compat import guess_chunks
from ._compression import BloscCompression

__all__ = [
    "DEFAULT_COMPRESSION",
    "ChunksLike",
    "EncodedArray",
    "chunk_grid_shape",
    "chunk_regions",
    "default_fill_value",
    "encode_chunk",
    "resolve_chunks",
    "storage_dtype",
]

ZarrFormat = Literal[2, 3]
ChunksLike = tuple[int, ...] | Literal["single", "auto"]
DEFAULT_COMPRESSION = BloscCompression()


def check_zarr_format(zarr_format: object) -> ZarrFormat:
    """``zarr_format`` if the installed zarr-python writes it, ValueError otherwise."""
    if zarr_format not in (2, 3):
        raise ValueError(f"unsupported zarr format {zarr_format!r} (zarr-python 3 writes formats 2 and 3)")
    return zarr_format


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
    return np.zeros((), dtype=dtype)[()]


def resolve_chunks(chunks: ChunksLike, shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The chunk shape of ``"single"``, ``"auto"`` or a tuple, with zero sizes clamped to 1."""
    if chunks == "single":
        resolved = shape
    elif chunks == "auto":
        resolved = guess_chunks(shape, itemsize) if shape else ()
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


def chunk_regions(
    shape: tuple[int, ...], chunks: tuple[int, ...]
) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """Every chunk's coordinates and the region of the array it covers (C order)."""
    for coords in itertools.product(*(range(count) for count in chunk_grid_shape(shape, chunks))):
        region = tuple(
            slice(index * chunk, min((index + 1) * chunk, size))
            for index, chunk, size in zip(coords, chunks, shape, strict=True)
        )
        yield coords, region


def encode_chunk(
    values: np.ndarray[Any, Any],
    chunks: tuple[int, ...],
    fill_value: Any,
    compression: BloscCompression | None,
) -> bytes:
    """The record of one chunk holding ``values`` (smaller than ``chunks`` at the edges)."""
    if values.shape != chunks:
        full = np.full(chunks, fill_value, dtype=values.dtype)
        full[tuple(slice(0, size) for size in values.shape)] = values
        values = full
    values = np.ascontiguousarray(values)
    if compression is None:
        return values.tobytes()
    return blosc.compress(  # type: ignore[no-any-return]
        values,
        compression.cname.encode(),
        compression.clevel,
        compression.shuffle_id,
        compression.blocksize,
        values.dtype.itemsize,
    )


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

        Uses no store and no shared state, so many arrays can be encoded concurrently on
        worker threads (Blosc releases the GIL) and stored in order afterwards.

        Args:
            data: The values (their shape is the array's, their dtype too unless ``dtype``).
            dtype: dtype to convert the values to.
            chunks: Chunk shape; ``"single"`` (one chunk, default) or ``"auto"`` (zarr-python's
                heuristic). Zero sizes are clamped to 1.
            compression: Blosc compression, or None for uncompressed chunks.
            zarr_format: zarr format of the group the array will be stored in.
        """
        zarr_format = check_zarr_format(zarr_format)
        if compression is not None and not isinstance(compression, BloscCompression):
            raise TypeError(f"compression must be a BloscCompression or None, got {type(compression).__name__}")
        values = np.asarray(data) if dtype is None else np.asarray(data, dtype=dtype)
        stored = storage_dtype(values.dtype, zarr_format)
        values = values.astype(stored, copy=False)
        shape = tuple(int(size) for size in values.shape)
        resolved = resolve_chunks(chunks, shape, stored.itemsize)
        fill_value = default_fill_value(stored)
        records = {
            coords: encode_chunk(values[region], resolved, fill_value, compression)
            for coords, region in chunk_regions(shape, resolved)
        }
        return cls(shape, stored, resolved, compression, zarr_format, fill_value, records)

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
