"""The record table: the index once more, in a form that opens in a fraction of the time.

The xz-compressed CBOR index is what nvidia-ncore reads, and decoding it is most of a first
open (LZMA decodes at ~100 MB/s; a 20,000-record index inflates to ~0.7 MB, and cbor2 makes
a Python object per entry). Archives written by ncore_like also carry the same records as a
*record table*, between the tar end-of-archive blocks and the xz index (where tar and
nvidia-ncore never look), found through 24 bytes of the index header block that nvidia-ncore
ignores (after its 20-byte ``<4sIQI``)::

    [tar end][record table, NUL-padded to 512][xz index, padded][header block + table pointer]

The table is a fixed header, then one zlib stream of the gaps (bytes between one payload's
padded end and the next payload: its tar header blocks), the sizes (both uint32, int64 where
a number needs it) and the keys
(UTF-8, NUL-separated: keys never hold NUL), then the CRC32C of every payload as raw uint32
(incompressible: zlib would only slow them down). Little-endian throughout, records in file
order. Offsets are a cumulative sum of gaps and padded sizes.

Archives written without checksums carry no table (they are byte for byte what nvidia-ncore
writes). The CRC32C list moves from the xz index into the table (the index then holds the three lists
nvidia-ncore knows), so the two together stay within twice the size of the index alone.
A table whose CRC32C (in the pointer) doesn't match, or that doesn't decode, or a damaged
pointer, is ignored for the xz index; the records' checksums then come from their tar
headers (local archives: a block read per record), or a remote archive is refused unless
checksums aren't verified; ``verify`` reports the damage.
"""

from __future__ import annotations

import functools
import struct
import sys
import zlib
from array import array
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate
from operator import add
from typing import Any, NamedTuple

from .._concurrency import on_own_thread
from ..errors import ArchiveFormatError
from ._checksum import checksum
from ._format import (
    BLOCK_SIZE,
    TABLE_MAGIC,
    Index,
    IndexHeader,
    _check_entries,
    compress_index,
    encode_index,
    in_file_order,
    index_document,
    padding,
)

__all__ = [
    "DecodedTable",
    "KeyText",
    "TablePointer",
    "decode_records",
    "decode_table",
    "encode_index_tail",
    "pack_table_pointer",
    "pointer_damaged",
    "unpack_table_pointer",
]

_TABLE_HEAD = struct.Struct("<8sQB7xQ")  # magic, records, flags, zlib stream length
_HAS_CRCS = 1  # flags: the table ends with the CRC32C list
_WIDE = 2  # flags: gaps and sizes are int64 (else uint32: less to inflate)
_POINTER_MAGIC = b"tbl1"
_POINTER = struct.Struct("<4sQQI")  # magic, table offset, table size, CRC32C of the table
#: Where the pointer lies in the index header block: after nvidia-ncore's ``<4sIQI``.
POINTER_START = 20
_LIMIT = 1 << 62  # no archive is this large: larger values are damage
# array typecodes of exactly 8 and 4 bytes (``l`` and ``I`` vary by platform)
_INT64 = "q"
_OUT_OF_PLACE = "entries out of place"
_UINT32 = next(code for code in "IL" if array(code).itemsize == 4)


class TablePointer(NamedTuple):
    """Where an archive's record table lies, and its CRC32C."""

    offset: int
    size: int
    crc: int


def pack_table_pointer(pointer: TablePointer) -> bytes:
    return _POINTER.pack(_POINTER_MAGIC, pointer.offset, pointer.size, pointer.crc)


def unpack_table_pointer(block: bytes | memoryview, index_offset: int) -> TablePointer | None:
    """The table pointer in an index header block (its last 512 bytes), None if there is
    none or it can't point at a table before the xz index at ``index_offset``."""
    start = len(block) - BLOCK_SIZE + POINTER_START
    if start < POINTER_START:
        return None
    magic, offset, size, crc = _POINTER.unpack_from(block, start)
    if magic != _POINTER_MAGIC or offset % BLOCK_SIZE or size < _TABLE_HEAD.size or offset + size > index_offset:
        return None
    return TablePointer(offset, size, crc)


