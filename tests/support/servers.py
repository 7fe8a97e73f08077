"""Local test servers (moto S3, static HTTP with ``Range``, latency proxy) as subprocesses.

Everything here binds and connects to ``127.0.0.1`` only. Each server runs in
its own subprocess, is started on a free loopback port, and is stopped by its
own pid (:meth:`ServerProcess.stop`: SIGTERM, bounded wait, SIGKILL if needed;
also registered with :mod:`atexit`). Each server also exits by itself when its
stdin pipe closes, so none outlives a parent that was killed. Startup waits are
bounded; a server that fails to start raises :class:`ServerStartError` with its
stderr.

Usable from pytest (see :mod:`tests.support.fixtures`) and from plain scripts
(run as modules from the repository root, ``python -m scripts.bench_x``)::

    from tests.support.servers import s3_storage_options, start_http, start_moto, start_proxy

    with start_http(Path("/data"), latency=0.02) as http:
        url = f"{http.endpoint}/some/file.bin"
        ...

    with start_moto() as moto, start_proxy(moto.endpoint, latency=0.02) as s3:
        storage_options = s3_storage_options(s3.endpoint)
        ...

Request logs: the HTTP server and the proxy append one JSON line per handled
request (see :meth:`ServerProcess.requests`). A record is written before the
last byte of its response is sent, so once a client has received a response its
record is already in the log. To check that requests ran concurrently, look for
overlapping ``[start, end]`` intervals, e.g. ``max(r["start"] for r in recs) <
min(r["end"] for r in recs)`` means all of ``recs`` were in flight at once, and
:func:`max_in_flight` gives the peak number of concurrent requests.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any

#: The only address servers bind to and clients connect to.
LOOPBACK = "127.0.0.1"
#: Credentials and region accepted by moto (any credentials work).
MOTO_KEY = "testing"
MOTO_SECRET = "testing"
MOTO_REGION = "us-east-1"

DEFAULT_START_TIMEOUT = 30.0
DEFAULT_STOP_TIMEOUT = 5.0

_REPO_ROOT = Path(__file__).resolve().parents[2]
_PROXY_VARS = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "FTP_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "ftp_proxy",
)


class ServerStartError(RuntimeError):
    """A server subprocess did not come up in time (message includes its stderr)."""


def max_in_flight(records: list[dict[str, Any]]) -> int:
    """Return the largest number of requests that were in flight at the same time.

    Computed from the ``[start, end]`` intervals of request-log records (see
    :meth:`ServerProcess.requests`): ``max_in_flight(recs) == len(recs)`` means
    all of them overlapped; ``1`` means they were strictly sequential.

    Args:
        records: Request-log records.

    Returns:
        The maximum overlap (0 for no records).
    """
    events = sorted(
        [(float(r["start"]), 1) for r in records] + [(float(r["end"]), -1) for r in records],
        key=lambda event: (event[0], event[1]),
    )
    current = best = 0
    for _, delta in events:
        current += delta
        best = max(best, current)
    return best


def loopback_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Return an environment that keeps HTTP traffic on the loopback interface.

    Proxy variables are removed and ``NO_PROXY``/``no_proxy`` are set to
    ``127.0.0.1,localhost``.

    Args:
        base: Environment to start from (default: a copy of ``os.environ``).

    Returns:
        A new environment mapping.
    """
    env = dict(os.environ if base is None else base)
    for name in _PROXY_VARS:
        env.pop(name, None)
    env["NO_PROXY"] = env["no_proxy"] = f"{LOOPBACK},localhost"
    return env


def s3_storage_options(endpoint: str) -> dict[str, Any]:
    """Build s3fs storage options for a moto (or proxy) endpoint.

    Args:
        endpoint: e.g. ``http://127.0.0.1:PORT``.

    Returns:
        Options for ``s3fs.S3FileSystem(**opts)`` / ``UPath("s3://...", **opts)``:
        explicit test credentials, region ``us-east-1`` and the listings
        (``ls``/``info``) cache disabled. The fsspec *instance* cache is left
        on: with ``skip_instance_cache=True`` every derived ``UPath`` gets a
        new S3 client, costing ~0.1-0.2 s on its first request.

    Note:
        With ``region_name="us-east-1"`` in ``client_kwargs``, s3fs'
        ``mkdir("bucket")`` sends ``LocationConstraint=us-east-1``, which moto
        (like AWS) rejects; create buckets with
        ``fs.call_s3("create_bucket", Bucket=name)`` instead.
    """
    return {
        "endpoint_url": endpoint,
        "key": MOTO_KEY,
        "secret": MOTO_SECRET,
        "client_kwargs": {"region_name": MOTO_REGION},
        "use_listings_cache": False,
    }


