"""Checksums are verified by default on every read path, local archives included: a record
damaged on disk (4 bytes flipped in a frame, a lidar row, a compressed volume chunk) never
comes out of any entry point. Each raises ``ChecksumError`` naming the archive and the
record, whether the record lies in the tail read held in memory since the opening or
before it (two different read paths); ``verify_checksums=False`` opts out wherever the
other options are taken; archives without checksums (nvidia-ncore's) still read."""

from __future__ import annotations

import asyncio
import io
import pickle
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from upath import UPath

from ncore_like import ArchiveCollection, BloscCompression, IndexedTarArchive, IndexedTarZarrStore
from ncore_like._defaults import TAIL_READ_SIZE
from ncore_like.archive import map_records, read_records, scan_records
from ncore_like.cli import main
from ncore_like.errors import ChecksumError
from tests.support.fixtures import HttpRoot
from tests.support.servers import ServerProcess

FRAMES = 8
FRAME_BYTES = 70_000
LIDAR = np.random.default_rng(1).standard_normal((12, 1000, 4)).astype(np.float32)
VOLUME = np.random.default_rng(2).standard_normal((8, 64, 64)).astype(np.float32)
FRAME_VALUES = [np.random.default_rng(10 + n).bytes(FRAME_BYTES) for n in range(FRAMES)]
#: The damaged records: a frame (a blob), a lidar row (one raw row chunk), a volume chunk.
FRAME_KEY, LIDAR_KEY, VOLUME_KEY = "cameras/front/00003/0", "lidar/points/5.0.0", "volume/1.0.0"
DAMAGED = (FRAME_KEY, LIDAR_KEY, VOLUME_KEY)
LAYOUTS = ("in the tail read", "before the tail read")


@dataclass
class Damaged:
    """An archive with the records of :data:`DAMAGED` damaged."""

    path: Path
    layout: str

    @property
    def name(self) -> str:
        return str(self.path)


def write_sequence(path: Path, *, padding: bool, checksums: bool = True) -> None:
    """Frames, lidar rows (one raw chunk a row) and a Blosc volume; with ``padding``, a blob
    of 1.2 MB written last pushes them out of the tail read."""
    with IndexedTarZarrStore(path, mode="w", checksums=checksums) as store:
        root = store.create_root_group({"sequence": 1})
        front = root.create_group("cameras/front")
        for number, frame in enumerate(FRAME_VALUES):
            front.create_bytes_array(f"{number:05d}", frame)
        root.create_array("lidar/points", LIDAR, chunks=(1, 1000, 4), compression=None)
        root.create_array("volume", VOLUME, chunks=(2, 64, 64), compression=BloscCompression())
        if padding:
            root.create_bytes_array("padding", bytes(1_200_000))
        store.consolidate()


