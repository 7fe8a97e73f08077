"""Integrity and crash safety: checksums written and verified, the index checked at open,
atomic publish, flush and recovery of unfinished archives."""

from __future__ import annotations

import asyncio
import itertools
import lzma
import os
import random
import re
import shlex
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import crc32c
import numpy as np
import pytest
from upath import UPath

from ncore_like import (
    ArchiveExistsError,
    ArchiveFormatError,
    BloscCompression,
    ChecksumError,
    ConsolidatedMetadataError,
    IndexedTarArchive,
    IndexedTarZarrStore,
    InvalidKeyError,
    UnfinishedArchiveError,
    recover,
)
from ncore_like.archive import _checksum
from ncore_like.archive._checksum import checksum, hardware_checksums, implementation
from ncore_like.archive._format import BLOCK_SIZE
from ncore_like.cli import main as cli_main
from tests.support.archives import die, rewrite_index
from tests.support.fixtures import HttpRoot


def records() -> dict[str, bytes]:
    rng = random.Random(11)
    data = {f"frames/{i:03d}": rng.randbytes(rng.randrange(0, 3000)) for i in range(20)}
    data["long/" + "k" * 120] = b"pax header"
    data["unicode/kamera_vorn_üß"] = "ü".encode()
    data["big"] = rng.randbytes(1_300_000)  # outside the default tail read
    data["last"] = b"in the tail"
    return data


def write(path: Path, data: dict[str, bytes], **options: object) -> None:
    with IndexedTarArchive(path, mode="w", **options) as archive:  # type: ignore[arg-type]
        for key, value in data.items():
            archive[key] = value


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        byte = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([byte ^ 0x10]))


# -- checksums written -----------------------------------------------------------------------


def test_checksums_are_crc32c_whatever_the_size_alignment_or_continuation() -> None:
    # The crc32c package is the reference; the package used may fold the data in wide
    # vector registers, whose paths depend on the size and the alignment.
    rng = np.random.default_rng(5)
    for size in (0, 1, 7, 8, 15, 16, 63, 64, 255, 256, 257, 4095, 4096, 65_537, 1 << 20, (1 << 20) + 13):
        data = rng.bytes(size + 1)
        assert checksum(data[1:]) == crc32c.crc32c(data[1:]), size
        assert checksum(memoryview(data)[1:]) == crc32c.crc32c(data[1:]), size
        assert checksum(bytearray(data)) == crc32c.crc32c(data), size
        cut = size // 3
        assert checksum(data[cut:], checksum(data[:cut])) == crc32c.crc32c(data), size
    assert checksum(bytes(32)) == 0x8A9136AA  # RFC 3720, B.4


def test_a_checksum_package_that_misses_known_answers_or_is_missing_is_not_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert implementation() == "crc32c-rs" and hardware_checksums()  # installed, and it works here
    broken = types.ModuleType("crc32c_rs")
    broken.crc32c = lambda data, value=0: 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "crc32c_rs", broken)
    name, function = _checksum._pick()
    assert name == "crc32c" and function(b"123456789", 0) == 0xE3069283  # the check value of CRC-32C
    monkeypatch.setitem(sys.modules, "crc32c_rs", None)  # not installed
    assert _checksum._pick()[0] == "crc32c"


def test_every_record_carries_its_crc32c_in_the_record_table_and_its_tar_header(tmp_path: Path) -> None:
    from ncore_like.archive._table import decode_table, unpack_table_pointer

    data = records()
    write(tmp_path / "a.itar", data)
    archive = IndexedTarArchive(tmp_path / "a.itar")
    assert archive.has_checksums
    raw = (tmp_path / "a.itar").read_bytes()
    header_offset, index_size = archive.index_record or (0, 0)
    index = __import__("cbor2").loads(lzma.decompress(raw[header_offset:][:index_size]))
    assert sorted(index) == ["items", "offset_datas", "sizes"]  # the CRC32C list lives in the table
    pointer = unpack_table_pointer(raw, header_offset)
    assert pointer is not None
    table = decode_table(raw[pointer.offset : pointer.offset + pointer.size], pointer, "a.itar")
    expected = {key: crc32c.crc32c(value) for key, value in data.items()}
    assert table.checksums is not None
    assert dict(zip(table.keys, table.checksums, strict=True)) == expected
    assert (table.keys, table.offsets, table.sizes) == (index["items"], index["offset_datas"], index["sizes"])
    for key, record in archive.records.items():
        block = raw[record.offset - BLOCK_SIZE : record.offset]
        assert block[500:512] == b"CRC%08x\0" % expected[key], key
    # tar itself sees the same members, names and sizes (it ignores those bytes).
    with tarfile.open(tmp_path / "a.itar") as tar:
        members = {member.name: (member.offset_data, member.size) for member in tar.getmembers()}
    assert members == {key: (record.offset, record.size) for key, record in archive.records.items()}