def pointer_damaged(block: bytes | memoryview, index_offset: int) -> bool:
    """True if the index header block (the last 512 bytes of ``block``) holds something where
    the table pointer goes that isn't a pointer (nvidia-ncore's blocks hold zeros there): a
    damaged pointer, which must not be taken for an archive without a record table."""
    start = len(block) - BLOCK_SIZE + POINTER_START
    if start < POINTER_START:
        return False
    region = bytes(block[start : start + _POINTER.size])
    return any(region) and unpack_table_pointer(block, index_offset) is None


def encode_table(
    keys: Sequence[str], offsets: Sequence[int], sizes: Sequence[int], crcs: Sequence[int] | None
) -> bytes:
    """The record table of records given in file order."""
    import numpy as np  # here: the archive layer imports without numpy

    offset_array = np.asarray(offsets, dtype="<i8")
    size_array = np.asarray(sizes, dtype="<i8")
    padded_ends = offset_array + size_array + (-size_array % BLOCK_SIZE)
    gaps = offset_array - np.concatenate(([0], padded_ends[:-1])).astype("<i8")
    wide = bool(len(keys)) and max(int(gaps.max()), int(size_array.max())) >= 1 << 32
    numbers = np.concatenate((gaps, size_array)).astype("<i8" if wide else "<u4")
    # Level 1: ~3x faster than 6 for ~6 % more bytes, and inflates as fast (a close pays it
    # once per archive, ~10 ms for 20,000 records at level 6).
    packed = zlib.compress(numbers.tobytes() + "\0".join(keys).encode("utf-8"), 1)
    crc_bytes = b"" if crcs is None else np.asarray(crcs, dtype="<u4").tobytes()
    flags = (_HAS_CRCS if crcs is not None else 0) | (_WIDE if wide else 0)
    return _TABLE_HEAD.pack(TABLE_MAGIC, len(keys), flags, len(packed)) + packed + crc_bytes


class KeyText(Sequence[str]):
    """The keys of a decoded record table, kept as the one NUL-separated text they are stored
    as, and split into a list only when something asks for more than a few of them.

    Splitting 20,000 keys and hashing them into a dict is ~2.4 ms, about half of a first
    open; finding one key by scanning the text costs tens of microseconds. A reader that
    looks up a handful of keys after opening (a consolidated record, one chunk) pays for
    the scans only (see ``RecordTable``)."""

    __slots__ = ("_count", "_list", "_text")

    def __init__(self, text: str, count: int) -> None:
        self._text = f"\0{text}\0"  # every key between two NULs: a search can't match a part
        self._count = count
        self._list: list[str] | None = None

    def as_list(self) -> list[str]:
        """The keys, in file order (split once, then kept)."""
        keys = self._list
        if keys is None:
            keys = self._list = self._text[1:-1].split("\0") if self._count else []
        return keys

    def find(self, key: str) -> tuple[int, bool] | None:
        """The position of ``key`` and whether the table holds it more than once (a damaged
        or crafted table), by scanning the text; None if it holds no such key."""
        if "\0" in key:
            return None
        text = self._text
        needle = f"\0{key}\0"
        at = text.find(needle)
        if at < 0:
            return None
        # The key's position is the number of keys before it: the NULs before its own.
        return text.count("\0", 0, at), text.find(needle, at + 1) >= 0

    def __reduce__(self) -> tuple[type[KeyText], tuple[str, int]]:
        return KeyText, (self._text[1:-1], self._count)  # the text only, never the list too

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int | slice) -> Any:
        return self.as_list()[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_list())


class DecodedTable(NamedTuple):
    """A decoded record table: the keys as text, the numbers as arrays (no Python object
    per record until one is read)."""

    keys: KeyText
    offsets: Sequence[int]
    sizes: Sequence[int]
    checksums: Sequence[int] | None

    def as_index(self) -> Index:
        """The same records as an :class:`Index` of lists."""
        crcs = self.checksums
        return Index(self.keys.as_list(), list(self.offsets), list(self.sizes), None if crcs is None else list(crcs))


