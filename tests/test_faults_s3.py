"""Archives on S3 read through a flaky network: the local S3 server behind a proxy that fails
chosen requests (S3's 503 SlowDown and 500, a reset connection, a body cut short, a body
that stalls). Scans and reads return every record exactly, only transient failures are
retried, a failure that persists ends in a clear error within bounded time, and the
requests are counted at the proxy."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from upath import UPath

from ncore_like import IndexedTarArchive, RetryPolicy
from ncore_like.archive import read_records, scan_records
from ncore_like.errors import RemoteStorageError
from tests.support import servers
from tests.support.servers import ServerProcess

# Small spans, so that a scan of the archive is several requests the faults can hit.
SPAN = 300_000


def payloads() -> dict[str, bytes]:
    return {f"frames/{index:03d}": bytes([index]) * (100_000 + 997 * index) for index in range(12)}


@pytest.fixture
def archive_url(s3_bucket: UPath, tmp_path: Path) -> str:
    written = payloads()
    with IndexedTarArchive(tmp_path / "seq.itar", "w") as archive:
        for key, payload in written.items():
            archive[key] = payload
    (s3_bucket / "seq.itar").write_bytes((tmp_path / "seq.itar").read_bytes())
    return str(s3_bucket / "seq.itar")


@pytest.fixture
def faulty(moto_server: ServerProcess, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """A proxy in front of the S3 server failing the GETs ``request.param`` names."""
    with servers.start_proxy(moto_server.endpoint, faults=request.param) as proxy:
        yield proxy


def opened(url: str, proxy: ServerProcess, **config: Any) -> IndexedTarArchive:
    """The archive read through ``proxy``: a small tail read (the records are not in it)."""
    return IndexedTarArchive(url, index_tail_read_size=600, storage_options=options(proxy, **config))


def options(proxy: ServerProcess, **config: Any) -> dict[str, Any]:
    """s3fs's options through ``proxy``; ``config``: botocore's settings (e.g. timeouts)."""
    result = servers.s3_storage_options(proxy.endpoint)
    if config:
        result["config_kwargs"] = config
    return result


def gets(proxy: ServerProcess) -> list[dict[str, Any]]:
    return [record for record in proxy.requests() if record["method"] == "GET"]


# GETs 1 and 2 read the archive's tail and index; the faults hit the requests after them.
EVERY_FAULT = {3: "503", 4: "reset", 5: "cut", 6: "500", 7: "stall"}


@pytest.mark.parametrize("faulty", [EVERY_FAULT], indirect=True)
def test_a_scan_through_faults_returns_every_record_exactly(archive_url: str, faulty: ServerProcess) -> None:
    # The stall is given up after botocore's read timeout (1 s here, 60 s by default).
    archive = opened(archive_url, faulty, read_timeout=1)
    started = time.monotonic()
    assert dict(scan_records(archive, span_bytes=SPAN, spans_ahead=1)) == payloads()
    assert time.monotonic() - started < 20
    requests = gets(faulty)
    statuses = [str(record["status"]) for record in requests]
    assert set(EVERY_FAULT.values()) <= set(statuses)
    # One request per span and one per fault, no more: a record is never read twice over.
    spans = sum(1 for status in statuses if status in ("200", "206"))
    assert len(requests) == spans + len(EVERY_FAULT)


@pytest.mark.parametrize("faulty", [{4: "503", 7: "cut", 10: "reset"}], indirect=True)
def test_bulk_reads_through_faults_return_every_record_exactly(archive_url: str, faulty: ServerProcess) -> None:
    archive = opened(archive_url, faulty)
    expected = payloads()
    assert dict(read_records(archive, list(expected))) == expected
    assert {"503", "cut", "reset"} <= {str(record["status"]) for record in gets(faulty)}


@pytest.mark.parametrize("faulty", [{3: "short", 5: "short"}], indirect=True)
@pytest.mark.parametrize("range_reads", [True, False])
def test_a_body_that_ends_cleanly_but_short_is_retried(
    archive_url: str, faulty: ServerProcess, range_reads: bool
) -> None:
    # A complete response (its Content-Length says so) of half the bytes asked for. (The
    # buffered path reads ahead: a small block, so that half a request misses record bytes.)
    buffered = {} if range_reads else {"default_block_size": 4096, "default_cache_type": "bytes"}
    archive = IndexedTarArchive(
        archive_url,
        index_tail_read_size=600,
        remote_range_reads=range_reads,
        storage_options={**options(faulty), **buffered},
    )
    expected = payloads()
    assert archive["frames/004"] == expected["frames/004"]
    assert dict(scan_records(archive, ["frames/005"])) == {"frames/005": expected["frames/005"]}
    requests = [(str(record["status"]), record["range"]) for record in gets(faulty)]
    # Each short answer is followed by a request for the bytes it lacked.
    assert [status for status, _ in requests[2:6]] == ["short", "206", "short", "206"], requests


@pytest.mark.parametrize("faulty", [{number: "503" for number in range(3, 60)}], indirect=True)
def test_a_failure_that_persists_ends_in_a_clear_error_in_bounded_time(
    archive_url: str, faulty: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3fs  # type: ignore[import-untyped,unused-ignore]

    # botocore's and s3fs's own retries off (they multiply ours: 5 x 5 x 5 attempts within
    # our 30 s deadline by default): our loop's 5 attempts remain.
    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)
    archive = opened(archive_url, faulty, retries={"total_max_attempts": 1})
    started = time.monotonic()
    with pytest.raises(RemoteStorageError, match=r"record 'frames/003'.*failed 5 times") as raised:
        archive["frames/003"]
    assert time.monotonic() - started < 10
    assert raised.value.archive == archive_url and raised.value.key == "frames/003"
    assert len(gets(faulty)) == 2 + 5  # the tail and the index, then five attempts


@pytest.mark.parametrize("faulty", [{number: "503" for number in range(3, 60)}], indirect=True)
@pytest.mark.parametrize("attempts", [5, 2])
def test_the_retry_policy_replaces_the_filesystems_own_retries(
    archive_url: str, faulty: ServerProcess, attempts: int
) -> None:
    # No setting of s3fs's or botocore's retries here: the policy sets them to one attempt,
    # so that a failure that persists costs its attempts, not five times five times them.
    policy = RetryPolicy(attempts=attempts)
    archive = IndexedTarArchive(archive_url, index_tail_read_size=600, storage_options=options(faulty), retry=policy)
    started = time.monotonic()
    with pytest.raises(RemoteStorageError, match=rf"record 'frames/003'.*failed {attempts} times"):
        archive["frames/003"]
    assert time.monotonic() - started <= policy.worst_case_seconds(1.0)  # 503s answer at once
    assert len(gets(faulty)) == 2 + attempts  # the tail and the index, then the attempts


@pytest.mark.parametrize("faulty", [{}], indirect=True)
def test_a_missing_object_is_not_retried(archive_url: str, faulty: ServerProcess) -> None:
    archive = opened(archive_url, faulty)
    UPath(archive_url, **options(faulty)).unlink()
    faulty.clear_requests()
    with pytest.raises(FileNotFoundError):
        archive["frames/001"]
    assert len(gets(faulty)) == 1