def test_archives_without_checksums_still_read(tmp_path: Path) -> None:
    data = records()
    write(tmp_path / "plain.itar", data, checksums=False)
    archive = IndexedTarArchive(tmp_path / "plain.itar", verify_checksums=True)
    assert not archive.has_checksums and not archive.verify_checksums
    assert {key: archive[key] for key in data} == data


# -- checksums verified ----------------------------------------------------------------------


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    data = records()
    write(tmp_path / "d.itar", data)
    archive = IndexedTarArchive(tmp_path / "d.itar")
    for key in ("frames/003", "big", "last"):
        flip(tmp_path / "d.itar", archive.records[key].offset + archive.records[key].size // 2)
    return tmp_path / "d.itar", data


@pytest.mark.parametrize("tail", [None, 1 << 20])
def test_verified_reads_never_hand_out_damaged_bytes(damaged: tuple[Path, dict[str, bytes]], tail: int | None) -> None:
    path, data = damaged
    archive = IndexedTarArchive(path, index_tail_read_size=tail, verify_checksums=True)
    assert archive.verify_checksums
    for key in ("frames/003", "big", "last"):  # "last" is served from the tail read when there is one
        offset = archive.records[key].offset
        with pytest.raises(
            ChecksumError, match=rf"record {key!r} at offset {offset} doesn't match its CRC32C"
        ) as raised:
            archive.read(key)
        assert (raised.value.archive, raised.value.key, raised.value.offset) == (str(path), key, offset)
        assert isinstance(raised.value, ValueError)
        with pytest.raises(ChecksumError):
            asyncio.run(archive.read_async(key))
        with pytest.raises(ChecksumError):
            archive.read_range(key, 0, 10)
        with pytest.raises(ChecksumError):
            asyncio.run(archive.read_range_async(key, 0, 10))
        buffer = bytearray(b"\xff" * archive.records[key].size)
        with pytest.raises(ChecksumError):
            archive.read_into(key, memoryview(buffer))
        # The damaged bytes never reach the caller's buffer: untouched, or zeroed.
        assert buffer in (bytearray(b"\xff" * len(buffer)), bytearray(len(buffer)))
    for key in data.keys() - {"frames/003", "big", "last"}:
        assert archive[key] == data[key]


def test_local_reads_verify_by_default_and_opting_out_returns_the_stored_bytes(
    damaged: tuple[Path, dict[str, bytes]],
) -> None:
    path, data = damaged
    assert IndexedTarArchive(path).verify_checksums  # the default, local archives included
    with pytest.raises(ChecksumError, match="'big'"):
        IndexedTarArchive(path)["big"]
    archive = IndexedTarArchive(path, verify_checksums=False)
    assert not archive.verify_checksums
    assert archive["big"] != data["big"] and len(archive["big"]) == len(data["big"])


def test_remote_reads_verify_by_default(http_root: HttpRoot) -> None:
    data = records()
    write(http_root.directory / "d.itar", data)
    local = IndexedTarArchive(http_root.directory / "d.itar")
    flip(http_root.directory / "d.itar", local.records["big"].offset + 7)
    for range_reads in (False, True):
        remote = IndexedTarArchive(UPath(f"{http_root.base_url}/d.itar"), remote_range_reads=range_reads)
        assert remote.is_remote and remote.verify_checksums
        with pytest.raises(ChecksumError, match="'big'"):
            remote.read("big")
        with pytest.raises(ChecksumError):
            asyncio.run(remote.read_async("big"))
        assert remote["frames/001"] == data["frames/001"]


@pytest.mark.parametrize("compression", [None, BloscCompression()])
def test_array_reads_check_their_chunks(tmp_path: Path, compression: BloscCompression | None) -> None:
    values = np.arange(4096, dtype=np.float32).reshape(64, 64)
    with IndexedTarZarrStore(tmp_path / "z.itar", mode="w") as store:
        root = store.create_root_group({})
        root.create_array("v", values, chunks=(16, 64), compression=compression)
        root.create_bytes_array("blob", bytes(range(256)) * 8)
        store.consolidate()
    archive = IndexedTarArchive(tmp_path / "z.itar")
    flip(tmp_path / "z.itar", archive.records["v/2.0"].offset + 3)
    flip(tmp_path / "z.itar", archive.records["blob/0"].offset + 3)
    root = IndexedTarZarrStore(tmp_path / "z.itar", verify_checksums=True).open_root_group()
    array = root.array("v")
    np.testing.assert_array_equal(array.read(np.s_[:32]), values[:32])
    for read in (lambda: array.read(), lambda: array.read(out=np.empty_like(values)), lambda: array.read(np.s_[40])):
        with pytest.raises(ChecksumError, match="'v/2.0'"):
            read()
    with pytest.raises(ChecksumError, match="'blob/0'"):
        root.array("blob").read_bytes()
    with pytest.raises(ChecksumError):
        asyncio.run(array.read_async())


# -- the index is checked at open ------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda o, s: s.__setitem__(1, -5), "entry 'b' .* has a negative size"),
        (lambda o, s: o.__setitem__(1, o[1] + 1), "entry 'b' .* not block-aligned"),
        (lambda o, s: o.__setitem__(1, 0), "entry 'b' .*before the first header"),
        (lambda o, s: s.__setitem__(0, 600), "entry 'a' .* overlaps the next one, entry 'b'"),
        (lambda o, s: o.__setitem__(1, o[0]), "entry 'a' .* overlaps the next one, entry 'b'"),
        (lambda o, s: s.__setitem__(2, 10**6), "entry 'c' .* past the index"),
    ],
)
def test_index_entries_outside_the_tar_data_are_refused_at_open(tmp_path: Path, change: object, message: str) -> None:
    write(tmp_path / "i.itar", {"a": b"x" * 100, "b": b"y" * 700, "c": b"z"})
    keys = IndexedTarArchive(tmp_path / "i.itar").keys()
    rewrite_index(tmp_path / "i.itar", lambda _, offsets, sizes: change(offsets, sizes))  # type: ignore[operator]
    with pytest.raises(ArchiveFormatError, match=message) as raised:
        IndexedTarArchive(tmp_path / "i.itar")
    assert raised.value.key in keys


