"""The ``.itar`` format, version 1: pure functions without I/O.

An indexed tar archive is a regular POSIX tar file (pax headers as Python's ``tarfile``
writes them) of *records*, one tar member per record, followed by a compressed index
and a final 512-byte index header block::

    [member header][payload, NUL-padded to 512]     one per record
    [two zero blocks, NUL padding to 10240]         tar end-of-archive
    [compressed index, NUL-padded to 512]           at offset I, S bytes
    [index header block]                            b"itar", type, I, S

The index (type 1) is an xz stream of the CBOR map ``{"items": keys, "offset_datas":
payload offsets, "sizes": payload sizes}``, the lists parallel and sorted by offset. This
is byte-compatible with the indexed tar files of nvidia-ncore 19.8.
"""

from __future__ import annotations

import array
import lzma
import struct
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cbor2
import numpy as np

from ..errors import ArchiveFormatError, InvalidKeyError

__all__ = [
    "BLOCK_SIZE",
    "INDEX_HEADER_FORMAT",
    "INDEX_MAGIC",
    "INDEX_TYPE_CBOR_XZ",
    "NODE_METADATA_NAMES",
    "Index",
    "IndexHeader",
    "decode_index",
    "encode_index",
    "is_node_metadata_key",
    "member_header",
    "pack_index_header",
    "padding",
    "tar_end",
    "unpack_index_header",
    "validate_key",
]

BLOCK_SIZE = tarfile.BLOCKSIZE  # 512
_TAR_RECORD_SIZE = tarfile.RECORDSIZE  # 20 blocks: tarfile pads the end-of-archive to this
INDEX_MAGIC = b"itar"
INDEX_TYPE_CBOR_XZ = 1
INDEX_HEADER_FORMAT = "<4sIQI"  # magic, index type, index offset, index size
_INDEX_HEADER_SIZE = struct.calcsize(INDEX_HEADER_FORMAT)
_ZERO_BLOCK = bytes(BLOCK_SIZE)

#: Last key components of node metadata records: rewritable until the archive is closed,
#: then appended after all other records (so they land in the tail read). The compressed
#: consolidated metadata records are node metadata too.
NODE_METADATA_NAMES = frozenset(
    {".zgroup", ".zarray", ".zattrs", ".zmetadata", "zarr.json", ".zmetadata.cbor.xz", "zarr.json.cbor.zlib"}
)


def is_node_metadata_key(key: str) -> bool:
    """True for keys of node metadata records (zarr group/array metadata, attributes and
    consolidated metadata of both zarr formats)."""
    return key.rpartition("/")[2] in NODE_METADATA_NAMES


def validate_key(key: object, archive: str) -> str:
    """Returns ``key`` if it can name a record, raises :class:`InvalidKeyError` otherwise.

    Keys are relative ``/``-separated paths: extracting the archive with ``tar`` must not
    write outside the target folder, and tar cannot store NUL characters.
    """
    if not isinstance(key, str):
        raise InvalidKeyError(f"record keys are strings, got {type(key).__name__}", archive=archive)
    if not key:
        raise InvalidKeyError("record key is empty", archive=archive)
    if "\0" in key:
        raise InvalidKeyError(f"record key {key!r} contains a NUL character", archive=archive)
    if key.startswith("/"):
        raise InvalidKeyError(f"record key {key!r} is absolute", archive=archive)
    parts = key.split("/")
    if ".." in parts:
        raise InvalidKeyError(f"record key {key!r} contains a '..' component", archive=archive)
    if "" in parts or "." in parts:
        raise InvalidKeyError(f"record key {key!r} contains an empty or '.' component", archive=archive)
    return key


def padding(size: int) -> int:
    """Bytes of NUL padding after ``size`` bytes to reach the next block boundary."""
    return -size % BLOCK_SIZE


def _tarfile_header(key: str, size: int) -> bytes:
    info = tarfile.TarInfo(key)
    info.size = size
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


# A ustar header as tarfile writes it for a short ASCII name; only the name, the size and
# the checksum differ between records.
_USTAR_TEMPLATE = _tarfile_header("x", 0)
_MAX_USTAR_SIZE = 8**11  # the size field holds 11 octal digits


def member_header(key: str, size: int) -> bytes:
    """The tar header block(s) of a record, exactly as ``tarfile`` writes them: one ustar
    block for ASCII keys of up to 100 characters, a pax extended header before it for
    others."""
    if len(key) <= 100 and size < _MAX_USTAR_SIZE and key.isascii():
        # Filled in from a template: tarfile takes ~4x longer, a noticeable share of
        # writing records of a few hundred kilobytes.
        block = bytearray(_USTAR_TEMPLATE)
        block[0:100] = key.encode("ascii").ljust(100, b"\0")
        block[124:136] = b"%011o\0" % size
        block[148:156] = b" " * 8  # the checksum counts its own field as spaces
        block[148:155] = b"%06o\0" % sum(block)
        return bytes(block)
    return _tarfile_header(key, size)


