"""Fuzzing of indexed tar archives: damage a file, read everything back, judge every answer.

Two small base archives are written once: raw records of random sizes (some keys long or
non-ASCII, so they get pax headers), and a zarr hierarchy (a Blosc-compressed array, an
uncompressed one, a blob, consolidated metadata). Every iteration applies one or two
random *mutations* to a copy of one of them -- bit flips, truncation, appended garbage,
overwritten or swapped blocks, a rewritten index whose entries point elsewhere or whose
structure is wrong, bad index header fields, bad tar header fields -- and then opens it in
many ways (checksums verified or not; ``index_tail_read_size`` None, 512, 4096, 1 MiB and
a drawn one; the local file and fsspec's ``memory://`` copy, buffered and with range reads)
and reads every record (``read``, ``read_into``, ``read_range``, ``read_async``) and every
array (hierarchy opened from its consolidated metadata and from its node metadata). Each
answer must be one of:

* the bytes (array values, array metadata) that were written;
* an exception that is a ``ValueError``, ``KeyError`` or ``OSError`` and none of the raw
  errors of the layers below (``struct.error``, ``lzma.LZMAError``, ``IndexError``,
  ``MemoryError``, cbor2's decode errors, ``zlib.error``);
* other bytes, but only if checksums are not verified (counted, not a failure), or the
  index lost its checksums (counted too: see ``--unverifiable``);

and it must come within a time limit (a read that hangs is a failure; each open and read
runs on a watchdog thread). An opened archive must also place every record within the
file. The summary lists the mutations per kind, the reads that returned the original
bytes, the exceptions by class (with an example message), changed bytes returned
without verification, and every failure (mutation, read, traceback) with the command
that reproduces it. Exit status 1 on any failure.

The long runs' command line is ``scripts/fuzz_archive.py`` (``python -m
scripts.fuzz_archive``); ``tests/test_fuzz.py`` uses the same mutations, reads and judging,
drawn by hypothesis instead of ``random``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import lzma
import queue
import random
import struct
import tarfile
import tempfile
import threading
import traceback
import zlib
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import cbor2
import fsspec
import numpy as np

import ncore_like
from ncore_like.archive._format import (
    BLOCK_SIZE,
    INDEX_HEADER_FORMAT,
    INDEX_MAGIC,
    pack_index_header,
)
from ncore_like.archive._table import decode_table, unpack_table_pointer

T = TypeVar("T")
NDArray = np.ndarray[Any, Any]

#: Seconds a single open or read may take before it counts as a hang.
READ_TIME_LIMIT = 10.0
#: ``index_tail_read_size`` values every mutated file is opened with (plus a drawn one):
#: header and index read separately, just the header block, a small tail, the default.
TAIL_READ_SIZES: tuple[int | None, ...] = (None, BLOCK_SIZE, 4096, 1 << 20)
#: Exceptions that must never reach a caller, whatever their base classes.
FORBIDDEN_EXCEPTIONS: tuple[type[BaseException], ...] = (
    struct.error,
    lzma.LZMAError,
    IndexError,
    MemoryError,
    cbor2.CBORDecodeError,
    zlib.error,
)
#: The largest index offset and size an index header block can hold.
MAX_INDEX_OFFSET = 2**64 - 1
MAX_INDEX_SIZE = 2**32 - 1
ALLOWED_EXCEPTIONS: tuple[type[BaseException], ...] = (ValueError, KeyError, OSError)


# -- drawing choices: random.Random for the script, hypothesis for the test -----------------


class Chooser(Protocol):
    """Where mutations draw their choices from."""

    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]``."""
        ...

    def raw(self, size: int) -> bytes:
        """``size`` arbitrary bytes."""
        ...