def test_an_entry_running_into_the_index_is_refused_at_open(tmp_path: Path) -> None:
    # Its offset and size are each below the index offset; only their sum runs into it.
    write(tmp_path / "i.itar", {"a": b"x" * 100, "b": b"y" * 700, "c": b"z"})
    index = IndexedTarArchive(tmp_path / "i.itar").index_record
    assert index is not None

    def grow_c(keys: list[str], offsets: list[int], sizes: list[int]) -> None:
        sizes[2] = index.offset - offsets[2] + 1
        assert offsets[2] < index.offset and sizes[2] < index.offset

    rewrite_index(tmp_path / "i.itar", grow_c)
    with pytest.raises(ArchiveFormatError, match=rf"entry 'c' .* past the index at offset {index.offset}") as raised:
        IndexedTarArchive(tmp_path / "i.itar")
    assert raised.value.key == "c"


def test_a_file_truncated_after_opening_makes_read_into_raise(tmp_path: Path) -> None:
    data = {"a": b"a" * 2000, "big": os.urandom(2_000_000), "z": b"z"}
    write(tmp_path / "t.itar", data)
    archive = IndexedTarArchive(tmp_path / "t.itar", index_tail_read_size=None)
    os.truncate(tmp_path / "t.itar", archive.records["big"].offset + 1000)
    buffer = memoryview(bytearray(len(data["big"])))
    with pytest.raises(ArchiveFormatError, match="truncated archive"):
        archive.read_into("big", buffer)


def test_the_consolidated_record_must_be_an_xz_stream(tmp_path: Path) -> None:
    import cbor2

    from ncore_like.store import CONSOLIDATED_KEY_V2

    table = {"zarr_consolidated_format": 1, "metadata": {".zgroup": {"zarr_format": 2}}}
    alone = lzma.compress(cbor2.dumps(table), format=lzma.FORMAT_ALONE)  # lzma reads it when asked to guess
    assert lzma.decompress(alone) == cbor2.dumps(table)
    with IndexedTarArchive(tmp_path / "c.itar", mode="w") as archive:
        archive[".zgroup"] = b'{"zarr_format": 2}'
        archive[CONSOLIDATED_KEY_V2] = alone
    with pytest.raises(ConsolidatedMetadataError, match="is no xz stream"):
        IndexedTarZarrStore(tmp_path / "c.itar").open_root_group()


@pytest.mark.parametrize("key", ["a\\b", "..\\up", "c:\\x"])
def test_keys_with_backslashes_are_refused(tmp_path: Path, key: str) -> None:
    with IndexedTarArchive(tmp_path / "k.itar", mode="w") as archive, pytest.raises(InvalidKeyError, match="backslash"):
        archive[key] = b"x"


# -- atomic publish --------------------------------------------------------------------------