def damage(path: Path, key: str) -> None:
    """Flips 4 bytes in the middle of the record's payload."""
    record = IndexedTarArchive(path, verify_checksums=False).records[key]
    with path.open("r+b") as file:
        file.seek(record.offset + record.size // 2)
        original = file.read(4)
        file.seek(record.offset + record.size // 2)
        file.write(bytes(byte ^ 0x5A for byte in original))


@pytest.fixture(params=LAYOUTS)
def damaged(request: pytest.FixtureRequest, tmp_path: Path) -> Damaged:
    path = tmp_path / "seq.itar"
    write_sequence(path, padding=request.param == "before the tail read")
    archive = IndexedTarArchive(path, verify_checksums=False)
    tail_start = archive.file_size - TAIL_READ_SIZE
    for key in DAMAGED:
        record = archive.records[key]
        in_tail = record.offset >= tail_start
        assert in_tail is (request.param == "in the tail read"), key
        assert archive.in_memory(key) is in_tail
        damage(path, key)
    return Damaged(path, request.param)


def assert_names(error: pytest.ExceptionInfo[ChecksumError], archive: str, key: str) -> None:
    """The error names the archive and the record, in its attributes and its message."""
    assert (error.value.archive, error.value.key) == (archive, key)
    assert str(error.value).startswith(f"{archive}: record {key!r} at offset {error.value.offset}")
    assert "doesn't match its CRC32C" in str(error.value)


def raises_for(archive: str, key: str, call: Callable[[], Any]) -> None:
    with pytest.raises(ChecksumError) as raised:
        call()
    assert_names(raised, archive, key)


# -- the archive -----------------------------------------------------------------------------


def check_archive(archive: IndexedTarArchive, name: str) -> None:
    """Every way of reading a record raises for the damaged records, and the others read."""
    assert archive.verify_checksums
    for key in DAMAGED:
        size = archive.records[key].size
        raises_for(name, key, lambda key=key: archive.read(key))
        raises_for(name, key, lambda key=key: archive[key])
        raises_for(name, key, lambda key=key: archive.read_range(key, 0, 10))
        raises_for(name, key, lambda key=key: asyncio.run(archive.read_async(key)))
        raises_for(name, key, lambda key=key: asyncio.run(archive.read_range_async(key, 5, 50)))
        buffer = bytearray(b"\xee" * size)
        raises_for(name, key, lambda key=key, buffer=buffer: archive.read_into(key, memoryview(buffer)))
        assert buffer in (bytearray(b"\xee" * size), bytearray(size))  # damaged bytes never reach it
    frame = "cameras/front/00004/0"
    assert archive[frame] == FRAME_VALUES[4]
    assert archive.read_range(frame, 10, 20) == FRAME_VALUES[4][10:20]
    assert asyncio.run(archive.read_async(frame)) == FRAME_VALUES[4]


def test_every_read_of_the_archive_raises_for_a_damaged_record(damaged: Damaged) -> None:
    with IndexedTarArchive(damaged.path) as archive:
        check_archive(archive, damaged.name)
    check_archive(pickle.loads(pickle.dumps(IndexedTarArchive(damaged.path))), damaged.name)
    check_archive(asyncio.run(IndexedTarArchive.open_async(damaged.path)), damaged.name)


def test_opting_out_hands_out_the_stored_bytes(damaged: Damaged) -> None:
    archive = IndexedTarArchive(damaged.path, verify_checksums=False)
    assert archive.has_checksums and not archive.verify_checksums
    stored = archive[FRAME_KEY]
    assert stored != FRAME_VALUES[3] and len(stored) == FRAME_BYTES
    root = IndexedTarZarrStore(damaged.path, verify_checksums=False).open_root_group()
    row = root.array("lidar/points").read(5)
    assert row.shape == LIDAR[5].shape and not np.array_equal(row, LIDAR[5], equal_nan=True)


# -- stores, the fast backend, zarr-python -----------------------------------------------------


def check_arrays(root: Any, name: str) -> None:
    frame, lidar, volume = root.array("cameras/front/00003"), root.array("lidar/points"), root.array("volume")
    raises_for(name, FRAME_KEY, frame.read_bytes)
    raises_for(name, FRAME_KEY, frame.read)
    raises_for(name, FRAME_KEY, lambda: asyncio.run(frame.read_bytes_async()))
    for read in (
        lambda: lidar.read(5),  # one row: the row reader
        lambda: lidar[5],
        lambda: lidar.read(),
        lambda: lidar.read(slice(4, 7)),
        lambda: lidar.read([1, 5, 7]),  # a batch by index list
        lambda: asyncio.run(lidar.read_async()),
        lambda: asyncio.run(lidar.read_async(5)),
    ):
        raises_for(name, LIDAR_KEY, read)
    out = np.full(LIDAR.shape, 7.0, np.float32)
    raises_for(name, LIDAR_KEY, lambda: lidar.read(out=out))
    assert np.all((out[5] == 7.0) | (out[5] == 0.0))  # never the damaged values
    raises_for(name, LIDAR_KEY, lambda: lidar.read(5, out=np.empty(LIDAR.shape[1:], np.float32)))
    for read in (
        lambda: volume.read(),
        lambda: volume.read(np.s_[2:4, 10:20]),
        lambda: volume.read(out=np.empty(VOLUME.shape, np.float32)),
        lambda: asyncio.run(volume.read_async()),
    ):
        raises_for(name, VOLUME_KEY, read)
    # The records around them read.
    assert root.array("cameras/front/00002").read_bytes() == FRAME_VALUES[2]
    np.testing.assert_array_equal(lidar.read(4), LIDAR[4])
    np.testing.assert_array_equal(lidar.read([0, 11]), LIDAR[[0, 11]])
    np.testing.assert_array_equal(volume.read(np.s_[4:8]), VOLUME[4:8])


def test_arrays_read_by_the_fast_backend_raise_for_a_damaged_chunk(damaged: Damaged) -> None:
    with IndexedTarZarrStore(damaged.path) as store:
        check_arrays(store.open_root_group(), damaged.name)
    store = asyncio.run(IndexedTarZarrStore.open_async(damaged.path))
    with store:
        check_arrays(store.open_root_group(), damaged.name)


def test_zarr_python_reading_through_the_store_raises_for_a_damaged_chunk(damaged: Damaged) -> None:
    store = IndexedTarZarrStore(damaged.path)
    lidar = zarr.open_array(store.zarr, path="lidar/points", mode="r")
    raises_for(damaged.name, LIDAR_KEY, lambda: lidar[5])
    np.testing.assert_array_equal(lidar[4], LIDAR[4])
    volume = zarr.open_array(store.zarr, path="volume", mode="r")
    raises_for(damaged.name, VOLUME_KEY, lambda: volume[...])
    frame = zarr.open_array(store.zarr, path="cameras/front/00003", mode="r")
    raises_for(damaged.name, FRAME_KEY, lambda: frame[...])


# -- scans, bulk reads, collections ------------------------------------------------------------


def test_scans_and_bulk_reads_raise_when_the_damaged_record_comes(damaged: Damaged) -> None:
    archive = IndexedTarArchive(damaged.path)
    records = archive.records
    in_order = sorted(archive.keys(), key=lambda key: records[key].offset)
    for key in DAMAGED:
        before = [other for other in in_order[: in_order.index(key)] if other not in DAMAGED]
        with closing(scan_records(archive, [*before, key])) as scan:
            assert [next(scan)[0] for _ in before] == before  # those come first
            raises_for(damaged.name, key, lambda scan=scan: next(scan))
        raises_for(damaged.name, key, lambda key=key: list(read_records(archive, ["volume/0.0.0", key])))
        raises_for(damaged.name, key, lambda key=key: list(map_records(archive, [key], archive.read)))
    raises_for(damaged.name, FRAME_KEY, lambda: list(scan_records(archive)))
    front = IndexedTarZarrStore(damaged.path).open_root_group().group("cameras/front")
    blobs = front.blobs()
    assert [next(blobs) for _ in range(3)] == [(f"{n:05d}", FRAME_VALUES[n]) for n in range(3)]
    raises_for(damaged.name, FRAME_KEY, lambda: next(blobs))


def test_a_collection_raises_for_a_damaged_record(damaged: Damaged) -> None:
    collection = pickle.loads(pickle.dumps(ArchiveCollection([str(damaged.path)])))
    raises_for(damaged.name, FRAME_KEY, lambda: collection.read(0, FRAME_KEY))
    raises_for(damaged.name, LIDAR_KEY, lambda: collection.read_array(0, "lidar/points", 5))
    raises_for(damaged.name, FRAME_KEY, lambda: collection.root(0).array("cameras/front/00003").read_bytes())
    assert collection.read(0, "cameras/front/00001/0") == FRAME_VALUES[1]
    unverified = ArchiveCollection([str(damaged.path)], verify_checksums=False)
    assert len(unverified.read(0, FRAME_KEY)) == FRAME_BYTES


# -- the command line ---------------------------------------------------------------------------


def test_cat_and_extract_refuse_a_damaged_record(
    damaged: Damaged, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    for what, key in ((FRAME_KEY, FRAME_KEY), ("cameras/front/00003", FRAME_KEY), ("lidar/points", LIDAR_KEY)):
        assert main(["cat", damaged.name, what]) == 1
        out, err = capsysbinary.readouterr()
        assert out == b"", what
        assert err.decode().startswith(f"ncore-like: error: {damaged.name}: record {key!r}"), err
        assert b"Traceback" not in err
    assert main(["cat", damaged.name, "cameras/front/00002"]) == 0
    assert capsysbinary.readouterr().out == FRAME_VALUES[2]
    folder = tmp_path / "out"
    assert main(["extract", "-q", damaged.name, "cameras", "-C", str(folder)]) == 1
    assert f"{damaged.name}: record {FRAME_KEY!r}".encode() in capsysbinary.readouterr().err
    assert not (folder / FRAME_KEY).exists()  # never written with the damaged bytes
    assert (folder / "cameras/front/00002/0").read_bytes() == FRAME_VALUES[2]


# -- xarray ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_xarray_engine_raises_for_a_damaged_chunk(tmp_path: Path, layout: str) -> None:
    xr = pytest.importorskip("xarray", reason="xarray is an optional extra")
    path = tmp_path / "xr.itar"
    dataset = xr.Dataset({"points": (("time", "point", "xyz"), LIDAR)})
    with IndexedTarZarrStore(path, mode="w") as store:
        dataset.to_zarr(store.zarr, zarr_format=2, consolidated=False, encoding={"points": {"chunks": (1, 1000, 4)}})
        if layout == "before the tail read":
            store.archive["padding"] = bytes(1_200_000)
        store.consolidate()
    key = "points/5.0.0"
    assert IndexedTarArchive(path).in_memory(key) is (layout == "in the tail read")
    damage(path, key)
    with xr.open_dataset(path, engine="ncore_like") as opened:
        raises_for(str(path), key, opened.load)
    with xr.open_dataset(path, engine="ncore_like") as opened:
        np.testing.assert_array_equal(opened["points"][4].values, LIDAR[4])
    with xr.open_dataset(path, engine="ncore_like", verify_checksums=False) as opened:
        assert opened["points"].values.shape == LIDAR.shape


# -- remote archives -----------------------------------------------------------------------------


@pytest.fixture
def remote_copies(damaged: Damaged, http_root: HttpRoot, s3_bucket: UPath) -> Iterator[list[Any]]:
    """The damaged archive on the HTTP server and on S3 (moto)."""
    shutil.copyfile(damaged.path, http_root.directory / "seq.itar")
    (s3_bucket / "seq.itar").write_bytes(damaged.path.read_bytes())
    yield [UPath(f"{http_root.base_url}/seq.itar"), s3_bucket / "seq.itar"]


def test_remote_reads_raise_for_a_damaged_record(remote_copies: list[UPath]) -> None:
    for location in remote_copies:
        for range_reads in (False, True):
            archive = IndexedTarArchive(location, remote_range_reads=range_reads)
            name = archive.location.name  # the URL
            assert archive.is_remote and name.endswith("/seq.itar") and "://" in name
            check_archive(archive, name)
            store = IndexedTarZarrStore(location, remote_range_reads=range_reads)
            check_arrays(store.open_root_group(), name)
            for key in DAMAGED:
                raises_for(name, key, lambda key=key, archive=archive: list(scan_records(archive, [key])))
                raises_for(name, key, lambda key=key, archive=archive: list(read_records(archive, [key])))
        options = dict(location.storage_options)
        collection = pickle.loads(pickle.dumps(ArchiveCollection([name], storage_options=options or None)))
        raises_for(name, FRAME_KEY, lambda collection=collection: collection.read(0, FRAME_KEY))
        raises_for(name, LIDAR_KEY, lambda collection=collection: collection.read_array(0, "lidar/points", 5))


def test_cat_of_a_remote_damaged_record(remote_copies: list[UPath], capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    url = str(remote_copies[0])  # over HTTP
    assert main(["cat", url, FRAME_KEY]) == 1
    out, err = capsysbinary.readouterr()
    assert out == b"" and err.decode().startswith(f"ncore-like: error: {url}: record {FRAME_KEY!r}")


# -- archives without checksums -----------------------------------------------------------------


def test_archives_without_checksums_read_with_the_default_settings(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    path = tmp_path / "plain.itar"
    write_sequence(path, padding=False, checksums=False)
    archive = IndexedTarArchive(path)
    assert not archive.has_checksums and not archive.verify_checksums
    assert archive[FRAME_KEY] == FRAME_VALUES[3]
    root = IndexedTarZarrStore(path).open_root_group()
    np.testing.assert_array_equal(root.array("volume").read(), VOLUME)
    reference = Path(__file__).parent / "fixtures" / "ncore-19.8.3" / "sequence-v2-consolidated.itar"
    written_by_nvidia = IndexedTarArchive(reference)
    assert not written_by_nvidia.has_checksums and not written_by_nvidia.verify_checksums
    assert all(isinstance(payload, bytes) for _, payload in read_records(written_by_nvidia, written_by_nvidia.keys()))
    assert main(["cat", str(path), "volume"]) == 0
    np.testing.assert_array_equal(np.load(io.BytesIO(capsysbinary.readouterr().out)), VOLUME)


def test_a_record_read_by_ranges_is_checked_whole_once_then_read_by_range(
    s3_bucket: UPath, s3_proxy: ServerProcess
) -> None:
    # What zarr-python does with a shard: its index, then chunk after chunk, as byte ranges.
    location = s3_bucket / "shards.itar"
    payload = np.random.default_rng(3).bytes(300_000)
    with IndexedTarArchive(location, mode="w") as written:
        written["shard"] = payload
    archive = IndexedTarArchive(location, remote_range_reads=True, index_tail_read_size=None)
    record = archive.records["shard"]

    def ranges_read() -> list[str]:
        deadline = time.monotonic() + 2
        while not s3_proxy.requests() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        logged = [request["range"] for request in s3_proxy.requests() if request["method"] == "GET"]
        s3_proxy.clear_requests()
        return logged

    s3_proxy.clear_requests()
    assert archive.read_range("shard", 299_000, 300_000) == payload[299_000:]
    assert ranges_read() == [f"bytes={record.offset}-{record.offset + record.size - 1}"]  # checked whole
    assert archive.read_range("shard", 1000, 2000) == payload[1000:2000]
    assert ranges_read() == [f"bytes={record.offset + 1000}-{record.offset + 1999}"]  # then just the range
    assert asyncio.run(archive.read_range_async("shard", 5, 10)) == payload[5:10]
    assert ranges_read() == [f"bytes={record.offset + 5}-{record.offset + 9}"]