class ServerProcess:
    """A running server subprocess.

    Attributes:
        name: Human-readable name (for messages).
        process: The :class:`subprocess.Popen` object.
        endpoint: Base URL, ``http://127.0.0.1:PORT`` (no trailing slash).
        log_path: JSON-lines request log, or ``None`` if the server has none.
    """

    def __init__(
        self,
        name: str,
        process: subprocess.Popen[bytes],
        endpoint: str,
        *,
        log_path: Path | None,
        stderr_path: Path,
        workdir: Path | None,
    ) -> None:
        """Wrap an already started process (use the ``start_*`` functions instead).

        Args:
            name: Human-readable name.
            process: The started process.
            endpoint: Base URL.
            log_path: Request log, or ``None``.
            stderr_path: File receiving the process' stderr.
            workdir: Temporary directory owned by this object (removed by
                :meth:`stop`), or ``None``.
        """
        self.name = name
        self.process = process
        self.endpoint = endpoint
        self.log_path = log_path
        self._stderr_path = stderr_path
        self._workdir = workdir
        self._stopped = False
        self._lock = threading.Lock()
        atexit.register(self.stop)

    @property
    def pid(self) -> int:
        """Process id of the server."""
        return self.process.pid

    @property
    def port(self) -> int:
        """TCP port the server listens on."""
        return int(self.endpoint.rsplit(":", 1)[1])

    def is_running(self) -> bool:
        """Return whether the process is still alive.

        Returns:
            ``True`` if it has not exited.
        """
        return self.process.poll() is None

    def stderr_text(self) -> str:
        """Return what the server wrote to stderr so far (empty after :meth:`stop`).

        Returns:
            The decoded stderr contents.
        """
        try:
            return self._stderr_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def requests(self) -> list[dict[str, Any]]:
        """Return the logged requests, oldest first.

        Each record has ``method``, ``path`` (decoded, without query),
        ``query`` (raw query string), ``range`` (``Range`` header or ``None``),
        ``start`` (``time.time()`` when received, before the injected latency),
        ``end`` (``time.time()`` just before the last byte of the response was
        sent), ``status`` and ``bytes`` (body bytes sent); plus ``error`` if
        sending failed. Two requests ran concurrently iff their
        ``[start, end]`` intervals overlap.

        Returns:
            The records.

        Raises:
            RuntimeError: If this server has no request log (moto).
        """
        if self.log_path is None:
            msg = f"{self.name} has no request log"
            raise RuntimeError(msg)
        try:
            text = self.log_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        records: list[dict[str, Any]] = []
        for line in text.splitlines(keepends=True):
            if line.endswith("\n"):
                records.append(json.loads(line))
        return records

    def clear_requests(self) -> None:
        """Truncate the request log.

        Raises:
            RuntimeError: If this server has no request log (moto).
        """
        if self.log_path is None:
            msg = f"{self.name} has no request log"
            raise RuntimeError(msg)
        self.log_path.write_bytes(b"")

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
        """Stop the process (idempotent): SIGTERM, wait, SIGKILL if needed.

        Also removes the temporary directory holding the logs.

        Args:
            timeout: Seconds to wait after SIGTERM before killing.
        """
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        atexit.unregister(self.stop)
        _terminate(self.process, timeout)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> ServerProcess:
        """Return ``self``."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server."""
        self.stop()

    def __repr__(self) -> str:
        """Short description."""
        state = "running" if self.is_running() else "stopped"
        return f"<ServerProcess {self.name} pid={self.pid} {self.endpoint} {state}>"


def _terminate(process: subprocess.Popen[bytes], timeout: float) -> None:
    """Terminate ``process`` by pid with bounded waits and close its pipes.

    Args:
        process: The process.
        timeout: Seconds to wait after SIGTERM (and after SIGKILL).
    """
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def _read_first_line(stream: IO[bytes], timeout: float) -> bytes | None:
    """Read one line from ``stream`` with a timeout.

    Args:
        stream: A pipe.
        timeout: Seconds to wait.

    Returns:
        The line (``b""`` at EOF) or ``None`` on timeout.
    """
    lines: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        return None


def _start_failure(name: str, process: subprocess.Popen[bytes], stderr_path: Path, reason: str) -> ServerStartError:
    """Stop a failed server and build the error describing why.

    Args:
        name: Server name.
        process: The process (terminated here).
        stderr_path: Its stderr file.
        reason: Short description.

    Returns:
        The exception to raise.
    """
    _terminate(process, DEFAULT_STOP_TIMEOUT)
    try:
        stderr = stderr_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        stderr = ""
    return ServerStartError(
        f"{name} failed to start ({reason}; exit code {process.returncode}).\n--- stderr ---\n{stderr[-8000:]}"
    )