def test_an_archive_appears_at_its_name_only_when_closed(tmp_path: Path) -> None:
    path = tmp_path / "p.itar"
    archive = IndexedTarArchive(path, mode="w")
    archive["a"] = b"1"
    archive.flush()
    assert not path.exists() and (tmp_path / "p.itar.partial").exists()
    archive.close()
    assert path.exists() and not (tmp_path / "p.itar.partial").exists()
    assert IndexedTarArchive(path)["a"] == b"1"


def test_a_failed_with_block_publishes_nothing_and_keeps_the_old_archive(tmp_path: Path) -> None:
    path = tmp_path / "p.itar"
    write(path, {"old": b"old"})
    before = path.read_bytes()
    with pytest.raises(RuntimeError, match="camera died"), IndexedTarArchive(path, mode="w") as archive:
        archive["new"] = b"new"
        raise RuntimeError("camera died")
    assert path.read_bytes() == before
    # The records written are on disk in the partial file, for recovery.
    assert (tmp_path / "p.itar.partial").exists()
    with pytest.raises(UnfinishedArchiveError, match="recover") as unfinished_error:
        IndexedTarArchive(path, mode="w")
    # Recovering in place would replace the intact archive: refused, naming both files.
    with pytest.raises(ArchiveExistsError) as refused:
        recover(path)
    assert str(path) in str(refused.value) and f"{path}.partial" in str(refused.value)
    assert isinstance(refused.value, FileExistsError) and path.read_bytes() == before
    # The command the writer's error suggests is safe as printed: it recovers beside it.
    command = re.search(r"`ncore-like (recover [^`]+)`", str(unfinished_error.value))
    assert command is not None, unfinished_error.value
    assert cli_main(shlex.split(command.group(1))) == 0
    assert path.read_bytes() == before
    assert IndexedTarArchive(tmp_path / "p.recovered.itar")["new"] == b"new"
    assert not (tmp_path / "p.itar.partial").exists()


# One record, and records enough for the index to compress on its own thread while the
# records are synced (before the tail is written: the last sync must still follow it).
@pytest.mark.parametrize("count", [1, 3000])
def test_publishing_syncs_the_file_before_the_rename_and_the_folder_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    # A rename that reaches the disk before the file's bytes would publish an archive whose
    # records may be zeros after a power cut.
    calls: list[tuple[str, str]] = []
    real_fsync, real_replace, real_pwritev = os.fsync, os.replace, os.pwritev

    def fsync(fd: int) -> None:
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(source: str, target: str) -> None:
        calls.append(("replace", os.fspath(source)))
        real_replace(source, target)

    def pwritev(fd: int, buffers: list[memoryview], offset: int) -> int:
        calls.append(("write", os.readlink(f"/proc/self/fd/{fd}")))
        return real_pwritev(fd, buffers, offset)

    archive = IndexedTarArchive(tmp_path / "p.itar", mode="w")
    for index in range(count):
        archive[f"r/{index}"] = b"1"
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "pwritev", pwritev)
    archive.close()
    partial = str(tmp_path / "p.itar.partial")
    assert calls[-4:] == [("write", partial), ("fsync", partial), ("replace", partial), ("fsync", str(tmp_path))]
    assert set(calls[:-4]) <= {("write", partial), ("fsync", partial)}, calls
    assert IndexedTarArchive(tmp_path / "p.itar")[f"r/{count - 1}"] == b"1"


@pytest.mark.parametrize("durable", [True, False])
def test_flush_and_close_sync_only_durable_writers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable: bool
) -> None:
    # durable=False (scratch conversions) skips every fsync; the archive is whole either way.
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    path = tmp_path / "d.itar"
    with IndexedTarZarrStore(path, mode="w", durable=durable) as store:
        store.archive["a"] = b"1"
        store.flush()  # the small record leaves the write buffer: readable in the partial file
        assert (tmp_path / "d.itar.partial").read_bytes()[512:513] == b"1"
        store.archive["b"] = b"2" * 3000
        assert store.archive["b"] == b"2" * 3000  # served from the write buffer
    partial = str(tmp_path / "d.itar.partial")
    assert synced == ([partial, partial, str(tmp_path)] if durable else []), synced
    archive = IndexedTarArchive(path, verify_checksums=True)
    assert (archive["a"], archive["b"]) == (b"1", b"2" * 3000)


