"""IndexedTarArchive on local files: format fixtures, round trips, errors, concurrency."""

from __future__ import annotations

import asyncio
import hashlib
import json
import lzma
import multiprocessing
import os
import pickle
import random
import shutil
import struct
import subprocess
import tarfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cbor2
import pytest

from ncore_like import (
    ArchiveClosedError,
    ArchiveFormatError,
    IndexedTarArchive,
    InvalidKeyError,
    ReadOnlyError,
    Record,
    RecordExistsError,
    clear_caches,
)
from ncore_like.archive._format import BLOCK_SIZE
from tests.support.archives import FOREIGN_MESSAGES, foreign_files

FIXTURES = Path(__file__).parent / "fixtures" / "ncore-19.8.3"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
TAIL_SIZES = [None, 1, 512, 513, 1024, 1 << 20]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sample_records() -> dict[str, bytes]:
    rng = random.Random(7)
    records = {f"chunks/{i}": rng.randbytes(rng.randrange(0, 5000)) for i in range(40)}
    records["empty"] = b""
    records["exactly/one/block"] = rng.randbytes(512)
    records["k" * 150] = b"long key"
    records["unicode/kamera_vorn_üß/光"] = "ü光".encode()
    records["big"] = rng.randbytes(1_500_000)  # larger than the default tail read
    records["after/big"] = b"tail"
    return records


def write_archive(path: Path, records: dict[str, bytes], metadata: dict[str, bytes] | None = None) -> None:
    with IndexedTarArchive(path, mode="w") as archive:
        for key, value in records.items():
            archive[key] = value
        for key, value in (metadata or {}).items():
            archive[key] = value


# -- the golden archives of nvidia-ncore 19.8.3 -------------------------------------------


@pytest.mark.parametrize("tail", TAIL_SIZES)
@pytest.mark.parametrize("name", sorted(MANIFEST["archives"]))
def test_golden_archives_read_exactly_as_the_manifest_says(name: str, tail: int | None) -> None:
    expected = MANIFEST["archives"][name]["records"]
    with IndexedTarArchive(FIXTURES / name, index_tail_read_size=tail) as archive:
        assert sorted(archive.keys()) == sorted(expected)
        assert len(archive) == len(expected)
        for key, record in expected.items():
            assert archive.records[key] == Record(record["offset"], record["size"])
            assert sha256(archive[key]) == record["sha256"], key


def test_golden_archive_keys_are_in_archive_order() -> None:
    expected = MANIFEST["archives"]["raw-records.itar"]["records"]
    archive = IndexedTarArchive(FIXTURES / "raw-records.itar")
    assert archive.keys() == sorted(expected, key=lambda key: expected[key]["offset"])


# -- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("tail", TAIL_SIZES)
def test_round_trip_with_every_tail_read_size(tmp_path: Path, tail: int | None) -> None:
    records = sample_records()
    write_archive(tmp_path / "a.itar", records)
    with IndexedTarArchive(tmp_path / "a.itar", index_tail_read_size=tail) as archive:
        assert archive.keys() == list(records)
        assert {key: archive[key] for key in archive} == records


def test_written_archive_is_a_tar_that_gnu_tar_lists_and_extracts(tmp_path: Path) -> None:
    records = sample_records()
    metadata = {".zgroup": b'{"zarr_format": 2}', "sub/.zattrs": b"{}"}
    write_archive(tmp_path / "a.itar", records, metadata)
    listing = subprocess.run(["tar", "-tf", str(tmp_path / "a.itar")], check=True, capture_output=True)
    assert listing.stdout.decode().splitlines() == list(records) + list(metadata)
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["tar", "-xf", str(tmp_path / "a.itar"), "-C", str(out)], check=True)
    for key, value in {**records, **metadata}.items():
        assert (out / key).read_bytes() == value
    # Python's tarfile agrees on every payload offset.
    archive = IndexedTarArchive(tmp_path / "a.itar")
    with tarfile.open(tmp_path / "a.itar") as tar:
        offsets = {member.name: member.offset_data for member in tar.getmembers()}
    assert offsets == {key: archive.records[key].offset for key in archive}


