"""Remote reads survive a flaky network: transient failures (HTTP 503 and 429, a reset
connection, a body cut short) are retried with backoff, permanent ones (404) are not, and
the error after the last attempt names the archive, the record and the attempts. A short
read is never handed out. The faults come from the test HTTP server, by request number."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ncore_like import ArchiveCollection, IndexedTarArchive, IndexedTarZarrStore, RetryPolicy
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


def test_bulk_reads_go_on_while_one_record_waits_for_its_retry(tmp_path: Path) -> None:
    from ncore_like.archive import read_records

    retry = RetryPolicy(base_delay=0.5)  # a backoff of 0.25-0.75 s: time for many reads

    payloads = {f"frames/{index:03d}": bytes([index]) * 50_000 for index in range(40)}
    with IndexedTarArchive(tmp_path / "seq.itar", "w") as archive:
        for key, payload in payloads.items():
            archive[key] = payload
    with start_http(tmp_path, latency=0.01, faults={3: "503"}) as server:  # GET 1 opens the archive
        archive = IndexedTarArchive(
            f"{server.endpoint}/seq.itar", index_tail_read_size=600, remote_range_reads=True, retry=retry
        )
        assert list(read_records(archive, list(payloads), threads=2)) == list(payloads.items())
        requests = server.requests()
        failed = next(index for index, record in enumerate(requests) if str(record["status"]) == "503")
        retried = next(
            index for index in range(failed + 1, len(requests)) if requests[index]["range"] == requests[failed]["range"]
        )
        # Records after the waiting one keep being read during its backoff (in order, they
        # are handed out after it): more than two per thread.
        assert retried - failed - 1 > 4


# -- the retry policy ----------------------------------------------------------------------------


def test_the_policy_sets_the_attempts_and_what_is_transient(tmp_path: Path) -> None:
    write(tmp_path)
    every_read_fails = {number: "503" for number in range(3, 40)}  # GETs 1-2 open the archive
    with start_http(tmp_path, faults=every_read_fails) as server:
        url = f"{server.endpoint}/seq.itar"
        archive = IndexedTarArchive(
            url, index_tail_read_size=600, remote_range_reads=True, retry=RetryPolicy(attempts=2, base_delay=0.01)
        )
        with pytest.raises(RemoteStorageError, match=r"record 'frames/001'.*failed 2 times"):
            archive["frames/001"]
        assert sum(1 for record in server.requests() if str(record["status"]) == "503") == 2
    with start_http(tmp_path, faults={3: "503"}) as server:  # GETs 1-2 open the archive
        url = f"{server.endpoint}/seq.itar"
        never = RetryPolicy(transient=never_transient)
        archive = IndexedTarArchive(url, index_tail_read_size=600, remote_range_reads=True, retry=never)
        with pytest.raises(Exception) as raised:  # the filesystem's own error, at once
            archive["frames/002"]
        assert not isinstance(raised.value, RemoteStorageError) and getattr(raised.value, "status", None) == 503
        assert [str(record["status"]) for record in server.requests()][-1:] == ["503"]
        assert len(server.requests()) == 3  # tail, index, one attempt


def never_transient(error: BaseException) -> bool:
    return False


@pytest.mark.parametrize(("attempts", "deadline"), [(3, 30.0), (50, 1.0)])
def test_a_failing_read_takes_at_most_the_worst_case_time(tmp_path: Path, attempts: int, deadline: float) -> None:
    import time

    import aiohttp

    write(tmp_path)
    every_read_stalls = {number: "stall" for number in range(2, 100)}  # GET 1 opens the archive
    timeout = 0.4  # each attempt gives up after this long without data
    policy = RetryPolicy(attempts=attempts, base_delay=0.05, deadline=deadline)
    with start_http(tmp_path, faults=every_read_stalls) as server:
        options = {"client_kwargs": {"timeout": aiohttp.ClientTimeout(sock_read=timeout)}}
        archive = IndexedTarArchive(
            f"{server.endpoint}/seq.itar", remote_range_reads=True, storage_options=options, retry=policy
        )
        started = time.monotonic()
        with pytest.raises(RemoteStorageError, match="failed"):
            archive["frames/000"]
        elapsed = time.monotonic() - started
        stalls = sum(1 for record in server.requests() if str(record["status"]) == "stall")
    # Each attempt waited for its timeout; all of them together no longer than the policy says
    # (with a second per attempt for a busy machine).
    assert elapsed >= stalls * timeout
    assert elapsed <= policy.worst_case_seconds(timeout + 1.0), (elapsed, stalls)
    assert stalls == attempts if attempts == 3 else 2 <= stalls < attempts


def test_the_policy_is_checked_and_pickles_with_the_archive(tmp_path: Path) -> None:
    import pickle

    for bad in ({"attempts": 0}, {"base_delay": -1.0}, {"deadline": float("nan")}):
        with pytest.raises(ValueError, match="retry policy"):
            RetryPolicy(**bad)  # type: ignore[arg-type]
    write(tmp_path)
    with start_http(tmp_path) as server:
        policy = RetryPolicy(attempts=3, deadline=5.0)
        archive = IndexedTarArchive(f"{server.endpoint}/seq.itar", retry=policy)
        assert archive.retry == policy and pickle.loads(pickle.dumps(archive)).retry == policy
        assert IndexedTarArchive(f"{server.endpoint}/seq.itar").retry == RetryPolicy()
        store = IndexedTarZarrStore(f"{server.endpoint}/seq.itar", retry=policy)
        assert store.archive.retry == policy
        collection = pickle.loads(pickle.dumps(ArchiveCollection([f"{server.endpoint}/seq.itar"], retry=policy)))
        assert collection.archive(0).retry == policy
    with pytest.raises(TypeError, match="RetryPolicy"):
        IndexedTarArchive(tmp_path / "seq.itar", retry=3)  # type: ignore[arg-type]


def test_a_policy_is_a_value() -> None:
    # Compared, hashed and shown by its fields, and unchangeable (as a frozen dataclass is).
    policy = RetryPolicy(attempts=3, deadline=5.0)
    assert policy == RetryPolicy(attempts=3, deadline=5.0) and hash(policy) == hash(
        RetryPolicy(attempts=3, deadline=5.0)
    )
    for other in (
        RetryPolicy(),
        RetryPolicy(attempts=3, deadline=6.0),
        RetryPolicy(attempts=3, deadline=5.0, transient=bool),
    ):
        assert policy != other
    assert policy != (3, 0.1, 2.0, 5.0, policy.transient) and len({policy, RetryPolicy(attempts=3, deadline=5.0)}) == 1
    assert repr(policy).startswith("RetryPolicy(attempts=3, base_delay=0.1, max_delay=2.0, deadline=5.0, transient=")
    with pytest.raises(AttributeError, match="can't be changed"):
        policy.attempts = 4  # type: ignore[misc]
    with pytest.raises(AttributeError, match="can't be changed"):
        del policy.deadline  # type: ignore[misc]
    assert policy.attempts == 3 and policy.deadline == 5.0


def test_a_users_own_botocore_retries_are_kept() -> None:
    policy = RetryPolicy()
    ours = policy.storage_options("s3", {"anon": True})
    assert ours == {"anon": True, "config_kwargs": {"retries": {"total_max_attempts": 1}}}
    theirs = {"config_kwargs": {"retries": {"max_attempts": 3}, "read_timeout": 5}}
    assert policy.storage_options("s3", theirs) == theirs
    assert policy.storage_options("https", {"block_size": 0}) == {"block_size": 0}


# -- logging -------------------------------------------------------------------------------------


def test_each_retry_is_logged_with_its_attempt_cause_and_wait(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import re

    payloads = write(tmp_path)
    with start_http(tmp_path, faults={2: "503", 3: "cut"}) as server:  # GET 1 opens the archive
        url = f"{server.endpoint}/seq.itar"
        archive = IndexedTarArchive(url, index_tail_read_size=600, remote_range_reads=True)
        caplog.set_level(logging.WARNING, logger="ncore_like.archive.retry")
        assert archive["frames/005"] == payloads["frames/005"]
    messages = [record.getMessage() for record in caplog.records if record.name == "ncore_like.archive.retry"]
    assert len(messages) == 2, messages
    assert re.search(r"attempt 1 of 5: .*503.*retrying in 0\.\d\d s", messages[0]), messages[0]
    assert re.search(r"attempt 2 of 5: .*retrying in 0\.\d\d s", messages[1]), messages[1]
    assert all(url in message for message in messages)


def test_the_library_logs_nothing_unless_the_application_asks(tmp_path: Path) -> None:
    import subprocess
    import sys

    payloads = write(tmp_path)
    code = (
        "import logging, sys\n"
        "from ncore_like import IndexedTarArchive\n"
        "archive = IndexedTarArchive(sys.argv[1], index_tail_read_size=600, remote_range_reads=True)\n"
        "assert archive['frames/001'] == bytes([1]) * 200001\n"
        "assert all(isinstance(h, logging.NullHandler) for h in logging.getLogger('ncore_like').handlers)\n"
        "assert not logging.getLogger('ncore_like.archive.retry').handlers\n"
        "if len(sys.argv) > 2:\n"
        "    logging.basicConfig()\n"
        "    assert archive['frames/002'] == bytes([2]) * 200002\n"
    )
    assert payloads["frames/001"] == bytes([1]) * 200001
    # GETs 1 and 2 open the archive, 3 reads frames/001, 4 frames/002.
    with start_http(tmp_path, faults={3: "503"}) as server:
        url = f"{server.endpoint}/seq.itar"
        quiet = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True, check=True)
        assert "503" in [str(record["status"]) for record in server.requests()]
        assert quiet.stderr == ""  # a retry happened, and nothing was printed
    with start_http(tmp_path, faults={4: "503"}) as server:
        url = f"{server.endpoint}/seq.itar"
        told = subprocess.run([sys.executable, "-c", code, url, "-v"], capture_output=True, text=True, check=True)
        assert "WARNING:ncore_like.archive.retry:" in told.stderr and "retrying" in told.stderr
