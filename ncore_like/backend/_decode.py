"""Decoding one chunk record into a destination buffer, and per-thread scratch buffers."""

from __future__ import annotations

import struct
import threading
from typing import Any

import numpy as np

from .. import _codecs
from ..errors import ArchiveFormatError

__all__ = ["blosc_into", "decode_into", "scratch_buffer"]

_local = threading.local()


def scratch_buffer(nbytes: int) -> np.ndarray[tuple[int], np.dtype[np.uint8]]:
    """A per-thread buffer of ``nbytes`` (reused: allocated once per thread and size class),
    for chunks whose selected part is copied out after decoding."""
    buffer: np.ndarray[tuple[int], np.dtype[np.uint8]] | None = getattr(_local, "buffer", None)
    if buffer is None or buffer.size < nbytes:
        buffer = np.empty(nbytes, dtype=np.uint8)
        _local.buffer = buffer
    return buffer[:nbytes]


_BLOSC_HEADER_BYTES = 16
_BLOSC_MAX_FORMAT = 4  # the highest Blosc 1 header format version
_BLOSC_SIZES = struct.Struct("<III")


def decode_into(
    record: bytes, dest: np.ndarray[tuple[int], np.dtype[np.uint8]], *, compressed: bool, key: str, where: str
) -> None:
    """Decodes a chunk record into ``dest`` (a contiguous byte view of exactly the chunk's
    size): Blosc decompresses straight into it; raw records are copied once.

    Raises:
        ArchiveFormatError: For records that don't decode to the chunk's size (``where``
            names the archive).
    """
    if not compressed:
        if len(record) != dest.size:
            raise ArchiveFormatError(
                f"chunk record {key!r} has {len(record)} bytes, expected {dest.size}", archive=where, key=key
            )
        dest[:] = np.frombuffer(record, dtype=np.uint8)
        return
    blosc_into(record, dest, dest.size, key, where)


def blosc_into(record: bytes, dest: np.ndarray[Any, Any], nbytes: int, key: str, where: str) -> None:
    """Decompresses the Blosc record of a chunk of ``nbytes`` bytes into ``dest`` (a
    writeable C-contiguous array of that many bytes, of any dtype and shape: Blosc fills
    its memory; the arguments positional, for the row reads that call it directly).

    Raises:
        ArchiveFormatError: For records that don't decompress to ``nbytes`` (``where``
            names the archive).
    """
    # The sizes are read from the Blosc header (version byte, then nbytes, blocksize and
    # cbytes, little-endian) rather than through numcodecs, which costs ~1 us of a small read;
    # anything unexpected takes numcodecs' checks for a precise message.
    looks_right = len(record) >= _BLOSC_HEADER_BYTES and record[0] <= _BLOSC_MAX_FORMAT
    size, _, cbytes = _BLOSC_SIZES.unpack_from(record, 4) if looks_right else (-1, 0, -1)
    if size != nbytes or cbytes != len(record):
        if looks_right and cbytes > len(record):
            # Blosc takes the stream's length from its header: it would read past the record.
            raise ArchiveFormatError(
                f"chunk record {key!r} is truncated: {len(record)} bytes of the {cbytes} its Blosc header gives",
                archive=where,
                key=key,
            )
        try:
            size = _codecs.blosc._cbuffer_sizes(record)[0]
        except Exception as error:
            raise ArchiveFormatError(
                f"chunk record {key!r} is no Blosc stream ({error})", archive=where, key=key
            ) from error
        if size != nbytes:
            raise ArchiveFormatError(
                f"chunk record {key!r} decompresses to {size} bytes, expected {nbytes}", archive=where, key=key
            )
    try:
        _codecs.blosc.decompress(record, dest)
    except Exception as error:
        raise ArchiveFormatError(
            f"chunk record {key!r} can't be decompressed ({error})", archive=where, key=key
        ) from error
