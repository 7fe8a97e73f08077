"""Decoding one chunk record into a destination buffer, and per-thread scratch buffers."""

from __future__ import annotations

import struct
import threading
from typing import Any

import numpy as np

from .. import _codecs
from ..errors import ArchiveFormatError

__all__ = ["blosc_decoded", "blosc_into", "decode_into", "one_block_decoded", "raw_checked", "scratch_buffer"]

_local = threading.local()


def scratch_buffer(nbytes: int) -> np.ndarray[tuple[int], np.dtype[np.uint8]]:
    """A per-thread buffer of ``nbytes`` (reused: allocated once per thread and size class),
    for chunks whose selected part is copied out after decoding."""
    buffer: np.ndarray[tuple[int], np.dtype[np.uint8]] | None = getattr(_local, "buffer", None)
    if buffer is None or buffer.size < nbytes:
        buffer = np.empty(nbytes, dtype=np.uint8)
        _local.buffer = buffer
    return buffer[:nbytes]


_BLOSC_MAX_FORMAT = 4  # the highest Blosc 1 header format version
#: The Blosc header's version byte, then its nbytes and cbytes (blocksize skipped), little-endian.
_BLOSC_HEADER = struct.Struct("<B3xI4xI")
#: The same with the blocksize: a stream of nbytes <= blocksize is one block.
_BLOSC_HEADER_BLOCKS = struct.Struct("<B3xIII")


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
        dest[:] = np.frombuffer(raw_checked(record, dest.size, key, where), dtype=np.uint8)
        return
    blosc_into(record, dest, dest.size, key, where)


def raw_checked(record: bytes, nbytes: int, key: str, where: str) -> bytes:
    """The raw record of a chunk of ``nbytes`` bytes, if it has that many (else an
    ArchiveFormatError naming the archive ``where``)."""
    if len(record) != nbytes:
        raise ArchiveFormatError(
            f"chunk record {key!r} has {len(record)} bytes, expected {nbytes}", archive=where, key=key
        )
    return record


def blosc_into(record: bytes, dest: np.ndarray[Any, Any], nbytes: int, key: str, where: str) -> None:
    """Decompresses the Blosc record of a chunk of ``nbytes`` bytes into ``dest`` (a
    writeable C-contiguous array of that many bytes, of any dtype and shape: Blosc fills
    its memory).

    Raises:
        ArchiveFormatError: For records that don't decompress to ``nbytes`` (``where``
            names the archive).
    """
    _check_blosc(record, nbytes, key, where)
    try:
        _codecs.blosc.decompress(record, dest)
    except Exception as error:
        if not _codec_failure(error):
            raise
        raise _undecodable(key, where, error) from error


def one_block_decoded(record: bytes, nbytes: int) -> bytes | None:
    """The decompressed bytes of a well-formed Blosc record of one block and ``nbytes``
    bytes; None for anything else, which :func:`blosc_decoded` then decodes or names the
    error of (the hot path of a row read, without the key its errors need)."""
    try:
        version, size, blocksize, cbytes = _BLOSC_HEADER_BLOCKS.unpack_from(record)
        if size == nbytes and cbytes == len(record) and size <= blocksize and version <= _BLOSC_MAX_FORMAT:
            return _codecs.decompress_one_block(record, False)
    except Exception as error:  # blosc_decoded names the codec's error
        if not _codec_failure(error):
            raise
    return None


def blosc_decoded(record: bytes, nbytes: int, key: str, where: str) -> bytes:
    """The Blosc record of a chunk of ``nbytes`` bytes, decompressed into new bytes (the
    arguments positional, for the row reads that call it directly). Cheaper than
    :func:`blosc_into` for small chunks: numcodecs checks a destination it is given with
    Python code (~1.5 us), and a few KB copy in a fraction of that.

    Raises:
        ArchiveFormatError: As :func:`blosc_into`.
    """
    # The quick form of _check_blosc's test (a call less): a header that says what is
    # expected; anything else is examined there.
    try:
        version, size, blocksize, cbytes = _BLOSC_HEADER_BLOCKS.unpack_from(record)
    except struct.error:  # shorter than a header
        version = -1
    if version == -1 or size != nbytes or cbytes != len(record) or version > _BLOSC_MAX_FORMAT:
        _check_blosc(record, nbytes, key, where)
        blocksize = -1  # numcodecs decodes what passes (trailing bytes, which python-blosc refuses)
    try:
        if size <= blocksize:  # one block: the cheaper call (see ncore_like._codecs)
            return _codecs.decompress_one_block(record, False)
        decoded: bytes = _codecs.blosc.decompress(record)
    except Exception as error:
        if not _codec_failure(error):
            raise
        raise _undecodable(key, where, error) from error
    return decoded


def _codec_failure(error: Exception) -> bool:
    """Whether ``error`` is the answer to a record that can't be decoded (numcodecs'
    RuntimeError, ValueError or SystemError, python-blosc's own error, a header too short for
    ``struct``), rather than something that happened meanwhile and is not the archive's
    fault: a signal handler's exception (an alarm's TimeoutError), a MemoryError, a Blosc
    binding missing from the installation."""
    if isinstance(error, (OSError, MemoryError, ImportError)):
        return False
    return isinstance(error, struct.error) or type(error).__module__ in ("builtins", "blosc_extension")


def _check_blosc(record: bytes, nbytes: int, key: str, where: str) -> None:
    """Raises ArchiveFormatError unless the Blosc ``record`` decompresses to ``nbytes`` and
    holds all the bytes its header gives (Blosc takes the stream's length from its header:
    it would read past a shorter record)."""
    # The sizes are read from the header rather than through numcodecs, which costs ~1 us of
    # a small read; anything unexpected takes numcodecs' checks for a precise message.
    try:
        version, size, cbytes = _BLOSC_HEADER.unpack_from(record)
    except struct.error:  # shorter than a header
        version = size = cbytes = -1
    if size == nbytes and cbytes == len(record) and version <= _BLOSC_MAX_FORMAT:
        return
    if version == -1:  # numcodecs would read the header past the record's end
        raise ArchiveFormatError(
            f"chunk record {key!r} is no Blosc stream: {len(record)} bytes, shorter than a Blosc header",
            archive=where,
            key=key,
        )
    if version <= _BLOSC_MAX_FORMAT and cbytes > len(record):
        raise ArchiveFormatError(
            f"chunk record {key!r} is truncated: {len(record)} bytes of the {cbytes} its Blosc header gives",
            archive=where,
            key=key,
        )
    try:
        size = _codecs.blosc._cbuffer_sizes(record)[0]
    except Exception as error:
        if not _codec_failure(error):
            raise
        raise ArchiveFormatError(
            f"chunk record {key!r} is no Blosc stream ({error})", archive=where, key=key
        ) from error
    if size != nbytes:
        raise ArchiveFormatError(
            f"chunk record {key!r} decompresses to {size} bytes, expected {nbytes}", archive=where, key=key
        )


def _undecodable(key: str, where: str, error: Exception) -> ArchiveFormatError:
    return ArchiveFormatError(f"chunk record {key!r} can't be decompressed ({error})", archive=where, key=key)