def _start_aiohttp_server(
    name: str,
    module: str,
    args: list[str],
    *,
    log: Path | None,
    timeout: float,
) -> ServerProcess:
    """Start one of the aiohttp servers and wait for its ``PORT`` line.

    Args:
        name: Server name.
        module: Module to run with ``python -m``.
        args: Extra command-line arguments.
        log: Request log path, or ``None`` to use a fresh temporary file.
        timeout: Startup timeout in seconds.

    Returns:
        The running server.

    Raises:
        ServerStartError: If it does not report its port in time.
    """
    workdir = Path(tempfile.mkdtemp(prefix=f"ncore-test-{name}-"))
    log_path = log.resolve() if log is not None else workdir / "requests.jsonl"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_bytes(b"")
    stderr_path = workdir / "stderr.txt"
    command = [
        sys.executable,
        "-m",
        module,
        "--port",
        "0",
        "--log",
        str(log_path),
        "--exit-on-stdin-eof",
        *args,
    ]
    env = _child_env()
    with stderr_path.open("wb") as stderr_file:
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr_file,
            cwd=_REPO_ROOT,
            env=env,
        )
    assert process.stdout is not None
    line = _read_first_line(process.stdout, timeout)
    if line is None:
        error = _start_failure(name, process, stderr_path, f"no port after {timeout:.0f}s")
        shutil.rmtree(workdir, ignore_errors=True)
        raise error
    text = line.decode("ascii", errors="replace").strip()
    if not text.startswith("PORT "):
        error = _start_failure(name, process, stderr_path, f"unexpected output {text!r}")
        shutil.rmtree(workdir, ignore_errors=True)
        raise error
    endpoint = f"http://{LOOPBACK}:{int(text.split()[1])}"
    return ServerProcess(
        name,
        process,
        endpoint,
        log_path=log_path,
        stderr_path=stderr_path,
        workdir=workdir,
    )


def start_http(
    directory: Path,
    latency: float = 0.0,
    *,
    log: Path | None = None,
    timeout: float = DEFAULT_START_TIMEOUT,
    faults: dict[int, str] | None = None,
) -> ServerProcess:
    """Start a static-file HTTP server (``GET``/``HEAD`` with ``Range``, ``PUT``, ``DELETE``).

    See :mod:`tests.support.http_server` for the exact behaviour. URLs map to
    paths below ``directory``: ``f"{server.endpoint}/a/b.bin"`` is
    ``directory / "a/b.bin"``.

    Args:
        directory: Directory to serve (must exist).
        latency: Seconds each request sleeps before being handled.
        log: Request log file (default: a temporary file removed on stop).
        timeout: Startup timeout in seconds.
        faults: GETs (by number, from 1) to fail on purpose: ``"503"``, ``"429"``,
            ``"reset"`` or ``"cut"`` (see :mod:`tests.support.http_server`).

    Returns:
        The running server, with a request log.

    Raises:
        ServerStartError: If it does not come up within ``timeout``.
        NotADirectoryError: If ``directory`` is not a directory.
    """
    directory = Path(directory).resolve()
    if not directory.is_dir():
        raise NotADirectoryError(str(directory))
    return _start_aiohttp_server(
        "http",
        "tests.support.http_server",
        [
            "--dir",
            str(directory),
            "--latency",
            repr(float(latency)),
            "--faults",
            ",".join(f"{number}={kind}" for number, kind in (faults or {}).items()),
        ],
        log=log,
        timeout=timeout,
    )


def start_proxy(
    upstream: str,
    latency: float = 0.0,
    *,
    log: Path | None = None,
    timeout: float = DEFAULT_START_TIMEOUT,
    faults: dict[int, str] | None = None,
) -> ServerProcess:
    """Start a logging reverse proxy in front of ``upstream`` (typically moto).

    Requests are forwarded unchanged (including ``Host`` and ``Authorization``)
    after sleeping ``latency`` seconds each; see :mod:`tests.support.proxy_server`.

    Args:
        upstream: Upstream origin, must be ``http://127.0.0.1:PORT``.
        latency: Seconds each request sleeps before being forwarded.
        log: Request log file (default: a temporary file removed on stop).
        timeout: Startup timeout in seconds.
        faults: GETs (by number, from 1) to fail on purpose: ``"503"``, ``"500"``, ``"429"``,
            ``"reset"`` or ``"cut"`` (see :mod:`tests.support.proxy_server`).

    Returns:
        The running proxy, with a request log.

    Raises:
        ServerStartError: If it does not come up within ``timeout``.
        ValueError: If ``upstream`` is not a loopback ``http`` origin.
    """
    host_port = upstream.removeprefix(f"http://{LOOPBACK}:").rstrip("/")
    if not upstream.startswith(f"http://{LOOPBACK}:") or not host_port.isdigit():
        msg = f"upstream must look like http://{LOOPBACK}:PORT, got {upstream!r}"
        raise ValueError(msg)
    return _start_aiohttp_server(
        "proxy",
        "tests.support.proxy_server",
        [
            "--upstream",
            upstream,
            "--latency",
            repr(float(latency)),
            "--faults",
            ",".join(f"{number}={kind}" for number, kind in (faults or {}).items()),
        ],
        log=log,
        timeout=timeout,
    )