@pytest.mark.parametrize("durable", [True, False])
def test_durable_writers_start_writing_back_what_they_wrote_as_they_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable: bool
) -> None:
    # A durable writer asks the kernel to start writing its pages to disk every few MB (the
    # fsync at close then waits for the last ones only): the ranges follow each other from
    # the file's start, without gaps; a writer that isn't durable asks nothing.
    from ncore_like.archive import _writer

    started: list[tuple[int, int]] = []
    real = _writer._writeback

    def writeback(fd: int, offset: int, count: int) -> None:
        assert os.readlink(f"/proc/self/fd/{fd}") == str(tmp_path / "w.itar.partial")
        started.append((offset, count))
        real(fd, offset, count)

    monkeypatch.setattr(_writer, "_writeback", writeback)
    rng = np.random.default_rng(5)
    records = {f"r/{n}": rng.bytes(int(size)) for n, size in enumerate(rng.integers(1, 3 << 20, size=24))}
    with IndexedTarArchive(tmp_path / "w.itar", mode="w", durable=durable) as archive:
        for key, value in records.items():
            archive[key] = value
    if not durable:
        assert started == []
        return
    total = sum(map(len, records.values()))
    assert len(started) >= total // (2 * _writer._WRITEBACK_BYTES), started
    assert started[0][0] == 0 and all(count >= _writer._WRITEBACK_BYTES for _, count in started)
    assert all(offset + count == after for (offset, count), (after, _) in itertools.pairwise(started))
    assert started[-1][0] + started[-1][1] <= (tmp_path / "w.itar").stat().st_size
    reread = IndexedTarArchive(tmp_path / "w.itar")
    assert all(reread[key] == value for key, value in records.items())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_the_write_back_is_asked_on_a_thread_of_its_own_with_a_descriptor_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sync_file_range blocks while the device's queue is full: the writing thread must never
    # wait for it, and the archive's descriptor may be closed before the request is served.
    import threading
    import time

    from ncore_like.archive import _writer

    served: list[tuple[str, int, str]] = []
    started = threading.Event()
    release = threading.Event()

    def blocking(fd: int, offset: int, count: int) -> int:
        started.set()
        release.wait(30)  # a congested device
        served.append((threading.current_thread().name, fd, os.readlink(f"/proc/self/fd/{fd}")))
        return 0

    monkeypatch.setattr(_writer, "_writeback_function", (blocking,))
    monkeypatch.setattr(_writer, "_writeback_requests", None)  # a thread serving `blocking`
    path = tmp_path / "t.itar"
    archive = IndexedTarArchive(path, mode="w")
    archive["big"] = bytes(3 * _writer._WRITEBACK_BYTES)
    assert started.wait(30)
    archive["more"] = bytes(3 * _writer._WRITEBACK_BYTES)  # doesn't wait for the first request
    archive.close()  # nor does closing
    release.set()
    deadline = time.monotonic() + 30
    while len(served) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [name for name, _, _ in served] == ["ncore_like-writeback"] * 2
    # Each a duplicate of the archive's descriptor, still open after the archive closed
    # (and published: the file has its final name by then).
    assert all(target == str(path) for _, _, target in served), served
    assert IndexedTarArchive(path)["more"] == bytes(3 * _writer._WRITEBACK_BYTES)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_the_writeback_call_is_the_kernels(tmp_path: Path) -> None:
    from ncore_like.archive._writer import _find_writeback

    function = _find_writeback()
    assert function is not None
    with open(tmp_path / "f", "wb") as file:
        file.write(b"x" * 100_000)
        file.flush()
        assert function(file.fileno(), 0, 100_000) == 0
    assert function(-1, 0, 1) == -1  # a bad descriptor: the kernel's error, nothing raised


def test_abort_discards_the_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "p.itar"
    archive = IndexedTarArchive(path, mode="w")
    archive["a"] = b"1"
    archive.abort()
    assert not path.exists() and not (tmp_path / "p.itar.partial").exists()
    archive.close()  # harmless after abort


def test_a_failed_store_block_publishes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.itar"
    with pytest.raises(KeyError), IndexedTarZarrStore(path, mode="w") as store:
        store.create_root_group({}).create_array("a", np.arange(3))
        raise KeyError("source missing")
    assert not path.exists() and (tmp_path / "s.itar.partial").exists()


# -- flush and recovery ----------------------------------------------------------------------


def test_metadata_rewritten_after_a_flush_reads_in_its_last_version(tmp_path: Path) -> None:
    path = tmp_path / "m.itar"
    with IndexedTarArchive(path, mode="w") as archive:
        archive[".zattrs"] = b'{"v": 1}'
        archive["chunk"] = b"c"
        archive.flush()
        archive[".zattrs"] = b'{"v": 2}'
        assert archive[".zattrs"] == b'{"v": 2}' and archive.keys().count(".zattrs") == 1
    reread = IndexedTarArchive(path)
    assert reread.keys().count(".zattrs") == 1 and reread[".zattrs"] == b'{"v": 2}'
    out = tmp_path / "x"
    out.mkdir()
    subprocess.run(["tar", "-xf", str(path), "-C", str(out)], check=True)  # the later member wins
    assert (out / ".zattrs").read_bytes() == b'{"v": 2}'


