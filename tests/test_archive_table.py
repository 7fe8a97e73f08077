"""The record table (archive/_table.py): archives written with checksums open from it, and
every reader of the format still reads them (tar, nvidia-ncore); damage falls back to the
xz index."""

from __future__ import annotations

import logging
import lzma
import random
import struct
import subprocess
import tarfile
import zlib
from pathlib import Path
from typing import Any

import cbor2
import crc32c
import pytest

from ncore_like import ArchiveFormatError, ChecksumError, IndexedTarArchive, recover
from ncore_like.archive import _reading, _table
from ncore_like.archive._format import BLOCK_SIZE, INDEX_HEADER_FORMAT, encode_index, padding
from ncore_like.archive._table import (
    POINTER_START,
    TablePointer,
    decode_table,
    encode_table,
    pack_table_pointer,
    unpack_table_pointer,
)
from ncore_like.archive._verify import verify_archive


def sample(count: int = 300, seed: int = 5) -> dict[str, bytes]:
    rng = random.Random(seed)
    records = {f"frames/c/{i}/0": rng.randbytes(rng.randrange(0, 3000)) for i in range(count)}
    records["long/" + "k" * 140] = b"a pax header before it"
    records["unicode/kamera_ü/光"] = b"unicode"
    return records


def write(path: Path, records: dict[str, bytes]) -> None:
    with IndexedTarArchive(path, mode="w") as archive:
        for key, value in records.items():
            archive[key] = value


def xz_index(raw: bytes) -> tuple[int, int, dict[str, Any]]:
    """Offset, size and lists of the xz index, decoded with lzma and cbor2 themselves."""
    _, _, offset, size = struct.unpack_from(INDEX_HEADER_FORMAT, raw, len(raw) - BLOCK_SIZE)
    return offset, size, cbor2.loads(lzma.decompress(raw[offset : offset + size]))


def pointer_of(raw: bytes) -> TablePointer:
    offset, _, _ = xz_index(raw)
    pointer = unpack_table_pointer(raw, offset)
    assert pointer is not None
    return pointer


def with_table(raw: bytes, table: bytes) -> bytes:
    """``raw`` with its record table replaced by ``table`` (no longer than the old one with
    its padding), the pointer updated."""
    pointer = pointer_of(raw)
    room = pointer.size + padding(pointer.size)
    assert len(table) <= room
    data = bytearray(raw)
    data[pointer.offset : pointer.offset + room] = table + bytes(room - len(table))
    new = pack_table_pointer(TablePointer(pointer.offset, len(table), crc32c.crc32c(table)))
    data[len(data) - BLOCK_SIZE + POINTER_START : len(data) - BLOCK_SIZE + POINTER_START + len(new)] = new
    return bytes(data)


# A small index, and one large enough to be compressed on a thread of its own.
@pytest.mark.parametrize("count", [300, _table._BACKGROUND_INDEX_RECORDS + 100])
def test_archives_open_from_the_record_table_not_the_xz_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    records = sample(count)
    write(tmp_path / "a.itar", records)
    raw = (tmp_path / "a.itar").read_bytes()

    def refuse(*args: object) -> object:
        raise AssertionError("the xz index was decoded")

    monkeypatch.setattr(_reading, "decode_index", refuse)
    archive = IndexedTarArchive(tmp_path / "a.itar", verify_checksums=True)
    assert archive.has_checksums and archive.keys() == list(records)
    assert {key: archive[key] for key in records} == records
    _, _, index = xz_index(raw)  # what nvidia-ncore reads: the same records, where they are
    assert index["items"] == archive.keys()
    assert index["offset_datas"] == [archive.records[key].offset for key in index["items"]]
    assert index["sizes"] == [len(records[key]) for key in index["items"]]


def test_tar_and_nvidia_ncore_read_archives_with_a_record_table(tmp_path: Path) -> None:
    records = sample(40)
    write(tmp_path / "a.itar", records)
    pointer_of((tmp_path / "a.itar").read_bytes())  # it has one
    listed = subprocess.run(["tar", "-tf", str(tmp_path / "a.itar")], capture_output=True, text=True, check=True)
    assert listed.stdout.splitlines() == list(records)
    for key in ("frames/c/7/0", "long/" + "k" * 140, "unicode/kamera_ü/光"):
        out = subprocess.run(["tar", "-xOf", str(tmp_path / "a.itar"), key], capture_output=True, check=True)
        assert out.stdout == records[key]