def decode_table(data: bytes, pointer: TablePointer, archive: str) -> Index:
    """The index a record table holds, its entries checked as :func:`decode_index` checks
    an index's; :class:`ArchiveFormatError` if the table is damaged."""
    return decode_records(data, pointer, archive).as_index()


def decode_records(data: bytes, pointer: TablePointer, archive: str) -> DecodedTable:
    """:func:`decode_table` in the form readers keep (see :class:`DecodedTable`)."""

    def damaged(why: str) -> ArchiveFormatError:
        return ArchiveFormatError(f"damaged record table at offset {pointer.offset} ({why})", archive=archive)

    if len(data) != pointer.size or checksum(data) != pointer.crc:
        raise damaged("its CRC32C doesn't match")
    magic, count, flags, packed_size = _TABLE_HEAD.unpack_from(data)
    crc_size = 4 * count if flags & _HAS_CRCS else 0
    width = 8 if flags & _WIDE else 4
    if magic != TABLE_MAGIC or flags > 3 or _TABLE_HEAD.size + packed_size + crc_size != len(data):
        raise damaged("unknown layout")
    if count > pointer.offset // BLOCK_SIZE:  # each record has a header block at least
        raise damaged(f"{count} records in {pointer.offset} bytes")
    start = _TABLE_HEAD.size
    try:
        # Bounded: the keys are in the tar headers before the table, so no longer than they.
        inflate = zlib.decompressobj()
        body = inflate.decompress(data[start : start + packed_size], 2 * width * count + pointer.offset + 1)
        if not inflate.eof or inflate.unconsumed_tail:
            raise ValueError("zlib stream too long or cut short")
        if len(body) < 2 * width * count:
            raise ValueError("numbers cut short")
        numbers = _little_endian(_INT64 if width == 8 else _UINT32, body[: 2 * width * count])
        text = body[2 * width * count :].decode("utf-8")
    except (zlib.error, ValueError) as error:
        raise damaged(str(error)) from None
    if (text.count("\0") + 1 if count else 0) != count or (not count and text):
        raise damaged("wrong number of keys")
    keys = KeyText(text, count)
    # numpy when it is loaded already (a library process); else pure Python, slower for large
    # tables (8 against 3 ms for 20,000 records) but far faster than importing numpy for it
    # (``ncore-like ls``, scripts that read records alone).
    offsets, sizes, problem = (_offsets_numpy if "numpy" in sys.modules else _offsets_python)(numbers, count)
    if problem is not None and problem != _OUT_OF_PLACE:
        raise damaged(problem)
    # Offsets grow by construction, so an index's checks come down to these: each payload
    # after a header block of its own, block-aligned, the last one ending before the table.
    # Where one fails, the index's check says which entry and why.
    if count and (problem is not None or offsets[-1] + sizes[-1] > pointer.offset):
        import numpy as np  # the error path alone: the index's check is numpy's

        offset_array, size_array = np.asarray(offsets, dtype=np.int64), np.asarray(sizes, dtype=np.int64)
        header = IndexHeader(1, pointer.offset, pointer.size)
        _check_entries(keys.as_list(), offset_array, size_array, header, archive)
        raise damaged("entries out of place")  # not reached: the check above raises
    crcs = _little_endian(_UINT32, data[start + packed_size :]) if crc_size else None
    return DecodedTable(keys, offsets, sizes, crcs)


def _little_endian(typecode: str, data: bytes) -> array[int]:
    """``data`` as an array of little-endian integers of ``typecode``."""
    numbers = array(typecode)
    numbers.frombytes(data)
    if sys.byteorder == "big":
        numbers.byteswap()
    return numbers


def _offsets_python(numbers: array[int], count: int) -> tuple[Sequence[int], Sequence[int], str | None]:
    """The offsets and sizes of the gaps and sizes in ``numbers``, and what is wrong with
    them if anything is (a gap smaller than a block or not block-aligned: _OUT_OF_PLACE)."""
    if not count:
        return [], [], None
    if min(numbers) < 0:
        return [], [], "negative numbers"
    if max(numbers) >= _LIMIT:
        return [], [], "numbers too large"
    gaps, sizes = numbers[:count], numbers[count:]
    padded = [0, *((size + BLOCK_SIZE - 1) & -BLOCK_SIZE for size in sizes[:-1])]
    offsets = list(accumulate(map(add, gaps, padded)))
    in_place = min(gaps) >= BLOCK_SIZE and not any(gap & (BLOCK_SIZE - 1) for gap in gaps)
    return offsets, sizes.tolist(), None if in_place else _OUT_OF_PLACE


