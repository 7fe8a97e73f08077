"""Pytest fixtures for the local test servers (load with ``pytest_plugins``).

``tests/conftest.py`` loads this module with::

    pytest_plugins = ["tests.support.fixtures"]

Fixtures:

* ``aws_test_env`` (session, autouse): test AWS credentials/region, no AWS
  config files, no instance metadata, no HTTP proxies (``NO_PROXY`` covers
  ``127.0.0.1``); restored after the session.
* ``moto_server`` (session): moto's standalone server.
* ``s3_proxy`` (session): zero-latency logging proxy in front of ``moto_server``.
* ``s3_storage_options`` (function): s3fs/UPath options pointing at ``s3_proxy``.
* ``s3_bucket`` (function): ``UPath("s3://<fresh bucket>", **s3_storage_options)``,
  with the proxy request log cleared.
* ``http_server`` (session): static HTTP server over ``http_server_root``.
* ``http_root`` (function): :class:`HttpRoot` ``(directory, base_url, server)``
  for a fresh subdirectory, with the request log cleared.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import s3fs  # type: ignore[import-untyped,unused-ignore]
from upath import UPath

from tests.support import servers
from tests.support.servers import (
    LOOPBACK,
    MOTO_KEY,
    MOTO_REGION,
    MOTO_SECRET,
    ServerProcess,
    start_http,
    start_moto,
    start_proxy,
)

_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "FTP_PROXY")
_counter = itertools.count()


class HttpRoot(NamedTuple):
    """A per-test directory served over HTTP.

    Attributes:
        directory: Local directory; ``directory / "a/b"`` is served at
            ``f"{base_url}/a/b"``.
        base_url: URL of ``directory`` (no trailing slash).
        server: The (session-wide) server, for its request log.
    """

    directory: Path
    base_url: str
    server: ServerProcess


@pytest.fixture(scope="session", autouse=True)
def aws_test_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Isolate the session from real AWS and from HTTP proxies.

    Removes every ``AWS_*`` variable and proxy variable, then sets test
    credentials, region ``us-east-1``, non-existent AWS config files,
    ``AWS_EC2_METADATA_DISABLED=true`` and ``NO_PROXY=127.0.0.1,localhost``.
    Everything is restored when the session ends.

    Args:
        tmp_path_factory: Pytest's session temp-dir factory.

    Yields:
        Nothing.
    """
    missing = tmp_path_factory.mktemp("aws-config") / "does-not-exist"
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.upper().startswith("AWS_") or name.upper() in _PROXY_VARS:
                patch.delenv(name)
        patch.setenv("AWS_ACCESS_KEY_ID", MOTO_KEY)
        patch.setenv("AWS_SECRET_ACCESS_KEY", MOTO_SECRET)
        patch.setenv("AWS_DEFAULT_REGION", MOTO_REGION)
        patch.setenv("AWS_CONFIG_FILE", str(missing))
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(missing))
        patch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        patch.setenv("NO_PROXY", f"{LOOPBACK},localhost")
        patch.setenv("no_proxy", f"{LOOPBACK},localhost")
        yield


@pytest.fixture(scope="session")
def moto_server(aws_test_env: None) -> Iterator[ServerProcess]:
    """Moto's standalone server for the whole session.

    Args:
        aws_test_env: Ensures the environment is isolated first.

    Yields:
        The running server (stopped at session end).
    """
    with start_moto() as server:
        yield server


@pytest.fixture(scope="session")
def s3_proxy(moto_server: ServerProcess) -> Iterator[ServerProcess]:
    """Zero-latency logging proxy in front of :func:`moto_server`.

    Args:
        moto_server: The upstream.

    Yields:
        The running proxy (stopped at session end).
    """
    with start_proxy(moto_server.endpoint) as proxy:
        yield proxy


@pytest.fixture
def s3_storage_options(s3_proxy: ServerProcess) -> dict[str, Any]:
    """Storage options for s3fs/UPath going through :func:`s3_proxy`.

    See :func:`tests.support.servers.s3_storage_options` (listings cache off;
    do not ``mkdir`` buckets with them, use ``call_s3("create_bucket")``).

    Args:
        s3_proxy: The proxy.

    Returns:
        A fresh options dict.
    """
    return servers.s3_storage_options(s3_proxy.endpoint)


@pytest.fixture
def s3_bucket(s3_storage_options: dict[str, Any], s3_proxy: ServerProcess) -> Iterator[UPath]:
    """A fresh, empty bucket for this test.

    The proxy request log is cleared right before the test runs. The bucket
    and its objects are deleted (best effort) afterwards.

    Args:
        s3_storage_options: Options pointing at the proxy.
        s3_proxy: The proxy (for clearing its log).

    Yields:
        ``UPath("s3://<bucket>", **s3_storage_options)``.
    """
    name = f"test-{next(_counter)}-{uuid.uuid4().hex[:12]}"
    fs = s3fs.S3FileSystem(**s3_storage_options)
    fs.call_s3("create_bucket", Bucket=name)
    s3_proxy.clear_requests()
    yield UPath(f"s3://{name}", **s3_storage_options)
    with contextlib.suppress(OSError, ValueError):
        fs.rm(name, recursive=True)


@pytest.fixture(scope="session")
def http_server_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory served by :func:`http_server`.

    Args:
        tmp_path_factory: Pytest's session temp-dir factory.

    Returns:
        The directory.
    """
    return tmp_path_factory.mktemp("http-root")


@pytest.fixture(scope="session")
def http_server(aws_test_env: None, http_server_root: Path) -> Iterator[ServerProcess]:
    """Static HTTP server (no latency) over :func:`http_server_root`.

    Args:
        aws_test_env: Ensures the environment is isolated first.
        http_server_root: Directory to serve.

    Yields:
        The running server (stopped at session end).
    """
    with start_http(http_server_root) as server:
        yield server


@pytest.fixture
def http_root(http_server: ServerProcess, http_server_root: Path) -> HttpRoot:
    """A fresh served directory for this test, with the request log cleared.

    Args:
        http_server: The session HTTP server.
        http_server_root: Its root directory.

    Returns:
        ``HttpRoot(directory, base_url, server)``.
    """
    name = f"t{next(_counter)}-{uuid.uuid4().hex[:8]}"
    directory = http_server_root / name
    directory.mkdir()
    http_server.clear_requests()
    return HttpRoot(directory, f"{http_server.endpoint}/{name}", http_server)
