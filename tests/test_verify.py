"""Verification in the library: the tar header parser and walk (checked against Python's
``tarfile`` on the same files), ``verify_archive`` on archives written by
``IndexedTarArchive`` and then damaged on purpose, bulk reads, and ``verify_arrays``."""

from __future__ import annotations

import io
import shutil
import tarfile
import threading
import time
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ncore_like import ArchiveFormatError, BloscCompression, IndexedTarArchive, IndexedTarZarrStore
from ncore_like.archive import (
    ArchiveReport,
    Problem,
    TarMember,
    TarStop,
    error_detail,
    map_records,
    read_records,
    scan_tar,
    verify_archive,
)
from ncore_like.archive._format import (
    BLOCK_SIZE,
    encode_index,
    member_header,
    pack_index_header,
    padding,
    parse_pax_records,
    parse_tar_header,
    parse_tar_number,
)
from ncore_like.errors import RecordExistsError
from ncore_like.nodes import Array, verify_arrays
from tests.support.archives import rewrite_index

LONG_KEY = "sensors/" + "very-long-component-" * 8 + "/0.0"  # > 100 characters: a pax header
UNICODE_KEY = "caméras/前/0"  # non-ASCII: a pax header
RECORDS = {
    "a/0": b"alpha" * 100,
    LONG_KEY: b"long key payload",
    "empty": b"",
    UNICODE_KEY: bytes(range(256)) * 3,
    "z/last": b"z" * 513,
}


def write_archive(path: Path, records: dict[str, bytes] = RECORDS) -> Path:
    with IndexedTarArchive(path, "w") as archive:
        for key, value in records.items():
            archive[key] = value
    return path


def scan(path: Path) -> tuple[list[TarMember], TarStop]:
    with path.open("rb") as file:
        items = list(scan_tar(file))
    *members, stop = items
    assert isinstance(stop, TarStop) and all(isinstance(member, TarMember) for member in members)
    return members, stop  # type: ignore[return-value]


def tarfile_listing(path: Path) -> list[tuple[str, int, int, int]]:
    """What Python's tarfile sees: name, header offset, data offset and size of each member."""
    with tarfile.open(path, "r:") as tar:
        return [(member.name, member.offset, member.offset_data, member.size) for member in tar.getmembers()]


def listing(members: list[TarMember]) -> list[tuple[str, int, int, int]]:
    return [(member.name, member.offset, member.offset_data, member.size) for member in members]


def with_index(tar_bytes: bytes, path: Path) -> Path:
    """An indexed tar archive made of a tar written by another tool: its members (as tarfile
    lists them) indexed after the tar's end."""
    members: list[tarfile.TarInfo] = []
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        for member in tar.getmembers():
            if member.isreg() and member.name not in {m.name for m in members}:  # the first of duplicates
                members.append(member)
    index = encode_index([m.name for m in members], [m.offset_data for m in members], [m.size for m in members])
    offset = len(tar_bytes)
    assert offset % BLOCK_SIZE == 0
    path.write_bytes(tar_bytes + index + bytes(padding(len(index))) + pack_index_header(offset, len(index)))
    return path