def _offsets_numpy(numbers: array[int], count: int) -> tuple[Sequence[int], Sequence[int], str | None]:
    """:func:`_offsets_python` with numpy (values below 2**62 once checked: sums can't wrap),
    as arrays of int64 (a list would cost a Python object per number at every open)."""
    import numpy as np

    if not count:
        return [], [], None
    values = np.frombuffer(numbers, dtype=np.int64 if numbers.itemsize == 8 else np.uint32).astype(np.int64)
    if int(values.min()) < 0:
        return [], [], "negative numbers"
    if int(values.max()) >= _LIMIT:
        return [], [], "numbers too large"
    gaps, sizes = values[:count], values[count:]
    steps = gaps + np.concatenate(([0], sizes[:-1] + (-sizes[:-1] % BLOCK_SIZE))).astype(np.int64)
    offsets = np.cumsum(steps, dtype=np.int64)
    in_place = not bool(((gaps < BLOCK_SIZE) | (gaps % BLOCK_SIZE != 0)).any())
    return array(_INT64, offsets.tobytes()), array(_INT64, sizes.tobytes()), None if in_place else _OUT_OF_PLACE


#: The xz level of the index written beside a record table (see :func:`encode_index_tail`).
_OLDER_READERS_PRESET = 0
#: Indexes of at least this many records are compressed beside the table's encoding: a
#: thread's start (~0.1 ms) is a small share of their ~0.3 us a record.
_BACKGROUND_INDEX_RECORDS = 2000


def encode_index_tail(
    start: int,
    keys: Sequence[str],
    offsets: Sequence[int],
    sizes: Sequence[int],
    checksums: Sequence[int] | None,
    meanwhile: Callable[[], object] | None = None,
) -> bytes:
    """What follows the tar end-of-archive blocks ending at ``start``: the record table, the
    xz index (without the CRC32C list, which the table holds) and the index header block
    pointing at both. Without checksums, the xz index and its header alone: byte for byte
    what nvidia-ncore writes. ``meanwhile``: called while a large index compresses on its
    own thread (e.g. syncing the records written), not at all for others."""
    from ._format import pack_index_header

    if checksums is None or not keys:  # an empty archive: its (empty) list in the index is no burden
        index = encode_index(keys, offsets, sizes, checksums)
        return b"".join((index, bytes(padding(len(index))), pack_index_header(start, len(index))))
    keys, offsets, sizes, crcs = in_file_order(keys, offsets, sizes, checksums)
    # Only readers of the older format decode this index (ours read the table): xz level 0
    # compresses a 20,000-record index in 5.6 ms, level 1 in 8.0 ms (6 % smaller), the
    # default 6 in ~60 ms. A large one is compressed on a thread of its own (lzma releases
    # the GIL) while this one encodes the table and syncs the records (``meanwhile``).
    compress = functools.partial(compress_index, index_document(keys, offsets, sizes), preset=_OLDER_READERS_PRESET,
                                 fitted=True)  # fmt: skip
    index_job = on_own_thread(compress, "ncore_like-index") if len(keys) >= _BACKGROUND_INDEX_RECORDS else None
    table = encode_table(keys, offsets, sizes, crcs)
    if index_job is not None and meanwhile is not None:
        meanwhile()
    index = compress() if index_job is None else index_job.result()
    index_offset = start + len(table) + padding(len(table))
    header = pack_index_header(index_offset, len(index))
    pointer = pack_table_pointer(TablePointer(start, len(table), checksum(table)))
    header = header[:POINTER_START] + pointer + header[POINTER_START + len(pointer) :]
    return b"".join((table, bytes(padding(len(table))), index, bytes(padding(len(index))), header))
