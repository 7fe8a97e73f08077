"""Shared machinery for the aiohttp test-server subprocesses.

This module is imported by :mod:`tests.support.http_server` and
:mod:`tests.support.proxy_server`, which are run as subprocesses by
:mod:`tests.support.servers`. It is not meant to be used from tests directly.

Protocol between parent and child:

* The child binds ``127.0.0.1`` (port ``0`` by default, i.e. a free port chosen
  by the kernel) and prints exactly one line ``PORT <number>`` on stdout once it
  is accepting connections. Nothing else is ever written to stdout.
* The child stops on SIGTERM/SIGINT, or when its stdin reaches EOF (so it also
  goes away if the parent dies without stopping it).
* Every handled request is appended to the request log (if one is configured)
  as one JSON line, see :class:`RequestLog`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

#: Only address the servers ever bind to.
LOOPBACK = "127.0.0.1"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RequestLog:
    """Append-only JSON-lines request log.

    Each record is written with a single ``write`` call on a file opened in
    append mode, so lines never interleave and the parent may truncate the file
    at any time.

    Args:
        path: File to append to, or ``None`` to disable logging.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one record as a JSON line.

        Args:
            record: JSON-serialisable mapping.
        """
        if self.path is None:
            return
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line)


def new_record(request: web.Request) -> dict[str, Any]:
    """Create the log record for a request that was just received.

    Args:
        request: The incoming request.

    Returns:
        A record with ``method``, ``path``, ``query``, ``range`` and ``start``
        filled in; ``end``, ``status`` and ``bytes`` are set when responding.
    """
    return {
        "method": request.method,
        "path": request.path,
        "query": request.query_string,
        "range": request.headers.get("Range"),
        "start": time.time(),
        "end": None,
        "status": None,
        "bytes": 0,
    }


async def _single(data: bytes) -> AsyncIterator[bytes]:
    """Yield ``data`` once (if non-empty).

    Args:
        data: The bytes to yield.

    Yields:
        ``data``.
    """
    if data:
        yield data


async def respond(
    request: web.Request,
    log: RequestLog,
    record: dict[str, Any],
    *,
    status: int,
    headers: Mapping[str, str] | Any,
    body: bytes | AsyncIterator[bytes] = b"",
) -> web.StreamResponse:
    """Send a response and log the request.

    The log record is written *before* the last body chunk (or, without a
    body, before the headers) is handed to the transport, so by the time a
    client has received the complete response its record is guaranteed to be
    in the log. ``end`` is therefore the time just before the final bytes were
    sent.

    Args:
        request: The request being answered.
        log: Where to log the request.
        record: Record created by :func:`new_record` for this request.
        status: HTTP status code.
        headers: Response headers (a mapping or multidict).
        body: Body bytes or an async iterator of body chunks. Ignored for HEAD.

    Returns:
        The prepared and finished response.
    """
    response = web.StreamResponse(status=status, headers=headers)
    record["status"] = status
    chunks = _single(body) if isinstance(body, bytes) else body
    logged = False

    def finish_record() -> None:
        nonlocal logged
        if not logged:
            logged = True
            record["end"] = time.time()
            log.write(record)

    try:
        if request.method == "HEAD":
            finish_record()
            await response.prepare(request)
        else:
            previous: bytes | None = None
            async for chunk in chunks:
                if not chunk:
                    continue
                if previous is None:
                    await response.prepare(request)
                else:
                    await response.write(previous)
                record["bytes"] += len(chunk)
                previous = chunk
            finish_record()
            if previous is None:
                await response.prepare(request)
            else:
                await response.write(previous)
        await response.write_eof()
    except BaseException as exc:
        record["error"] = repr(exc)
        finish_record()
        raise
    return response


def base_arg_parser(description: str) -> argparse.ArgumentParser:
    """Create an argument parser with the options shared by all servers.

    Args:
        description: Parser description.

    Returns:
        A parser with ``--port``, ``--latency``, ``--log`` and
        ``--exit-on-stdin-eof``.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--port", type=int, default=0, help="port (0: any free one)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds to sleep per request")
    parser.add_argument("--log", type=Path, default=None, help="JSON-lines request log")
    parser.add_argument(
        "--exit-on-stdin-eof",
        action="store_true",
        help="stop when stdin is closed (used when run by tests.support.servers)",
    )
    return parser


class _StdinWatcher(asyncio.Protocol):
    """Sets an event when the parent closes our stdin (or dies)."""

    def __init__(self, stop: asyncio.Event) -> None:
        self._stop = stop

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop.set()


async def _serve(app: web.Application, port: int, watch_stdin: bool) -> None:
    """Serve ``app`` on the loopback interface until asked to stop.

    Args:
        app: The application to serve.
        port: Port to bind, ``0`` for any free port.
        watch_stdin: Also stop when stdin reaches EOF.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    if watch_stdin:
        await loop.connect_read_pipe(lambda: _StdinWatcher(stop), sys.stdin)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, port))
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.SockSite(runner, sock, backlog=1024)
        await site.start()
        bound_port = sock.getsockname()[1]
        sys.stdout.write(f"PORT {bound_port}\n")
        sys.stdout.flush()
        await stop.wait()
    finally:
        await runner.cleanup()


def run(app: web.Application, args: argparse.Namespace) -> None:
    """Run ``app`` until SIGTERM/SIGINT (or EOF on stdin, if requested).

    Args:
        app: The application to serve.
        args: Parsed arguments from a :func:`base_arg_parser` parser.
    """
    asyncio.run(_serve(app, int(args.port), bool(args.exit_on_stdin_eof)))