def tar_of(entries: list[tuple[tarfile.TarInfo, bytes]], format: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=format) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def file_entry(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def patch(path: Path, offset: int, data: bytes) -> None:
    with path.open("r+b") as file:
        file.seek(offset)
        file.write(data)


def header_offset(path: Path, key: str) -> int:
    """Offset of the (last) header block of a record."""
    with IndexedTarArchive(path) as archive:
        return archive.records[key].offset - BLOCK_SIZE


def verified(path: Path, **options: Any) -> ArchiveReport:
    with IndexedTarArchive(path) as archive:
        return verify_archive(archive, **options)


# -- the header parser ---------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 1, 511, 8**11 - 1, 8**11, 2**40 + 3, 256**11 - 1])
def test_numbers_octal_and_base_256_as_tarfile_writes_them(value: int) -> None:
    info = tarfile.TarInfo("n")
    info.size = value
    block = info.tobuf(tarfile.GNU_FORMAT)  # octal if the size fits 11 digits, else base-256
    assert (block[124] >= 0x80) == (value >= 8**11)
    assert parse_tar_number(block[124:136]) == value
    assert parse_tar_header(block).size == value


def test_numbers_negative_base_256_and_malformed() -> None:
    info = tarfile.TarInfo("n")
    info.mtime = -5
    assert parse_tar_number(info.tobuf(tarfile.GNU_FORMAT)[136:148]) == -5
    assert parse_tar_number(b"  17 \0\0\0\0") == 0o17  # space-padded, as old tars write
    assert parse_tar_number(bytes(12)) == 0
    for bad in (b"0000000009\0\0", b"12x\0", b"0o17\0", b"1_0\0"):
        with pytest.raises(ValueError):
            parse_tar_number(bad)


def test_header_fields_match_tarfile() -> None:
    info = tarfile.TarInfo("some/member")
    info.size = 1234
    block = info.tobuf(tarfile.USTAR_FORMAT)
    header = parse_tar_header(block)
    assert (header.name, header.size, header.typeflag, header.is_regular) == ("some/member", 1234, b"0", True)
    # Our writer's headers decode to the key and size.
    assert parse_tar_header(member_header("k/0.0", 77)).name == "k/0.0"
    assert parse_tar_header(member_header("k/0.0", 77)).size == 77


def test_header_of_a_v7_directory() -> None:
    info = tarfile.TarInfo("old/dir/")
    info.type = tarfile.AREGTYPE  # v7 had no directory type: a name ending in "/" said so
    header = parse_tar_header(info.tobuf(tarfile.USTAR_FORMAT))
    assert (header.name, header.typeflag, header.is_regular) == ("old/dir", b"5", False)


def test_header_with_ustar_prefix() -> None:
    name = "p" * 90 + "/" + "n" * 60  # > 100 characters: ustar splits it into prefix and name
    info = tarfile.TarInfo(name)
    block = info.tobuf(tarfile.USTAR_FORMAT)
    assert block[345 : 345 + 90] == b"p" * 90
    assert parse_tar_header(block).name == name


def test_header_checksum_mismatch_and_signed_sums() -> None:
    block = bytearray(member_header("key", 5))
    block[10] ^= 0x01
    with pytest.raises(ArchiveFormatError, match="checksum mismatch"):
        parse_tar_header(bytes(block))
    # Some old tars summed signed bytes: a name with high bytes, checksummed that way.
    block = bytearray(member_header("key", 5))
    block[5] = 0xE9
    block[148:156] = b" " * 8
    signed = sum(byte - 256 if byte & 0x80 else byte for byte in block)
    block[148:156] = b"%06o\0 " % signed
    assert parse_tar_header(bytes(block)).size == 5


def test_header_rejects_zero_and_short_blocks_and_bad_sizes() -> None:
    with pytest.raises(ArchiveFormatError, match="zero block"):
        parse_tar_header(bytes(BLOCK_SIZE))
    with pytest.raises(ArchiveFormatError, match="of 100 bytes"):
        parse_tar_header(bytes(100))
    block = bytearray(member_header("key", 5))
    block[124:136] = b"12x45678901\0"
    block[148:156] = b" " * 8
    block[148:155] = b"%06o\0" % sum(block)
    with pytest.raises(ArchiveFormatError, match="malformed size field"):
        parse_tar_header(bytes(block))
    info = tarfile.TarInfo("minus")
    info.size = -5  # base-256 can say it; no member has it
    with pytest.raises(ArchiveFormatError, match="negative size"):
        parse_tar_header(info.tobuf(tarfile.GNU_FORMAT))


def test_pax_records() -> None:
    info = tarfile.TarInfo(UNICODE_KEY)
    info.pax_headers = {"comment": "a = b\nc"}
    data = info.tobuf(tarfile.PAX_FORMAT)  # a pax header with the path and the comment, then the ustar one
    header = parse_tar_header(data[:BLOCK_SIZE])
    assert header.typeflag == b"x"
    records = parse_pax_records(data[BLOCK_SIZE : BLOCK_SIZE + header.size])
    assert records == {"comment": "a = b\nc", "path": UNICODE_KEY}
    for bad in (b"5 a=b\n", b"10 path=x", b"xx path=x\n", b"7 path\n"):
        with pytest.raises(ArchiveFormatError, match="malformed pax"):
            parse_pax_records(bad)


# -- walking the headers -------------------------------------------------------------------


def test_walk_matches_tarfile_and_the_index(tmp_path: Path) -> None:
    path = write_archive(tmp_path / "a.itar")
    members, stop = scan(path)
    assert listing(members) == tarfile_listing(path)
    with IndexedTarArchive(path) as archive:
        assert [(m.name, m.offset_data, m.size) for m in members] == [
            (key, *archive.records[key]) for key in archive.keys()
        ]
    assert stop.error is None
    assert members[1].offset < members[1].offset_data - BLOCK_SIZE  # the long key's pax header
    assert all(member.is_regular for member in members)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.dictionaries(
        st.lists(
            st.text(st.characters(blacklist_characters="/\0\\.", max_codepoint=0x2FFF), min_size=1),
            min_size=1,
            max_size=4,
        )
        .map("/".join)
        .filter(lambda key: len(key.encode()) < 300),
        st.binary(max_size=1500),
        max_size=6,
    )
)
def test_walk_matches_tarfile_for_any_keys(tmp_path: Path, records: dict[str, bytes]) -> None:
    path = write_archive(tmp_path / f"{uuid.uuid4().hex}.itar", records)
    members, stop = scan(path)
    assert stop.error is None
    assert listing(members) == tarfile_listing(path)
    assert [member.name for member in members] == list(records)


