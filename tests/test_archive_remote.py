"""IndexedTarArchive on real servers: S3 (moto behind a logging proxy) and HTTP with Range."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import multiprocessing
import os
import pickle
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from upath import UPath

from ncore_like import ArchiveFormatError, IndexedTarArchive
from ncore_like.errors import RemoteStorageError
from tests.support.archives import FOREIGN_MESSAGES, foreign_files
from tests.support.fixtures import HttpRoot
from tests.support.s3_clients import s3_client_setups
from tests.support.servers import ServerProcess, max_in_flight, start_http

pytestmark = pytest.mark.s3


def sample_records() -> dict[str, bytes]:
    rng = random.Random(11)
    records = {f"frames/{i:03d}": rng.randbytes(rng.randrange(50_000, 300_000)) for i in range(12)}
    records["empty"] = b""
    records["unicode/光"] = b"light"
    records["k" * 130] = b"long"
    records["big"] = rng.randbytes(1_300_000)  # beyond the default tail read
    records["small/last"] = b"tail"
    return records


def write_records(location: UPath | Path, records: dict[str, bytes]) -> None:
    with IndexedTarArchive(location, mode="w") as archive:
        for key, value in records.items():
            archive[key] = value
        archive[".zgroup"] = b'{"zarr_format": 2}'


def gets(server: ServerProcess) -> list[dict[str, Any]]:
    return [request for request in server.requests() if request["method"] == "GET"]


def wait_for_log(server: ServerProcess, count: int) -> list[dict[str, Any]]:
    # The proxy logs before it sends the last byte; give it a moment to land.
    deadline = time.monotonic() + 2
    while len(server.requests()) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return server.requests()


@pytest.fixture
def s3_archive(s3_bucket: UPath, s3_proxy: ServerProcess) -> Iterator[tuple[UPath, dict[str, bytes]]]:
    records = sample_records()
    location = s3_bucket / "seq.itar"
    write_records(location, records)
    s3_proxy.clear_requests()
    yield location, records


@pytest.mark.parametrize("range_reads", [False, True])
@pytest.mark.parametrize("tail", [None, 1 << 20])
def test_s3_round_trip(s3_archive: tuple[UPath, dict[str, bytes]], range_reads: bool, tail: int | None) -> None:
    location, records = s3_archive
    archive = IndexedTarArchive(location, index_tail_read_size=tail, remote_range_reads=range_reads)
    assert archive.is_remote and archive.remote_range_reads is range_reads
    assert archive.keys() == [*records, ".zgroup"]
    for key, value in records.items():
        assert archive[key] == value, key


def test_s3_open_costs_one_request_and_range_reads_one_get_each(
    s3_archive: tuple[UPath, dict[str, bytes]], s3_proxy: ServerProcess
) -> None:
    location, records = s3_archive
    archive = IndexedTarArchive(location, remote_range_reads=True)
    opening = wait_for_log(s3_proxy, 1)
    assert [(r["method"], r["range"]) for r in opening] == [("GET", "bytes=-1048576")]
    for key in ("frames/003", "big", "frames/007"):
        s3_proxy.clear_requests()
        assert archive[key] == records[key]
        record = archive.records[key]
        logged = wait_for_log(s3_proxy, 1)
        assert [(r["method"], r["range"]) for r in logged] == [
            ("GET", f"bytes={record.offset}-{record.offset + record.size - 1}")
        ]
    s3_proxy.clear_requests()
    assert archive[".zgroup"] == b'{"zarr_format": 2}' and archive["small/last"] == b"tail"
    assert archive["empty"] == b""
    assert s3_proxy.requests() == []  # served from the tail read


def test_s3_buffered_read_moves_about_the_bytes_wanted(
    s3_archive: tuple[UPath, dict[str, bytes]], s3_proxy: ServerProcess
) -> None:
    location, records = s3_archive
    archive = IndexedTarArchive(location)
    wait_for_log(s3_proxy, 1)
    s3_proxy.clear_requests()
    assert archive["frames/005"] == records["frames/005"]
    logged = wait_for_log(s3_proxy, 1)
    assert [r["method"] for r in logged] == ["GET"]  # no HEAD: the size came from the index
    moved = sum(r["bytes"] for r in logged)
    assert len(records["frames/005"]) <= moved <= 1.5 * len(records["frames/005"]) + 256 * 1024


async def test_s3_read_async_and_open_async(
    s3_archive: tuple[UPath, dict[str, bytes]], s3_proxy: ServerProcess
) -> None:
    location, records = s3_archive
    archive = await IndexedTarArchive.open_async(location, prefetch_keys=("big",))
    logged = wait_for_log(s3_proxy, 2)
    assert logged[0]["range"] == "bytes=-1048576"
    assert len(logged) == 2  # the tail, then the prefetched record
    s3_proxy.clear_requests()
    keys = [key for key in records if key.startswith("frames/")]
    values = await asyncio.gather(*(archive.read_async(key) for key in keys))
    assert values == [records[key] for key in keys]
    assert await archive.read_async("big") == records["big"]  # prefetched: no request
    logged = wait_for_log(s3_proxy, len(keys))
    assert len(logged) == len(keys) and all(r["method"] == "GET" and r["range"] for r in logged)


def test_s3_missing_and_bad_objects(s3_bucket: UPath, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        IndexedTarArchive(s3_bucket / "missing.itar")
    (s3_bucket / "junk.itar").write_bytes(os.urandom(3000))
    with pytest.raises(ArchiveFormatError, match=r"s3://.*junk\.itar: not an indexed tar archive"):
        IndexedTarArchive(s3_bucket / "junk.itar")
    # Files that are no archives say what they are, also when their first block lies outside
    # the tail read (a second request, made only on this error path).
    for kind, path in foreign_files(tmp_path).items():
        (s3_bucket / path.name).write_bytes(path.read_bytes())
        with pytest.raises(ArchiveFormatError, match=FOREIGN_MESSAGES[kind]):
            IndexedTarArchive(s3_bucket / path.name)
        with pytest.raises(ArchiveFormatError, match=FOREIGN_MESSAGES[kind]):
            asyncio.run(IndexedTarArchive.open_async(s3_bucket / path.name, index_tail_read_size=None))
    (s3_bucket / "empty.itar").write_bytes(b"")
    with pytest.raises(ArchiveFormatError, match=r"empty\.itar: empty file"):
        IndexedTarArchive(s3_bucket / "empty.itar")
    (s3_bucket / "folder" / "inner.itar").write_bytes(b"x")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        IndexedTarArchive(s3_bucket / "folder")


def _read_remote(archive: IndexedTarArchive, key: str) -> bytes:
    return archive[key]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_s3_reader_in_child_processes(s3_archive: tuple[UPath, dict[str, bytes]], method: str) -> None:
    location, records = s3_archive
    archive = IndexedTarArchive(location, remote_range_reads=True)
    assert archive["frames/000"] == records["frames/000"]  # the parent's event loop is in use
    assert pickle.loads(pickle.dumps(archive))["frames/001"] == records["frames/001"]
    with multiprocessing.get_context(method).Pool(2) as pool:
        values = pool.starmap(_read_remote, [(archive, "frames/002"), (archive, "big")])
    assert values == [records["frames/002"], records["big"]]


# -- HTTP ----------------------------------------------------------------------------------


def test_http_round_trip(http_root: HttpRoot) -> None:
    records = sample_records()
    write_records(http_root.directory / "seq.itar", records)
    url = f"{http_root.base_url}/seq.itar"
    for range_reads in (False, True):
        archive = IndexedTarArchive(UPath(url), remote_range_reads=range_reads)
        assert archive.is_remote
        assert {key: archive[key] for key in records} == records


# Each request of the overlap tests waits this long at the server. Long enough that a pause of
# the test process (a garbage-collector pass, a busy CI machine) between starting the
# requests doesn't make concurrent requests look sequential: a 0.2 s latency once saw 5 of 8
# threads' requests in flight at once.
OVERLAP_LATENCY = 0.5


def test_http_concurrent_read_async_overlap(tmp_path: Path) -> None:
    records = sample_records()
    write_records(tmp_path / "seq.itar", records)
    keys = [key for key in records if key.startswith("frames/")]
    with start_http(tmp_path, latency=OVERLAP_LATENCY) as server:

        async def main() -> list[bytes]:
            archive = await IndexedTarArchive.open_async(UPath(f"{server.endpoint}/seq.itar"))
            server.clear_requests()
            return list(await asyncio.gather(*(archive.read_async(key) for key in keys)))

        started = time.monotonic()
        values = asyncio.run(main())
        elapsed = time.monotonic() - started
        logged = wait_for_log(server, len(keys))
    assert values == [records[key] for key in keys]
    assert [r["method"] for r in logged] == ["GET"] * len(keys)
    assert max_in_flight(logged) >= len(keys) - 2  # they overlap, not one after another
    assert elapsed < OVERLAP_LATENCY * len(keys) / 2  # far below sequential round trips


def test_http_threads_with_range_reads_fetch_concurrently(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    records = sample_records()
    write_records(tmp_path / "seq.itar", records)
    keys = [key for key in records if key.startswith("frames/")][:8]
    with start_http(tmp_path, latency=OVERLAP_LATENCY) as server:
        archive = IndexedTarArchive(UPath(f"{server.endpoint}/seq.itar"), remote_range_reads=True)
        server.clear_requests()
        with ThreadPoolExecutor(8) as pool:
            values = list(pool.map(archive.read, keys))
        logged = wait_for_log(server, len(keys))
    assert values == [records[key] for key in keys]
    assert max_in_flight(logged) >= 6


def test_http_missing_file(http_root: HttpRoot) -> None:
    with pytest.raises(FileNotFoundError):
        IndexedTarArchive(UPath(f"{http_root.base_url}/missing.itar"))


def test_http_server_ignoring_range_is_an_error_not_wrong_bytes(tmp_path: Path) -> None:
    import functools
    import http.server
    import threading

    records = sample_records()
    write_records(tmp_path / "seq.itar", records)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)  # answers 200, whole file
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = UPath(f"http://127.0.0.1:{server.server_address[1]}/seq.itar")
        archive = IndexedTarArchive(url, remote_range_reads=True)
        # The suffix request got the whole file: every record is right, served from memory.
        assert archive.tail_size == archive.file_size == (tmp_path / "seq.itar").stat().st_size
        assert {key: archive[key] for key in records} == records
        # A range request answered with the whole file is refused, never returned as the record.
        record = archive.records["frames/004"]
        with pytest.raises(ArchiveFormatError, match="does the server honour Range requests"):
            archive._impl._live_source().read(record.offset, record.size)
    finally:
        server.shutdown()
        server.server_close()


def test_s3_clients_are_set_up_with_the_collector_paused(s3_archive: tuple[UPath, dict[str, bytes]]) -> None:
    """botocore's models make ~10^5 objects; with the cyclic collector running, a process that
    imported torch spent 0.19-0.30 s instead of 0.07-0.10 s on each client. The collector is
    paused for the setup only: on again afterwards, in the parent and in a forked worker."""
    location, records = s3_archive

    def sha256(value: bytes) -> str:
        return hashlib.sha256(value).hexdigest()

    code = f"""
    import gc, hashlib, multiprocessing
    from ncore_like import IndexedTarArchive

    def read_in_child(queue):
        archive = IndexedTarArchive({str(location)!r}, storage_options={dict(location.storage_options)!r})
        queue.put((hashlib.sha256(archive["frames/001"]).hexdigest(), gc.isenabled(), clients))

    archive = IndexedTarArchive({str(location)!r}, storage_options={dict(location.storage_options)!r})
    assert hashlib.sha256(archive["frames/000"]).hexdigest() == {sha256(records["frames/000"])!r}
    assert gc.isenabled()
    queue = multiprocessing.get_context("fork").Queue()
    child = multiprocessing.get_context("fork").Process(target=read_in_child, args=(queue,))
    child.start()
    value, child_collector_on, child_clients = queue.get(timeout=60)
    child.join()
    assert value == {sha256(records["frames/001"])!r} and child_collector_on
    clients.extend(c for c in child_clients if c not in clients)
    """
    setups = s3_client_setups(code)
    assert len({setup["pid"] for setup in setups}) == 2, setups  # the parent's client and the child's
    assert not any(setup["collector_on"] for setup in setups), setups


def test_s3_client_that_fails_to_set_up_is_reported_and_leaves_the_collector_on(
    s3_archive: tuple[UPath, dict[str, bytes]],
) -> None:
    location, _ = s3_archive
    options = {**location.storage_options, "profile": "no-such-profile"}
    with pytest.raises(RemoteStorageError, match=r"seq\.itar.*no-such-profile.*storage option profile") as raised:
        IndexedTarArchive(str(location), storage_options=options)
    assert gc.isenabled(), raised.value