def unfinished(path: Path, data: dict[str, bytes]) -> IndexedTarArchive:
    """An archive being written with ``data`` flushed, whose writer then "dies" (it is never
    closed: its partial file stays)."""
    archive = IndexedTarArchive(path, mode="w")
    for key, value in data.items():
        archive[key] = value
    archive.flush()
    die(archive)
    return archive


def test_recover_finishes_the_partial_file_in_place(tmp_path: Path) -> None:
    from ncore_like.archive._format import member_header

    path, data = tmp_path / "r.itar", records()
    unfinished(path, data)
    partial = tmp_path / "r.itar.partial"
    size = partial.stat().st_size
    with open(partial, "ab") as file:  # a torn record: a header and part of its payload
        file.write(member_header("torn", 5000, 0) + b"t" * 1000)
    report = recover(tmp_path / "r.itar.partial")  # the partial file may be named too
    assert report.records == len(data) and report.end == size and report.dropped_bytes == BLOCK_SIZE + 1000
    assert not report.damaged and not report.unverified and "torn" in (report.stop or "")
    recovered = IndexedTarArchive(path, verify_checksums=True)
    assert {key: recovered[key] for key in recovered.keys()} == data
    assert not partial.exists()
    # GNU tar lists the recovered archive as the records (the torn member is gone).
    listing = subprocess.run(["tar", "-tf", str(path)], check=True, capture_output=True, text=True).stdout
    assert listing.splitlines() == list(data)


@pytest.mark.parametrize("elsewhere", [False, True])
def test_recover_drops_damaged_records_and_keeps_the_source(tmp_path: Path, elsewhere: bool) -> None:
    path, data = tmp_path / "r.itar", records()
    archive = unfinished(path, data)
    flip(tmp_path / "r.itar.partial", archive.records["frames/004"].offset + 1)
    target = tmp_path / "copy.itar" if elsewhere else path
    report = recover(path, target if elsewhere else None)
    assert report.damaged == ["frames/004"] and report.records == len(data) - 1
    recovered = IndexedTarArchive(target, verify_checksums=True)
    assert {key: recovered[key] for key in recovered.keys()} == {k: v for k, v in data.items() if k != "frames/004"}
    # The file with the damaged record is never deleted by recovery.
    source = tmp_path / ("r.itar.partial" if elsewhere else "r.itar.partial.damaged")
    assert source.exists() and report.source == str(source)


def member_offsets(path: Path) -> dict[str, int]:
    """Where each record's first tar header block is (pax headers included)."""
    from ncore_like.archive._verify import TarMember, scan_tar

    with open(path, "rb") as file:
        return {item.name: item.offset for item in scan_tar(file) if isinstance(item, TarMember)}


LONG_KEY = "long/" + "k" * 120


@pytest.mark.parametrize("elsewhere", [False, True])
@pytest.mark.parametrize("lost", ["frames/000", "frames/010", LONG_KEY, "unicode/kamera_vorn_üß"])
def test_recover_goes_on_after_an_unreadable_tar_header(tmp_path: Path, lost: str, elsewhere: bool) -> None:
    """Damage to a tar header in the middle of the file is not its torn end: every intact
    record after it is kept; only the damaged one is lost (a record after the damage whose
    key the ustar field may hold cut short is not kept under that other key), and the
    unfinished file is kept."""
    path, data = tmp_path / "r.itar", records()
    unfinished(path, data)
    partial = tmp_path / "r.itar.partial"
    flip(partial, member_offsets(partial)[lost] + 100)  # the mode field: the tar checksum fails
    target = tmp_path / "copy.itar" if elsewhere else path
    report = recover(path, target if elsewhere else None)
    assert report.skipped and all("offset" in what for what in report.skipped)
    assert not report.damaged and report.records == len(data) - 1
    recovered = IndexedTarArchive(target, verify_checksums=True)
    assert {key: recovered[key] for key in recovered.keys()} == {k: v for k, v in data.items() if k != lost}
    source = tmp_path / ("r.itar.partial" if elsewhere else "r.itar.partial.damaged")
    assert source.exists() and report.source == str(source)