def test_walk_reads_gnu_long_names(tmp_path: Path) -> None:
    long_name = "gnu/" + "x" * 150 + "/0"
    data = tar_of([file_entry(long_name, b"payload"), file_entry("short", b"s" * 600)], tarfile.GNU_FORMAT)
    path = tmp_path / "gnu.tar"
    path.write_bytes(data)
    members, stop = scan(path)
    assert listing(members) == tarfile_listing(path)
    assert [member.name for member in members] == [long_name, "short"]
    assert members[0].offset == 0 and members[0].offset_data == 3 * BLOCK_SIZE  # L header, its name, the header
    assert stop.error is None


def test_walk_reads_pax_size_and_global_headers(tmp_path: Path) -> None:
    # A pax "size" record replaces the header's size field (tarfile writes it for >= 8 GiB).
    info = tarfile.TarInfo("big")
    info.pax_headers = {"size": "700"}
    header = info.tobuf(tarfile.PAX_FORMAT)
    global_header = tarfile.TarInfo.create_pax_global_header({"comment": "made by hand"})
    tar = global_header + header + b"b" * 700 + bytes(padding(700)) + bytes(2 * BLOCK_SIZE)
    path = tmp_path / "pax.tar"
    path.write_bytes(tar)
    members, stop = scan(path)
    assert listing(members) == tarfile_listing(path)
    assert (members[0].name, members[0].size) == ("big", 700)
    assert stop == TarStop(len(tar) - 2 * BLOCK_SIZE)


def test_walk_skips_no_data_for_directories_and_links(tmp_path: Path) -> None:
    directory = tarfile.TarInfo("folder/")
    directory.type = tarfile.DIRTYPE
    link = tarfile.TarInfo("link")
    link.type, link.linkname = tarfile.SYMTYPE, "folder/file"
    link.size = 700  # in the header, but no data follows a link: nothing to skip
    data = tar_of([(directory, b""), (link, b""), file_entry("folder/file", b"f" * 10)], tarfile.PAX_FORMAT)
    path = tmp_path / "mixed.tar"
    path.write_bytes(data)
    members, _ = scan(path)
    assert listing(members) == tarfile_listing(path)
    assert [(member.name, member.size, member.is_regular) for member in members] == [
        ("folder", 0, False),
        ("link", 700, False),
        ("folder/file", 10, True),
    ]


def test_walk_refuses_huge_extended_headers(tmp_path: Path) -> None:
    info = tarfile.TarInfo("././@PaxHeader")
    info.type, info.size = tarfile.XHDTYPE, 2 << 20  # a damaged size field, say
    path = tmp_path / "huge.tar"
    path.write_bytes(info.tobuf(tarfile.USTAR_FORMAT) + bytes(info.size + 2 * BLOCK_SIZE))
    members, stop = scan(path)
    assert members == [] and stop.offset == 0
    assert stop.error == f"tar header at offset 0 announces {2 << 20} bytes of extended header data"


