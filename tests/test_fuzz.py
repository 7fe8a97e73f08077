"""Fuzzing (issue #10, integrity and crash safety): damaged archives read back safely.

Small base archives (raw records of random sizes with pax-header keys; a consolidated zarr
hierarchy) are damaged by mutations that hypothesis draws -- bit flips anywhere,
truncation, appended garbage, overwritten and swapped blocks, index entries pointing
elsewhere, a malformed index, bad index and tar header fields -- and read every way
(``read``, ``read_into``, ``read_range``, ``read_async``, arrays, blobs), with checksums
verified and not, with several ``index_tail_read_size`` values. Every answer must be the
bytes written or a ``ValueError``/``KeyError``/``OSError`` that is none of the raw errors
of the layers below, within a time limit; with checksums verified, no changed byte may
come back. The mutations, the reads and the judging live in ``tests/support/fuzz.py``
(``scripts/fuzz_archive.py`` runs them for long): hypothesis draws the choices here.
"""

from __future__ import annotations

import asyncio
import lzma
import random
import struct
import time
from pathlib import Path
from typing import Any

import cbor2
import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from ncore_like import ArchiveFormatError, ChecksumError, ConsolidatedMetadataError, IndexedTarArchive
from ncore_like.archive._format import BLOCK_SIZE, pack_index_header
from tests.support import fuzz  # the mutations, reads and judging (shared with the long runs)

try:
    import pytest_timeout  # noqa: F401
except ImportError:
    pytestmark: list[pytest.MarkDecorator] = []
else:  # a second line of defence behind the per-read time limit of the Watchdog
    pytestmark = [pytest.mark.timeout(300)]

#: Examples per (mutation kind, base archive); each opens and reads a damaged file hundreds of times.
EXAMPLES_PER_KIND = 15
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES_PER_KIND, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


class DrawChooser:
    """The choices of the mutations, drawn by hypothesis (so failures shrink and replay)."""

    def __init__(self, data: st.DataObject) -> None:
        self._data = data

    def integer(self, low: int, high: int) -> int:
        value: int = self._data.draw(st.integers(low, high))
        return value

    def raw(self, size: int) -> bytes:
        if size <= 64:
            raw: bytes = self._data.draw(st.binary(min_size=size, max_size=size))
            return raw
        # Large garbage from a drawn seed: hypothesis's buffer stays small.
        seed = self._data.draw(st.integers(0, 2**32 - 1), label="garbage seed")
        return random.Random(seed).randbytes(size)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def bases(workspace: Path) -> dict[str, fuzz.Base]:
    return fuzz.build_bases(workspace, seed=0)


@pytest.fixture(scope="module")
def watchdog() -> fuzz.Watchdog:
    return fuzz.Watchdog()


def assert_no_failures(tally: fuzz.Tally) -> None:
    """Fails with the first failures (mutation, read, traceback) if the tally has any."""
    failures = tally.failures
    if failures:
        shown = "\n\n".join(str(failure) for failure in failures[:3])
        pytest.fail(f"{len(failures)} failing reads, the first ones:\n\n{shown}", pytrace=False)


def load_table(data: bytes) -> tuple[int, dict[Any, Any]]:
    """Offset and decoded CBOR map of the index of ``data`` (which must have one)."""
    loaded = fuzz.load_table(data)
    assert loaded is not None, "no readable index"
    return loaded


def check(mutated: fuzz.Mutated, folder: Path, watchdog: fuzz.Watchdog, drawn_tail: int = 3000) -> fuzz.Tally:
    """Reads ``mutated`` every way of :func:`fuzz.read_configs`: checksums verified
    and not, five tail read sizes, sync and async, local and through fsspec's memory
    filesystem (buffered and range reads), stores from their consolidated metadata and
    from their node metadata records."""
    return fuzz.check_mutated(mutated, folder, watchdog, fuzz.read_configs(drawn_tail))


#: Index structure variants the properties hold for: without the changes checksums can't
#: detect (dropping them, renaming keys; see test_checksums_dropped_from_the_index...).
STRUCTURE_VARIANTS: tuple[str, ...] = fuzz.index_structure_variants(unverifiable=False)
VARIANTS = {"index_structure": STRUCTURE_VARIANTS}


# -- the machinery itself --------------------------------------------------------------------


