"""Sequential scans: records read in order as large spans of adjacent records (one request
each remotely), handed out in order, checked against their checksums; and a camera's
frames read the same way through the typed API."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from ncore_like import ChecksumError, IndexedTarArchive, IndexedTarZarrStore, ZarrStoreAdapter
from ncore_like.archive import scan_records
from tests.support.fixtures import HttpRoot


def write(path: Path, count: int, seed: int = 0) -> dict[str, bytes]:
    rng = random.Random(seed)
    payloads = {f"frames/{index:05d}": rng.randbytes(rng.randrange(0, 300_000)) for index in range(count)}
    with IndexedTarArchive(path, "w") as archive:
        for key, payload in payloads.items():
            archive[key] = payload
    return payloads


def test_a_scan_gives_every_record_in_order(tmp_path: Path) -> None:
    payloads = write(tmp_path / "a.itar", 120)
    archive = IndexedTarArchive(tmp_path / "a.itar")
    assert list(scan_records(archive)) == [(key, payloads[key]) for key in payloads]  # file order
    chosen = ["frames/00007", "frames/00003", "frames/00004", "frames/00110", "frames/00111"]
    assert list(scan_records(archive, chosen, span_bytes=400_000)) == [(key, payloads[key]) for key in chosen]
    with pytest.raises(KeyError):
        list(scan_records(archive, ["frames/00001", "no/such/record"]))
    with pytest.raises(ValueError, match="positive"):
        scan_records(archive, span_bytes=0)


def test_a_remote_scan_takes_a_request_per_span(tmp_path: Path, http_root: HttpRoot) -> None:
    payloads = write(http_root.directory / "seq.itar", 100)
    archive = IndexedTarArchive(f"{http_root.base_url}/seq.itar")
    total = sum(map(len, payloads.values()))
    span = 4 << 20
    http_root.server.clear_requests()
    scanned = list(scan_records(archive, span_bytes=span))
    assert scanned == list(payloads.items())
    requests = http_root.server.requests()
    # Each span is one request; per-record reads would take 100.
    assert len(requests) <= total // span + 2, len(requests)


def test_a_damaged_record_in_a_span_is_a_checksum_error(tmp_path: Path) -> None:
    path = tmp_path / "a.itar"
    payloads = write(path, 10)
    record = IndexedTarArchive(path).records["frames/00004"]
    with path.open("r+b") as file:  # flip a byte of one payload
        file.seek(record.offset + record.size // 2)
        byte = file.read(1)
        file.seek(-1, 1)
        file.write(bytes([byte[0] ^ 0xFF]))
    archive = IndexedTarArchive(path, verify_checksums=True)
    scan = scan_records(archive)
    assert [next(scan) for _ in range(4)] == list(payloads.items())[:4]  # the records before it
    with pytest.raises(ChecksumError, match="frames/00004"):
        next(scan)


def flip(path: Path, offset: int) -> None:
    with path.open("r+b") as file:
        file.seek(offset)
        byte = file.read(1)
        file.seek(offset)
        file.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize("where", ["local", "remote"])
def test_a_damaged_record_outside_the_tail_read_is_a_checksum_error(
    tmp_path: Path, http_root: HttpRoot, where: str
) -> None:
    # Records of 200-300 KB behind a tail read of 600 bytes: the scan reads every one from
    # the file (as spans), none from memory.
    path = http_root.directory / "a.itar"
    rng = random.Random(3)
    payloads = {f"frames/{index:05d}": rng.randbytes(200_000 + index) for index in range(8)}
    with IndexedTarArchive(path, "w") as writer:
        for key, payload in payloads.items():
            writer[key] = payload
    record = IndexedTarArchive(path).records["frames/00005"]
    flip(path, record.offset + record.size // 2)
    if where == "local":
        archive = IndexedTarArchive(path, index_tail_read_size=600, verify_checksums=True)
    else:  # remote archives verify by default
        archive = IndexedTarArchive(f"{http_root.base_url}/a.itar", index_tail_read_size=600)
    assert archive.verify_checksums and not archive.in_memory("frames/00005")
    scan = scan_records(archive, span_bytes=1 << 20)
    assert [next(scan) for _ in range(5)] == list(payloads.items())[:5]
    with pytest.raises(ChecksumError, match="frames/00005"):
        next(scan)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_damaged_blob_outside_the_tail_read_is_a_checksum_error(tmp_path: Path, zarr_format: int) -> None:
    rng = random.Random(5)
    frames = {f"{index:04d}": rng.randbytes(300_000) for index in range(8)}
    path = tmp_path / "seq.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        front = store.create_root_group({}, zarr_format=zarr_format).create_group("front")  # type: ignore[arg-type]
        for name, blob in frames.items():
            front.create_bytes_array(name, blob)
        store.consolidate()
    archive = IndexedTarArchive(path)
    damaged = next(key for key in archive.keys() if key.startswith("front/0002/"))
    flip(path, archive.records[damaged].offset + 1000)
    store = IndexedTarZarrStore(path, verify_checksums=True)
    assert not store.archive.in_memory(damaged)  # 2.4 MB of frames: this one lies before the tail read
    blobs = store.open_root_group().group("front").blobs()
    assert [next(blobs) for _ in range(2)] == list(frames.items())[:2]
    with pytest.raises(ChecksumError, match=damaged):
        next(blobs)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_groups_blobs_come_as_a_scan(tmp_path: Path, zarr_format: int, monkeypatch: pytest.MonkeyPatch) -> None:
    frames = {f"{index:04d}": bytes([index]) * index + b"\\x00" for index in range(30)}
    frames["0007"] = b"" if zarr_format == 3 else frames["0007"]  # format 3 stores an empty blob
    with IndexedTarZarrStore(tmp_path / "seq.itar", mode="w") as store:
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        front = root.create_group("front")
        for name, blob in frames.items():
            front.create_bytes_array(name, blob)
        front.create_array("timestamps", np.arange(30.0))  # no blob: left out
        store.consolidate()
    group = IndexedTarZarrStore(tmp_path / "seq.itar").open_root_group().group("front")
    calls: list[int] = []
    import ncore_like.nodes._group as group_module

    original = group_module.scan_records
    monkeypatch.setattr(group_module, "scan_records", lambda *a, **k: (calls.append(1), original(*a, **k))[1])
    assert list(group.blobs()) == list(frames.items())
    assert calls == [1]  # one scan, not a read per frame
    # Other stores give the same, one read each.
    other = ZarrStoreAdapter.directory(tmp_path / "seq.zarr")
    front = other.create_root_group({}, zarr_format=zarr_format).create_group("front")  # type: ignore[arg-type]
    for name, blob in frames.items():
        front.create_bytes_array(name, blob) if blob or zarr_format == 3 else None
    assert list(front.blobs()) == [(name, blob) for name, blob in frames.items() if blob or zarr_format == 3]


def test_bulk_reads_of_a_remote_archive_overlap_on_the_buffered_path(tmp_path: Path) -> None:
    from ncore_like.archive import read_records
    from tests.support.servers import max_in_flight, start_http

    payloads = write(tmp_path / "seq.itar", 24)
    with start_http(tmp_path, latency=0.05) as server:
        archive = IndexedTarArchive(f"{server.endpoint}/seq.itar")  # the default, buffered path
        assert not archive.remote_range_reads
        server.clear_requests()
        assert list(read_records(archive, list(payloads), threads=4)) == list(payloads.items())
        # The threads' requests overlap: the buffered file object would take them one by one.
        assert max_in_flight(server.requests()) >= 2


def test_bulk_reads_of_a_remote_archive_keep_many_requests_in_flight_by_default(tmp_path: Path) -> None:
    from ncore_like._concurrency import default_workers
    from ncore_like.archive import read_records
    from tests.support.servers import max_in_flight, start_http

    payloads = write(tmp_path / "seq.itar", 24)
    with start_http(tmp_path, latency=0.2) as server:
        archive = IndexedTarArchive(f"{server.endpoint}/seq.itar")
        server.clear_requests()
        assert list(read_records(archive, list(payloads))) == list(payloads.items())
        # Each thread waits on a request: one per CPU would keep only that many in flight.
        assert max_in_flight(server.requests()) > max(4, default_workers())