def test_walk_refuses_gnu_sparse_members(tmp_path: Path) -> None:
    sparse = tarfile.TarInfo("sparse")
    sparse.type = tarfile.GNUTYPE_SPARSE
    path = tmp_path / "sparse.tar"
    path.write_bytes(tar_of([file_entry("first", b"1"), (sparse, b"")], tarfile.GNU_FORMAT))
    members, stop = scan(path)
    assert [member.name for member in members] == ["first"]
    assert stop.offset == 2 * BLOCK_SIZE and stop.error is not None and "GNU sparse" in stop.error


def test_walk_stops_at_a_bad_header_where_tarfile_stops(tmp_path: Path) -> None:
    path = write_archive(tmp_path / "a.itar")
    bad = header_offset(path, "empty")
    patch(path, bad + 20, b"\x01")
    members, stop = scan(path)
    assert listing(members) == tarfile_listing(path)  # tarfile ends its iteration there, quietly
    assert [member.name for member in members] == ["a/0", LONG_KEY]
    assert stop.offset == bad and stop.error is not None
    assert f"unreadable tar header at offset {bad}" in stop.error and "checksum" in stop.error


def test_walk_stops_at_a_bad_header_after_a_pax_header(tmp_path: Path) -> None:
    path = write_archive(tmp_path / "a.itar")
    bad = header_offset(path, UNICODE_KEY)  # the ustar block after the key's pax header
    patch(path, bad + 20, b"\x01")
    members, stop = scan(path)
    assert [member.name for member in members] == ["a/0", LONG_KEY, "empty"]
    assert stop.offset == bad and stop.error is not None and "checksum" in stop.error
    with pytest.raises(tarfile.ReadError, match="bad checksum"), tarfile.open(path, "r:") as tar:
        tar.getmembers()


@pytest.mark.parametrize(
    ("key", "cut", "expected"),
    [
        ("z/last", 100, "extend past the end of the file"),  # in a payload
        ("z/last", -300, "truncated tar header"),  # in a header
        ("z/last", -BLOCK_SIZE, "without an end-of-archive block"),  # between members
        ("z/last", -BLOCK_SIZE - 100, "the file ends at offset"),  # in the padding before a header
        (LONG_KEY, -2 * BLOCK_SIZE + 10, "extend past the end of the file"),  # in the data of a pax header
    ],
)
def test_walk_of_a_truncated_file(tmp_path: Path, key: str, cut: int, expected: str) -> None:
    path = write_archive(tmp_path / "a.itar")
    with IndexedTarArchive(path) as archive:
        size = archive.records[key].offset + cut
    with path.open("r+b") as file:
        file.truncate(size)
    with pytest.raises(ArchiveFormatError, match="not an indexed tar archive"):
        IndexedTarArchive(path)  # no index any more: only the walk can say what is left
    members, stop = scan(path)
    assert [member.name for member in members] == list(RECORDS)[: list(RECORDS).index(key)]
    assert stop.error is not None and expected in stop.error, stop


# -- verify_archive ------------------------------------------------------------------------


def test_sound_archive(tmp_path: Path) -> None:
    path = write_archive(tmp_path / "a.itar")
    calls: dict[str, list[tuple[int, int]]] = {}
    report = verified(
        path, threads=3, progress=lambda step, advance, total: calls.setdefault(step, []).append((advance, total))
    )
    assert report == ArchiveReport(str(path), records=5, tar_members=5, bytes_read=sum(map(len, RECORDS.values())))
    assert report.ok
    assert calls["members"] == [(1, 5)] * 5
    assert sum(advance for advance, _ in calls["records"]) == report.bytes_read
    assert {total for _, total in calls["records"]} == {report.bytes_read}


def test_flipped_header_checksum_byte_is_one_problem(tmp_path: Path) -> None:
    path = write_archive(tmp_path / "a.itar")
    bad = header_offset(path, "empty")
    patch(path, bad + 148, b"7")  # the first digit of the stored checksum
    report = verified(path)
    assert report.tar_members == 2
    [problem] = report.problems
    assert problem.key is None
    assert problem.message.startswith(f"unreadable tar header at offset {bad} (tar header checksum mismatch")
    assert "3 index entries from 'empty' on not checked" in problem.message
    assert report.bytes_read == sum(map(len, RECORDS.values()))  # the records themselves are fine