@pytest.mark.reference
def test_nvidia_ncore_reads_archives_with_a_record_table(tmp_path: Path) -> None:
    import hashlib

    from tests.support.reference import run_reference

    records = sample(40)
    write(tmp_path / "a.itar", records)
    pointer_of((tmp_path / "a.itar").read_bytes())
    dump = run_reference("dump-records", str(tmp_path / "a.itar"))
    assert dump["keys"] == list(records)
    assert all(dump["records"][key]["sha256"] == hashlib.sha256(value).hexdigest() for key, value in records.items())


def test_index_and_table_stay_within_twice_the_size_of_the_index_with_checksums(tmp_path: Path) -> None:
    records = sample(5000)
    write(tmp_path / "a.itar", records)
    raw = (tmp_path / "a.itar").read_bytes()
    _, _, index = xz_index(raw)
    # The index as it was before the table: the four lists in one xz stream.
    before = dict(index, crc32c=[crc32c.crc32c(records[key]) for key in index["items"]])
    old_size = len(lzma.compress(cbor2.dumps(before), format=lzma.FORMAT_XZ))
    now = len(raw) - BLOCK_SIZE - pointer_of(raw).offset  # table, index and their padding
    assert now <= 2 * old_size


@pytest.mark.parametrize("where", ["zlib stream", "checksum list"])
def test_a_damaged_table_falls_back_to_the_xz_index(
    where: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    records = sample()
    write(tmp_path / "a.itar", records)
    raw = bytearray((tmp_path / "a.itar").read_bytes())
    pointer = pointer_of(bytes(raw))
    # The middle of the table is in its zlib stream, its last byte the last record's CRC32C.
    raw[pointer.offset + (pointer.size // 2 if where == "zlib stream" else pointer.size - 1)] ^= 0x10
    (tmp_path / "b.itar").write_bytes(raw)
    with caplog.at_level(logging.WARNING, logger="ncore_like.archive.index"):
        archive = IndexedTarArchive(tmp_path / "b.itar")
    assert {key: archive[key] for key in records} == records
    # The xz index carries no checksums: they come from the records' tar headers.
    assert archive.has_checksums and archive.verify_checksums
    assert any(str(tmp_path / "b.itar") in message and "damaged record table" in message for message in caplog.messages)
    report = verify_archive(archive)
    assert any("damaged record table" in problem.message for problem in report.problems)


DAMAGED_POINTERS = {"magic": 0, "table offset": 4, "table size": 12}


@pytest.mark.parametrize("field", DAMAGED_POINTERS)
@pytest.mark.parametrize("where", ["pointer", "table"])
def test_damaged_bytes_are_never_served_when_the_table_or_its_pointer_is_damaged(
    tmp_path: Path, field: str, where: str
) -> None:
    """The records' checksums live in the record table; a damaged table or pointer must not
    turn their checks off: a second fault in a payload is found (the tar headers' CRC32C)."""
    records = sample(40)
    write(tmp_path / "a.itar", records)
    raw = bytearray((tmp_path / "a.itar").read_bytes())
    pointer = pointer_of(bytes(raw))
    if where == "pointer":
        raw[len(raw) - BLOCK_SIZE + POINTER_START + DAMAGED_POINTERS[field]] ^= 0x01
    else:
        raw[pointer.offset + pointer.size // 2] ^= 0x10
    victim = next(key for key in records if len(records[key]) > 10)
    raw[IndexedTarArchive(tmp_path / "a.itar").records[victim].offset + 5] ^= 0x01
    (tmp_path / "b.itar").write_bytes(raw)
    archive = IndexedTarArchive(tmp_path / "b.itar")
    with pytest.raises(ChecksumError, match=rf"b\.itar.*{victim}"):
        archive[victim]
    assert {key: archive[key] for key in records if key != victim} == {k: v for k, v in records.items() if k != victim}
    problems = [problem.message for problem in verify_archive(archive).problems]
    assert any(victim in message for message in problems)
    # (a pointer with a plausible size or offset leads to bytes that fail the table's CRC32C)
    assert any("pointer" in message or "damaged record table" in message for message in problems)
    unverified = IndexedTarArchive(tmp_path / "b.itar", verify_checksums=False)  # still readable so, if asked
    assert unverified[victim] != records[victim]


def test_a_remote_archive_with_a_damaged_table_is_refused_unless_unverified_reads_are_asked(tmp_path: Path) -> None:
    import fsspec

    records = sample(20)
    write(tmp_path / "a.itar", records)
    raw = bytearray((tmp_path / "a.itar").read_bytes())
    raw[len(raw) - BLOCK_SIZE + POINTER_START] ^= 0x01
    fsspec.filesystem("memory").pipe("/damaged/b.itar", bytes(raw))
    try:
        with pytest.raises(ArchiveFormatError, match=r"b\.itar.*record table.*damaged.*verify_checksums=False"):
            IndexedTarArchive("memory://damaged/b.itar")
        archive = IndexedTarArchive("memory://damaged/b.itar", verify_checksums=False)
        assert {key: archive[key] for key in records} == records
    finally:
        fsspec.filesystem("memory").rm("/damaged", recursive=True)


@pytest.fixture(params=["numpy", "python"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Tables decoded with numpy (a process that has it loaded) or without (one that hasn't:
    ``ncore-like ls``); ``_reading``'s cache of decoded indices cleared."""
    if request.param == "python":
        monkeypatch.setattr(_table, "_offsets_numpy", _table._offsets_python)
    _reading._decoded_indices.clear()
    return str(request.param)


def test_both_decoders_find_the_payloads_tar_finds(tmp_path: Path, decoder: str) -> None:
    records = sample()
    write(tmp_path / "a.itar", records)
    raw = (tmp_path / "a.itar").read_bytes()
    pointer = pointer_of(raw)
    table = decode_table(raw[pointer.offset : pointer.offset + pointer.size], pointer, "a")
    with tarfile.open(tmp_path / "a.itar") as tar:
        members = [(member.name, member.offset_data, member.size) for member in tar.getmembers()]
    assert list(zip(table.keys, table.offsets, table.sizes, strict=True)) == members
    assert table.checksums == [crc32c.crc32c(records[key]) for key in table.keys]
    assert all(type(number) is int for number in (*table.offsets, *table.sizes, *table.checksums))


@pytest.mark.parametrize(("numbers", "why"), [((-BLOCK_SIZE, 5), "negative numbers"), ((1 << 62, 5), "too large")])
def test_both_decoders_refuse_numbers_no_archive_holds(decoder: str, numbers: tuple[int, int], why: str) -> None:
    # A table whose CRC32C matches (a writer's bug, or crafted) with int64 numbers.
    packed = zlib.compress(struct.pack("<2q", *numbers) + b"k")
    table = struct.pack("<8sQB7xQ", b"itartbl1", 1, 2, len(packed)) + packed
    with pytest.raises(ArchiveFormatError, match=why):
        decode_table(table, TablePointer(1 << 20, len(table), crc32c.crc32c(table)), "x.itar")


def test_table_entries_out_of_place_are_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture, decoder: str) -> None:
    # A table whose own checksum matches but whose entries can't be payloads (a writer's
    # bug, or crafted): read through the xz index instead, never served.
    records = sample(20)
    write(tmp_path / "a.itar", records)
    raw = (tmp_path / "a.itar").read_bytes()
    pointer = pointer_of(raw)
    table = decode_table(raw[pointer.offset : pointer.offset + pointer.size], pointer, "a")
    for position, shift in ((3, BLOCK_SIZE), (0, -BLOCK_SIZE), (len(table.keys) - 1, 100 * BLOCK_SIZE)):
        offsets = list(table.offsets)
        offsets[position] += shift  # into the next record's header, before the first header, past the table
        crafted = with_table(raw, encode_table(table.keys, offsets, table.sizes, table.checksums))
        (tmp_path / "b.itar").write_bytes(crafted)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="ncore_like.archive.index"):
            archive = IndexedTarArchive(tmp_path / "b.itar")
        assert {key: archive[key] for key in records} == records
        assert any(repr(table.keys[position]) in message for message in caplog.messages), caplog.messages
        _reading._decoded_indices.clear()


def test_a_pointer_without_a_table_is_ignored(tmp_path: Path) -> None:
    records = sample(20)
    write(tmp_path / "a.itar", records)
    raw = bytearray((tmp_path / "a.itar").read_bytes())
    block = len(raw) - BLOCK_SIZE + POINTER_START
    offset, _, _ = xz_index(bytes(raw))
    for pointer in (bytes(range(24)), pack_table_pointer(TablePointer(offset, 100, 0)), bytes(24)):
        raw[block : block + 24] = pointer
        (tmp_path / "b.itar").write_bytes(raw)
        archive = IndexedTarArchive(tmp_path / "b.itar")
        assert {key: archive[key] for key in records} == records


def test_verify_finds_a_table_and_an_index_that_disagree(tmp_path: Path) -> None:
    records = sample(20)
    write(tmp_path / "a.itar", records)
    raw = (tmp_path / "a.itar").read_bytes()
    offset, size, index = xz_index(raw)
    items = list(index["items"])
    items[2] = items[2] + "x"  # nvidia-ncore would see another key than we do
    changed = encode_index(items, index["offset_datas"], index["sizes"])
    assert len(changed) + padding(len(changed)) == size + padding(size)
    data = bytearray(raw)
    data[offset : offset + size + padding(size)] = changed + bytes(padding(len(changed)))
    struct.pack_into("<Q", data, len(data) - BLOCK_SIZE + 8, offset)
    struct.pack_into("<I", data, len(data) - BLOCK_SIZE + 16, len(changed))
    (tmp_path / "b.itar").write_bytes(data)
    report = verify_archive(IndexedTarArchive(tmp_path / "b.itar"))
    assert [problem.message for problem in report.problems] == [
        "the record table and the xz index (what nvidia-ncore reads) list different records"
    ]
    assert verify_archive(IndexedTarArchive(tmp_path / "a.itar")).ok


def test_tables_round_trip_numbers_beyond_32_bits(decoder: str) -> None:
    keys = ["a", "b/ü", "c"]
    offsets = [BLOCK_SIZE, 3 * BLOCK_SIZE + (5 << 32), 6 * BLOCK_SIZE + (10 << 32)]
    sizes = [10, (5 << 32) - 3 * BLOCK_SIZE, 7]
    table = encode_table(keys, offsets, sizes, [1, 2, 3])
    decoded = decode_table(table, TablePointer(20 << 32, len(table), crc32c.crc32c(table)), "x")
    assert (decoded.keys, decoded.offsets, decoded.sizes, decoded.checksums) == (keys, offsets, sizes, [1, 2, 3])
    narrow = encode_table(keys[:1], offsets[:1], sizes[:1], None)
    decoded = decode_table(narrow, TablePointer(4 * BLOCK_SIZE, len(narrow), crc32c.crc32c(narrow)), "x")
    assert (decoded.keys, decoded.offsets, decoded.sizes, decoded.checksums) == (["a"], [BLOCK_SIZE], [10], None)
    assert len(narrow) < len(table)  # uint32 numbers where they fit


def test_lookups_before_and_after_the_dict_agree_with_the_keys(tmp_path: Path) -> None:
    # A reader answers its first lookups by scanning the table's key text, then builds a
    # dict: both must find every key where tar finds it, and nothing for keys it lacks,
    # however similar (prefixes, suffixes, a key plus the separator).
    records = sample(200)
    write(tmp_path / "a.itar", records)
    with tarfile.open(tmp_path / "a.itar") as tar:
        where = {member.name: (member.offset_data, member.size) for member in tar.getmembers()}
    keys = list(records)
    absent = ["frames/c/1", "rames/c/1/0", "frames/c/1/0/", "frames/c/1/0\0frames/c/2/0", "", "\0", "zzz"]
    for order in (keys[:3] + absent + keys[3:], absent + keys):  # scans, then the dict
        _reading._decoded_indices.clear()
        _reading._local_openings.clear()
        with IndexedTarArchive(tmp_path / "a.itar") as archive:
            for key in order:
                if key in records:
                    assert key in archive and archive.records[key] == where[key], key
                    assert archive[key] == records[key], key
                else:
                    assert key not in archive and archive.records.get(key) is None, repr(key)
            assert list(archive.keys()) == list(where) and len(archive) == len(where)


def test_a_table_listing_a_key_twice_never_serves_either_payload(tmp_path: Path, decoder: str) -> None:
    # A table whose own checksum matches (a writer's bug, or crafted) with two entries of
    # one key: looking that key up raises, naming it, before and after the reader builds
    # its dict of keys, and other keys read their own bytes until then.
    records = sample(40)
    write(tmp_path / "a.itar", records)
    raw = (tmp_path / "a.itar").read_bytes()
    table = decode_table(raw[pointer_of(raw).offset :][: pointer_of(raw).size], pointer_of(raw), "a")
    keys = list(table.keys)
    twice, lost = keys[3], keys[30]
    keys[30] = twice
    crafted = with_table(raw, encode_table(keys, table.offsets, table.sizes, table.checksums))
    (tmp_path / "b.itar").write_bytes(crafted)
    _reading._decoded_indices.clear()
    with IndexedTarArchive(tmp_path / "b.itar") as archive:
        with pytest.raises(ArchiveFormatError, match=f"{twice!r} has two entries"):
            archive[twice]
        served = []
        with pytest.raises(ArchiveFormatError, match=f"{twice!r} has two entries"):
            for _ in range(20):  # past the scans: the dict of keys can't be built either
                served.append(archive[keys[5]])
        assert served and all(value == records[keys[5]] for value in served)
        with pytest.raises(ArchiveFormatError, match=f"{twice!r} has two entries"):
            archive[twice]
        assert lost in records  # the entry renamed: its record can't be reached by name


def test_archives_pickle_their_lazily_indexed_records(tmp_path: Path) -> None:
    import pickle

    records = sample(50)
    write(tmp_path / "a.itar", records)
    _reading._decoded_indices.clear()
    with IndexedTarArchive(tmp_path / "a.itar") as archive:
        copy = pickle.loads(pickle.dumps(archive))
    with copy:
        assert {key: copy[key] for key in reversed(records)} == dict(reversed(records.items()))
        assert list(copy.keys()) == list(records)


def test_a_file_cut_after_the_first_block_of_its_record_table_is_called_truncated(tmp_path: Path) -> None:
    """The table begins like an index header block (``itar``): its ``tbl1`` must not be read
    as an unknown index type."""
    records = sample(20)
    write(tmp_path / "a.itar", records)
    raw = (tmp_path / "a.itar").read_bytes()
    (tmp_path / "b.itar").write_bytes(raw[: pointer_of(raw).offset + BLOCK_SIZE])
    with pytest.raises(ArchiveFormatError, match=r"b\.itar.*truncated: the file ends inside its index"):
        IndexedTarArchive(tmp_path / "b.itar")


def test_a_large_index_that_fails_to_compress_fails_the_close_and_keeps_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The xz index of a large archive is compressed on a thread of its own: its failure
    # must reach close(), not leave an archive published without its index.
    def fail(*args: object, **kwargs: object) -> bytes:
        raise MemoryError("no memory for the index")

    records = sample(_table._BACKGROUND_INDEX_RECORDS + 10)
    archive = IndexedTarArchive(tmp_path / "a.itar", mode="w")
    for key, value in records.items():
        archive[key] = value
    monkeypatch.setattr(_table, "compress_index", fail)
    with pytest.raises(MemoryError, match="no memory for the index"):
        archive.close()
    assert not (tmp_path / "a.itar").exists()
    monkeypatch.undo()
    recover(tmp_path / "a.itar")
    with IndexedTarArchive(tmp_path / "a.itar") as recovered:
        assert {key: recovered[key] for key in records} == records