def tar_end(position: int) -> bytes:
    """The tar end-of-archive written at ``position``: two zero blocks, then NUL padding to
    a multiple of 10240 bytes, as ``tarfile`` closes an archive."""
    end = position + 2 * BLOCK_SIZE
    return bytes(2 * BLOCK_SIZE + (-end % _TAR_RECORD_SIZE))


@dataclass(frozen=True)
class IndexHeader:
    """The decoded index header block."""

    index_type: int
    offset: int
    size: int

    @property
    def file_size(self) -> int:
        """Size of an archive whose header block directly follows its padded index."""
        return self.offset + self.size + padding(self.size) + BLOCK_SIZE


def pack_index_header(offset: int, size: int) -> bytes:
    """The 512-byte index header block for an index of ``size`` bytes at ``offset``."""
    packed = struct.pack(INDEX_HEADER_FORMAT, INDEX_MAGIC, INDEX_TYPE_CBOR_XZ, offset, size)
    return packed + bytes(BLOCK_SIZE - len(packed))


def unpack_index_header(block: bytes | memoryview, archive: str) -> IndexHeader:
    """Decodes the last block of an archive, raising :class:`ArchiveFormatError` if it is
    no index header of a known type."""
    if len(block) < BLOCK_SIZE:
        raise ArchiveFormatError(
            f"too short for an indexed tar archive ({len(block)} bytes, at least one "
            f"{BLOCK_SIZE}-byte index header block needed)",
            archive=archive,
        )
    magic, index_type, offset, size = struct.unpack_from(INDEX_HEADER_FORMAT, block, len(block) - BLOCK_SIZE)
    if magic != INDEX_MAGIC:
        raise ArchiveFormatError(
            f"not an indexed tar archive (its last block has magic {magic!r}, expected "
            f"{INDEX_MAGIC!r}; truncated, or not closed when it was written?)",
            archive=archive,
        )
    if index_type != INDEX_TYPE_CBOR_XZ:
        raise ArchiveFormatError(
            f"unknown index type {index_type} (this version reads type {INDEX_TYPE_CBOR_XZ})",
            archive=archive,
        )
    return IndexHeader(index_type, offset, size)


@dataclass(frozen=True)
class Index:
    """The record index: parallel lists sorted by payload offset."""

    keys: list[str]
    offsets: list[int]
    sizes: list[int]


def encode_index(keys: Sequence[str], offsets: Sequence[int], sizes: Sequence[int]) -> bytes:
    """Encodes an index of type 1 (records in any order; they are sorted by offset)."""
    order = sorted(range(len(keys)), key=offsets.__getitem__)
    table = {
        "items": [keys[i] for i in order],
        "offset_datas": [offsets[i] for i in order],
        "sizes": [sizes[i] for i in order],
    }
    return lzma.compress(cbor2.dumps(table), format=lzma.FORMAT_XZ)


def decode_index(data: bytes | memoryview, header: IndexHeader, archive: str) -> Index:
    """Decodes and validates an index of type 1: every record must lie before the index."""
    try:
        decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
        raw = decompressor.decompress(data)
        if not decompressor.eof:
            raise EOFError("xz stream ends before its end marker")
        table: Any = cbor2.loads(raw)
    except (lzma.LZMAError, EOFError, cbor2.CBORDecodeError, ValueError) as error:
        raise ArchiveFormatError(f"corrupt record index ({error})", archive=archive) from error
    try:
        keys, offsets, sizes = table["items"], table["offset_datas"], table["sizes"]
    except (TypeError, KeyError) as error:
        raise ArchiveFormatError("corrupt record index (no items/offset_datas/sizes)", archive=archive) from error
    if not (isinstance(keys, list) and isinstance(offsets, list) and isinstance(sizes, list)):
        raise ArchiveFormatError("corrupt record index (items/offset_datas/sizes not lists)", archive=archive)
    if not len(keys) == len(offsets) == len(sizes):
        raise ArchiveFormatError(
            f"corrupt record index ({len(keys)} keys, {len(offsets)} offsets, {len(sizes)} sizes)",
            archive=archive,
        )
    if keys:
        try:
            # Typed C arrays reject anything but integers, and numpy checks the bounds
            # without a Python object per record: opening large archives stays cheap.
            offset_array = np.frombuffer(array.array("q", offsets), dtype=np.int64)
            size_array = np.frombuffer(array.array("q", sizes), dtype=np.int64)
            bad = (
                set(map(type, keys)) != {str}
                or int(offset_array.min()) < 0
                or int(size_array.min()) < 0
                or int((offset_array + size_array).max()) > header.offset
            )
        except (TypeError, OverflowError):
            bad = True
        if bad:
            raise ArchiveFormatError(
                "corrupt record index (keys, offsets or sizes of wrong type, or records "
                f"extending past the index at offset {header.offset})",
                archive=archive,
            )
    return Index(keys, offsets, sizes)