def test_archives_dropped_without_close_give_their_descriptors_back(tmp_path: Path) -> None:
    """``IndexedTarZarrStore(path).open_root_group().array("a").read()`` in a loop must not run
    out of file descriptors: a collected reader closes its file."""
    import gc

    import numpy as np

    from ncore_like import IndexedTarZarrStore

    with IndexedTarZarrStore(tmp_path / "a.itar", mode="w") as store:
        store.create_root_group({}).create_array("a", np.arange(10))
        store.consolidate()

    def descriptors() -> int:
        gc.collect()
        return len(os.listdir("/proc/self/fd"))

    before = descriptors()
    for _ in range(50):
        np.testing.assert_array_equal(
            IndexedTarZarrStore(tmp_path / "a.itar").open_root_group().array("a").read(), np.arange(10)
        )
        IndexedTarArchive(tmp_path / "a.itar")["a/0"]  # the archive alone too
    assert descriptors() <= before + 2  # (a few may be the test machinery's)
    kept = IndexedTarArchive(tmp_path / "a.itar")  # a live reader keeps its file
    assert kept.keys() and descriptors() >= before


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_named_pipe_or_a_device_is_refused_without_waiting(tmp_path: Path, kind: str) -> None:
    """Opening a FIFO for reading would wait for a writer forever; a device is no archive
    either (``/dev/zero`` read as an empty file)."""
    if kind == "fifo":
        path = tmp_path / "f.itar"
        os.mkfifo(path)
        what = r"a named pipe \(FIFO\)"
    else:
        path, what = Path("/dev/zero"), "a character device"
    with pytest.raises(OSError, match=f"is {what}, not an indexed tar archive") as raised:
        IndexedTarArchive(path)
    assert raised.value.filename == str(path)


def test_opening_an_archive_whose_writer_never_finished_names_the_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "s.itar"
    writer = IndexedTarArchive(path, mode="w")
    writer["x"] = b"1"
    writer.flush()  # never closed: only s.itar.partial exists
    with pytest.raises(FileNotFoundError, match=r"s\.itar\.partial is beside it.*ncore-like recover") as raised:
        IndexedTarArchive(path)
    assert raised.value.filename == str(path)
    writer.abort()
    with pytest.raises(FileNotFoundError) as plain:
        IndexedTarArchive(path)
    assert "partial" not in str(plain.value)


def test_empty_archive_round_trip(tmp_path: Path) -> None:
    IndexedTarArchive(tmp_path / "e.itar", mode="w").close()
    archive = IndexedTarArchive(tmp_path / "e.itar")
    assert len(archive) == 0 and archive.keys() == [] and dict(archive.records) == {}
    assert (tmp_path / "e.itar").stat().st_size == (FIXTURES / "empty.itar").stat().st_size


def test_node_metadata_records_are_rewritable_and_appended_at_close(tmp_path: Path) -> None:
    path = tmp_path / "m.itar"
    with IndexedTarArchive(path, mode="w") as archive:
        archive[".zgroup"] = b"first"
        archive["a/0"] = b"chunk"
        archive[".zgroup"] = b'{"zarr_format": 2}'
        assert archive[".zgroup"] == b'{"zarr_format": 2}'
        assert ".zgroup" in archive and ".zgroup" not in archive.records
        assert archive.keys() == ["a/0", ".zgroup"]
        assert len(archive) == 2
    archive = IndexedTarArchive(path)
    assert archive.keys() == ["a/0", ".zgroup"]
    assert archive[".zgroup"] == b'{"zarr_format": 2}'
    assert archive.records[".zgroup"].offset > archive.records["a/0"].offset