def test_undamaged_bases_read_back_exactly(
    bases: dict[str, fuzz.Base], workspace: Path, watchdog: fuzz.Watchdog
) -> None:
    for base in bases.values():
        tally = check(fuzz.Mutated(base, (), (), base.data), workspace, watchdog)
        assert_no_failures(tally)
        # Only the reads of records that exist nowhere raise (none here), and nothing changed.
        assert not tally.raised, tally.raised
        assert tally.changed_unverified == tally.unverifiable == 0
        assert tally.original > 0
    records, zarr = bases["records"], bases["zarr"]
    assert any(len(key) > 100 for key in records.records) and any(not key.isascii() for key in records.records)
    assert {len(value) for value in records.records.values()} >= {0, 511, 512, 513}
    assert set(zarr.arrays) == {"a", "u"} and set(zarr.blobs) == {"b"}
    assert ".zmetadata.cbor.xz" in zarr.records


@pytest.mark.parametrize(
    ("error", "allowed"),
    [
        (ChecksumError("x"), True),
        (ArchiveFormatError("x"), True),
        (ConsolidatedMetadataError("x"), True),
        (KeyError("x"), True),
        (ValueError("x"), True),
        (FileNotFoundError("x"), True),
        (struct.error("x"), False),
        (lzma.LZMAError("x"), False),
        (IndexError("x"), False),
        (MemoryError(), False),
        (cbor2.CBORDecodeError("x"), False),
        (cbor2.CBORDecodeEOF("x"), False),
        (TypeError("x"), False),
        (RuntimeError("x"), False),
        (OverflowError("x"), False),
        (AssertionError("x"), False),
        (type("Both", (ValueError, IndexError), {})("x"), False),  # allowed base, but a raw IndexError too
    ],
)
def test_exception_judging(error: BaseException, allowed: bool) -> None:
    assert (fuzz.exception_problem(error) is None) is allowed


def test_watchdog_bounds_calls_in_time() -> None:
    watchdog = fuzz.Watchdog(limit=0.2)
    assert watchdog.run(lambda: 42) == 42
    with pytest.raises(KeyError):
        watchdog.run(lambda: {"present": 1}["missing"])
    started = time.perf_counter()
    with pytest.raises(fuzz.ReadHang):
        watchdog.run(lambda: time.sleep(2))
    assert time.perf_counter() - started < 1.5
    assert watchdog.abandoned == 1
    assert watchdog.run(lambda: "fresh thread") == "fresh thread"

    async def answer() -> int:
        await asyncio.sleep(0)
        return 7

    assert watchdog.run(fuzz.awaited(answer)) == 7


def test_a_changed_byte_returned_with_verification_is_caught(bases: dict[str, fuzz.Base], workspace: Path) -> None:
    """The judge itself: a payload flipped in an archive whose index CRC32C was recomputed
    to match (a forgery checksums can't see) must be reported as a failure."""
    from ncore_like.archive._checksum import checksum

    base = bases["records"]
    member = next(member for member in base.members if member.size > 10)
    data = bytearray(base.data)
    data[member.offset] ^= 0x01
    offset, table = load_table(bytes(data))
    position = table["items"].index(member.key)
    table["crc32c"][position] = checksum(bytes(data[member.offset : member.offset + member.size]))
    forged = fuzz.with_index(bytes(data), offset, fuzz.compress_table(table))
    tally = check(fuzz.Mutated(base, ("forgery",), ("forged CRC32C",), forged), workspace, fuzz.Watchdog())
    assert tally.failures and all("changed bytes" in failure.problem for failure in tally.failures)
    assert all(repr(member.key) in failure.read for failure in tally.failures)


@pytest.mark.parametrize("kind", sorted(fuzz.MUTATIONS))
def test_every_mutation_kind_damages_files(kind: str, bases: dict[str, fuzz.Base]) -> None:
    for base in bases.values():
        changed = 0
        for seed in range(20):
            mutated = fuzz.mutate(fuzz.RandomChooser(random.Random(seed)), base, [kind], VARIANTS)
            changed += mutated.data != base.data
        assert changed >= 15, f"{kind} left {base.name} unchanged in {20 - changed} of 20 draws"


# -- the properties --------------------------------------------------------------------------