def test_recover_says_what_damage_it_skipped_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, data = tmp_path / "r.itar", records()
    unfinished(path, data)
    partial = tmp_path / "r.itar.partial"
    flip(partial, member_offsets(partial)["frames/005"] + 100)
    assert cli_main(["recover", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{len(data) - 1} records" in out and "skipped damage: unreadable tar header at offset" in out
    assert (tmp_path / "r.itar.partial.damaged").exists() and path.exists()


def test_recover_refuses_a_file_that_holds_no_archive_and_leaves_it(tmp_path: Path) -> None:
    partial = tmp_path / "x.itar.partial"
    content = random.Random(5).randbytes(100_000)
    partial.write_bytes(content)
    with pytest.raises(ArchiveFormatError, match=r"x\.itar\.partial.*not the unfinished file of an archive"):
        recover(tmp_path / "x.itar")
    assert partial.read_bytes() == content and not (tmp_path / "x.itar").exists()


def test_recover_of_a_file_cut_in_the_last_records_padding_drops_nothing(tmp_path: Path) -> None:
    finished, data = tmp_path / "a.itar", {"x": b"1" * 1000, "y": b"2" * 1000}
    write(finished, data)
    end_of_y = BLOCK_SIZE + 1024 + BLOCK_SIZE + 1000  # two headers, x padded, y unpadded
    (tmp_path / "b.itar.partial").write_bytes(finished.read_bytes()[:end_of_y])
    report = recover(tmp_path / "b.itar")
    assert report.records == 2 and report.dropped_bytes == 0 and not report.skipped
    recovered = IndexedTarArchive(tmp_path / "b.itar", verify_checksums=True)
    assert {key: recovered[key] for key in recovered.keys()} == data


def test_recover_publishes_even_if_the_copied_partial_file_cant_be_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ncore_like.archive._recover as recover_module

    path, data = tmp_path / "r.itar", records()
    unfinished(path, data)

    source, unlink = str(tmp_path / "r.itar.partial"), os.unlink

    def refuse(name: str) -> None:  # as a read-only folder refuses it
        if str(name) == source:
            raise PermissionError(13, "Permission denied", name)
        unlink(name)

    monkeypatch.setattr(recover_module.os, "unlink", refuse)
    report = recover(path, tmp_path / "copy.itar")
    assert any("was not removed (Permission denied)" in note for note in report.notes)
    recovered = IndexedTarArchive(tmp_path / "copy.itar", verify_checksums=True)
    assert {key: recovered[key] for key in recovered.keys()} == data


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_recover_writes_no_consolidated_metadata_for_a_hierarchy_missing_a_parent_group(
    tmp_path: Path, zarr_format: int
) -> None:
    from ncore_like.store import CONSOLIDATED_KEY_V2, CONSOLIDATED_KEY_V3

    complete = tmp_path / "complete.itar"
    with IndexedTarZarrStore(complete, mode="w") as store:
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        root.create_group("a").create_array("b", np.arange(10), chunks=(5,))
    group_records = {"a/.zgroup", "a/.zattrs"} if zarr_format == 2 else {"a/zarr.json"}
    source = IndexedTarArchive(complete)
    assert group_records <= set(source.keys())
    # The writer died with every record of the hierarchy flushed but the metadata of group "a".
    path = tmp_path / "r.itar"
    unfinished(path, {key: source[key] for key in source.keys() if key not in group_records})
    report = recover(path)
    assert any("no group metadata for 'a', parent of 'a/b'" in note for note in report.notes), report.notes
    recovered = IndexedTarArchive(path)
    assert CONSOLIDATED_KEY_V2 not in recovered and CONSOLIDATED_KEY_V3 not in recovered
    assert set(recovered.keys()) == set(source.keys()) - group_records  # every record kept


def test_recover_keeps_a_last_record_that_ends_exactly_at_the_end_of_the_file(tmp_path: Path) -> None:
    # A payload of a multiple of 512 bytes has no padding: the flushed file ends at its last byte.
    path, data = tmp_path / "r.itar", {"a": b"a" * 100, "last": os.urandom(4 * BLOCK_SIZE)}
    archive = unfinished(path, data)
    assert (tmp_path / "r.itar.partial").stat().st_size == archive.records["last"].offset + 4 * BLOCK_SIZE
    report = recover(path)
    assert report.records == 2 and report.dropped_bytes == 0
    recovered = IndexedTarArchive(path, verify_checksums=True)
    assert {key: recovered[key] for key in recovered.keys()} == data


def test_recovery_decisions_are_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from ncore_like.archive._format import member_header

    path, data = tmp_path / "r.itar", records()
    archive = unfinished(path, data)
    flip(tmp_path / "r.itar.partial", archive.records["frames/004"].offset + 1)
    with open(tmp_path / "r.itar.partial", "ab") as file:  # a torn record
        file.write(member_header("torn", 5000, 0) + b"t" * 1000)
    caplog.set_level(logging.INFO, logger="ncore_like")
    recover(path)
    logged = [(record.name, record.levelno, record.getMessage()) for record in caplog.records]
    archive_layer = [entry for entry in logged if entry[0] == "ncore_like.archive.recover"]
    assert any(
        level == logging.WARNING and "'frames/004'" in message and "dropped" in message
        for _, level, message in archive_layer
    ), logged
    kept = f"{len(data) - 1} records kept"
    assert any(kept in message and "1 damaged" in message and "torn" in message for _, _, message in archive_layer)
    assert any("copied to" in message for _, _, message in archive_layer)
    assert any(name == "ncore_like.store.recover" and "no zarr root group" in message for name, _, message in logged), (
        logged
    )


def test_recover_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no unfinished archive"):
        recover(tmp_path / "none.itar")
    write(tmp_path / "done.itar", {"a": b"1"})
    with pytest.raises(FileNotFoundError, match="needs no recovery"):
        recover(tmp_path / "done.itar")
    with pytest.raises(ValueError, match="only local archives"):
        recover("s3://bucket/x.itar")


@pytest.mark.parametrize("verify", [False, True])
def test_read_range_clips_to_the_payload_whether_verified_or_not(tmp_path: Path, verify: bool) -> None:
    write(tmp_path / "r.itar", {"k": b"0123456789", "big": os.urandom(2_000_000)})
    archive = IndexedTarArchive(tmp_path / "r.itar", index_tail_read_size=None, verify_checksums=verify)
    cases = [((2, 5), b"234"), ((-3, 5), b"01234"), ((-3, 100), b"0123456789"), ((8, 3), b""), ((20, 30), b"")]
    for (start, stop), expected in cases:
        assert archive.read_range("k", start, stop) == expected, (start, stop)
        assert asyncio.run(archive.read_range_async("k", start, stop)) == expected, (start, stop)
    with IndexedTarArchive(tmp_path / "w.itar", mode="w") as writer:
        writer["k"] = b"0123456789"
        assert writer.read_range("k", -3, 5) == b"01234"


def test_recover_of_a_finished_archive_says_what_it_dropped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A finished archive renamed to its partial name: its index and tail follow the tar
    end-of-archive blocks, which is no unfinished record."""
    write(tmp_path / "a.itar", {"x": b"1" * 1000})
    (tmp_path / "a.itar").rename(tmp_path / "b.itar.partial")
    assert cli_main(["recover", str(tmp_path / "b.itar")]) == 0
    out = capsys.readouterr().out
    assert "(what follows the tar end-of-archive blocks)" in out and "unfinished record" not in out


def test_recover_never_takes_records_from_inside_a_torn_payload(tmp_path: Path) -> None:
    """A torn last record whose payload is an archive of its own (a backup kept as a blob):
    its tar headers are no records of this archive, and can't replace flushed ones."""
    write(tmp_path / "old.itar", {"x/0": b"OLD" * 100, "pad": random.Random(1).randbytes(600_000)})
    path, flushed = tmp_path / "new.itar", {"x/0": b"NEW" * 100}
    unfinished(path, flushed)
    partial = tmp_path / "new.itar.partial"
    with open(partial, "ab") as file:  # the blob's header, then part of the embedded archive
        from ncore_like.archive._format import member_header

        embedded = (tmp_path / "old.itar").read_bytes()
        file.write(member_header("backup/previous.itar", len(embedded), checksum(embedded)) + embedded[:200_000])
    report = recover(path)
    recovered = IndexedTarArchive(path, verify_checksums=True)
    assert recovered.keys() == ["x/0"] and recovered["x/0"] == flushed["x/0"]
    assert report.records == 1 and not report.skipped and "backup/previous.itar" in (report.stop or "")


def test_recover_keeps_the_first_of_two_records_of_one_key_that_isnt_node_metadata(tmp_path: Path) -> None:
    """Only node metadata is written again after a flush; a second chunk record of a key is
    no writer's (damage, or a payload's headers): the first stays, and the loss is told."""
    from ncore_like.archive._format import member_header

    path = tmp_path / "r.itar"
    unfinished(path, {"x/0": b"first", ".zattrs": b'{"v": 1}'})
    with open(tmp_path / "r.itar.partial", "ab") as file:
        for key, value in (("x/0", b"second"), (".zattrs", b'{"v": 2}')):
            file.write(member_header(key, len(value), checksum(value)) + value + bytes(-len(value) % BLOCK_SIZE))
    report = recover(path)
    recovered = IndexedTarArchive(tmp_path / "r.itar", verify_checksums=True)
    assert recovered["x/0"] == b"first" and recovered[".zattrs"] == b'{"v": 2}'
    assert report.superseded == 1 and any("a second record 'x/0'" in what for what in report.skipped)