class RandomChooser:
    """Choices from a seeded :class:`random.Random`."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def raw(self, size: int) -> bytes:
        return self.rng.randbytes(size)


def pick(chooser: Chooser, options: Sequence[T]) -> T:
    """One of ``options``."""
    return options[chooser.integer(0, len(options) - 1)]


# -- the base archives ---------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """Where one record of a base archive lies."""

    key: str
    header_offset: int
    """Offset of its first header block (the pax extended header, if it has one)."""
    offset: int
    """Offset of its payload; the ustar header block is the block before."""
    size: int


@dataclass(frozen=True)
class Base:
    """A base archive: its bytes and what was written into it."""

    name: str
    data: bytes = field(repr=False)
    records: dict[str, bytes] = field(repr=False)
    members: tuple[Member, ...] = field(repr=False)
    index_offset: int
    index_size: int
    arrays: dict[str, NDArray] = field(default_factory=dict, repr=False)
    blobs: dict[str, bytes] = field(default_factory=dict, repr=False)


LONG_KEY = "sensors/" + "a-rather-long-path-component-" * 4 + "/frame-0"  # > 100 characters
UNICODE_KEYS = ("caméras/前/0", "données/ü")


def _layout(name: str, path: Path, **extra: Any) -> Base:
    data = path.read_bytes()
    _, _, index_offset, index_size = struct.unpack_from(INDEX_HEADER_FORMAT, data, len(data) - BLOCK_SIZE)
    with ncore_like.IndexedTarArchive(path, verify_checksums=True) as archive:
        records = {key: archive.read(key) for key in archive.keys()}
    with tarfile.open(path, "r:") as tar:
        members = tuple(
            Member(member.name, member.offset, member.offset_data, member.size) for member in tar.getmembers()
        )
    assert sorted(member.key for member in members) == sorted(records), "tar members and index differ"
    return Base(name, data, records, members, index_offset, index_size, **extra)


def build_records_base(folder: Path, seed: int = 0) -> Base:
    """Raw records of random sizes (0 B to 3 KB, block-boundary sizes among them), some
    with keys that need pax headers, and a node metadata record (written at close)."""
    rng = random.Random(seed)
    sizes = [0, 1, 511, 512, 513, *(rng.randint(0, 3000) for _ in range(7))]
    records = {f"r/{i}": rng.randbytes(size) for i, size in enumerate(sizes)}
    records[LONG_KEY] = rng.randbytes(rng.randint(1, 1500))
    for key in UNICODE_KEYS:
        records[key] = rng.randbytes(rng.randint(0, 2000))
    records["group/.zattrs"] = b'{"written": "at close"}'
    path = folder / "records.itar"
    with ncore_like.IndexedTarArchive(path, mode="w") as archive:
        for key, value in records.items():
            archive.write(key, value)
    base = _layout("records", path)
    assert base.records == records
    return base


def build_zarr_base(folder: Path, seed: int = 0) -> Base:
    """A consolidated zarr hierarchy: a chunked Blosc array, an uncompressed one, a blob."""
    rng = np.random.default_rng(seed)
    arrays: dict[str, NDArray] = {
        "a": rng.integers(-(2**20), 2**20, size=(20, 30), dtype=np.int32),
        "u": rng.standard_normal(50).astype(np.float64),
    }
    blobs = {"b": bytes(rng.integers(0, 256, size=300, dtype=np.uint8))}
    path = folder / "zarr.itar"
    with ncore_like.IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({"fuzz": True})
        root.create_array("a", arrays["a"], chunks=(8, 16), compression=ncore_like.BloscCompression())
        root.create_array("u", arrays["u"], chunks=(16,), compression=None)
        root.create_bytes_array("b", blobs["b"])
        store.consolidate()
    return _layout("zarr", path, arrays=arrays, blobs=blobs)


def build_bases(folder: Path, seed: int = 0) -> dict[str, Base]:
    return {"records": build_records_base(folder, seed), "zarr": build_zarr_base(folder, seed)}


# -- mutations -----------------------------------------------------------------------------

Mutator = Callable[[Chooser, Base, bytes], tuple[bytes, str]]


def _region(chooser: Chooser, base: Base, size: int) -> tuple[str, int, int]:
    """A byte range ``[start, stop)`` of a file of ``size`` bytes worth damaging, named."""
    what = pick(chooser, ("anywhere", "anywhere", "tail", "payload", "header", "index header"))
    start, stop = 0, size
    if what == "tail":
        start = base.index_offset
    elif what == "index header":
        start = size - BLOCK_SIZE
    elif what in ("payload", "header"):
        member = pick(chooser, base.members)
        if what == "payload":
            start, stop = member.offset, member.offset + max(member.size, 1)
            what = f"payload of {member.key!r}"
        else:
            start, stop = member.header_offset, member.offset
            what = f"header of {member.key!r}"
    start, stop = max(0, min(start, size - 1)), max(0, min(stop, size))
    if stop <= start:
        return "anywhere", 0, size
    return what, start, stop


def flip_bits(chooser: Chooser, base: Base, data: bytes) -> tuple[bytes, str]:
    if not data:
        return data, "no bits to flip (empty file)"
    what, start, stop = _region(chooser, base, len(data))
    buffer = bytearray(data)
    flips = []
    for _ in range(chooser.integer(1, 8)):
        position, bit = chooser.integer(start, stop - 1), chooser.integer(0, 7)
        buffer[position] ^= 1 << bit
        flips.append(f"{position}.{bit}")
    return bytes(buffer), f"flip bits ({what}) at byte.bit {', '.join(flips)}"


def truncate(chooser: Chooser, base: Base, data: bytes) -> tuple[bytes, str]:
    if not data:
        return data, "nothing to truncate (empty file)"
    size = len(data)
    how = pick(chooser, ("anywhere", "near the end", "block boundary", "index"))
    if how == "anywhere":
        length = chooser.integer(0, size - 1)
    elif how == "near the end":
        length = size - chooser.integer(1, min(size, 2 * BLOCK_SIZE))
    elif how == "block boundary":
        length = BLOCK_SIZE * chooser.integer(0, (size - 1) // BLOCK_SIZE)
    else:
        length = min(size - 1, base.index_offset + chooser.integer(-BLOCK_SIZE, base.index_size))
    return data[: max(0, length)], f"truncate from {size} to {max(0, length)} bytes"


def append_garbage(chooser: Chooser, base: Base, data: bytes) -> tuple[bytes, str]:
    how = pick(chooser, ("random", "zeros", "blocks then the header again", "a fake index header", "the tail again"))
    if how == "random":
        extra = chooser.raw(chooser.integer(1, 3000))
    elif how == "zeros":
        extra = bytes(chooser.integer(1, 3000))
    elif how == "blocks then the header again":
        extra = chooser.raw(BLOCK_SIZE * chooser.integer(0, 3)) + data[-BLOCK_SIZE:]
    elif how == "a fake index header":
        offset = pick(chooser, (0, base.index_offset, len(data), chooser.integer(0, MAX_INDEX_OFFSET)))
        extra = pack_index_header(offset, pick(chooser, (0, base.index_size, chooser.integer(0, MAX_INDEX_SIZE))))
    else:
        extra = data[base.index_offset :]
    return data + extra, f"append {len(extra)} bytes ({how})"


def _block_count(data: bytes) -> int:
    return (len(data) + BLOCK_SIZE - 1) // BLOCK_SIZE


def _pick_block(chooser: Chooser, base: Base, data: bytes) -> int:
    count = _block_count(data)
    where = pick(chooser, ("any", "tail", "member"))
    if where == "tail":
        return max(0, count - chooser.integer(1, min(count, 4)))
    if where == "member":
        member = pick(chooser, base.members)
        first, last = member.header_offset // BLOCK_SIZE, (member.offset + max(member.size, 1) - 1) // BLOCK_SIZE
        return min(count - 1, chooser.integer(first, last))
    return chooser.integer(0, count - 1)


def overwrite_block(chooser: Chooser, base: Base, data: bytes) -> tuple[bytes, str]:
    if not data:
        return data, "no block to overwrite (empty file)"
    block = _pick_block(chooser, base, data)
    start = block * BLOCK_SIZE
    length = min(BLOCK_SIZE, len(data) - start)
    how = pick(chooser, ("random", "zeros", "0xff", "another block"))
    if how == "random":
        content = chooser.raw(length)
    elif how == "zeros":
        content = bytes(length)
    elif how == "0xff":
        content = b"\xff" * length
    else:
        other = chooser.integer(0, _block_count(data) - 1) * BLOCK_SIZE
        content = data[other : other + BLOCK_SIZE].ljust(length, b"\0")[:length]
        how = f"block at {other}"
    return data[:start] + content + data[start + length :], f"overwrite block at {start} with {how}"


def swap_blocks(chooser: Chooser, base: Base, data: bytes) -> tuple[bytes, str]:
    count = len(data) // BLOCK_SIZE
    if count < 2:
        return data, "no two blocks to swap"
    first = min(_pick_block(chooser, base, data), count - 1)
    second = min(_pick_block(chooser, base, data), count - 1)
    if first == second:
        second = (first + chooser.integer(1, count - 1)) % count
    run = chooser.integer(1, max(1, min(4, abs(first - second), count - max(first, second))))
    first, second = sorted((first, second))
    a, b = first * BLOCK_SIZE, second * BLOCK_SIZE
    n = run * BLOCK_SIZE
    swapped = data[:a] + data[b : b + n] + data[a + n : b] + data[a : a + n] + data[b + n :]
    assert len(swapped) == len(data)
    return swapped, f"swap {run} block(s) at {a} and {b}"


# The index: decoded from the current bytes, changed, re-encoded where the old one was.


def locate_index(data: bytes) -> tuple[int, int] | None:
    """Offset and size of the compressed index of a well-formed tail, None otherwise."""
    if len(data) < BLOCK_SIZE:
        return None
    magic, _, offset, size = struct.unpack_from(INDEX_HEADER_FORMAT, data, len(data) - BLOCK_SIZE)
    if magic != INDEX_MAGIC or offset + size > len(data) - BLOCK_SIZE:
        return None
    return offset, size


def load_table(data: bytes) -> tuple[int, dict[Any, Any]] | None:
    """Offset and decoded CBOR map of the index, None if the file has no readable index."""
    located = locate_index(data)
    if located is None:
        return None
    offset, size = located
    try:
        table = cbor2.loads(lzma.decompress(data[offset : offset + size], format=lzma.FORMAT_XZ))
    except Exception:
        return None
    if not isinstance(table, dict):
        return None
    table = dict(table)
    # Archives written with checksums keep the CRC32C list in their record table: taken back
    # into the index, so that an index rewritten here (with a header block pointing at no
    # table) carries the checksums as the index of older archives does.
    pointer = unpack_table_pointer(data, offset)
    if pointer is not None and "crc32c" not in table:
        with contextlib.suppress(Exception):
            table["crc32c"] = decode_table(data[pointer.offset : pointer.offset + pointer.size], pointer, "").checksums
    return offset, table


def with_index(data: bytes, offset: int, index: bytes) -> bytes:
    """``data`` with ``index`` (compressed) at ``offset``, padded, and a header block for it."""
    return data[:offset] + index + bytes(-len(index) % BLOCK_SIZE) + pack_index_header(offset, len(index))


def compress_table(table: Any) -> bytes:
    return lzma.compress(cbor2.dumps(table), format=lzma.FORMAT_XZ)


_INDEX_LISTS = ("items", "offset_datas", "sizes", "crc32c")


def _entry_lists(table: dict[Any, Any]) -> list[str]:
    """Names of the parallel index lists ``table`` has (all of the same length > 1), else []."""
    names = [name for name in _INDEX_LISTS if isinstance(table.get(name), list)]
    lengths = {len(table[name]) for name in names}
    if "items" not in names or "offset_datas" not in names or "sizes" not in names or lengths != {len(table["items"])}:
        return []
    return names if len(table["items"]) > 1 else []


INDEX_ENTRY_VARIANTS = (
    "offset of another entry",
    "offset near another entry",
    "offset of its header block",
    "block-aligned offset",
    "any offset",
    "unaligned offset",
    "offset of the index",
    "size edge",
    "size near 2**63",  # offset + size overflows 64 bits
    "offset near 2**63",
    "size of another entry",
    "any size",
    "swap with another entry",
    "swap offsets only",
    "checksum",
    "shift every offset",
)


def rewrite_index_entries(
    chooser: Chooser, base: Base, data: bytes, variants: Sequence[str] = INDEX_ENTRY_VARIANTS
) -> tuple[bytes, str]:
    """Index entries pointing elsewhere, with other sizes, other checksums (a checksum stays
    with its key: a payload read from elsewhere must fail verification)."""
    loaded = load_table(data)
    if loaded is None or not _entry_lists(loaded[1]):
        return data, "index entries unchanged (no readable index)"
    offset, table = loaded
    for name in _entry_lists(table):
        table[name] = list(table[name])
    keys, offsets, sizes = table["items"], table["offset_datas"], table["sizes"]
    crcs = table.get("crc32c")
    i = chooser.integer(0, len(keys) - 1)
    j = (i + chooser.integer(1, len(keys) - 1)) % len(keys)
    old = (offsets[i], sizes[i])
    how = pick(chooser, variants)
    if how == "offset of another entry":
        offsets[i] = offsets[j]
    elif how == "offset near another entry":
        offsets[i] = offsets[j] + BLOCK_SIZE * chooser.integer(-2, 2)
    elif how == "offset of its header block":
        offsets[i] -= BLOCK_SIZE
    elif how == "block-aligned offset":
        offsets[i] = BLOCK_SIZE * chooser.integer(0, len(data) // BLOCK_SIZE + 2)
    elif how == "any offset":
        offsets[i] = chooser.integer(-(2**63), 2**63 - 1)
    elif how == "unaligned offset":
        offsets[i] += chooser.integer(1, BLOCK_SIZE - 1)
    elif how == "offset of the index":
        offsets[i] = offset
    elif how == "size edge":
        sizes[i] = pick(
            chooser,
            (0, sizes[i] - 1, sizes[i] + 1, sizes[i] + BLOCK_SIZE, 2**31, 2**32 + sizes[i], 2**62, -1, -(2**63)),
        )
        sizes[i] = max(-(2**63), min(2**63 - 1, sizes[i]))
    elif how == "size near 2**63":  # offset + size overflows 64 bits
        sizes[i] = 2**63 - pick(chooser, (1, BLOCK_SIZE, chooser.integer(1, max(1, offsets[i]))))
    elif how == "offset near 2**63":
        offsets[i] = 2**63 - BLOCK_SIZE * chooser.integer(1, 4)
        sizes[i] = pick(chooser, (sizes[i], BLOCK_SIZE * 4, chooser.integer(0, 2**62)))
    elif how == "size of another entry":
        sizes[i] = sizes[j]
    elif how == "any size":
        sizes[i] = chooser.integer(0, 2 * len(data))
    elif how == "swap with another entry":
        offsets[i], offsets[j], sizes[i], sizes[j] = offsets[j], offsets[i], sizes[j], sizes[i]
    elif how == "swap offsets only":
        offsets[i], offsets[j] = offsets[j], offsets[i]
    elif how == "checksum" and crcs is not None:
        crcs[i] = pick(chooser, (chooser.integer(0, 2**32 - 1), crcs[j], crcs[i] ^ 1))
    elif how == "shift every offset":
        step = BLOCK_SIZE * pick(chooser, (-1, 1))
        table["offset_datas"] = [value + step for value in offsets]
    description = (
        f"index entry {keys[i]!r} (offset {old[0]}, size {old[1]}): {how} -> offset "
        f"{table['offset_datas'][i]}, size {sizes[i]} (other entry {keys[j]!r})"
    )
    return with_index(data, offset, compress_table(table)), description


#: Index structure variants that make checksums unverifiable, or change which record a key
#: names without changing a byte of a payload: not generated unless asked for.
UNVERIFIABLE_INDEX_VARIANTS = frozenset({"drop the checksums", "rename a key"})


_ODD_VALUES: tuple[Any, ...] = (None, 0, -1, 1.5, True, "x", b"x", [], {}, 2**64, -(2**64), cbor2.CBORTag(9999, 1))


def index_structure_variants(*, unverifiable: bool = False) -> tuple[str, ...]:
    """The variants of :func:`rewrite_index_structure` (with ``unverifiable``, also those
    that change the index in ways checksums can't detect)."""
    variants = [
        "drop a list",
        "not a list",
        "shorter list",
        "longer list",
        "odd element",
        "not a map",
        "extra key",
        "unsorted entries",
        "duplicate key",
        "drop the checksums",
        "rename a key",
        "cbor garbage",
        "cbor trailing bytes",
        "cbor truncated",
        "cbor deep nesting",
        "cbor huge length",
        "not xz",
        "xz truncated",
        "xz without check, bit flipped",
        "xz streams concatenated",
        "empty index",
    ]
    return tuple(variant for variant in variants if unverifiable or variant not in UNVERIFIABLE_INDEX_VARIANTS)


def rewrite_index_structure(
    chooser: Chooser, base: Base, data: bytes, variants: Sequence[str] | None = None
) -> tuple[bytes, str]:
    """An index of the wrong shape: lists missing or of other lengths and types, keys
    duplicated, bad CBOR, bad xz."""
    loaded = load_table(data)
    if loaded is None:
        return data, "index structure unchanged (no readable index)"
    offset, table = loaded
    how = pick(chooser, variants if variants is not None else index_structure_variants())
    name = pick(chooser, _INDEX_LISTS)
    lists = _entry_lists(table)
    for list_name in lists:
        table[list_name] = list(table[list_name])
    raw = cbor2.dumps(table)
    index: bytes | None = None
    detail = ""
    if how == "drop a list":
        table.pop(name, None)
        detail = name
    elif how == "not a list":
        table[name] = pick(chooser, _ODD_VALUES)
        detail = f"{name} = {table[name]!r}"
    elif how in ("shorter list", "longer list", "odd element") and name in lists:
        values = table[name]
        if how == "shorter list":
            values.pop(chooser.integer(0, len(values) - 1))
        elif how == "longer list":
            values.insert(chooser.integer(0, len(values)), values[chooser.integer(0, len(values) - 1)])
        else:
            position = chooser.integer(0, len(values) - 1)
            # (A string in the keys would be a renamed key: see "rename a key".)
            odd = [value for value in _ODD_VALUES if name != "items" or not isinstance(value, str)]
            values[position] = pick(chooser, odd)
            detail = f"{name}[{position}] = {values[position]!r}"
        detail = detail or name
    elif how == "not a map":
        index = compress_table(pick(chooser, ([], 0, "items", None, [table], b"x")))
    elif how == "extra key":
        table[pick(chooser, ("zzz", "", 5))] = pick(chooser, _ODD_VALUES)
    elif how == "unsorted entries" and lists:
        order = list(range(len(table["items"])))
        random.Random(chooser.integer(0, 2**32)).shuffle(order)
        for list_name in lists:
            table[list_name] = [table[list_name][k] for k in order]
    elif how == "duplicate key" and lists:
        i = chooser.integer(0, len(table["items"]) - 1)
        j = (i + chooser.integer(1, len(table["items"]) - 1)) % len(table["items"])
        detail = f"entry {table['items'][j]!r} renamed {table['items'][i]!r}"
        table["items"][j] = table["items"][i]
    elif how == "drop the checksums":
        table.pop("crc32c", None)
    elif how == "rename a key" and lists:
        i = chooser.integer(0, len(table["items"]) - 1)
        detail = f"{table['items'][i]!r} -> 'renamed'"
        table["items"][i] = "renamed"
    elif how == "cbor garbage":
        index = lzma.compress(chooser.raw(chooser.integer(0, 300)), format=lzma.FORMAT_XZ)
    elif how == "cbor trailing bytes":
        index = lzma.compress(raw + chooser.raw(chooser.integer(1, 50)), format=lzma.FORMAT_XZ)
    elif how == "cbor truncated":
        index = lzma.compress(raw[: chooser.integer(0, len(raw) - 1)], format=lzma.FORMAT_XZ)
    elif how == "cbor deep nesting":
        depth = chooser.integer(1000, 200_000)
        index = lzma.compress(pick(chooser, (b"\x81", b"\xa1\x00", b"\x9f")) * depth + b"\x00", format=lzma.FORMAT_XZ)
        detail = f"depth {depth}"
    elif how == "cbor huge length":
        prefix = pick(chooser, (b"\x9b", b"\x5b", b"\x7b", b"\xbb"))  # array, bytes, text, map
        length = chooser.integer(2**20, 2**64 - 1)
        body = b"\xa1\x65items" + prefix + length.to_bytes(8, "big")
        index = lzma.compress(body, format=lzma.FORMAT_XZ)
        detail = f"{prefix!r} of length {length}"
    elif how == "not xz":
        choice = pick(chooser, ("raw cbor", "lzma alone", "zlib", "random"))
        index = {
            "raw cbor": lambda: raw,
            "lzma alone": lambda: lzma.compress(raw, format=lzma.FORMAT_ALONE),
            "zlib": lambda: zlib.compress(raw),
            "random": lambda: chooser.raw(chooser.integer(0, 600)),
        }[choice]()
        detail = choice
    elif how == "xz truncated":
        full = compress_table(table)
        index = full[: chooser.integer(0, len(full) - 1)]
    elif how == "xz without check, bit flipped":
        unchecked = bytearray(lzma.compress(raw, format=lzma.FORMAT_XZ, check=lzma.CHECK_NONE))
        # The compressed data starts after the 12-byte stream header and the block header.
        position = chooser.integer(12, len(unchecked) - 1)
        unchecked[position] ^= 1 << chooser.integer(0, 7)
        index = bytes(unchecked)
        detail = f"byte {position}"
    elif how == "xz streams concatenated":
        index = compress_table(table) + compress_table(pick(chooser, ({}, table, [1])))
    elif how == "empty index":
        index = b""
    if index is None:
        index = compress_table(table)
    return with_index(data, offset, index), f"index structure: {how}{f' ({detail})' if detail else ''}"


def bad_index_header(chooser: Chooser, base: Base, data: bytes) -> tuple[bytes, str]:
    """Bad fields in the index header block (magic, type, index offset and size)."""
    if len(data) < BLOCK_SIZE:
        return data, "index header unchanged (file shorter than a block)"
    block = bytearray(data[-BLOCK_SIZE:])
    magic, kind, offset, size = struct.unpack_from(INDEX_HEADER_FORMAT, block)
    how = pick(chooser, ("magic", "type", "offset", "size", "offset and size", "trailing bytes"))
    if how == "magic":
        magic = pick(chooser, (b"ITAR", b"itaR", b"\0\0\0\0", chooser.raw(4)))
    elif how == "type":
        kind = pick(chooser, (0, 2, 2**32 - 1, chooser.integer(0, 2**32 - 1)))
    if how in ("offset", "offset and size"):
        offset = pick(
            chooser,
            (
                0,
                offset + BLOCK_SIZE,
                offset - BLOCK_SIZE,
                offset + 1,
                max(0, offset - 1),
                len(data),
                len(data) - BLOCK_SIZE,
                MAX_INDEX_OFFSET,
                2**63,
                chooser.integer(0, MAX_INDEX_OFFSET),
                chooser.integer(0, len(data)),
            ),
        )
        offset = max(0, min(MAX_INDEX_OFFSET, offset))
    if how in ("size", "offset and size"):
        size = pick(
            chooser,
            (
                0,
                1,
                size + 1,
                max(0, size - 1),
                size + BLOCK_SIZE,
                len(data),
                MAX_INDEX_SIZE,
                chooser.integer(0, MAX_INDEX_SIZE),
            ),
        )
        size = max(0, min(MAX_INDEX_SIZE, size))
    struct.pack_into(INDEX_HEADER_FORMAT, block, 0, magic, kind, offset, size)
    if how == "trailing bytes":
        block[struct.calcsize(INDEX_HEADER_FORMAT) :] = chooser.raw(BLOCK_SIZE - struct.calcsize(INDEX_HEADER_FORMAT))
    description = f"index header {how}: magic {magic!r}, type {kind}, offset {offset}, size {size}"
    return data[:-BLOCK_SIZE] + bytes(block), description


def _seal(block: bytearray) -> None:
    block[148:156] = b" " * 8
    block[148:155] = b"%06o\0" % sum(block)


def bad_tar_header(chooser: Chooser, base: Base, data: bytes) -> tuple[bytes, str]:
    """Bad fields of a member's tar header (size, checksum, name, type, CRC32C field, pax
    records), resealed with a valid tar checksum or not. Reads go by the index: they must
    not care."""
    member = pick(chooser, base.members)
    start = member.offset - BLOCK_SIZE
    if start + BLOCK_SIZE > len(data):
        return data, f"tar header of {member.key!r} unchanged (truncated away)"
    block = bytearray(data[start : start + BLOCK_SIZE])
    has_pax = member.offset - member.header_offset > BLOCK_SIZE
    fields = ["size", "checksum", "name", "typeflag", "crc32c field", "magic", "all zeros"]
    if has_pax:
        fields.append("pax records")
    how = pick(chooser, fields)
    reseal = how not in ("checksum", "all zeros", "pax records") and chooser.integer(0, 1) == 1
    buffer = bytearray(data)
    if how == "size":
        block[124:136] = pick(
            chooser,
            (
                b"%011o\0" % chooser.integer(0, 8**11 - 1),
                b"\x80" + chooser.integer(0, 2**88 - 1).to_bytes(11, "big"),
                b"\xff" * 12,
                b"99999999999\0",
                chooser.raw(12),
            ),
        )
    elif how == "checksum":
        block[148:156] = pick(chooser, (b"%06o\0 " % chooser.integer(0, 8**6 - 1), chooser.raw(8), b"        "))
    elif how == "name":
        other = pick(chooser, base.members).key.encode("utf-8")[:100]
        block[0:100] = pick(chooser, (other.ljust(100, b"\0"), chooser.raw(100), bytes(100)))
    elif how == "typeflag":
        block[156:157] = pick(chooser, (b"5", b"1", b"x", b"g", b"L", b"S", chooser.raw(1)))
    elif how == "crc32c field":
        block[500:512] = pick(chooser, (b"CRC%08x\0" % chooser.integer(0, 2**32 - 1), chooser.raw(12), bytes(12)))
    elif how == "magic":
        block[257:265] = pick(chooser, (b"ustar  \0", chooser.raw(8), bytes(8)))
    elif how == "all zeros":
        block[:] = bytes(BLOCK_SIZE)
    else:  # a pax record's bytes, in the pax data block(s) before the ustar block
        pax_data = member.header_offset + BLOCK_SIZE
        position = chooser.integer(pax_data, start - 1)
        buffer[position] = chooser.integer(0, 255)
        how = f"pax data byte {position} -> {buffer[position]}"
    if reseal:
        _seal(block)
    if not how.startswith("pax"):
        buffer[start : start + BLOCK_SIZE] = block
    return bytes(buffer), f"tar header of {member.key!r}: {how}{' (resealed)' if reseal else ''}"


MUTATIONS: dict[str, Mutator] = {
    "bit_flips": flip_bits,
    "truncate": truncate,
    "append_garbage": append_garbage,
    "overwrite_block": overwrite_block,
    "swap_blocks": swap_blocks,
    "index_entries": rewrite_index_entries,
    "index_structure": rewrite_index_structure,
    "index_header": bad_index_header,
    "tar_header": bad_tar_header,
}


@dataclass(frozen=True)
class Mutated:
    """A damaged copy of a base archive and what was done to it."""

    base: Base
    kinds: tuple[str, ...]
    steps: tuple[str, ...]
    data: bytes = field(repr=False)

    @property
    def description(self) -> str:
        return f"{self.base.name}: " + "; then ".join(self.steps)

    @property
    def verifiable(self) -> bool:
        """False if the index was changed in a way checksums can't detect (see
        :data:`UNVERIFIABLE_INDEX_VARIANTS`): changed answers then count as unverifiable."""
        return not any(
            step.startswith(f"index structure: {variant}")
            for step in self.steps
            for variant in UNVERIFIABLE_INDEX_VARIANTS
        )


#: The mutations that draw one of named variants, and the functions taking them.
VARIANT_MUTATIONS: dict[str, Callable[[Chooser, Base, bytes, Sequence[str]], tuple[bytes, str]]] = {
    "index_entries": rewrite_index_entries,
    "index_structure": rewrite_index_structure,
}


def mutate(
    chooser: Chooser, base: Base, kinds: Sequence[str], variants: Mapping[str, Sequence[str]] | None = None
) -> Mutated:
    """``base`` damaged by the mutations ``kinds``, one after another; ``variants`` limits
    the variants drawn by the mutations of :data:`VARIANT_MUTATIONS` (default: the index
    structure variants the properties hold for, see :func:`index_structure_variants`)."""
    if variants is None:
        variants = {"index_structure": index_structure_variants()}
    data = base.data
    steps = []
    for kind in kinds:
        if kind in variants:
            data, step = VARIANT_MUTATIONS[kind](chooser, base, data, variants[kind])
        else:
            data, step = MUTATIONS[kind](chooser, base, data)
        steps.append(step)
    return Mutated(base, tuple(kinds), tuple(steps), data)


# -- running reads: bounded in time --------------------------------------------------------


_worker = threading.local()


def awaited(make: Callable[[], Coroutine[Any, Any, T]]) -> Callable[[], T]:
    """A call that runs the coroutine ``make()`` on the event loop of the :class:`Watchdog`
    worker thread it is called on."""

    def call() -> T:
        loop: asyncio.AbstractEventLoop = _worker.loop
        return loop.run_until_complete(make())

    return call


class ReadHang(Exception):
    """A call did not return within the time limit."""


class Watchdog:
    """Runs calls on a daemon worker thread (with its own event loop for coroutines), each
    bounded in time: a call that hangs raises :class:`ReadHang` and its thread is abandoned."""

    def __init__(self, limit: float = READ_TIME_LIMIT) -> None:
        self.limit = limit
        self._tasks: queue.SimpleQueue[Callable[[], None]] | None = None
        self.abandoned = 0

    def _start(self) -> queue.SimpleQueue[Callable[[], None]]:
        tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

        def work() -> None:
            _worker.loop = asyncio.new_event_loop()
            while True:
                task = tasks.get()
                task()

        threading.Thread(target=work, name="fuzz-read", daemon=True).start()
        return tasks

    def run(self, call: Callable[[], T]) -> T:
        """The result of ``call()`` (its exception re-raised), within the time limit."""
        if self._tasks is None:
            self._tasks = self._start()
        done = threading.Lock()  # released by the worker when the call returned (cheaper than an Event)
        done.acquire()
        outcome: list[Any] = []

        def task() -> None:
            try:
                outcome.append((True, call()))
            except BaseException as error:
                outcome.append((False, error))
            done.release()

        self._tasks.put(task)
        if not done.acquire(timeout=self.limit):
            self._tasks = None  # stuck: the next call gets a fresh thread
            self.abandoned += 1
            raise ReadHang(f"no answer within {self.limit} s")
        ok, value = outcome[0]
        if ok:
            return value  # type: ignore[no-any-return]
        raise value


def exception_problem(error: BaseException) -> str | None:
    """Why ``error`` must not reach a caller (None if it may): it must be a ValueError,
    KeyError or OSError, and none of the raw errors of the layers below."""
    mro = type(error).__mro__
    forbidden = [cls for cls in FORBIDDEN_EXCEPTIONS if cls in mro]
    if forbidden:
        return f"raw {forbidden[0].__module__}.{forbidden[0].__qualname__} escaped: {type(error).__qualname__}"
    if not any(cls in mro for cls in ALLOWED_EXCEPTIONS):
        names = " -> ".join(cls.__qualname__ for cls in mro)
        return f"{type(error).__qualname__} is no ValueError/KeyError/OSError (MRO {names})"
    return None


def error_name(error: BaseException) -> str:
    cls = type(error)
    return (
        cls.__qualname__
        if cls.__module__ in ("builtins", "ncore_like.errors")
        else f"{cls.__module__}.{cls.__qualname__}"
    )


@dataclass(frozen=True)
class Failure:
    """One read that broke a property."""

    problem: str
    mutation: str
    read: str
    reproduce: str = ""
    trace: str = ""

    def __str__(self) -> str:
        text = f"{self.problem}\n  mutation: {self.mutation}\n  read: {self.read}"
        if self.reproduce:
            text += f"\n  reproduce: {self.reproduce}"
        if self.trace:
            text += "\n" + self.trace
        return text


@dataclass
class Tally:
    """What the reads of one or many mutated files gave."""

    examples: int = 0
    mutations: Counter[str] = field(default_factory=Counter)
    calls: int = 0
    """Opens and reads made (each bounded in time)."""
    original: int = 0
    """Reads that returned exactly the bytes (values) written."""
    raised: Counter[str] = field(default_factory=Counter)
    """Reads (and opens) that raised an allowed exception, by class."""
    messages: dict[str, str] = field(default_factory=dict)
    """The first message of each class in :attr:`raised`."""
    verify_reports: Counter[str] = field(default_factory=Counter)
    """Reports of ``verify_archive`` (if run): ``"ok"`` or ``"problems"``."""
    changed_unverified: int = 0
    """Reads that returned other bytes with checksums not verified (allowed)."""
    unverifiable: int = 0
    """Reads that returned other bytes with verification asked for, but an index changed in
    a way checksums can't detect: without its checksums, or with renamed keys (allowed)."""
    failures: list[Failure] = field(default_factory=list)

    def merge(self, other: Tally) -> None:
        self.examples += other.examples
        self.mutations.update(other.mutations)
        self.calls += other.calls
        self.original += other.original
        self.raised.update(other.raised)
        for name, message in other.messages.items():
            self.messages.setdefault(name, message)
        self.verify_reports.update(other.verify_reports)
        self.changed_unverified += other.changed_unverified
        self.unverifiable += other.unverifiable
        self.failures.extend(other.failures)


@dataclass(frozen=True)
class ReadConfig:
    """How a mutated file is opened."""

    verify: bool
    tail: int | None
    use_async: bool = False
    memory: bool = False
    """Read through fsspec's memory filesystem (``memory://``, the FsspecSource code path)
    instead of the local file (``os.pread``)."""
    range_reads: bool = False
    """``remote_range_reads`` (of ``memory://`` archives: exact range reads, not the buffered file)."""
    consolidated: bool | Literal["auto"] = "auto"
    """How stores open their root group."""
    records: bool = True
    """Whether the archive's records are read (else only the store's arrays)."""
    verify_archive: bool = False
    """Whether ``verify_archive`` runs too (see :meth:`Checker.check_verify_archive`)."""

    def __str__(self) -> str:
        text = f"verify_checksums={self.verify}, index_tail_read_size={self.tail}"
        if self.use_async:
            text += ", async"
        if self.memory:
            text += f", memory://, remote_range_reads={self.range_reads}"
        if self.consolidated != "auto":
            text += f", consolidated={self.consolidated}"
        return text


def read_configs(drawn_tail: int, *, verify_archive: bool = False) -> list[ReadConfig]:
    """Every mutated file is opened with checksums verified and not, with every tail size
    of :data:`TAIL_READ_SIZES` and ``drawn_tail``; async reads with two of them; three more
    times through fsspec's memory filesystem (buffered and range reads); stores also from
    their node metadata records (``consolidated=False``). Optionally ``verify_archive`` is
    checked against the reads."""
    tails = [*TAIL_READ_SIZES, drawn_tail]
    configs = [
        ReadConfig(
            verify, tail, use_async=tail in (None, 1 << 20), verify_archive=verify_archive and verify and not tail
        )
        for verify in (True, False)
        for tail in tails
    ]
    configs += [
        ReadConfig(True, None, memory=True),
        ReadConfig(False, 4096, memory=True, range_reads=True),
        ReadConfig(True, 1 << 20, use_async=True, memory=True, range_reads=True),
    ]
    configs += [ReadConfig(verify, None, consolidated=False, records=False) for verify in (True, False)]
    return configs


#: Byte ranges read with ``read_range`` (clipped to the payload by the archive).
READ_RANGES = ((1, 300), (511, 1 << 30))


def _clip(data: bytes, start: int, stop: int) -> bytes:
    start, stop = max(0, min(start, len(data))), max(0, min(stop, len(data)))
    return data[start:stop] if start < stop else b""


class Checker:
    """Reads everything of one mutated file in many ways and tallies what came back."""

    def __init__(self, mutated: Mutated, path: Path, watchdog: Watchdog, tally: Tally, context: str = "") -> None:
        self.mutated = mutated
        self.path = path
        self.watchdog = watchdog
        self.tally = tally
        self.context = context
        self.checksum_errors = 0
        """ChecksumErrors raised by the reads of the current archive."""
        self.verified_store = False
        """Whether the store being read verifies checksums."""

    def location(self, config: ReadConfig) -> str | Path:
        """Where the mutated file is opened from: the local file, or its copy in fsspec's
        memory filesystem (written by :func:`check_mutated`)."""
        return f"memory://fuzz/{self.path.name}" if config.memory else self.path

    def _fail(self, what: str, problem: str, error: BaseException | None = None) -> None:
        trace = "".join(traceback.format_exception(error)).rstrip() if error is not None else ""
        self.tally.failures.append(Failure(problem, self.mutated.description, what, self.context, trace))

    def attempt(self, what: str, call: Callable[[], T]) -> tuple[bool, T | None]:
        """Runs ``call`` bounded in time: (True, result) or (False, None) if it raised
        (an allowed exception is tallied, another one is a failure) or hung (a failure)."""
        self.tally.calls += 1
        try:
            return True, self.watchdog.run(call)
        except ReadHang as hang:
            self._fail(what, f"hang: {hang}")
        except BaseException as error:
            problem = exception_problem(error)
            if isinstance(error, ncore_like.ChecksumError):
                self.checksum_errors += 1
            if problem is None:
                self.tally.raised[error_name(error)] += 1
                self.tally.messages.setdefault(error_name(error), str(error).replace(str(self.path), "<file>"))
            else:
                self._fail(what, f"wrong exception: {problem}", error)
        return False, None

    def judge(self, what: str, same: bool, verified: bool, verify_asked: bool) -> None:
        """Tallies a returned answer: original, changed (allowed without verification), or a
        failure (changed although verified)."""
        if same:
            self.tally.original += 1
        elif verified:
            self._fail(what, "changed bytes returned although checksums were verified")
        elif verify_asked:
            self.tally.unverifiable += 1
        else:
            self.tally.changed_unverified += 1

    def check(self, configs: Sequence[ReadConfig]) -> None:
        for config in configs:
            if config.records:
                self.check_archive(config)
            if self.mutated.base.arrays or self.mutated.base.blobs:
                self.check_store(config)

    def _open_archive(self, config: ReadConfig, what: str) -> ncore_like.IndexedTarArchive | None:
        if config.use_async:
            prefetch = [key for key in self.mutated.base.records if key.endswith(".zmetadata.cbor.xz")]
            prefetch.append(next(iter(self.mutated.base.records)))
            _, opened = self.attempt(
                f"{what}: await IndexedTarArchive.open_async(prefetch_keys={prefetch})",
                awaited(
                    lambda: ncore_like.IndexedTarArchive.open_async(
                        self.location(config),
                        config.tail,
                        config.range_reads,
                        prefetch_keys=prefetch,
                        verify_checksums=config.verify,
                    )
                ),
            )
        else:
            _, opened = self.attempt(
                f"{what}: IndexedTarArchive()",
                lambda: ncore_like.IndexedTarArchive(
                    self.location(config),
                    index_tail_read_size=config.tail,
                    remote_range_reads=config.range_reads,
                    verify_checksums=config.verify,
                ),
            )
        return opened

    def check_archive(self, config: ReadConfig) -> None:
        what = f"archive ({config})"
        archive = self._open_archive(config, what)
        if archive is None:
            return
        try:
            self.checksum_errors = 0
            self._check_records(archive, config, what)
            if config.verify_archive:
                self.check_verify_archive(archive, what)
        finally:
            archive.close()

    def check_verify_archive(self, archive: ncore_like.IndexedTarArchive, what: str) -> None:
        """``verify_archive`` of the archive opened with checksums verified: it reports
        problems (raising only OSError for a file it can't walk), and never calls an archive
        sound whose reads just raised ChecksumError or returned changed bytes."""
        from ncore_like.archive import verify_archive

        label = f"{what}: verify_archive()"
        self.tally.calls += 1
        try:
            report = self.watchdog.run(partial(verify_archive, archive, threads=1))
        except ReadHang as hang:
            self._fail(label, f"hang: {hang}")
            return
        except BaseException as error:
            if isinstance(error, OSError):
                self.tally.verify_reports[f"raised {error_name(error)}"] += 1
            else:
                self._fail(label, f"verify_archive raised {error_name(error)} (problems should be reported)", error)
            return
        if report.ok and self.checksum_errors:
            self._fail(
                label, f"verify_archive reports no problem, but {self.checksum_errors} reads raised ChecksumError"
            )
        self.tally.verify_reports["ok" if report.ok else "problems"] += 1

    def _check_records(self, archive: ncore_like.IndexedTarArchive, config: ReadConfig, what: str) -> None:
        expected_records = self.mutated.base.records
        _, keys = self.attempt(f"{what}: keys()", archive.keys)
        keys = list(dict.fromkeys([*expected_records, *(keys or [])]))
        verified = archive.verify_checksums and self.mutated.verifiable
        for key in keys:
            expected = expected_records.get(key)
            ok, data = self.attempt(f"{what}: read({key!r})", partial(archive.read, key))
            if ok:
                self.judge(f"{what}: read({key!r})", data == expected, verified, config.verify)
            size = len(expected or b"")
            if key in archive.records:
                # Opening validates the index: every record lies within the file.
                offset, size = archive.records[key]
                if not 0 <= offset <= offset + size <= len(self.mutated.data):
                    self._fail(
                        f"{what}: records[{key!r}]",
                        f"index accepted a record ({size} bytes at offset {offset}) outside the "
                        f"{len(self.mutated.data)}-byte file",
                    )
                    continue
            buffer = memoryview(bytearray(size))
            ok, _ = self.attempt(
                f"{what}: read_into({key!r}, <{size} bytes>)",
                partial(archive.read_into, key, buffer),
            )
            if ok:
                self.judge(f"{what}: read_into({key!r})", bytes(buffer) == expected, verified, config.verify)
            for start, stop in READ_RANGES:
                ok, data = self.attempt(
                    f"{what}: read_range({key!r}, {start}, {stop})",
                    partial(archive.read_range, key, start, stop),
                )
                if ok:
                    same = expected is not None and data == _clip(expected, start, stop)
                    self.judge(f"{what}: read_range({key!r}, {start}, {stop})", same, verified, config.verify)
            if config.use_async:
                ok, data = self.attempt(
                    f"{what}: await read_async({key!r})",
                    awaited(partial(archive.read_async, key)),
                )
                if ok:
                    self.judge(f"{what}: await read_async({key!r})", data == expected, verified, config.verify)

    def check_store(self, config: ReadConfig) -> None:
        what = f"store ({config})"
        _, store = self.attempt(
            f"{what}: IndexedTarZarrStore()",
            lambda: ncore_like.IndexedTarZarrStore(
                self.location(config),
                index_tail_read_size=config.tail,
                remote_range_reads=config.range_reads,
                verify_checksums=config.verify,
            ),
        )
        if store is None:
            return
        try:
            self._check_arrays(store, config, what)
        finally:
            store.close()

    def _check_arrays(self, store: ncore_like.IndexedTarZarrStore, config: ReadConfig, what: str) -> None:
        _, root = self.attempt(
            f"{what}: open_root_group({config.consolidated!r})",
            lambda: store.open_root_group(consolidated=config.consolidated),
        )
        if root is None:
            return
        verified = self.verified_store = store.archive.verify_checksums and self.mutated.verifiable
        base = self.mutated.base
        for name, values in base.arrays.items():
            array = self._open_array(root, name, values.shape, values.dtype, config, what)
            if array is None:
                continue
            reads: list[tuple[str, Callable[[], Any]]] = [(f"array({name!r}).read()", array.read)]
            if config.use_async:
                reads.append((f"await array({name!r}).read_async()", awaited(array.read_async)))
            for label, call in reads:
                ok, result = self.attempt(f"{what}: {label}", call)
                if ok:
                    same = (
                        isinstance(result, np.ndarray)
                        and result.dtype == values.dtype
                        and result.shape == values.shape
                        and bool(np.array_equal(result, values))
                    )
                    self.judge(f"{what}: {label}", same, verified, config.verify)
        for name, blob in base.blobs.items():
            blob_array = self._open_array(root, name, (), np.dtype(f"S{len(blob)}"), config, what)
            if blob_array is None:
                continue
            label = f"array({name!r}).read_bytes()"
            ok, result = self.attempt(f"{what}: {label}", blob_array.read_bytes)
            if ok:
                self.judge(f"{what}: {label}", result == blob, verified, config.verify)

    def _open_array(
        self,
        root: ncore_like.Group,
        name: str,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        config: ReadConfig,
        what: str,
    ) -> ncore_like.Array | None:
        """The array ``name`` of ``root`` if it opens with the shape and dtype written. Its
        metadata is an answer too: other metadata is judged like changed bytes (and its
        values are not read: a blob whose metadata says otherwise is no blob any more)."""
        _, array = self.attempt(f"{what}: array({name!r})", partial(root.array, name))
        if array is None:
            return None
        if (array.shape, array.dtype) == (shape, dtype):
            return array
        self.judge(
            f"{what}: array({name!r}) has shape {array.shape} and dtype {array.dtype}",
            False,
            self.verified_store,
            config.verify,
        )
        return None


def check_mutated(
    mutated: Mutated,
    folder: Path,
    watchdog: Watchdog,
    configs: Sequence[ReadConfig],
    tally: Tally | None = None,
    context: str = "",
) -> Tally:
    """Writes ``mutated`` to a file in ``folder``, reads it with every config, returns the tally."""
    tally = tally if tally is not None else Tally()
    tally.examples += 1
    tally.mutations.update(mutated.kinds)
    with tempfile.NamedTemporaryFile(dir=folder, suffix=".itar", delete=False) as file:
        file.write(mutated.data)
        path = Path(file.name)
    memory = fsspec.filesystem("memory")
    in_memory = f"/fuzz/{path.name}"
    if any(config.memory for config in configs):
        memory.pipe_file(in_memory, mutated.data)
    try:
        Checker(mutated, path, watchdog, tally, context).check(configs)
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        with contextlib.suppress(OSError):
            memory.rm_file(in_memory)
    return tally


# -- the long run --------------------------------------------------------------------------


def iteration(
    seed: int, number: int, bases: dict[str, Base], folder: Path, watchdog: Watchdog, options: argparse.Namespace
) -> Tally:
    """One mutated file, drawn from ``random.Random(f"{seed}/{number}")``, read every way."""
    chooser = RandomChooser(random.Random(f"{seed}/{number}"))
    base = pick(chooser, sorted(bases.values(), key=lambda b: b.name))
    kinds = [pick(chooser, options.kinds) for _ in range(chooser.integer(1, options.stack))]
    variants = {"index_structure": index_structure_variants(unverifiable=options.unverifiable)}
    mutated = mutate(chooser, base, kinds, variants)
    configs = read_configs(
        chooser.integer(0, len(mutated.data) + 2 * BLOCK_SIZE), verify_archive=options.verify_archive
    )
    context = f"python -m scripts.fuzz_archive --seed {seed} --only-iteration {number}"
    for flag in ("unverifiable", "verify_archive"):
        if getattr(options, flag):
            context += f" --{flag.replace('_', '-')}"
    if options.verbose:
        print(f"[{number}] {mutated.description}", flush=True)
    return check_mutated(mutated, folder, watchdog, configs, context=context)


def _table(rows: Sequence[tuple[str, object]]) -> str:
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"  {name.ljust(width)}  {value}" for name, value in rows)