def test_records_items_agree_with_lookups_in_archive_order(tmp_path: Path) -> None:
    # items() reads the table's lists in one pass (ncore-like ls --long): it must pair each
    # key with its own record, skip superseded versions and give Python ints (JSON output).
    path = tmp_path / "i.itar"

    def by_lookup(archive: IndexedTarArchive) -> list[tuple[str, Record]]:
        return [(key, archive.records[key]) for key in archive.keys() if key in archive.records]

    with IndexedTarArchive(path, mode="w") as archive:
        archive[".zgroup"] = b"first"
        for index in range(300):
            archive[f"a/{index}"] = bytes(index % 7)
        archive.flush()  # .zgroup is written, then superseded below
        archive[".zgroup"] = b'{"zarr_format": 2}'
        archive.flush()
        archive["b/0"] = b"last"
        assert list(archive.records.items()) == by_lookup(archive)
        # Iterating the view follows the same order as items() and keys() (a Mapping's promise).
        assert list(archive.records) == [key for key, _ in archive.records.items()] == archive.keys()
    for _ in range(2):  # a first open (the decoded table) and a cached one
        archive = IndexedTarArchive(path)
        items = list(archive.records.items())
        assert [key for key, _ in items] == archive.keys() and len(items) == 302
        assert items == by_lookup(archive)
        assert all(type(record.offset) is int and type(record.size) is int for _, record in items)
        archive.close()


def test_chunk_records_are_write_once(tmp_path: Path) -> None:
    path = tmp_path / "w.itar"
    with IndexedTarArchive(path, mode="w") as archive:
        archive["a/0"] = b"one"
        with pytest.raises(RecordExistsError) as raised:
            archive["a/0"] = b"two"
        assert raised.value.key == "a/0"
        assert isinstance(raised.value, ValueError)
        assert str(path) in str(raised.value)
        assert archive["a/0"] == b"one"
    assert IndexedTarArchive(path).keys() == ["a/0"]
    assert IndexedTarArchive(path)["a/0"] == b"one"


def test_record_exists_error_pickles_with_its_key() -> None:
    error = pickle.loads(pickle.dumps(RecordExistsError("k", "msg")))
    assert (error.key, str(error)) == ("k", "msg")
    assert RecordExistsError("k").key == "k"


def test_writes_accept_any_contiguous_buffer(tmp_path: Path) -> None:
    import numpy as np

    data = np.arange(1000, dtype=np.float32)
    with IndexedTarArchive(tmp_path / "b.itar", mode="w") as archive:
        archive["array"] = memoryview(data)
        archive["bytearray"] = bytearray(b"abc")
        with pytest.raises(ValueError, match="contiguous"):
            archive["strided"] = memoryview(data)[::2]
        with pytest.raises(TypeError, match="bytes-like"):
            archive["text"] = "text"  # type: ignore[assignment]
    archive = IndexedTarArchive(tmp_path / "b.itar")
    assert archive["array"] == data.tobytes() and archive["bytearray"] == b"abc"
    assert "strided" not in archive


def test_local_writer_reads_back_its_records_while_writing(tmp_path: Path) -> None:
    with IndexedTarArchive(tmp_path / "r.itar", mode="w") as archive:
        archive["a"] = b"payload"
        archive["empty"] = b""
        assert archive["a"] == b"payload" and archive["empty"] == b""
        assert archive.records["a"] == Record(512, 7)
        with pytest.raises(KeyError):
            archive["missing"]


def test_properties(tmp_path: Path) -> None:
    write_archive(tmp_path / "p.itar", {"a": b"1"})
    archive = IndexedTarArchive(str(tmp_path / "p.itar"), remote_range_reads=True)
    assert archive.mode == "r" and not archive.is_remote and archive.remote_range_reads
    assert archive.itar_upath.path == str(tmp_path / "p.itar")
    with pytest.raises(TypeError):
        archive.records["b"] = Record(0, 0)  # type: ignore[index]
    os.chdir(tmp_path)
    assert IndexedTarArchive("p.itar").itar_upath.path == str(tmp_path / "p.itar")


# -- memory: the tail read and its retention ----------------------------------------------


def test_records_in_the_tail_read_need_no_io(tmp_path: Path) -> None:
    records = sample_records()
    write_archive(tmp_path / "t.itar", records, {".zgroup": b"{}"})
    archive = IndexedTarArchive(tmp_path / "t.itar")
    archive.close()
    # After close only records held in memory can be read: those after "big" lie in the tail.
    assert archive[".zgroup"] == b"{}" and archive["after/big"] == b"tail"
    assert archive["empty"] == b""
    with pytest.raises(ArchiveClosedError, match=r"t\.itar: archive is closed"):
        archive["chunks/0"]