def _free_port() -> int:
    """Return a currently free loopback TCP port.

    Returns:
        The port number.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _moto_command(port: int) -> list[str]:
    """Build the command line running moto's standalone server.

    Args:
        port: Port to bind.

    Returns:
        ``python -m tests.support.moto_runner -H 127.0.0.1 -p PORT``: the same
        server as ``moto_server``/``python -m moto.server``, plus a watchdog that
        stops moto when its stdin is closed (i.e. when this process dies).
    """
    return [sys.executable, "-m", "tests.support.moto_runner", "-H", LOOPBACK, "-p", str(port)]


def _child_env() -> dict[str, str]:
    """Environment for server subprocesses: loopback only, repository importable.

    Returns:
        The environment.
    """
    env = loopback_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH")]))
    env.pop("MOTO_PORT", None)
    return env


def _http_status(port: int, method: str, path: str, timeout: float) -> int | None:
    """Send one request to ``127.0.0.1:port`` (never through a proxy).

    Args:
        port: Port.
        method: HTTP method.
        path: Request path.
        timeout: Socket timeout in seconds.

    Returns:
        The response status, or ``None`` if the connection failed.
    """
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        response.read()
        return response.status
    except OSError:
        return None
    finally:
        connection.close()


def start_moto(
    timeout: float = DEFAULT_START_TIMEOUT,
    attempts: int = 3,
    *,
    extra_env: Mapping[str, str] | None = None,
) -> ServerProcess:
    """Start moto's standalone server (all AWS services, in memory) on a free port.

    Runs ``moto.server.main`` (what the ``moto_server`` script runs) with
    ``-H 127.0.0.1 -p PORT`` via :mod:`tests.support.moto_runner`, which adds a
    parent-death watchdog.

    Any credentials are accepted (use :data:`MOTO_KEY`/:data:`MOTO_SECRET`),
    region :data:`MOTO_REGION`; bucket names need at least 3 characters;
    signatures are not verified. Reset all state with :func:`reset_moto`.
    Moto has no request log (put :func:`start_proxy` in front of it for that).

    Args:
        timeout: Startup timeout in seconds (per attempt).
        attempts: How often to retry with another port if the chosen one was
            taken in the meantime.
        extra_env: Extra environment variables for moto, e.g.
            ``{"INITIAL_NO_AUTH_ACTION_COUNT": "3"}`` to make it verify
            signatures after the first three requests.

    Returns:
        The running server.

    Raises:
        ServerStartError: If it does not come up within ``timeout``.
    """
    env = _child_env()
    env.update(extra_env or {})
    last_error: ServerStartError | None = None
    for _ in range(max(1, attempts)):
        workdir = Path(tempfile.mkdtemp(prefix="ncore-test-moto-"))
        stderr_path = workdir / "stderr.txt"
        port = _free_port()
        with stderr_path.open("wb") as stderr_file:
            process = subprocess.Popen(
                _moto_command(port),
                stdin=subprocess.PIPE,
                stdout=stderr_file,
                stderr=stderr_file,
                cwd=_REPO_ROOT,
                env=env,
            )
        deadline = time.monotonic() + timeout
        ready = False
        while time.monotonic() < deadline and process.poll() is None:
            if _http_status(port, "GET", "/moto-api/data.json", timeout=2.0) == 200:
                ready = process.poll() is None
                break
            time.sleep(0.05)
        if ready:
            return ServerProcess(
                "moto",
                process,
                f"http://{LOOPBACK}:{port}",
                log_path=None,
                stderr_path=stderr_path,
                workdir=workdir,
            )
        reason = "exited" if process.poll() is not None else f"not ready after {timeout:.0f}s"
        last_error = _start_failure("moto", process, stderr_path, reason)
        shutil.rmtree(workdir, ignore_errors=True)
    assert last_error is not None
    raise last_error


def reset_moto(server: ServerProcess | str, timeout: float = 10.0) -> None:
    """Drop all moto state (``POST /moto-api/reset``).

    Args:
        server: The moto server or its endpoint (``http://127.0.0.1:PORT``).
        timeout: Socket timeout in seconds.

    Raises:
        RuntimeError: If moto does not answer 200.
    """
    endpoint = server.endpoint if isinstance(server, ServerProcess) else server
    port = int(endpoint.rstrip("/").rsplit(":", 1)[1])
    status = _http_status(port, "POST", "/moto-api/reset", timeout=timeout)
    if status != 200:
        msg = f"moto reset at {endpoint} failed with status {status}"
        raise RuntimeError(msg)