@pytest.mark.parametrize("base_name", ["records", "zarr"])
@pytest.mark.parametrize("kind", sorted(fuzz.MUTATIONS))
@FUZZ_SETTINGS
@given(data=st.data())
def test_one_mutation(
    kind: str,
    base_name: str,
    data: st.DataObject,
    bases: dict[str, fuzz.Base],
    workspace: Path,
    watchdog: fuzz.Watchdog,
) -> None:
    chooser = DrawChooser(data)
    mutated = fuzz.mutate(chooser, bases[base_name], [kind], VARIANTS)
    note = f"mutation: {mutated.description}"
    event(" ".join(mutated.steps[0].split()[:4]))  # what was drawn, see --hypothesis-show-statistics
    drawn_tail = chooser.integer(0, len(mutated.data) + 2 * BLOCK_SIZE)
    tally = check(mutated, workspace, watchdog, drawn_tail)
    assert tally.calls > 0, note
    assert_no_failures(tally)


@pytest.mark.parametrize(
    ("kind", "variant"),
    [("index_entries", variant) for variant in fuzz.INDEX_ENTRY_VARIANTS]
    + [("index_structure", variant) for variant in STRUCTURE_VARIANTS],
)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_one_index_rewrite(
    kind: str, variant: str, data: st.DataObject, bases: dict[str, fuzz.Base], workspace: Path, watchdog: fuzz.Watchdog
) -> None:
    """Every variant of the index rewrites (hypothesis would favour the first ones of a list)."""
    chooser = DrawChooser(data)
    base = bases[data.draw(st.sampled_from(sorted(bases)), label="base")]
    mutated = fuzz.mutate(chooser, base, [kind], {kind: [variant]})
    assert_no_failures(check(mutated, workspace, watchdog, chooser.integer(0, len(mutated.data))))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_stacked_mutations(
    data: st.DataObject, bases: dict[str, fuzz.Base], workspace: Path, watchdog: fuzz.Watchdog
) -> None:
    chooser = DrawChooser(data)
    base = bases[data.draw(st.sampled_from(sorted(bases)), label="base")]
    kinds = data.draw(st.lists(st.sampled_from(sorted(fuzz.MUTATIONS)), min_size=2, max_size=3), label="kinds")
    mutated = fuzz.mutate(chooser, base, kinds, VARIANTS)
    assert_no_failures(check(mutated, workspace, watchdog, chooser.integer(0, len(mutated.data))))


def test_checksums_dropped_from_the_index_are_only_unverifiable(
    bases: dict[str, fuzz.Base], workspace: Path, watchdog: fuzz.Watchdog
) -> None:
    """An index without its CRC32C list (as nvidia-ncore writes them) verifies nothing:
    a flipped payload byte then comes back even with verify_checksums=True, which the
    fuzzer counts as unverifiable, not as a failure."""
    base = bases["records"]
    member = next(member for member in base.members if member.size > 10)
    data = bytearray(base.data)
    data[member.offset] ^= 0x80
    offset, table = load_table(bytes(data))
    del table["crc32c"]
    stripped = fuzz.with_index(bytes(data), offset, fuzz.compress_table(table))
    tally = check(fuzz.Mutated(base, ("strip",), ("drop the checksums, flip a bit",), stripped), workspace, watchdog)
    assert_no_failures(tally)
    assert tally.unverifiable > 0 and tally.changed_unverified > 0


# -- regressions: library bugs the fuzzer found (fixed) ---------------------------------------


def _duplicate_key(base: fuzz.Base, renamed: str, duplicated: str) -> fuzz.Mutated:
    """``base`` with the index entry of ``renamed`` given the key ``duplicated``: two index
    entries of one key, each with its own payload and CRC32C."""
    offset, table = load_table(base.data)
    table["items"][table["items"].index(renamed)] = duplicated
    data = fuzz.with_index(base.data, offset, fuzz.compress_table(table))
    return fuzz.Mutated(base, ("index_structure",), (f"entry {renamed!r} renamed {duplicated!r}",), data)


@pytest.mark.parametrize(("base_name", "renamed", "duplicated"), [("records", "r/11", "r/4"), ("zarr", "u/2", "u/1")])
def test_duplicate_keys_in_the_index_never_return_other_bytes(
    base_name: str, renamed: str, duplicated: str, bases: dict[str, fuzz.Base], workspace: Path, watchdog: fuzz.Watchdog
) -> None:
    """Two index entries of one key, each with a payload matching its own CRC32C: the later
    one won, and a read returned another record's bytes with checksums verified."""
    mutated = _duplicate_key(bases[base_name], renamed, duplicated)
    assert_no_failures(check(mutated, workspace, watchdog))
    path = workspace / "duplicate.itar"
    path.write_bytes(mutated.data)
    with pytest.raises(ArchiveFormatError, match=repr(duplicated)):
        IndexedTarArchive(path, verify_checksums=True)