@pytest.mark.parametrize(
    ("retention", "consolidated", "small_kept", "large_kept"),
    [
        ("keep", False, True, True),
        ("keep", True, True, True),
        ("release_after_opening", False, False, False),
        ("release_if_consolidated", True, False, False),
        ("release_if_consolidated", False, True, True),
        ("keep_complete_archives", True, True, False),
    ],
)
def test_release_index_tail(
    tmp_path: Path, retention: str, consolidated: bool, small_kept: bool, large_kept: bool
) -> None:
    write_archive(tmp_path / "small.itar", {"a": b"1"}, {".zgroup": b"{}"})
    write_archive(tmp_path / "large.itar", {"big": bytes(2 << 20)}, {".zgroup": b"{}"})
    for name, kept in (("small.itar", small_kept), ("large.itar", large_kept)):
        archive = IndexedTarArchive(tmp_path / name)
        archive.release_index_tail(retention, consolidated=consolidated)  # type: ignore[arg-type]
        assert archive[".zgroup"] == b"{}"  # still readable while open
        archive.close()
        if kept:
            assert archive[".zgroup"] == b"{}"
        else:
            with pytest.raises(ArchiveClosedError):
                archive[".zgroup"]


def test_release_index_tail_rejects_unknown_retention_and_ignores_writers(tmp_path: Path) -> None:
    with IndexedTarArchive(tmp_path / "w.itar", mode="w") as archive:
        archive.release_index_tail("release_after_opening", consolidated=True)
        with pytest.raises(ValueError, match="unknown index tail retention"):
            archive.release_index_tail("forget", consolidated=True)  # type: ignore[arg-type]


# -- errors --------------------------------------------------------------------------------


def corrupt_copy(tmp_path: Path, mutate: Callable[[bytearray], bytes | bytearray]) -> Path:
    data = bytearray((FIXTURES / "raw-records.itar").read_bytes())
    path = tmp_path / "corrupt.itar"
    path.write_bytes(bytes(mutate(data)))
    return path


def replace_index(data: bytearray, table: object, index_type: int = 1) -> bytearray:
    _, _, offset, _ = struct.unpack_from("<4sIQI", data, len(data) - 512)
    index = lzma.compress(cbor2.dumps(table), format=lzma.FORMAT_XZ)
    padded = index + bytes(-len(index) % 512)
    header = struct.pack("<4sIQI", b"itar", index_type, offset, len(index))
    return data[:offset] + padded + header + bytes(512 - len(header))


@pytest.mark.parametrize("tail", [None, 1 << 20])
@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda data: b"", "empty file"),
        (lambda data: data[:-1000], "not an indexed tar archive"),
        (lambda data: data[:-512], "not an indexed tar archive"),
        (lambda data: data[:100], "too short|not an indexed tar"),
        (lambda data: data[:-512] + b"xtar" + data[-508:], "magic b'xtar'"),
        (lambda data: data[:-508] + struct.pack("<I", 2) + data[-504:], "unknown index type 2"),
        (lambda data: data[:-1000] + bytes(100) + data[-900:], "corrupt record index"),
        (
            lambda data: data[:-504] + struct.pack("<Q", 1 << 40) + data[-496:],
            "extends past the end",
        ),
        (
            lambda data: replace_index(data, {"items": ["a"], "offset_datas": [1 << 30], "sizes": [1]}),
            "past the index",
        ),
    ],
)
def test_bad_files_raise_clear_errors(
    tmp_path: Path, mutate: Callable[[bytearray], bytes], message: str, tail: int | None
) -> None:
    path = corrupt_copy(tmp_path, mutate)
    with pytest.raises(ArchiveFormatError, match=message) as raised:
        IndexedTarArchive(path, index_tail_read_size=tail)
    assert str(path) in str(raised.value)