def test_zeroed_header_is_one_problem(tmp_path: Path) -> None:
    path = write_archive(tmp_path / "a.itar")
    bad = header_offset(path, "z/last")
    patch(path, bad, bytes(BLOCK_SIZE))
    [problem] = verified(path).problems
    assert problem == Problem(
        f"the tar ends at offset {bad} (end-of-archive block) before index entry 'z/last', which has no member"
    )


def test_member_missing_from_the_index(tmp_path: Path) -> None:
    path = write_archive(tmp_path / "a.itar")

    def drop(keys: list[str], offsets: list[int], sizes: list[int]) -> None:
        position = keys.index(LONG_KEY)
        for values in (keys, offsets, sizes):
            del values[position]

    rewrite_index(path, drop)
    report = verified(path)
    with IndexedTarArchive(tmp_path / "a.itar") as archive:
        assert LONG_KEY not in archive
    [problem] = report.problems
    assert problem.key == LONG_KEY and "is not in the index" in problem.message
    assert (report.records, report.tar_members) == (4, 5)


def test_index_entry_without_member(tmp_path: Path) -> None:
    path = write_archive(tmp_path / "a.itar")
    offset = header_offset(path, "empty") + BLOCK_SIZE

    def rename(keys: list[str], offsets: list[int], sizes: list[int]) -> None:
        keys[keys.index("empty")] = "ghost"

    rewrite_index(path, rename)
    assert verified(path).problems == [
        Problem(f"tar member at offset {offset} (0 bytes) is not in the index", "empty"),
        Problem(f"index entry (offset {offset}, 0 bytes) has no tar member", "ghost"),
    ]


def test_index_disagrees_with_the_member(tmp_path: Path) -> None:
    path = write_archive(tmp_path / "a.itar")

    def change(keys: list[str], offsets: list[int], sizes: list[int]) -> None:
        sizes[keys.index("a/0")] -= 1
        offsets[keys.index("z/last")] += BLOCK_SIZE  # still a plausible payload offset

    rewrite_index(path, change)
    problems = {problem.key: problem.message for problem in verified(path).problems}
    assert set(problems) == {"a/0", "z/last"}
    assert "the index says" in problems["a/0"] and "499 bytes" in problems["a/0"]


def test_gnu_tar_with_long_names_duplicates_and_directories(tmp_path: Path) -> None:
    long_name = "gnu/" + "y" * 130 + "/0"
    directory = tarfile.TarInfo("dir")
    directory.type = tarfile.DIRTYPE
    entries = [
        file_entry(long_name, b"1" * 700),
        file_entry("twice", b"a"),
        file_entry("twice", b"b"),
        (directory, b""),
    ]
    path = with_index(tar_of(entries, tarfile.GNU_FORMAT), tmp_path / "gnu.itar")
    report = verified(path)
    assert report.tar_members == 4
    assert [(problem.key, problem.message.split(" ")[0]) for problem in report.problems] == [
        ("twice", "duplicate"),
        ("dir", "tar"),  # a member, not in the index (only regular files were indexed)
    ]
    # The one-record index of the long name matches: a GNU long name is read as the name.
    assert not any(problem.key == long_name for problem in report.problems)


def test_directory_named_like_a_record(tmp_path: Path) -> None:
    directory = tarfile.TarInfo("d")
    directory.type = tarfile.DIRTYPE
    tar = tar_of([file_entry("f", b"x"), (directory, b"")], tarfile.PAX_FORMAT)
    path = tmp_path / "d.itar"
    with_index(tar, path)

    def index_the_directory(keys: list[str], offsets: list[int], sizes: list[int]) -> None:
        keys.append("d")
        offsets.append(offsets[0] + BLOCK_SIZE * 2)
        sizes.append(0)

    rewrite_index(path, index_the_directory)
    [problem] = verified(path).problems
    assert problem.key == "d" and "is not a regular file" in problem.message


def test_unreadable_records_are_problems_without_the_archive_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_archive(tmp_path / "a.itar")
    original = IndexedTarArchive.read

    def flaky(self: IndexedTarArchive, key: str) -> bytes:
        if key == "a/0":
            raise ArchiveFormatError("the disk said no", archive=str(path), key=key)
        if key == "z/last":
            raise OSError(5, "Input/output error", str(path))
        data = original(self, key)
        return data[:-1] if key == UNICODE_KEY else data

    monkeypatch.setattr(IndexedTarArchive, "read", flaky)
    report = verified(path, threads=2)
    assert report.problems == [
        Problem("the disk said no", "a/0"),
        Problem("read 767 bytes, the index says 768", UNICODE_KEY),
        Problem("Input/output error", "z/last"),
    ]
    assert report.bytes_read == len(RECORDS[LONG_KEY])


