"""Tests of the local test servers themselves (fsspec/s3fs/UPath only, no ncore_like)."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3  # type: ignore[import-untyped,unused-ignore]
import fsspec
import pytest
import s3fs
from fsspec.asyn import sync
from upath import UPath

from tests.support import servers
from tests.support.servers import ServerProcess, ServerStartError, start_http, start_moto, start_proxy

if TYPE_CHECKING:
    from tests.support.fixtures import HttpRoot

# Harmless when tests/conftest.py already loads the plugin; lets this file run on its own.

DATA = os.urandom(10_000)


def raw_request(
    endpoint: str, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """Send one request with http.client (no proxy, no fsspec logic)."""
    port = int(endpoint.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection(servers.LOOPBACK, port, timeout=10)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def all_overlap(records: list[dict[str, Any]]) -> bool:
    """True iff every [start, end] interval overlaps all others (all in flight at once)."""
    return bool(max(r["start"] for r in records) < min(r["end"] for r in records))


@pytest.mark.http
@pytest.mark.parametrize(
    ("start", "end"),
    [(0, 1), (10, 20), (9_990, 10_000), (5_000, None), (-7, None), (None, 4), (0, 10_000), (9_000, 20_000)],
)
def test_http_cat_file_ranges(http_root: HttpRoot, start: int | None, end: int | None) -> None:
    (http_root.directory / "data.bin").write_bytes(DATA)
    fs = fsspec.filesystem("http")
    url = f"{http_root.base_url}/data.bin"
    assert fs.cat_file(url, start=start, end=end) == DATA[start:end]
    (record,) = http_root.server.requests()
    assert record["method"] == "GET"
    assert record["path"].endswith("/data.bin")
    assert record["status"] == 206
    if start is not None and start < 0:
        assert record["range"] == f"bytes={start}"
    assert record["start"] <= record["end"]


@pytest.mark.http
def test_http_status_codes_and_headers(http_root: HttpRoot) -> None:
    (http_root.directory / "data.bin").write_bytes(DATA)
    endpoint = http_root.server.endpoint
    path = http_root.base_url.removeprefix(endpoint) + "/data.bin"

    status, headers, body = raw_request(endpoint, "GET", path)
    assert (status, headers["Content-Length"], body) == (200, str(len(DATA)), DATA)
    status, headers, body = raw_request(endpoint, "GET", path, {"Range": "bytes=100-199"})
    assert (status, headers["Content-Range"], headers["Content-Length"]) == (
        206,
        "bytes 100-199/10000",
        "100",
    )
    assert body == DATA[100:200]
    status, headers, body = raw_request(endpoint, "GET", path, {"Range": "bytes=-20000"})
    assert (status, headers["Content-Range"], body) == (206, "bytes 0-9999/10000", DATA)
    status, headers, body = raw_request(endpoint, "GET", path, {"Range": "bytes=10000-"})
    assert (status, headers["Content-Range"], body) == (416, "bytes */10000", b"")
    status, headers, body = raw_request(endpoint, "HEAD", path, {"Range": "bytes=5-"})
    assert (status, headers["Content-Length"], body) == (206, "9995", b"")
    status, _, _ = raw_request(endpoint, "GET", path + ".missing")
    assert status == 404

    fs = fsspec.filesystem("http")
    assert fs.info(f"{http_root.base_url}/data.bin")["size"] == len(DATA)
    with pytest.raises(FileNotFoundError):
        fs.cat_file(f"{http_root.base_url}/missing.bin")
    assert [r["status"] for r in http_root.server.requests()][:6] == [200, 206, 206, 416, 206, 404]


@pytest.mark.http
def test_http_put_and_listing(http_root: HttpRoot) -> None:
    fs = fsspec.filesystem("http")
    fs.pipe_file(f"{http_root.base_url}/sub/new.bin", DATA[:123])
    assert (http_root.directory / "sub" / "new.bin").read_bytes() == DATA[:123]
    assert fs.cat_file(f"{http_root.base_url}/sub/new.bin", start=3, end=6) == DATA[3:6]
    assert fs.ls(f"{http_root.base_url}/sub/", detail=False) == [f"{http_root.base_url}/sub/new.bin"]
    assert [r["method"] for r in http_root.server.requests()][:2] == ["PUT", "GET"]


@pytest.mark.s3
def test_s3_round_trip_through_proxy(s3_bucket: UPath, s3_proxy: ServerProcess) -> None:
    target = s3_bucket / "dir" / "object.bin"
    target.write_bytes(DATA)
    assert target.read_bytes() == DATA
    fs = s3_bucket.fs
    path = target.path  # note: s3_bucket.path is "<bucket>/", with a trailing slash

    s3_proxy.clear_requests()
    assert fs.cat_file(path, start=1_000, end=1_500) == DATA[1_000:1_500]
    (record,) = s3_proxy.requests()
    assert record["method"] == "GET"
    assert record["path"] == f"/{s3_bucket.drive}/dir/object.bin"
    assert record["range"] == "bytes=1000-1499"
    assert record["status"] == 206
    assert record["bytes"] == 500


@pytest.mark.s3
def test_s3_bucket_is_fresh(s3_bucket: UPath, s3_storage_options: dict[str, Any]) -> None:
    assert list(s3_bucket.iterdir()) == []
    assert UPath(f"s3://{s3_bucket.path}/x", **s3_storage_options).exists() is False


@pytest.mark.s3
def test_proxy_preserves_sigv4_signatures(aws_test_env: None) -> None:
    # moto verifies signatures after the first 3 (unauthenticated) IAM calls.
    with (
        start_moto(extra_env={"INITIAL_NO_AUTH_ACTION_COUNT": "3"}) as moto,
        start_proxy(moto.endpoint) as proxy,
    ):
        iam = boto3.client("iam", endpoint_url=moto.endpoint, region_name=servers.MOTO_REGION)
        iam.create_user(UserName="tester")
        key = iam.create_access_key(UserName="tester")["AccessKey"]
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="tester", PolicyName="all", PolicyDocument=json.dumps(policy))

        def filesystem(secret: str) -> s3fs.S3FileSystem:
            options = servers.s3_storage_options(proxy.endpoint)
            options.update(key=key["AccessKeyId"], secret=secret, skip_instance_cache=True)
            return s3fs.S3FileSystem(**options)

        fs = filesystem(key["SecretAccessKey"])
        fs.call_s3("create_bucket", Bucket="signed")
        fs.pipe_file("signed/a b+c~.bin", DATA)
        assert fs.cat_file("signed/a b+c~.bin", start=10, end=20) == DATA[10:20]
        with pytest.raises(PermissionError, match="signature"):
            filesystem("wrong-secret").cat_file("signed/a b+c~.bin", start=0, end=10)
        assert [r["status"] for r in proxy.requests()] == [200, 200, 206, 403]


@pytest.mark.http
def test_http_latency_requests_overlap(tmp_path: Path) -> None:
    (tmp_path / "data.bin").write_bytes(DATA)
    with start_http(tmp_path, latency=0.2) as server:
        fs = fsspec.filesystem("http", skip_instance_cache=True)
        url = f"{server.endpoint}/data.bin"

        async def gather() -> list[bytes]:
            return list(await asyncio.gather(*(fs._cat_file(url, start=i * 100, end=i * 100 + 50) for i in range(5))))

        began = time.monotonic()
        results = sync(fs.loop, gather)
        elapsed = time.monotonic() - began
        assert results == [DATA[i * 100 : i * 100 + 50] for i in range(5)]
        assert 0.2 <= elapsed < 0.6
        records = server.requests()
        assert len(records) == 5
        assert all(r["end"] - r["start"] >= 0.2 for r in records)
        assert all_overlap(records)
        assert servers.max_in_flight(records) == 5


@pytest.mark.s3
def test_proxy_latency_requests_overlap(moto_server: ServerProcess) -> None:
    direct = s3fs.S3FileSystem(**servers.s3_storage_options(moto_server.endpoint))
    direct.call_s3("create_bucket", Bucket="latency-test")
    direct.pipe_file("latency-test/data.bin", DATA)
    with start_proxy(moto_server.endpoint, latency=0.2) as proxy:
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **servers.s3_storage_options(proxy.endpoint))
        fs.call_s3("head_bucket", Bucket="latency-test")  # creates the client outside the timing
        proxy.clear_requests()

        async def gather() -> list[bytes]:
            return list(
                await asyncio.gather(
                    *(fs._cat_file("latency-test/data.bin", start=i * 100, end=i * 100 + 50) for i in range(5))
                )
            )

        began = time.monotonic()
        results = sync(fs.loop, gather)
        elapsed = time.monotonic() - began
        assert results == [DATA[i * 100 : i * 100 + 50] for i in range(5)]
        assert 0.2 <= elapsed < 0.6
        records = proxy.requests()
        assert sorted(r["range"] for r in records) == [f"bytes={i * 100}-{i * 100 + 49}" for i in range(5)]
        assert all(r["end"] - r["start"] >= 0.2 for r in records)
        assert all_overlap(records)
        assert servers.max_in_flight(records) == 5
    direct.rm("latency-test", recursive=True)


def test_server_lifecycle_and_start_errors(tmp_path: Path) -> None:
    server = start_http(tmp_path)
    assert server.is_running()
    assert raw_request(server.endpoint, "GET", "/")[0] == 200
    server.stop()
    server.stop()  # idempotent
    assert server.process.returncode is not None
    with pytest.raises(ConnectionRefusedError):
        raw_request(server.endpoint, "GET", "/")

    with pytest.raises(NotADirectoryError):
        start_http(tmp_path / "missing")
    with pytest.raises(ValueError, match="127.0.0.1"):
        start_proxy("http://example.com:80")
    with pytest.raises(ServerStartError, match="not a directory"):
        servers._start_aiohttp_server(
            "broken", "tests.support.http_server", ["--dir", str(tmp_path / "missing")], log=None, timeout=10
        )