@pytest.mark.parametrize("tail", [None, 1 << 20])
def test_foreign_files_say_what_they_are(tmp_path: Path, tail: int | None) -> None:
    for kind, path in foreign_files(tmp_path).items():
        with pytest.raises(ArchiveFormatError, match=FOREIGN_MESSAGES[kind]) as raised:
            IndexedTarArchive(path, index_tail_read_size=tail)
        assert raised.value.archive == str(path) and "truncated" not in str(raised.value)
        with pytest.raises(ArchiveFormatError, match=FOREIGN_MESSAGES[kind]):
            asyncio.run(IndexedTarArchive.open_async(path, index_tail_read_size=tail))
    # An archive cut short inside its records stays "truncated, or not closed".
    archive = tmp_path / "cut.itar"
    with IndexedTarArchive(archive, "w") as writer:
        writer["a"] = b"x" * 5000
        writer["b"] = bytes(5000)
    cut = tmp_path / "cut-short.itar"
    cut.write_bytes(archive.read_bytes()[:7000])
    with pytest.raises(ArchiveFormatError, match="truncated, or not closed when it was written"):
        IndexedTarArchive(cut)


def test_missing_path_and_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing.itar"):
        IndexedTarArchive(tmp_path / "missing.itar")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        IndexedTarArchive(tmp_path)
    with pytest.raises(FileNotFoundError):
        IndexedTarArchive(tmp_path / "no" / "such" / "dir.itar", mode="w")
    with pytest.raises(IsADirectoryError):
        IndexedTarArchive(tmp_path, mode="w")


def test_invalid_mode(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid mode 'a'"):
        IndexedTarArchive(tmp_path / "x.itar", mode="a")  # type: ignore[arg-type]
    assert not (tmp_path / "x.itar").exists()


@pytest.mark.parametrize("key", ["", "/etc/passwd", "a/../../b", "..", "nul\0byte", "a//b"])
def test_invalid_keys_are_rejected_and_nothing_is_written(tmp_path: Path, key: str) -> None:
    with IndexedTarArchive(tmp_path / "k.itar", mode="w") as archive:
        with pytest.raises(InvalidKeyError, match=str(tmp_path / "k.itar")):
            archive[key] = b"x"
    assert IndexedTarArchive(tmp_path / "k.itar").keys() == []


def test_writing_to_an_archive_opened_for_reading(tmp_path: Path) -> None:
    write_archive(tmp_path / "r.itar", {"a": b"1"})
    before = (tmp_path / "r.itar").read_bytes()
    archive = IndexedTarArchive(tmp_path / "r.itar")
    with pytest.raises(ReadOnlyError, match="opened for reading"):
        archive["b"] = b"2"
    assert isinstance(ReadOnlyError(), ValueError)
    assert (tmp_path / "r.itar").read_bytes() == before


def test_closed_archives(tmp_path: Path) -> None:
    archive = IndexedTarArchive(tmp_path / "c.itar", mode="w")
    archive["a"] = b"1"
    archive.close()
    archive.close()  # harmless
    with pytest.raises(ArchiveClosedError, match="closed"):
        archive["b"] = b"2"
    with pytest.raises(ArchiveClosedError):
        archive["a"]
    assert IndexedTarArchive(tmp_path / "c.itar").keys() == ["a"]


def test_missing_key(tmp_path: Path) -> None:
    write_archive(tmp_path / "m.itar", {"a": b"1"})
    with pytest.raises(KeyError, match="no record 'b' in .*m.itar"):
        IndexedTarArchive(tmp_path / "m.itar")["b"]


@pytest.mark.parametrize("verify", [True, False])  # without checksums, the read's length tells
def test_records_past_the_end_of_a_truncated_file(tmp_path: Path, verify: bool) -> None:
    # The index is intact but the file lost bytes before it: reads must fail, not return
    # short or wrong data. Simulate by truncating the payload region in place.
    records = {"a": b"x" * 4000, "b": b"y" * 10}
    write_archive(tmp_path / "t.itar", records)
    archive = IndexedTarArchive(tmp_path / "t.itar", index_tail_read_size=None, verify_checksums=verify)
    with open(tmp_path / "t.itar", "r+b") as file:
        file.truncate(1000)
    with pytest.raises(ArchiveFormatError, match="truncated archive"):
        archive["a"]


# -- async ---------------------------------------------------------------------------------


async def test_read_async_and_open_async_local(tmp_path: Path) -> None:
    records = sample_records()
    write_archive(tmp_path / "a.itar", records, {".zmetadata.cbor.xz": b"meta"})
    archive = await IndexedTarArchive.open_async(
        tmp_path / "a.itar", index_tail_read_size=None, prefetch_keys=("big", ".zmetadata.cbor.xz", "nope")
    )
    assert set(archive._impl._prefetched) == {"big", ".zmetadata.cbor.xz"}
    values = await asyncio.gather(*(archive.read_async(key) for key in records))
    assert dict(zip(records, values, strict=True)) == records
    assert "big" not in archive._impl._prefetched  # held only until read once
    with pytest.raises(KeyError):
        await archive.read_async("nope")


async def test_open_async_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        await IndexedTarArchive.open_async(tmp_path / "missing.itar")
    (tmp_path / "bad.itar").write_bytes(bytes(4096))
    with pytest.raises(ArchiveFormatError, match="bad.itar"):
        await IndexedTarArchive.open_async(tmp_path / "bad.itar")


# -- threads and processes -----------------------------------------------------------------


def test_many_threads_read_random_records(tmp_path: Path) -> None:
    records = sample_records()
    write_archive(tmp_path / "a.itar", records)
    archive = IndexedTarArchive(tmp_path / "a.itar")
    keys = list(records)

    def reader(seed: int) -> int:
        rng = random.Random(seed)
        for _ in range(300):
            key = rng.choice(keys)
            assert archive[key] == records[key]
        return 300

    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(reader, range(8))) == 2400


