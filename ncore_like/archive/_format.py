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

Checksums (optional, written by ncore_like by default): the index map has a fourth list,
``"crc32c"``, the CRC32C of every payload, which readers that know only the first three
keys ignore; and every member's ustar header block carries the same CRC32C in its unused
last 12 bytes (offset 500, after the ``prefix`` field), as ``b"CRC"``, 8 lowercase hex
digits and a NUL. tar ignores those bytes (its header checksum covers them), they cost
nothing per record, and they let a reader check records without the index (recovery of an
archive whose writer died).
"""

from __future__ import annotations

import array
import itertools
import operator
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple
from zlib import adler32

from ..errors import ArchiveFormatError, InvalidKeyError

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "BLOCK_SIZE",
    "INDEX_CHECKSUMS_KEY",
    "INDEX_HEADER_FORMAT",
    "INDEX_MAGIC",
    "INDEX_TYPE_CBOR_XZ",
    "NODE_METADATA_NAMES",
    "Index",
    "IndexHeader",
    "compress_index",
    "decode_index",
    "encode_index",
    "foreign_file",
    "has_index_magic",
    "has_node_metadata_key",
    "header_checksum",
    "in_file_order",
    "index_document",
    "is_node_metadata_key",
    "member_header",
    "member_headers",
    "pack_index_header",
    "padding",
    "tar_end",
    "unpack_index_header",
    "validate_key",
    "validate_keys",
]

# tarfile's BLOCKSIZE and RECORDSIZE (a test checks), without importing tarfile for a reader.
BLOCK_SIZE = 512
_TAR_RECORD_SIZE = 20 * BLOCK_SIZE  # tarfile pads the end-of-archive to this
INDEX_MAGIC = b"itar"
INDEX_TYPE_CBOR_XZ = 1
INDEX_HEADER_FORMAT = "<4sIQI"  # magic, index type, index offset, index size
_INDEX_HEADER_SIZE = struct.calcsize(INDEX_HEADER_FORMAT)
_ZERO_BLOCK = bytes(BLOCK_SIZE)
#: No archive is this large (4 EiB); larger offsets in an index header are damage.
_MAX_FILE_SIZE = 1 << 62
#: The index key of the payloads' CRC32C list (unknown to nvidia-ncore, which ignores it).
INDEX_CHECKSUMS_KEY = "crc32c"
# Where a member header keeps its payload's CRC32C: the 12 bytes after the ustar prefix.
_CHECKSUM_FIELD = slice(500, 512)
_CHECKSUM_MARK = b"CRC"

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


def has_node_metadata_key(keys: Sequence[str]) -> bool:
    """``any(map(is_node_metadata_key, keys))``, for a batch: a search per name of
    :data:`NODE_METADATA_NAMES` over the keys joined, each after a ``/`` and before a NUL."""
    joined = "/" + "\0/".join(keys) + "\0"
    return any(f"/{name}\0" in joined for name in NODE_METADATA_NAMES)


def validate_key(key: object, archive: str) -> str:
    """Returns ``key`` if it can name a record, raises :class:`InvalidKeyError` otherwise.

    Keys are relative ``/``-separated paths: extracting the archive with ``tar`` must not
    write outside the target folder, and tar cannot store NUL characters.
    """
    if (
        type(key) is str
        and key
        and key[0] not in "/."
        and key[-1] != "/"
        and "//" not in key
        and "/." not in key
        and "\0" not in key
        and "\\" not in key
    ):
        # Most keys (chunk keys) at half the cost: no component can be empty, "." or ".."
        # when none starts with a dot and no slash leads, trails or doubles (for a batch:
        # _NOT_PLAIN_KEY_MARKS).
        return key
    if not isinstance(key, str):
        raise InvalidKeyError(f"record keys are strings, got {type(key).__name__}", archive=archive)
    if not key:
        raise InvalidKeyError("record key is empty", archive=archive)
    if "\0" in key:
        raise InvalidKeyError(f"record key {key!r} contains a NUL character", archive=archive)
    if "\\" in key:
        # A path separator on Windows: extracting there could leave the target folder.
        raise InvalidKeyError(f"record key {key!r} contains a backslash", archive=archive)
    if key.startswith("/"):
        raise InvalidKeyError(f"record key {key!r} is absolute", archive=archive)
    parts = key.split("/")
    if ".." in parts:
        raise InvalidKeyError(f"record key {key!r} contains a '..' component", archive=archive)
    if "" in parts or "." in parts:
        raise InvalidKeyError(f"record key {key!r} contains an empty or '.' component", archive=archive)
    return key


#: Among keys each preceded and followed by a NUL, what a key outside :func:`validate_key`'s
#: short path shows: an empty key, a leading dot or slash, a trailing or double slash, a
#: component starting with a dot, a backslash (the same rule, for a batch at once).
_NOT_PLAIN_KEY_MARKS = ("\0\0", "\0/", "\0.", "/\0", "//", "/.", "\\")


def validate_keys(keys: Sequence[str], archive: str) -> None:
    """Raises what :func:`validate_key` raises for the first key of ``keys`` that can't name
    a record. Checks a batch with a few string searches over the keys joined by NULs (NUL is
    no key's character: exactly ``len(keys) + 1`` of them then), not a dozen per key; a batch
    that fails them is checked key by key for the error."""
    if all(map(str.__instancecheck__, keys)):
        joined = "\0" + "\0".join(keys) + "\0"
        if joined.count("\0") == len(keys) + 1 and not any(mark in joined for mark in _NOT_PLAIN_KEY_MARKS):
            return
    for key in keys:
        validate_key(key, archive)


def padding(size: int) -> int:
    """Bytes of NUL padding after ``size`` bytes to reach the next block boundary."""
    return -size % BLOCK_SIZE


def _tarfile_header(key: str, size: int) -> bytes:
    import tarfile  # writers only (a reader never builds a header)

    info = tarfile.TarInfo(key)
    info.size = size
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


_MAX_USTAR_SIZE = 8**11  # the size field holds 11 octal digits


class _Template(NamedTuple):
    """A ustar header as tarfile writes it for a short ASCII name (only the name, the size
    and the checksums differ between records), made with the first header, in the pieces
    between the fields that vary."""

    block: bytes
    mode_to_size: bytes  # bytes 100-124: mode, uid, gid
    mtime: bytes  # bytes 136-148
    type_to_prefix: bytes  # bytes 156-500: type flag, link name, magic, ..., prefix
    fixed_sum: int
    """The tar checksum's share of the bytes that don't vary between records (all but the
    name, size, checksum and CRC fields; the checksum field counts as spaces)."""
    no_crc: bytes  # the CRC field without a CRC: NULs


def _make_template() -> _Template:
    global _template
    block = _tarfile_header("x", 0)
    fixed = bytearray(block)
    for field in (slice(0, 100), slice(124, 136), _CHECKSUM_FIELD):
        fixed[field] = bytes(field.stop - field.start)
    fixed[148:156] = b" " * 8
    _template = _Template(
        block, block[100:124], block[136:148], block[156 : _CHECKSUM_FIELD.start], sum(fixed), block[_CHECKSUM_FIELD]
    )
    return _template


_template: _Template | None = None


def _seal(block: bytearray) -> bytes:
    """The header block with its tar checksum filled in (as tarfile writes it)."""
    block[148:156] = b" " * 8  # the checksum counts its own field as spaces
    block[148:155] = b"%06o\0" % sum(block)
    return bytes(block)


def member_header(key: str, size: int, crc: int | None = None) -> bytes:
    """The tar header block(s) of a record: one ustar block for ASCII keys of up to 100
    characters, a pax extended header before it for others; exactly as ``tarfile`` writes
    them, but with the payload's CRC32C in the last ustar block if ``crc`` is given."""
    if len(key) <= 100 and size < _MAX_USTAR_SIZE and key.isascii():
        # Filled in from a template: tarfile takes ~4x longer, a noticeable share of
        # writing records of a few hundred kilobytes.
        template = _template or _make_template()
        name = key.encode("ascii")
        size_field = b"%011o\0" % size
        crc_field = b"%s%08x\0" % (_CHECKSUM_MARK, crc) if crc is not None else template.no_crc
        # The tar checksum is the sum of the block's bytes: the template's fixed part is summed
        # once, so a record sums only what differs, with adler32 (whose low 16 bits are 1 + the
        # byte sum modulo 65521, which these <= 124 bytes can't reach): ~3x faster than sum().
        varying = adler32(name + size_field + crc_field) & 0xFFFF
        return b"".join(
            (
                name.ljust(100, b"\0"),
                template.mode_to_size,
                size_field,
                template.mtime,
                b"%06o\0 " % (template.fixed_sum + varying - 1),
                template.type_to_prefix,
                crc_field,
            )
        )
    header = _tarfile_header(key, size)
    if crc is None:
        return header
    last = bytearray(header[-BLOCK_SIZE:])
    last[_CHECKSUM_FIELD] = b"%s%08x\0" % (_CHECKSUM_MARK, crc)
    return header[:-BLOCK_SIZE] + _seal(last)


#: Batches of at least this many records get their headers from numpy (~20 us to start,
#: ~0.7 us a record); smaller ones, e.g. the one chunk of a frame, record by record (~1 us
#: each).
_VECTORISED_HEADERS = 48


def member_headers(keys: Sequence[str], sizes: Sequence[int], crcs: Sequence[int] | None = None) -> list[bytes]:
    """``member_header(key, size, crc)`` of every record of a batch (``crcs``: one per
    record, or None). A batch of short ASCII keys is filled into copies of the template by
    numpy, a few array operations for the whole batch instead of a dozen Python operations
    a record; other batches (pax headers) are made record by record."""
    count = len(keys)
    if count != len(sizes) or (crcs is not None and len(crcs) != count):
        raise ValueError(f"{count} keys, {len(sizes)} sizes and {'no' if crcs is None else len(crcs)} checksums")
    joined = "".join(keys)
    if (
        count < _VECTORISED_HEADERS
        or not joined.isascii()
        or max(map(len, keys)) > 100
        or max(sizes) >= _MAX_USTAR_SIZE
    ):
        if crcs is None:
            return [member_header(key, size) for key, size in zip(keys, sizes, strict=True)]
        return [member_header(key, size, crc) for key, size, crc in zip(keys, sizes, crcs, strict=True)]
    import numpy as np

    template = _template or _make_template()
    blocks = np.empty((count, BLOCK_SIZE), np.uint8)
    blocks[:] = np.frombuffer(template.block, np.uint8)
    # Names: NUL-padded to 100 bytes (numpy's fixed-size bytes pad them so).
    names = np.array(keys, dtype="S100").view(np.uint8).reshape(count, 100)
    blocks[:, :100] = names
    # Size: 11 octal digits and a NUL.
    digits = (np.array(sizes, np.int64)[:, None] >> np.arange(30, -1, -3)) & 7
    blocks[:, 124:135] = digits + ord("0")
    blocks[:, 135] = 0
    total = template.fixed_sum + names.sum(1, dtype=np.int64) + blocks[:, 124:136].sum(1, dtype=np.int64)
    if crcs is not None:
        # "CRC", 8 lowercase hex digits and a NUL.
        hex_digits = (np.array(crcs, np.int64)[:, None] >> np.arange(28, -1, -4)) & 15
        field = blocks[:, _CHECKSUM_FIELD]
        field[:, :3] = np.frombuffer(_CHECKSUM_MARK, np.uint8)
        field[:, 3:11] = np.frombuffer(b"0123456789abcdef", np.uint8)[hex_digits]
        field[:, 11] = 0
        total += field.sum(1, dtype=np.int64)
    # The tar checksum (at most 512 * 255, six octal digits), a NUL and a space.
    blocks[:, 148:154] = ((total[:, None] >> np.arange(15, -1, -3)) & 7) + ord("0")
    blocks[:, 154] = 0
    blocks[:, 155] = ord(" ")
    data = blocks.tobytes()
    return list(
        map(data.__getitem__, map(slice, range(0, len(data), BLOCK_SIZE), range(BLOCK_SIZE, len(data) + 1, BLOCK_SIZE)))
    )


def header_checksum(block: bytes | memoryview) -> int | None:
    """The payload CRC32C a member's (last) header block carries, None if it carries none."""
    field = bytes(block[_CHECKSUM_FIELD])
    if not field.startswith(_CHECKSUM_MARK) or field[-1] != 0:
        return None
    try:
        return int(field[len(_CHECKSUM_MARK) : -1], 16)
    except ValueError:
        return None


def tar_end(position: int) -> bytes:
    """The tar end-of-archive written at ``position``: two zero blocks, then NUL padding to
    a multiple of 10240 bytes, as ``tarfile`` closes an archive."""
    end = position + 2 * BLOCK_SIZE
    return bytes(2 * BLOCK_SIZE + (-end % _TAR_RECORD_SIZE))


class IndexHeader(NamedTuple):
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


#: The first bytes of a record table (see ``_table.py``): they begin like an index header
#: block (``itar``), so a file cut after the table's first block must not be read as one.
TABLE_MAGIC = b"itartbl1"


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
        if bytes(block[len(block) - BLOCK_SIZE : len(block) - BLOCK_SIZE + len(TABLE_MAGIC)]) == TABLE_MAGIC:
            raise ArchiveFormatError(
                "truncated: the file ends inside its index (its last block is the start of the record "
                "table, which the xz index and the index header block follow)",
                archive=archive,
            )
        raise ArchiveFormatError(
            f"unknown index type {index_type} (this version reads type {INDEX_TYPE_CBOR_XZ})",
            archive=archive,
        )
    if offset >= _MAX_FILE_SIZE or offset % BLOCK_SIZE:
        # Bounded, so that no sum of offsets and sizes below can overflow 64 bits.
        raise ArchiveFormatError(f"corrupt index header (index offset {offset})", archive=archive)
    return IndexHeader(index_type, offset, size)


def has_index_magic(tail: bytes | memoryview) -> bool:
    """True if the last block of ``tail`` starts like an index header."""
    return len(tail) >= BLOCK_SIZE and bytes(tail[len(tail) - BLOCK_SIZE : len(tail) - BLOCK_SIZE + 4]) == INDEX_MAGIC


#: Magic numbers at the start of compressed files, by the name of the compression.
_COMPRESSED_MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd", b"\xfd7zXZ\x00": "xz", b"BZh": "bzip2"}
#: zip's end-of-central-directory record: in the last 22 bytes plus a comment of up to 64 KiB.
_ZIP_END = b"PK\x05\x06"
_ZIP_END_SPAN = 22 + 0xFFFF


def foreign_file(head: bytes | memoryview, tail: bytes | memoryview, file_size: int | None, name: str) -> str | None:
    """What a file that is no indexed tar archive is, and what to do with it, from its first
    block (``head``), its last bytes (``tail``) and its size if known: a plain tar file, a
    zip file, a compressed file; None if it is none of these (e.g. an archive whose writer
    never closed it: a tar file without an end)."""
    head, tail = bytes(head[:BLOCK_SIZE]), bytes(tail)
    if head.startswith((b"PK\x03\x04", _ZIP_END)) or _ZIP_END in tail[-_ZIP_END_SPAN:]:
        return (
            f"a zip file, not an indexed tar archive; to pack the zarr hierarchy in it: "
            f"ncore-like pack 'zip://FOLDER::{name}' OUT.itar (FOLDER: the hierarchy's folder in the zip, "
            "empty for its top)"
        )
    for magic, compression in _COMPRESSED_MAGIC.items():
        if head.startswith(magic):
            return (
                f"a {compression}-compressed file, not an indexed tar archive; decompress it (a compressed tar file "
                f"into a new folder: mkdir FOLDER && tar -xf {name} -C FOLDER) and pack the zarr folder: "
                "ncore-like pack FOLDER OUT.itar"
            )
    # tar's end: two zero blocks (as far as the tail read shows), in a file of whole blocks (an
    # archive cut short in a run of zeros is told apart where the size is known).
    end = tail[-2 * BLOCK_SIZE :]
    ends = len(end) >= BLOCK_SIZE and not any(end)
    if head[257:262] == b"ustar" and ends and (file_size is None or file_size % BLOCK_SIZE == 0):
        return (
            "a plain tar file, not an indexed tar archive (no index follows its end-of-archive blocks: written "
            f"by tar, or an archive cut short before its index); unpack it into a new folder (mkdir FOLDER && "
            f"tar -xf {name} -C FOLDER: mkdir refuses a folder that exists) and pack the zarr folder: "
            "ncore-like pack FOLDER OUT.itar"
        )
    return None


class Index(NamedTuple):
    """The record index: parallel lists sorted by payload offset."""

    keys: list[str]
    offsets: list[int]
    sizes: list[int]
    checksums: list[int] | None = None
    """The CRC32C of every payload (None for archives written without checksums)."""


def in_file_order(
    keys: Sequence[str], offsets: Sequence[int], sizes: Sequence[int], checksums: Sequence[int] | None = None
) -> tuple[list[str], list[int], list[int], list[int] | None]:
    """The records' lists (as lists) ordered by offset. A writer appends records in file
    order, so the common case is a check and a copy: reordering 20,000 records element by
    element took ~4 ms of an archive's close."""
    if all(map(operator.lt, offsets, itertools.islice(offsets, 1, None))):
        return list(keys), list(offsets), list(sizes), None if checksums is None else list(checksums)
    order = sorted(range(len(keys)), key=offsets.__getitem__)
    return (
        [keys[i] for i in order],
        [offsets[i] for i in order],
        [sizes[i] for i in order],
        None if checksums is None else [checksums[i] for i in order],
    )


def encode_index(
    keys: Sequence[str],
    offsets: Sequence[int],
    sizes: Sequence[int],
    checksums: Sequence[int] | None = None,
    *,
    preset: int = 6,
    fitted: bool = False,
) -> bytes:
    """Encodes an index of type 1 (records in any order; they are sorted by offset), with
    the payloads' CRC32C if ``checksums`` is given: :func:`compress_index` of
    :func:`index_document` of the records :func:`in_file_order`."""
    document = index_document(*in_file_order(keys, offsets, sizes, checksums))
    return compress_index(document, preset=preset, fitted=fitted)


def index_document(keys: list[str], offsets: list[int], sizes: list[int], checksums: list[int] | None = None) -> bytes:
    """The CBOR document of an index of type 1, uncompressed, of records given in file order
    (as :func:`in_file_order` gives them)."""
    table: dict[str, list[Any]] = {"items": keys, "offset_datas": offsets, "sizes": sizes}
    if checksums is not None:
        table[INDEX_CHECKSUMS_KEY] = checksums
    import cbor2  # here, as in decode_index: a reader of a record table never needs it

    return cbor2.dumps(table)


def compress_index(document: bytes, *, preset: int = 6, fitted: bool = False) -> bytes:
    """The xz stream of an index's CBOR ``document`` (no Python objects: the GIL is released
    while it compresses). ``preset``: the xz compression level (6, xz's default, is what
    nvidia-ncore writes; every level decodes alike). ``fitted``: the level's dictionary cut
    to the smallest power of two holding the document, which compresses alike: setting up
    the level's own (1 MiB for level 1) took ~0.6 ms of every archive's close, ~60 x the
    compression of a small index."""
    import lzma  # here, as in decode_index

    if not fitted:
        return lzma.compress(document, format=lzma.FORMAT_XZ, preset=preset)
    dictionary = min(max(_SMALLEST_DICTIONARY, 1 << (len(document) - 1).bit_length()), _PRESET_DICTIONARIES[preset])
    filters = [{"id": lzma.FILTER_LZMA2, "preset": preset, "dict_size": dictionary}]
    return lzma.compress(document, format=lzma.FORMAT_XZ, filters=filters)


#: The dictionary sizes of xz's levels 0-9 (liblzma's presets), and LZMA2's smallest.
_PRESET_DICTIONARIES = tuple(size << 18 for size in (1, 4, 8, 16, 16, 32, 32, 64, 128, 256))
_SMALLEST_DICTIONARY = 4096


def decode_index(data: bytes | memoryview, header: IndexHeader, archive: str) -> Index:
    """Decodes and validates an index of type 1: every record must lie before the index."""
    import lzma

    import cbor2

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
    checksums = table.get(INDEX_CHECKSUMS_KEY)
    if checksums is not None and (not isinstance(checksums, list) or len(checksums) != len(keys)):
        raise ArchiveFormatError(
            f"corrupt record index ({INDEX_CHECKSUMS_KEY} is no list of {len(keys)} checksums)", archive=archive
        )
    if keys:
        import numpy as np  # here, not at the top: the archive layer imports in a fraction of numpy's time

        try:
            # Typed C arrays reject anything but integers, and numpy checks the entries
            # without a Python object per record: opening large archives stays cheap.
            offset_array = np.frombuffer(array.array("q", offsets), dtype=np.int64)
            size_array = np.frombuffer(array.array("q", sizes), dtype=np.int64)
            if checksums is not None:
                crc_array = np.frombuffer(array.array("q", checksums), dtype=np.int64)
                if int(crc_array.min()) < 0 or int(crc_array.max()) >= 1 << 32:
                    raise OverflowError("checksum out of range")
            typed = set(map(type, keys)) == {str}
        except (TypeError, OverflowError):
            typed = False
        if not typed:
            raise ArchiveFormatError(
                "corrupt record index (keys, offsets, sizes or checksums of wrong type)", archive=archive
            )
        _check_entries(keys, offset_array, size_array, header, archive)
    return Index(keys, offsets, sizes, checksums)


def _check_entries(
    keys: list[str], offsets: np.ndarray[Any, Any], sizes: np.ndarray[Any, Any], header: IndexHeader, archive: str
) -> None:
    """Raises :class:`ArchiveFormatError` naming the first index entry (in file order) that
    can't be a tar member's payload: each lies after its header block, block-aligned, with a
    size that is not negative, before the index, and clear of the next payload's header."""
    import numpy as np

    order = np.argsort(offsets, kind="stable")
    start, size = offsets[order], sizes[order]
    # Compared before anything is added: the header's offset is below 2**62, so sums of
    # bounded values can't wrap around.
    beyond = (start > header.offset) | (size > header.offset)
    end = np.where(beyond, header.offset + 1, start + np.where(beyond, 0, size))
    bad = (start < BLOCK_SIZE) | (start % BLOCK_SIZE != 0) | (size < 0) | beyond | (end > header.offset)
    # Between two payloads lies at least the second one's header block: overlap[i] flags the
    # pair of entries i and i + 1.
    padded_end = end + (-end % BLOCK_SIZE)
    overlap = start[1:] - padded_end[:-1] < BLOCK_SIZE
    if not (bad.any() or overlap.any()):
        return
    first = int(np.argmax(bad)) if bad.any() else len(bad)
    pair = int(np.argmax(overlap)) if overlap.any() else len(bad)

    def entry(i: int) -> str:
        return f"entry {keys[int(order[i])]!r} (offset {int(start[i])}, {int(size[i])} bytes)"

    if pair < first:
        position = int(order[pair])
        why = f"{entry(pair)} overlaps the next one, {entry(pair + 1)}, or its header"
    else:
        position = int(order[first])
        offset, length = int(start[first]), int(size[first])
        if length < 0:
            why = f"{entry(first)} has a negative size"
        elif offset < BLOCK_SIZE or offset % BLOCK_SIZE:
            why = f"{entry(first)} has an offset that is no payload's (before the first header, or not block-aligned)"
        else:
            why = f"{entry(first)} has a payload extending past the index at offset {header.offset}"
    raise ArchiveFormatError(f"corrupt record index: {why}", archive=archive, key=keys[position])


# -- reading tar headers -----------------------------------------------------------------
# Verification (and recovery of archives without an index) walks the tar headers itself:
# the index is not trusted there, and tarfile's iteration stops quietly at a bad header
# instead of saying what is wrong with it.

__all__ += [
    "TAR_REGULAR_TYPES",
    "TarHeader",
    "is_zero_block",
    "parse_gnu_long_name",
    "parse_pax_records",
    "parse_tar_header",
    "parse_tar_number",
    "tar_data_size",
]

#: Typeflags of members whose data is a file's contents: "0", the old "\0", and "7"
#: (contiguous file, read as a regular one). GNU sparse members ("S") are not supported.
TAR_REGULAR_TYPES = frozenset({b"0", b"\0", b"7"})
TAR_PAX_TYPES = frozenset({b"x", b"X"})  # extended header of the next member ("X": Solaris)
TAR_PAX_GLOBAL_TYPE = b"g"  # extended header of all later members
TAR_GNU_LONG_NAME_TYPE = b"L"  # GNU: the name of the next member
TAR_GNU_LONG_LINK_TYPE = b"K"  # GNU: the link target of the next member
TAR_GNU_SPARSE_TYPE = b"S"
TAR_DIRECTORY_TYPE = b"5"
# Hard and symbolic links, devices, directories and FIFOs: their size field does not count
# data blocks that follow (POSIX leaves it unused; tarfile skips no data for them).
_TYPES_WITHOUT_DATA = frozenset({b"1", b"2", b"3", b"4", b"5", b"6"})
_USTAR_MAGIC = b"ustar\x00"  # POSIX; GNU writes b"ustar  \x00" and uses the prefix field otherwise
_OCTAL_DIGITS = frozenset(b"01234567")


class TarHeader(NamedTuple):
    """One decoded tar header block (a member may have extended headers before it)."""

    name: str
    """The name field, after the ustar prefix field when there is one."""
    size: int
    """The size field (an extended header may replace it)."""
    typeflag: bytes
    """The type of the entry, one byte: ``b"0"`` a regular file, ``b"x"`` a pax extended
    header, ``b"L"`` a GNU long name..."""

    @property
    def is_regular(self) -> bool:
        """True for regular files (see :data:`TAR_REGULAR_TYPES`)."""
        return self.typeflag in TAR_REGULAR_TYPES


def tar_data_size(typeflag: bytes, size: int) -> int:
    """Bytes of data after the header of an entry of type ``typeflag`` and ``size`` (before
    padding): ``size``, but none for links, devices, directories and FIFOs."""
    return 0 if typeflag in _TYPES_WITHOUT_DATA else size


def is_zero_block(block: bytes | memoryview) -> bool:
    """True for a block of NUL bytes: the end-of-archive marker where a header is expected."""
    return len(block) == BLOCK_SIZE and block == _ZERO_BLOCK


def parse_tar_number(field: bytes | memoryview) -> int:
    """A numeric header field: octal digits ended by NUL or space, or (GNU, for values too
    large for the digits) base-256 big-endian with the high bit of the first byte set.

    Raises:
        ValueError: For anything else.
    """
    raw = bytes(field)
    if raw and raw[0] & 0x80:
        if raw[0] & 0x40:  # negative: two's complement over the whole field
            return int.from_bytes(raw, "big", signed=True)
        return int.from_bytes(bytes([raw[0] & 0x7F]) + raw[1:], "big")
    digits = raw.split(b"\0", 1)[0].strip(b" ")
    if not set(digits) <= _OCTAL_DIGITS:
        raise ValueError(f"not an octal number: {raw!r}")
    return int(digits, 8) if digits else 0


def _header_text(field: bytes | memoryview) -> str:
    # Names are bytes to tar; the UTF-8 ones of our writer decode as written, others keep
    # their bytes as surrogates (as tarfile does).
    return bytes(field).split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def parse_tar_header(block: bytes | memoryview, archive: str | None = None) -> TarHeader:
    """Decodes one tar header block (ustar, GNU or v7): checksum, name, size and typeflag.

    Raises:
        ArchiveFormatError: For a block of the wrong length, a block of zeros (the
            end-of-archive marker, see :func:`is_zero_block`), a wrong checksum, and
            malformed numbers (naming ``archive``, if given).
    """
    if len(block) != BLOCK_SIZE:
        raise ArchiveFormatError(f"tar header of {len(block)} bytes, expected {BLOCK_SIZE}", archive=archive)
    if is_zero_block(block):
        raise ArchiveFormatError("zero block (end-of-archive marker) where a tar header was expected", archive=archive)
    raw = bytes(block)
    try:
        checksum = parse_tar_number(raw[148:156])
    except ValueError:
        raise ArchiveFormatError(f"malformed checksum field in tar header: {raw[148:156]!r}", archive=archive) from None
    # The sum counts the checksum field as 8 spaces; some old tars summed signed bytes.
    rest = raw[:148] + raw[156:]
    unsigned = sum(rest) + 8 * 0x20
    signed = unsigned - 256 * sum(1 for byte in rest if byte & 0x80)
    if checksum not in (unsigned, signed):
        raise ArchiveFormatError(
            f"tar header checksum mismatch: stored {checksum}, computed {unsigned}", archive=archive
        )
    try:
        size = parse_tar_number(raw[124:136])
    except ValueError:
        raise ArchiveFormatError(f"malformed size field in tar header: {raw[124:136]!r}", archive=archive) from None
    if size < 0:
        raise ArchiveFormatError(f"negative size in tar header: {size}", archive=archive)
    typeflag = raw[156:157]
    name = _header_text(raw[0:100])
    if raw[257:263] == _USTAR_MAGIC:
        prefix = _header_text(raw[345:500])
        if prefix:
            name = f"{prefix}/{name}"
    if typeflag == b"\0" and name.endswith("/"):  # v7 wrote directories as files ending in "/"
        typeflag = TAR_DIRECTORY_TYPE
    if typeflag == TAR_DIRECTORY_TYPE:
        name = name.rstrip("/")
    return TarHeader(name, size, typeflag)


def parse_pax_records(data: bytes | memoryview, archive: str | None = None) -> dict[str, str]:
    """The records of a pax extended header's data: ``"<length> <keyword>=<value>\\n"``
    each, the length counting the whole record. Values are UTF-8 (other bytes are kept as
    surrogates).

    Raises:
        ArchiveFormatError: For malformed records.
    """
    raw = bytes(data)
    records: dict[str, str] = {}
    position = 0
    while position < len(raw):
        if raw[position] == 0:  # NUL padding after the last record (some writers count it)
            break
        space = raw.find(b" ", position)
        length_text = raw[position:space] if space > position else b""
        length = int(length_text) if length_text.isdigit() else 0
        record = raw[position : position + length]
        keyword, equals, value = record[len(length_text) + 1 : -1].partition(b"=")
        if length <= len(length_text) + 1 or len(record) != length or not record.endswith(b"\n") or not equals:
            raise ArchiveFormatError(f"malformed pax extended header record at byte {position}", archive=archive)
        records[keyword.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        position += length
    return records


def parse_gnu_long_name(data: bytes | memoryview) -> str:
    """The name stored in the data of a GNU long name entry (``"L"``), NUL-terminated."""
    return _header_text(data)