def summary(tally: Tally, seed: int, elapsed: float, watchdog: Watchdog) -> str:
    lines = [
        f"fuzz_archive: seed {seed}, {tally.examples} mutated files in {elapsed:.1f} s, {tally.calls} opens and reads"
    ]
    lines.append("mutations tried, by kind:")
    lines.append(_table([(kind, tally.mutations[kind]) for kind in MUTATIONS]))
    lines.append("answers:")
    rows: list[tuple[str, object]] = [
        ("original bytes returned", tally.original),
        ("raised (allowed), total", sum(tally.raised.values())),
    ]
    for name, count in tally.raised.most_common():
        message = " ".join(tally.messages.get(name, "").split())
        message = message if len(message) <= 150 else message[:147] + "..."
        rows.append((f"  {name}", f"{count:<9} e.g. {message}"))
    rows += [(f"verify_archive: {outcome}", count) for outcome, count in sorted(tally.verify_reports.items())]
    rows += [
        ("changed bytes, checksums not verified", tally.changed_unverified),
        ("changed bytes, index without checksums or keys renamed", tally.unverifiable),
        ("abandoned (hung) read threads", watchdog.abandoned),
        ("FAILURES (reads)", len(tally.failures)),
        ("FAILURES (mutated files)", len({failure.reproduce or failure.mutation for failure in tally.failures})),
    ]
    lines.append(_table(rows))
    # The reads of one mutated file failing the same way are listed once.
    groups: dict[tuple[str, str], list[Failure]] = {}
    for failure in tally.failures:
        groups.setdefault((failure.reproduce or failure.mutation, failure.problem.split(":", 1)[0]), []).append(failure)
    for number, similar in enumerate(groups.values(), 1):
        more = f"\n  (and {len(similar) - 1} more reads of this file failing the same way)" if len(similar) > 1 else ""
        lines.append(f"FAILURE {number}: {similar[0]}{more}")
    return "\n".join(lines)