def test_many_threads_write_distinct_records(tmp_path: Path) -> None:
    records = {f"t{thread}/{i}": os.urandom(700 + i) for thread in range(8) for i in range(50)}
    with IndexedTarArchive(tmp_path / "w.itar", mode="w") as archive, ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda item: archive.__setitem__(*item), records.items()))
    archive = IndexedTarArchive(tmp_path / "w.itar")
    assert {key: archive[key] for key in archive} == records


def test_pickled_reader_needs_no_io_and_reads(tmp_path: Path) -> None:
    records = sample_records()
    write_archive(tmp_path / "a.itar", records)
    archive = IndexedTarArchive(tmp_path / "a.itar")
    clone = pickle.loads(pickle.dumps(archive))
    assert clone._impl._source is None  # opened lazily, on the first read that needs I/O
    assert clone.keys() == archive.keys() and clone["big"] == records["big"]
    with IndexedTarArchive(tmp_path / "w.itar", mode="w") as writer:
        with pytest.raises(TypeError, match="can't be pickled"):
            pickle.dumps(writer)


def _read_in_child(archive: IndexedTarArchive, key: str) -> str:
    return sha256(archive[key])


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_readers_work_in_child_processes(tmp_path: Path, method: str) -> None:
    records = sample_records()
    write_archive(tmp_path / "a.itar", records)
    archive = IndexedTarArchive(tmp_path / "a.itar")
    archive["chunks/1"]  # use it in the parent first
    with multiprocessing.get_context(method).Pool(2) as pool:
        hashes = pool.starmap(_read_in_child, [(archive, key) for key in ("big", "chunks/3", "empty")])
    assert hashes == [sha256(records[key]) for key in ("big", "chunks/3", "empty")]


def test_writer_in_forked_child_needs_reload_resources(tmp_path: Path) -> None:
    path = tmp_path / "f.itar"
    archive = IndexedTarArchive(path, mode="w")
    archive["parent"] = b"p"
    pid = os.fork()
    if pid == 0:  # child: continue writing after reload_resources, then finish the archive
        code = 1
        try:
            try:
                archive["refused"] = b"x"
            except ValueError as error:
                if "reload_resources" in str(error):
                    archive.reload_resources()
                    archive["child"] = b"c"
                    archive.close()
                    code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    reread = IndexedTarArchive(path)
    assert reread.keys() == ["parent", "child"] and reread["child"] == b"c"


def test_copied_golden_fixture_is_unchanged(tmp_path: Path) -> None:
    # The committed fixtures are the ones of shared/fixtures: a missing one must fail here.
    for name in MANIFEST["archives"]:
        shutil.copy(FIXTURES / name, tmp_path / name)
        assert (tmp_path / name).stat().st_size > 0


