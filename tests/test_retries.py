"""Remote reads survive a flaky network: transient failures (HTTP 503 and 429, a reset
connection, a body cut short) are retried with backoff, permanent ones (404) are not, and
the error after the last attempt names the archive, the record and the attempts. A short
read is never handed out. The faults come from the test HTTP server, by request number."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ncore_like import IndexedTarArchive
from ncore_like.errors import RemoteStorageError
from tests.support.servers import start_http


def write(directory: Path) -> dict[str, bytes]:
    payloads = {f"frames/{index:03d}": bytes([index]) * (200_000 + index) for index in range(6)}
    with IndexedTarArchive(directory / "seq.itar", "w") as archive:
        for key, payload in payloads.items():
            archive[key] = payload
    return payloads


@pytest.mark.parametrize("range_reads", [True, False])
def test_transient_failures_are_retried_and_records_arrive_whole(tmp_path: Path, range_reads: bool) -> None:
    payloads = write(tmp_path)
    # GET 1 opens the archive (the tail); then every kind of fault once, among the reads.
    faults = {2: "503", 3: "cut", 5: "reset", 7: "429", 9: "cut"}
    with start_http(tmp_path, faults=faults) as server:
        archive = IndexedTarArchive(
            f"{server.endpoint}/seq.itar", index_tail_read_size=600, remote_range_reads=range_reads
        )
        assert {key: archive[key] for key in payloads} == payloads  # whole records, never short ones
        statuses = {str(record["status"]) for record in server.requests()}
        assert {"503", "cut", "reset", "429"} <= statuses


def test_async_reads_are_retried_too(tmp_path: Path) -> None:
    payloads = write(tmp_path)
    with start_http(tmp_path, faults={2: "cut", 3: "503", 4: "reset"}) as server:
        archive = IndexedTarArchive(f"{server.endpoint}/seq.itar", index_tail_read_size=600)

        async def read_all() -> list[bytes]:
            return list(await asyncio.gather(*(archive.read_async(key) for key in payloads)))

        assert asyncio.run(read_all()) == list(payloads.values())


@pytest.mark.parametrize("range_reads", [True, False])
def test_a_body_that_ends_cleanly_but_short_is_retried_never_handed_out(tmp_path: Path, range_reads: bool) -> None:
    # No transport error: a complete response of half the bytes asked for.
    payloads = write(tmp_path)
    with start_http(tmp_path, faults={2: "short", 4: "short"}) as server:  # GET 1 opens the archive
        archive = IndexedTarArchive(
            f"{server.endpoint}/seq.itar", index_tail_read_size=600, remote_range_reads=range_reads
        )
        assert archive["frames/002"] == payloads["frames/002"]
        assert asyncio.run(archive.read_async("frames/004")) == payloads["frames/004"]
        assert [str(record["status"]) for record in server.requests()[1:5]] == ["short", "206", "short", "206"]


def test_a_failure_that_persists_names_archive_record_and_attempts(tmp_path: Path) -> None:
    write(tmp_path)
    every_read_fails = {number: "503" for number in range(3, 40)}  # GETs 1-2 open the archive
    with start_http(tmp_path, faults=every_read_fails) as server:
        url = f"{server.endpoint}/seq.itar"
        archive = IndexedTarArchive(url, index_tail_read_size=600, remote_range_reads=True)
        with pytest.raises(RemoteStorageError, match=r"record 'frames/002'.*failed 5 times") as raised:
            archive["frames/002"]
        assert raised.value.key == "frames/002" and raised.value.archive == url
        assert sum(1 for record in server.requests() if str(record["status"]) == "503") == 5


def test_permanent_failures_are_not_retried(tmp_path: Path) -> None:
    write(tmp_path)
    with start_http(tmp_path) as server:
        url = f"{server.endpoint}/seq.itar"
        archive = IndexedTarArchive(url, index_tail_read_size=600, remote_range_reads=True)
        (tmp_path / "seq.itar").unlink()  # gone: 404 from now on
        server.clear_requests()
        with pytest.raises(FileNotFoundError):
            archive["frames/001"]
        assert len(server.requests()) == 1


# (A reset is not among them: the HTTP client itself retries a request whose connection was
# reset before any answer, at once.)
@pytest.mark.parametrize(("fault", "waits"), [("cut", False), ("503", True), ("429", True)])
def test_a_failed_connection_is_retried_at_once_an_overloaded_server_after_a_wait(
    tmp_path: Path, fault: str, waits: bool
) -> None:
    from ncore_like._defaults import RETRY_BASE_DELAY

    payloads = write(tmp_path)
    with start_http(tmp_path, faults={2: fault}) as server:  # GET 1 opens the archive
        archive = IndexedTarArchive(f"{server.endpoint}/seq.itar", index_tail_read_size=600, remote_range_reads=True)
        assert archive["frames/003"] == payloads["frames/003"]
        failed, retried = server.requests()[1:3]
        assert str(failed["status"]) == fault
        gap = float(retried["start"]) - float(failed["end"])
        # Backoff waits at least half the base delay (jitter); a reset server says nothing of load.
        assert (gap >= 0.5 * RETRY_BASE_DELAY) == waits, gap


@pytest.mark.parametrize("range_reads", [True, False])
def test_a_stalled_body_is_given_up_after_the_read_timeout_and_retried(tmp_path: Path, range_reads: bool) -> None:
    import time

    import aiohttp

    payloads = write(tmp_path)
    with start_http(tmp_path, faults={2: "stall"}) as server:  # GET 1 opens the archive
        # A per-request timeout is the filesystem's (aiohttp's here, s3fs's read_timeout on S3).
        options = {"client_kwargs": {"timeout": aiohttp.ClientTimeout(sock_read=0.5)}}
        archive = IndexedTarArchive(
            f"{server.endpoint}/seq.itar", index_tail_read_size=600, remote_range_reads=range_reads,
            storage_options=options,
        )  # fmt: skip
        started = time.monotonic()
        assert archive["frames/004"] == payloads["frames/004"]
        assert time.monotonic() - started < 10  # the stall holds the body back for a minute
        assert [str(record["status"]) for record in server.requests()[1:3]] == ["stall", "206"]


def test_bulk_reads_go_on_while_one_record_waits_for_its_retry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ncore_like.archive import _sources, read_records

    monkeypatch.setattr(_sources, "RETRY_BASE_DELAY", 0.5)  # a backoff of 0.25-0.75 s: time for many reads

    payloads = {f"frames/{index:03d}": bytes([index]) * 50_000 for index in range(40)}
    with IndexedTarArchive(tmp_path / "seq.itar", "w") as archive:
        for key, payload in payloads.items():
            archive[key] = payload
    with start_http(tmp_path, latency=0.01, faults={3: "503"}) as server:  # GET 1 opens the archive
        archive = IndexedTarArchive(f"{server.endpoint}/seq.itar", index_tail_read_size=600, remote_range_reads=True)
        assert list(read_records(archive, list(payloads), threads=2)) == list(payloads.items())
        requests = server.requests()
        failed = next(index for index, record in enumerate(requests) if str(record["status"]) == "503")
        retried = next(
            index for index in range(failed + 1, len(requests)) if requests[index]["range"] == requests[failed]["range"]
        )
        # Records after the waiting one keep being read during its backoff (in order, they
        # are handed out after it): more than two per thread.
        assert retried - failed - 1 > 4
