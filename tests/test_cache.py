"""The local record cache of remote archives (``cache=``), on real servers: S3 (moto behind a
logging proxy) and HTTP with Range. Hits make no request; a rewritten object is never served
stale; processes share one cache folder; the size bound holds; damaged entries are read
again, not served."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import multiprocessing
import os
import pickle
import random
import time
from pathlib import Path
from typing import Any

import pytest
from upath import UPath

from ncore_like import ArchiveCollection, ChecksumError, IndexedTarArchive, IndexedTarZarrStore, RecordCache
from ncore_like.archive import scan_records
from tests.support.fixtures import HttpRoot
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.s3


def payloads(seed: int, count: int = 12) -> dict[str, bytes]:
    """Records of fixed sizes (the same layout for every seed) and seeded contents."""
    sizes = random.Random(0)
    contents = random.Random(seed)
    return {f"frames/{index:03d}": contents.randbytes(sizes.randrange(100_000, 300_000)) for index in range(count)}


def write(location: UPath | Path, records: dict[str, bytes]) -> None:
    with IndexedTarArchive(location, mode="w") as archive:
        for key, value in records.items():
            archive[key] = value
        archive[".zgroup"] = b'{"zarr_format": 2}'


def settle(server: ServerProcess) -> list[dict[str, Any]]:
    """The request log once it stopped growing (the proxy logs just before the last byte)."""
    logged = server.requests()
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        time.sleep(0.05)
        again = server.requests()
        if len(again) == len(logged):
            break
        logged = again
    return logged


def outside_tail(archive: IndexedTarArchive) -> list[str]:
    return [key for key in archive.keys() if not archive.in_memory(key)]


def entries(cache: RecordCache) -> list[Path]:
    return [path for path in Path(cache.path).glob("??/*") if not path.name.startswith(".")]


@pytest.fixture
def s3_seq(s3_bucket: UPath, s3_proxy: ServerProcess) -> tuple[UPath, dict[str, bytes]]:
    records = payloads(1)
    location = s3_bucket / "seq.itar"
    write(location, records)
    s3_proxy.clear_requests()
    return location, records


# -- hits make no request ------------------------------------------------------------------


@pytest.mark.parametrize("range_reads", [False, True])
def test_second_reads_make_no_request(
    s3_seq: tuple[UPath, dict[str, bytes]], s3_proxy: ServerProcess, tmp_path: Path, range_reads: bool
) -> None:
    location, records = s3_seq
    cache = RecordCache(tmp_path / "cache")
    archive = IndexedTarArchive(location, remote_range_reads=range_reads, cache=cache)
    keys = outside_tail(archive)
    assert len(keys) >= 5 and archive.cache is cache
    first = settle(s3_proxy)
    # Opening asks for the version (HEAD) and the tail at once: one round trip.
    assert sorted(r["method"] for r in first) == ["GET", "HEAD"]
    assert {key: archive[key] for key in keys} == {key: records[key] for key in keys}
    assert len(settle(s3_proxy)) == 2 + len(keys)
    s3_proxy.clear_requests()

    again = IndexedTarArchive(location, remote_range_reads=range_reads, cache=cache)  # within the TTL
    assert again[keys[0]] == records[keys[0]]
    buffer = bytearray(len(records[keys[1]]))
    again.read_into(keys[1], memoryview(buffer))
    assert buffer == records[keys[1]]

    async def read_async() -> list[bytes]:
        return list(await asyncio.gather(*(again.read_async(key) for key in keys[2:])))

    assert asyncio.run(read_async()) == [records[key] for key in keys[2:]]
    assert again.read_range(keys[0], 10, 20) == records[keys[0]][10:20]
    assert settle(s3_proxy) == []  # the open, the records: all from the cache


def test_open_async_and_stores_use_the_cache(
    s3_seq: tuple[UPath, dict[str, bytes]], s3_proxy: ServerProcess, tmp_path: Path
) -> None:
    location, records = s3_seq
    cache_dir = tmp_path / "cache"
    key = "frames/004"

    async def read() -> bytes:
        archive = await IndexedTarArchive.open_async(location, cache=cache_dir)
        return await archive.read_async(key)

    assert asyncio.run(read()) == records[key]
    s3_proxy.clear_requests()
    assert asyncio.run(read()) == records[key]
    store = IndexedTarZarrStore(location, cache=str(cache_dir))  # a path: a cache with defaults
    assert store.archive.read(key) == records[key]
    assert settle(s3_proxy) == []


def test_a_reopen_within_the_ttl_makes_no_request_after_it_one_version_check(
    s3_seq: tuple[UPath, dict[str, bytes]], s3_proxy: ServerProcess, tmp_path: Path
) -> None:
    location, _ = s3_seq
    cache = RecordCache(tmp_path / "cache", ttl=1.0)
    IndexedTarArchive(location, cache=cache)
    settle(s3_proxy)
    s3_proxy.clear_requests()
    assert IndexedTarArchive(location, cache=cache)[".zgroup"] == b'{"zarr_format": 2}'
    assert settle(s3_proxy) == []
    time.sleep(1.1)
    archive = IndexedTarArchive(location, cache=cache)
    logged = settle(s3_proxy)
    assert [(r["method"], r["bytes"]) for r in logged] == [("HEAD", 0)]  # one small request
    s3_proxy.clear_requests()
    assert IndexedTarArchive(location, cache=cache).keys() == archive.keys()  # checked: trusted again
    assert settle(s3_proxy) == []
    every_time = RecordCache(tmp_path / "cache", ttl=0)
    IndexedTarArchive(location, cache=every_time)
    assert [r["method"] for r in settle(s3_proxy)] == ["HEAD"]


# -- a changed object is never served stale ------------------------------------------------


def test_a_rewritten_s3_object_is_detected(
    s3_seq: tuple[UPath, dict[str, bytes]], s3_proxy: ServerProcess, tmp_path: Path
) -> None:
    location, old = s3_seq
    cache = RecordCache(tmp_path / "cache", ttl=0)
    archive = IndexedTarArchive(location, cache=cache)
    keys = outside_tail(archive)
    assert [archive[key] for key in keys] == [old[key] for key in keys]
    new = payloads(2)  # the same keys and sizes (the same offsets), other bytes
    write(location, new)
    reopened = IndexedTarArchive(location, cache=cache, verify_checksums=False)  # nothing else to catch it
    assert reopened.records == archive.records
    assert [reopened[key] for key in keys] == [new[key] for key in keys]
    # The old archive object keeps its own consistent view: what it cached of the old object.
    assert archive[keys[0]] == old[keys[0]]


def test_a_rewritten_http_file_is_detected(http_root: HttpRoot, tmp_path: Path) -> None:
    path = http_root.directory / "seq.itar"
    old, new = payloads(1), payloads(3)
    write(path, old)
    url = f"{http_root.base_url}/seq.itar"
    cache = RecordCache(tmp_path / "cache", ttl=0)
    archive = IndexedTarArchive(url, cache=cache, verify_checksums=False)
    keys = outside_tail(archive)
    assert [archive[key] for key in keys] == [old[key] for key in keys]
    http_root.server.clear_requests()
    assert IndexedTarArchive(url, cache=cache, verify_checksums=False)[keys[0]] == old[keys[0]]
    assert [r["method"] for r in settle(http_root.server)] == ["HEAD"]  # its ETag is checked
    write(path, new)
    reopened = IndexedTarArchive(url, cache=cache, verify_checksums=False)
    assert [reopened[key] for key in keys] == [new[key] for key in keys]


def test_within_the_ttl_a_rewrite_fails_checksums_rather_than_reading_wrong(
    s3_seq: tuple[UPath, dict[str, bytes]], tmp_path: Path
) -> None:
    location, old = s3_seq
    cache = RecordCache(tmp_path / "cache", ttl=600)
    archive = IndexedTarArchive(location, cache=cache)
    keys = outside_tail(archive)
    archive[keys[0]]
    write(location, payloads(2))
    trusting = IndexedTarArchive(location, cache=cache)  # the old index and version, trusted
    assert trusting[keys[0]] == old[keys[0]]  # the old object's record, as cached
    with pytest.raises(ChecksumError, match=keys[1]):
        trusting[keys[1]]  # the new object's bytes at the old offsets: refused


# -- damaged entries -----------------------------------------------------------------------


def damage(cache: RecordCache, how: str) -> int:
    """Damages every entry of the cache; returns how many there were."""
    paths = entries(cache)
    for path in paths:
        data = bytearray(path.read_bytes())
        if how == "flip":
            data[len(data) // 2] ^= 0xFF
        else:
            data = data[: len(data) // 2]
        path.write_bytes(bytes(data))
    return len(paths)


@pytest.mark.parametrize(
    ("checksums", "verify_checksums", "how"),
    [
        (True, None, "flip"),  # checked against the archive's checksums
        (True, None, "truncate"),
        (False, None, "flip"),  # an archive without checksums: against the cache's own
        (False, None, "truncate"),
        (True, False, "truncate"),  # no checksums checked: lengths still are
    ],
)
def test_a_damaged_cache_file_is_read_again_not_served(
    s3_bucket: UPath,
    s3_proxy: ServerProcess,
    tmp_path: Path,
    checksums: bool,
    verify_checksums: bool | None,
    how: str,
) -> None:
    records = payloads(1)
    location = s3_bucket / "seq.itar"
    with IndexedTarArchive(location, mode="w", checksums=checksums) as written:
        for key, value in records.items():
            written[key] = value
    cache = RecordCache(tmp_path / "cache")
    archive = IndexedTarArchive(location, cache=cache, verify_checksums=verify_checksums)
    assert archive.has_checksums is checksums
    keys = outside_tail(archive)
    assert [archive[key] for key in keys] == [records[key] for key in keys]
    assert damage(cache, how) == len(keys) + 2  # the records, the tail, the version
    s3_proxy.clear_requests()
    again = IndexedTarArchive(location, cache=cache, verify_checksums=verify_checksums)
    assert [again[key] for key in keys] == [records[key] for key in keys]
    assert len(settle(s3_proxy)) == len(keys) + 2  # read from storage again
    damage(cache, how)
    buffer = bytearray(len(records[keys[0]]))
    again.read_into(keys[0], memoryview(buffer))
    assert buffer == records[keys[0]]

    async def read_async() -> list[bytes]:
        return list(await asyncio.gather(*(again.read_async(key) for key in keys[1:])))

    assert asyncio.run(read_async()) == [records[key] for key in keys[1:]]
    s3_proxy.clear_requests()
    assert [again[key] for key in keys] == [records[key] for key in keys]  # and cached again
    assert settle(s3_proxy) == []


def test_dropped_entries_are_logged(
    s3_seq: tuple[UPath, dict[str, bytes]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    location, records = s3_seq
    cache = RecordCache(tmp_path / "cache")
    archive = IndexedTarArchive(location, cache=cache)
    keys = outside_tail(archive)
    assert [archive[key] for key in keys] == [records[key] for key in keys]
    damage(cache, "truncate")
    caplog.set_level(logging.INFO, logger="ncore_like.archive.cache")
    again = IndexedTarArchive(location, cache=cache)
    assert [again[key] for key in keys] == [records[key] for key in keys]
    dropped = [record for record in caplog.records if "damaged entry" in record.getMessage()]
    # The object's version (so its tail is read again, not looked up) and every record read.
    assert len(dropped) == len(keys) + 1, [record.getMessage() for record in caplog.records]
    assert all(record.levelno == logging.WARNING and cache.path in record.getMessage() for record in dropped)
    caplog.clear()
    small = RecordCache(tmp_path / "small", max_bytes=600_000)
    reader = IndexedTarArchive(location, cache=small)
    assert [reader[key] for key in keys] == [records[key] for key in keys]
    evictions = [record.getMessage() for record in caplog.records if "evicted" in record.getMessage()]
    assert evictions and all(small.path in message for message in evictions)


# -- the size bound ------------------------------------------------------------------------


def test_the_size_bound_holds(s3_bucket: UPath, s3_proxy: ServerProcess, tmp_path: Path) -> None:
    records = payloads(4, count=40)
    location = s3_bucket / "big.itar"
    write(location, records)
    bound = 1_500_000
    cache = RecordCache(tmp_path / "cache", max_bytes=bound)
    archive = IndexedTarArchive(location, cache=cache, index_tail_read_size=64 * 1024)
    keys = outside_tail(archive)
    assert sum(len(records[key]) for key in keys) > 2 * bound
    rng = random.Random(5)
    for _ in range(120):
        key = rng.choice(keys)
        assert archive[key] == records[key]
        assert cache.total_bytes() <= bound
    # The most recently read records are the ones kept.
    s3_proxy.clear_requests()
    assert archive[key] == records[key]
    assert settle(s3_proxy) == []
    cache.clear()
    assert cache.total_bytes() == 0


def test_records_larger_than_the_bound_are_not_cached(s3_seq: tuple[UPath, dict[str, bytes]], tmp_path: Path) -> None:
    location, records = s3_seq
    cache = RecordCache(tmp_path / "cache", max_bytes=10_000)
    archive = IndexedTarArchive(location, cache=cache)
    assert all(archive[key] == records[key] for key in outside_tail(archive))
    assert 0 < cache.total_bytes() <= 10_000  # the version record only


# -- processes -----------------------------------------------------------------------------


def _read_many(url: str, options: dict[str, Any], cache: RecordCache, digests: dict[str, str], seed: int) -> int:
    """Reads random records many times through the shared cache; returns the wrong ones."""
    rng = random.Random(seed)
    wrong = 0
    for _ in range(4):
        archive = IndexedTarArchive(UPath(url, **options), cache=cache, verify_checksums=False)
        for _ in range(30):
            key = rng.choice(sorted(digests))
            wrong += hashlib.sha256(archive[key]).hexdigest() != digests[key]
    return wrong


def test_processes_share_a_cache(s3_bucket: UPath, s3_storage_options: dict[str, Any], tmp_path: Path) -> None:
    records = payloads(6, count=30)
    location = s3_bucket / "shared.itar"
    write(location, records)
    digests = {key: hashlib.sha256(value).hexdigest() for key, value in records.items()}
    # Small enough that the processes evict under each other's reads.
    cache = RecordCache(tmp_path / "cache", max_bytes=1_200_000, ttl=0)
    jobs = [(str(location), s3_storage_options, cache, digests, seed) for seed in range(4)]
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        assert pool.starmap(_read_many, jobs) == [0, 0, 0, 0]
    assert cache.total_bytes() <= 1_200_000 * 1.25  # between rescans each process may pass it a little
    assert not [path for path in Path(cache.path).glob("??/.*")]  # no temporary file left


def test_pickled_archives_and_collections_keep_their_cache(
    s3_seq: tuple[UPath, dict[str, bytes]],
    s3_proxy: ServerProcess,
    s3_storage_options: dict[str, Any],
    tmp_path: Path,
) -> None:
    location, records = s3_seq
    cache = RecordCache(tmp_path / "cache", max_bytes=50_000_000, ttl=5)
    archive = IndexedTarArchive(location, cache=cache)
    keys = outside_tail(archive)
    copy = pickle.loads(pickle.dumps(archive))
    assert repr(copy.cache) == repr(cache)
    assert copy[keys[0]] == records[keys[0]]  # read in the copy, cached under the same version
    s3_proxy.clear_requests()
    assert archive[keys[0]] == records[keys[0]]
    assert settle(s3_proxy) == []
    collection = ArchiveCollection([str(location)], storage_options=s3_storage_options, cache=cache)
    collection = pickle.loads(pickle.dumps(collection))
    assert collection.read(0, keys[0]) == records[keys[0]]
    assert settle(s3_proxy) == []


# -- what the cache is not for ---------------------------------------------------------------


def test_local_archives_and_scans_pass_the_cache_by(s3_seq: tuple[UPath, dict[str, bytes]], tmp_path: Path) -> None:
    location, records = s3_seq
    write(tmp_path / "local.itar", records)
    cache = RecordCache(tmp_path / "cache")
    local = IndexedTarArchive(tmp_path / "local.itar", cache=cache)
    assert local.cache is None and local["frames/001"] == records["frames/001"]
    assert cache.total_bytes() == 0
    remote = IndexedTarArchive(location, cache=cache)
    opened = cache.total_bytes()
    assert [payload for key, payload in scan_records(remote) if key in records] == list(records.values())
    assert cache.total_bytes() == opened  # a scan streams past the cache


def test_bad_cache_paths_are_clear_errors(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_bytes(b"")
    with pytest.raises(NotADirectoryError, match=str(file)):
        RecordCache(file)
    with pytest.raises(NotADirectoryError, match="inner"):
        RecordCache(file / "inner")
    if os.geteuid() == 0:  # root writes anywhere but on read-only file systems
        unwritable = Path("/sys")
        if not unwritable.is_dir():
            pytest.skip("no read-only folder to try")
    else:
        unwritable = tmp_path / "read-only"
        unwritable.mkdir(mode=0o500)
    with pytest.raises(PermissionError, match=f"record cache: can't write .*{unwritable}"):
        RecordCache(unwritable)
    with pytest.raises(TypeError, match="RecordCache or the path"):
        IndexedTarArchive(tmp_path / "x.itar", cache=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_bytes"):
        RecordCache(tmp_path, max_bytes=0)
    with pytest.raises(ValueError, match="ttl"):
        RecordCache(tmp_path, ttl=-1)