def test_one_problem_per_unreadable_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "h.itar"
    with IndexedTarZarrStore(path, "w") as store:
        store.create_root_group().create_array("values", np.arange(40, dtype=np.int64), chunks=(10,))
        store.consolidate()
    original = IndexedTarArchive.read

    def failing(self: IndexedTarArchive, key: str) -> bytes:
        if key == "values/2":
            raise ArchiveFormatError("the disk said no", archive=str(path), key=key)
        return original(self, key)

    monkeypatch.setattr(IndexedTarArchive, "read", failing)
    with IndexedTarZarrStore(path) as store:
        report = verify_archive(store.archive)
        assert report.problems == [Problem("the disk said no", "values/2")] == list(report.unreadable.values())
        report.add([Problem("unrelated")])
        report.add(verify_arrays([store.open_root_group().array("values")], archive=str(path)))
    # The array's problem, which names the array too, replaced the record's.
    assert report.problems == [Problem("unrelated"), Problem("the disk said no", "values/2", "values")]
    assert report.unreadable == {}


def test_error_detail() -> None:
    here, there = "/data/a.itar", "/data/b.itar"
    assert error_detail(ArchiveFormatError("corrupt", archive=here), here) == "corrupt"
    assert error_detail(ArchiveFormatError("corrupt", archive=there), here) == f"{there}: corrupt"
    assert error_detail(RecordExistsError("k", archive=here), here) == "record 'k' exists already"
    assert error_detail(KeyError("no record 'x'"), here) == "no record 'x'"
    assert error_detail(OSError(5, "Input/output error", there), here) == f"{there}: Input/output error"
    assert error_detail(FileNotFoundError("bucket/a.itar"), here) == "bucket/a.itar: no such file or object"
    assert error_detail(ValueError(), here) == "ValueError"
    problem = Problem.from_error(ArchiveFormatError("bad", archive=here), archive=here, key="k", array="arr")
    assert problem.text() == "k (array arr): bad"
    assert Problem("m", array="arr").text() == "array arr: m" and Problem("m").text() == "m"


# -- bulk reads ----------------------------------------------------------------------------


def test_read_records_in_order_with_bounded_read_ahead(tmp_path: Path) -> None:
    records = {f"r/{index}": bytes([index]) * (1000 + index) for index in range(40)}
    path = write_archive(tmp_path / "many.itar", records)
    lock = threading.Lock()
    running = peak = 0

    def slow_size(key: str) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.002)
        with lock:
            running -= 1
        return len(archive.read(key))

    with IndexedTarArchive(path) as archive:
        keys = list(reversed(archive.keys()))
        assert [(key, data) for key, data in read_records(archive, keys, threads=4)] == [
            (key, records[key]) for key in keys
        ]
        sizes = dict(map_records(archive, keys, slow_size, threads=4, read_ahead_bytes=2500))
        assert sizes == {key: len(records[key]) for key in keys}
        assert 1 <= peak <= 2  # 2500 bytes hold two records of this size in flight, never three
        with pytest.raises(ValueError, match="threads must be positive"):
            read_records(archive, keys, threads=0)


def test_map_records_raises_in_turn_and_cancels_on_close(tmp_path: Path) -> None:
    path = write_archive(tmp_path / "a.itar")
    started: list[str] = []

    def fail_on_empty(key: str) -> str:
        started.append(key)
        if key == "empty":
            raise OSError("boom")
        return key

    with IndexedTarArchive(path) as archive:
        results = map_records(archive, archive.keys(), fail_on_empty, threads=1)
        assert next(results) == ("a/0", "a/0")
        assert next(results) == (LONG_KEY, LONG_KEY)
        with pytest.raises(OSError, match="boom"):
            next(results)
        with closing(map_records(archive, archive.keys(), fail_on_empty, threads=1, read_ahead_bytes=1)) as first:
            assert next(first)[0] == "a/0"
        with pytest.raises(KeyError):
            list(read_records(archive, ["missing"]))