def test_file_and_memory_urls(tmp_path: Path) -> None:
    import fsspec
    from upath import UPath

    records = {"a": b"1" * 3000, "b/c": b""}
    write_archive(tmp_path / "u.itar", records)
    by_url = IndexedTarArchive(f"file://{tmp_path / 'u.itar'}")
    assert not by_url.is_remote and {key: by_url[key] for key in records} == records
    assert by_url.itar_upath.path == str(tmp_path / "u.itar")
    memory = UPath("memory://archives/u.itar")
    write_archive(memory, records)
    assert fsspec.filesystem("memory").cat_file("/archives/u.itar") == (tmp_path / "u.itar").read_bytes()
    in_memory = IndexedTarArchive(memory, remote_range_reads=True)
    assert not in_memory.is_remote and {key: in_memory[key] for key in records} == records
    # Records outside a small tail read come through the buffered file object (a memory
    # file keeps no block cache) or as ranges, blocking or async.
    for range_reads in (False, True):
        small_tail = IndexedTarArchive(memory, index_tail_read_size=600, remote_range_reads=range_reads)
        assert not small_tail.in_memory("a") and small_tail["a"] == records["a"]
        assert asyncio.run(small_tail.read_async("a")) == records["a"]


# -- the process-wide cache of decoded indices ---------------------------------------------


def test_reopening_takes_the_decoded_index_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ncore_like.archive import _reading

    write_archive(tmp_path / "c.itar", sample_records())
    decoded: list[int] = []
    original = _reading.decode_index

    def counting(*args: object, **kwargs: object) -> object:
        decoded.append(1)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_reading, "decode_index", counting)
    first = IndexedTarArchive(tmp_path / "c.itar")
    second = IndexedTarArchive(tmp_path / "c.itar", index_tail_read_size=None)  # index read separately
    assert len(decoded) <= 1  # once at most (an earlier test may have opened the same bytes)
    assert second.keys() == first.keys() and second["big"] == sample_records()["big"]


def test_a_rewritten_archive_never_finds_a_stale_index(tmp_path: Path) -> None:
    path = tmp_path / "r.itar"
    write_archive(path, {"a": b"old", "b": b"x" * 600})
    assert IndexedTarArchive(path)["a"] == b"old"
    write_archive(path, {"b": b"y" * 600, "a": b"new!"})
    archive = IndexedTarArchive(path)
    assert archive.keys() == ["b", "a"] and archive["a"] == b"new!"