def _flip(base: fuzz.Base, key: str, text: bytes, index: int, bit: int) -> fuzz.Mutated:
    """``base`` with bit ``bit`` flipped in byte ``index`` of ``text`` in the payload of ``key``."""
    member = next(member for member in base.members if member.key == key)
    payload = base.data[member.offset : member.offset + member.size]
    position = member.offset + payload.index(text) + index
    data = bytearray(base.data)
    data[position] ^= 1 << bit
    return fuzz.Mutated(
        base, ("bit_flips",), (f"flip bit {bit} of byte {position} ({text!r} in {key!r})",), bytes(data)
    )


@pytest.mark.parametrize(
    ("key", "text", "index", "bit"),
    [
        ("a/.zarray", b'"shuffle"', 6, 2),  # "shuffhe": Blosc() got an unexpected keyword argument (TypeError)
        ("u/.zarray", b'"order"', 4, 1),  # "ordgr": ArrayV2Metadata() missing argument 'order' (TypeError)
    ],
)
def test_damaged_node_metadata_raises_clear_errors_unverified(
    key: str, text: bytes, index: int, bit: int, bases: dict[str, fuzz.Base], workspace: Path, watchdog: fuzz.Watchdog
) -> None:
    """Without verification, damaged .zarray JSON reached zarr-python and numcodecs, whose
    TypeErrors came out of open_root_group(consolidated=False).array(...)."""
    mutated = _flip(bases["zarr"], key, text, index, bit)
    unverified = [fuzz.ReadConfig(False, None, consolidated=False, records=False)]
    tally = fuzz.check_mutated(mutated, workspace, watchdog, unverified)
    assert_no_failures(tally)
    assert tally.raised["NodeMetadataError"] == 1, tally.raised


@pytest.mark.parametrize(
    "change",
    [
        {"sizes": 2**63 - 1},  # read(): OverflowError "byte string is too large"
        {"sizes": 2**63 - 4096},  # read(): MemoryError
        {"offset_datas": 2**63 - 512, "sizes": 1000},  # accepted; unverified read() returned b""
    ],
    ids=["size 2**63-1", "size 2**63-4096", "offset 2**63-512"],
)
def test_index_entries_near_2_63_are_rejected(
    change: dict[str, int], bases: dict[str, fuzz.Base], workspace: Path, watchdog: fuzz.Watchdog
) -> None:
    """The entry checks added offset and size in int64, which wrapped: the last record's
    entry passed with a size or offset near 2**63."""
    base = bases["records"]
    offset, table = load_table(base.data)
    last = max(range(len(table["items"])), key=table["offset_datas"].__getitem__)  # no next entry to overlap
    for name, value in change.items():
        table[name][last] = value
    data = fuzz.with_index(base.data, offset, fuzz.compress_table(table))
    mutated = fuzz.Mutated(base, ("index_entries",), (f"entry {table['items'][last]!r}: {change}",), data)
    assert_no_failures(check(mutated, workspace, watchdog))
    path = workspace / "near-2-63.itar"
    path.write_bytes(data)
    with pytest.raises(ArchiveFormatError, match="corrupt record index"):
        IndexedTarArchive(path)


@pytest.mark.parametrize("index_offset", [2**63, 2**64 - 1])
def test_index_header_offsets_past_2_63_raise_clear_errors_remotely(
    index_offset: int, bases: dict[str, fuzz.Base], workspace: Path, watchdog: fuzz.Watchdog
) -> None:
    """An fsspec archive whose tail read is shorter than the file takes its size from the
    index header: the buffered file object's seek() raised OverflowError for its offset."""
    base = bases["records"]
    data = base.data[:-BLOCK_SIZE] + pack_index_header(index_offset, base.index_size)
    mutated = fuzz.Mutated(base, ("index_header",), (f"index header offset {index_offset}",), data)
    buffered = [fuzz.ReadConfig(True, None, memory=True), fuzz.ReadConfig(False, BLOCK_SIZE, memory=True)]
    tally = fuzz.check_mutated(mutated, workspace, watchdog, buffered)
    assert_no_failures(tally)
    assert tally.raised["ArchiveFormatError"] == len(buffered), tally.raised