# -- verify_arrays -------------------------------------------------------------------------


def test_verify_arrays_names_failing_chunks(tmp_path: Path) -> None:
    path = tmp_path / "h.itar"
    with IndexedTarZarrStore(path, "w") as store:
        root = store.create_root_group()
        root.create_array(
            "values", np.arange(600, dtype=np.int32).reshape(100, 6), chunks=(10, 6), compression=BloscCompression()
        )
        root.create_array("scalar", np.array(7, dtype=np.int16), compression=None)
        store.consolidate()
    broken = tmp_path / "broken.itar"
    shutil.copyfile(path, broken)
    with IndexedTarArchive(path) as archive:
        for key in ("values/4.0", "values/9.0"):  # in two slabs
            record = archive.records[key]
            patch(broken, record.offset, b"\xff" * record.size)

    def arrays_of(location: Path, verify_checksums: bool = True) -> tuple[IndexedTarZarrStore, list[Array]]:
        store = IndexedTarZarrStore(location, verify_checksums=verify_checksums)
        root = store.open_root_group()
        return store, [root.array("values"), root.array("scalar")]

    store, arrays = arrays_of(path)
    with store:
        seen: list[tuple[str, int, int]] = []
        assert verify_arrays(arrays, archive=str(path), slab_bytes=500, progress=lambda *args: seen.append(args)) == []
        assert sum(advance for _, advance, _ in seen) == 600 * 4 + 2 == seen[0][2]
        assert len(seen) == 5 + 1  # slabs of two chunk rows (480 bytes) and the scalar
    store, arrays = arrays_of(broken)  # checksums verified (the default): the damage is caught there
    with store:
        problems = verify_arrays(arrays, archive=str(broken), slab_bytes=500)
        assert [(problem.key, problem.array) for problem in problems] == [
            ("values/4.0", "values"),
            ("values/9.0", "values"),
        ]
        assert problems[0].message.startswith("record 'values/4.0' at offset") and "CRC32C" in problems[0].message
    store, arrays = arrays_of(broken, verify_checksums=False)  # then decoding fails
    with store:
        problems = verify_arrays(arrays, archive=str(broken), slab_bytes=500)
        assert [(problem.key, problem.array) for problem in problems] == [
            ("values/4.0", "values"),
            ("values/9.0", "values"),
        ]
        assert problems[0].message.startswith("chunk record 'values/4.0'") and str(broken) not in problems[0].message
        problem = verify_arrays(arrays, slab_bytes=500)[0]  # the archive not named: messages name it
        assert str(broken) in problem.message


@pytest.mark.parametrize("verify_checksums", [False, True])
def test_verify_archive_checks_every_checksum_whatever_the_archive_verifies(
    tmp_path: Path, verify_checksums: bool
) -> None:
    path = write_archive(tmp_path / "c.itar")
    key = next(k for k, v in RECORDS.items() if len(v) > 10)
    record = IndexedTarArchive(path).records[key]
    with path.open("r+b") as file:
        file.seek(record.offset + 5)
        byte = file.read(1)[0]
        file.seek(record.offset + 5)
        file.write(bytes([byte ^ 0x40]))
    archive = IndexedTarArchive(path, verify_checksums=verify_checksums)
    report = verify_archive(archive)
    assert not report.ok
    assert [(problem.key, "CRC32C" in problem.message) for problem in report.problems] == [(key, True)]


@pytest.mark.parametrize("bad", ["../evil", "/etc/evil", "a/./b"])
def test_verify_reports_keys_no_writer_makes(tmp_path: Path, bad: str) -> None:
    """A crafted index may name a record ``../evil``: readers serve it, ``extract`` refuses it,
    and ``verify`` says what is wrong with it."""
    path = tmp_path / "a.itar"
    with IndexedTarArchive(path, mode="w", checksums=False) as archive:
        archive["good"] = b"1"
        archive["renamed"] = b"2"

    def rename(keys: list[str], offsets: list[int], sizes: list[int]) -> None:
        keys[keys.index("renamed")] = bad

    rewrite_index(path, rename)
    report = verify_archive(IndexedTarArchive(path))
    problems = [(problem.key, problem.message) for problem in report.problems]
    # (the tar header still names it "renamed": reported too)
    assert any(key == bad and "no writer makes such a key" in message for key, message in problems), problems