def reads_of_local_opens(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the reads local sources make from now on (the real reads, recorded;
    the tail read is one of them)."""
    from ncore_like.archive._sources import LocalSource

    sizes: list[int] = []
    read = LocalSource.read

    def recording_read(self: LocalSource, offset: int, size: int) -> bytes:
        sizes.append(size)
        return read(self, offset, size)

    monkeypatch.setattr(LocalSource, "read", recording_read)
    return sizes


def test_a_repeat_open_of_an_unchanged_archive_reads_its_last_block_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "r.itar"
    records = {f"k/{i}": bytes([i % 251]) * (i * 37) for i in range(200)}
    write_archive(path, records)
    clear_caches()
    sizes = reads_of_local_opens(monkeypatch)
    IndexedTarArchive(path).close()
    assert sum(sizes) == path.stat().st_size  # a first open reads the tail (all of a small file)
    sizes.clear()
    with IndexedTarArchive(path) as archive:
        assert sizes == [BLOCK_SIZE]
        assert {key: archive[key] for key in archive.keys()} == records  # checked against the CRC32Cs


def test_a_repeat_open_after_a_rewrite_in_place_finds_the_new_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rewritten in place (same inode, same size) within one timestamp tick of a filesystem
    # with coarse timestamps (simulated: times in whole seconds, as on FAT or ext3): the last
    # block (the table's CRC32C) tells the archives apart.
    from ncore_like.archive._sources import LocalSource

    identity = LocalSource.identity

    def coarse(self: LocalSource) -> tuple[int, int, int, int, int]:
        dev, ino, size, _, _ = identity(self)
        return dev, ino, size, 0, 0

    monkeypatch.setattr(LocalSource, "identity", coarse)
    path, other = tmp_path / "r.itar", tmp_path / "other.itar"
    write_archive(path, {"a": b"old!", "b": b"x" * 600})
    write_archive(other, {"c": b"new!", "d": b"y" * 600})
    assert path.stat().st_size == other.stat().st_size
    assert IndexedTarArchive(path)["a"] == b"old!"
    inode = path.stat().st_ino
    with open(path, "r+b") as file:
        file.write(other.read_bytes())
    assert path.stat().st_ino == inode
    with IndexedTarArchive(path) as archive:
        assert archive.keys() == ["c", "d"] and archive["c"] == b"new!"


def test_index_cache_is_bounded_by_records() -> None:
    from ncore_like._lru import LRUCache
    from ncore_like.archive import _reading
    from ncore_like.archive._format import Index
    from ncore_like.archive._records import RecordTable

    def entry(count: int) -> RecordTable:
        keys = [f"k{i}" for i in range(count)]
        return RecordTable(Index(keys, list(range(count)), [1] * count))

    # The same cache type and weight as the archive's process-wide cache, with a small bound.
    cache: LRUCache[tuple[int, bytes], RecordTable] = LRUCache(12, weight=lambda table: len(table.keys))
    cache.put((0, b"one"), entry(6))
    cache.put((0, b"two"), entry(4))
    assert cache.get((0, b"one")) is not None and cache.get((1, b"one")) is None  # the offset is part of the key
    cache.put((0, b"three"), entry(5))  # evicts the least recently used: "two"
    assert cache.get((0, b"two")) is None and cache.get((0, b"one")) is not None
    assert cache.get((0, b"three")) is not None
    cache.put((0, b"huge"), entry(13))  # larger than the whole cache: not kept
    assert cache.get((0, b"huge")) is None
    # The archive's own cache weighs entries by their records.
    assert _reading._decoded_indices.max_weight == _reading.DECODED_INDEX_RECORDS


@pytest.mark.parametrize("verify", [True, False])
def test_reads_return_what_was_written_through_every_change_of_a_readers_state(tmp_path: Path, verify: bool) -> None:
    # Local reads of records outside memory take a short path set up from the reader's state
    # (descriptor, tail read, prefetched records, closing): each change must reach it.
    records = sample_records()
    write_archive(tmp_path / "a.itar", records, {".zmetadata.cbor.xz": b"meta"})

    def all_read(archive: IndexedTarArchive) -> None:
        for key, value in records.items():
            assert archive[key] == value and archive.read(key) == value
        with pytest.raises(KeyError, match="no record 'missing' in"):
            archive["missing"]

    archive = IndexedTarArchive(tmp_path / "a.itar", verify_checksums=verify)
    all_read(archive)
    archive.release_index_tail("release_after_opening", consolidated=True)  # the tail's records from the file
    all_read(archive)
    archive.reload_resources()  # another descriptor
    all_read(archive)
    clone = pickle.loads(pickle.dumps(archive))  # its source opened by the first read
    all_read(clone)
    for reader in (archive, clone):
        reader.close()
        for key in ("big", "chunks/3"):
            with pytest.raises(ArchiveClosedError, match="archive is closed"):
                reader[key]
        assert reader["empty"] == b""  # held in memory: still served
    opened = asyncio.run(IndexedTarArchive.open_async(tmp_path / "a.itar", prefetch_keys=["big", "chunks/3"]))
    with opened:
        all_read(opened)
        assert opened._impl._prefetched == {}  # each prefetched record served once, from memory
        all_read(opened)


def test_numbered_reads_are_what_reads_by_key_give(tmp_path: Path) -> None:
    # A writer holds node metadata back until it flushes: numbered reads see it as read() does.
    keys = ["g/.zattrs", "g/x/0.0", "g/x/1.0", "missing"]
    path = tmp_path / "n.itar"
    with IndexedTarArchive(path, "w") as archive:
        archive["g/.zattrs"] = b'{"a": 1}'
        archive["g/x/0.0"] = b"first"
        read = archive.numbered_reader(keys.__getitem__)
        assert [read(number) for number in range(4)] == [b'{"a": 1}', b"first", None, None]
        archive["g/x/1.0"] = b"second"
        assert read(2) == b"second" and read(2) == archive["g/x/1.0"]
    with IndexedTarArchive(path) as archive:
        read = archive.numbered_reader(keys.__getitem__)
        for _ in range(2):  # positions looked up, then kept
            assert [read(number) for number in range(4)] == [b'{"a": 1}', b"first", b"second", None]
