"""Static-file HTTP server with ``Range`` support, latency injection and a request log.

Run as a subprocess by :func:`tests.support.servers.start_http`::

    python -m tests.support.http_server --dir DIR [--port 0] [--latency 0.02] [--log FILE]

It binds ``127.0.0.1`` only and prints ``PORT <n>`` on stdout once listening.

Behaviour:

* ``GET``/``HEAD`` on a file: ``200`` with the whole file, or ``206`` with
  ``Content-Range``/``Content-Length`` for a single satisfiable range
  (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``); ``416`` with
  ``Content-Range: bytes */SIZE`` for an unsatisfiable one. Syntactically
  invalid or multi-range headers are ignored (full ``200``), as RFC 9110 allows.
  Bodies are always ``application/octet-stream`` without any content coding.
* ``GET``/``HEAD`` on a directory: a minimal HTML listing (``<a href>`` links,
  as parsed by fsspec's HTTP filesystem).
* ``PUT``/``POST``: write the request body to the file (parents created),
  ``201``. ``DELETE``: remove a file, ``204``.
* Missing paths give ``404``; paths escaping the directory give ``403``.
* Every request first sleeps ``--latency`` seconds (``asyncio.sleep``, so
  concurrent requests overlap) and is logged, see
  :class:`tests.support._serving.RequestLog`.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import os
import re
import tempfile
import time
import urllib.parse
from collections.abc import AsyncIterator
from email.utils import formatdate
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.support._serving import RequestLog, base_arg_parser, new_record, respond, run

CHUNK_SIZE = 1 << 20
_RANGE_RE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.IGNORECASE)

ROOT_KEY = web.AppKey("root", Path)
LATENCY_KEY = web.AppKey("latency", float)
#: Faults by the number of the ``GET`` they hit (1-based): ``503``, ``429``, ``reset`` (the
#: connection closed before any response), ``cut`` (headers and half the body, then closed),
#: ``stall`` (headers and half the body, then nothing for STALL_SECONDS) or ``short`` (a
#: well-formed response whose ``Content-Length`` and body are half of the range asked for:
#: no transport error, only fewer bytes).
FAULTS_KEY = web.AppKey("faults", dict)
GETS_KEY = web.AppKey("gets", list)
LOG_KEY = web.AppKey("log", RequestLog)


#: How long a ``stall`` fault holds the rest of the body back (the client gives up first).
STALL_SECONDS = 60.0


class Unsatisfiable(Exception):
    """The requested range does not overlap the file."""


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """Interpret a ``Range`` header for a resource of ``size`` bytes.

    Args:
        header: The ``Range`` header value, or ``None``.
        size: Size of the resource in bytes.

    Returns:
        ``(first, last)`` inclusive byte positions of a satisfiable single
        range, or ``None`` if the whole resource should be served (no header,
        invalid syntax, or several ranges).

    Raises:
        Unsatisfiable: The range is syntactically valid but selects no byte.
    """
    if header is None:
        return None
    match = _RANGE_RE.match(header)
    if match is None:
        return None
    first_text, last_text = match.groups()
    if first_text == "" and last_text == "":
        return None
    if first_text == "":
        suffix = int(last_text)
        if suffix == 0 or size == 0:
            raise Unsatisfiable
        return max(0, size - suffix), size - 1
    first = int(first_text)
    if last_text == "":
        last = size - 1
    else:
        last = int(last_text)
        if last < first:
            return None
        last = min(last, size - 1)
    if first >= size:
        raise Unsatisfiable
    return first, last


async def _read_file(path: Path, offset: int, length: int) -> AsyncIterator[bytes]:
    """Yield ``length`` bytes of ``path`` starting at ``offset`` in chunks.

    Args:
        path: File to read.
        offset: First byte.
        length: Number of bytes.

    Yields:
        Chunks of at most :data:`CHUNK_SIZE` bytes.
    """
    with path.open("rb") as handle:
        handle.seek(offset)
        remaining = length
        while remaining > 0:
            chunk = handle.read(min(CHUNK_SIZE, remaining))
            if not chunk:
                break
            remaining -= len(chunk)
            yield chunk


def _resolve(root: Path, request: web.Request) -> Path | None:
    """Map the request path to a path below ``root``.

    Args:
        root: Served directory (resolved).
        request: The request.

    Returns:
        The target path, or ``None`` if it would escape ``root``.
    """
    relative = request.match_info["tail"]
    target = (root / relative).resolve()
    if target != root and root not in target.parents:
        return None
    return target


def _listing(directory: Path, request: web.Request) -> bytes:
    """Render a minimal HTML directory listing.

    Args:
        directory: Directory to list.
        request: The request (for building absolute links).

    Returns:
        UTF-8 HTML.
    """
    base = request.path if request.path.endswith("/") else request.path + "/"
    links = []
    for entry in sorted(directory.iterdir()):
        name = entry.name + ("/" if entry.is_dir() else "")
        href = html.escape(base + urllib.parse.quote(name), quote=True)
        links.append(f'<a href="{href}">{html.escape(name)}</a><br>')
    return ("<html><body>\n" + "\n".join(links) + "\n</body></html>\n").encode()


async def _get(request: web.Request, target: Path, record: dict[str, Any]) -> web.StreamResponse:
    """Serve ``GET``/``HEAD``.

    Args:
        request: The request.
        target: Resolved target path.
        record: Log record.

    Returns:
        The response.
    """
    log = request.app[LOG_KEY]
    if target.is_dir():
        body = _listing(target, request)
        headers = {"Content-Type": "text/html; charset=utf-8", "Content-Length": str(len(body))}
        return await respond(request, log, record, status=200, headers=headers, body=body)
    try:
        stat = target.stat()
    except (FileNotFoundError, NotADirectoryError):
        return await respond(request, log, record, status=404, headers={"Content-Length": "0"})
    size = stat.st_size
    headers = {
        "Content-Type": "application/octet-stream",
        "Accept-Ranges": "bytes",
        "Last-Modified": formatdate(stat.st_mtime, usegmt=True),
        "ETag": f'"{stat.st_mtime_ns:x}-{size:x}"',
    }
    try:
        selected = parse_range(request.headers.get("Range"), size)
    except Unsatisfiable:
        headers["Content-Range"] = f"bytes */{size}"
        headers["Content-Length"] = "0"
        return await respond(request, log, record, status=416, headers=headers)
    if selected is None:
        first, length, status = 0, size, 200
    else:
        first, last = selected
        length = last - first + 1
        status = 206
        headers["Content-Range"] = f"bytes {first}-{last}/{size}"
    headers["Content-Length"] = str(length)
    fault = _next_fault(request) if request.method == "GET" else None
    if fault is not None:
        return await _faulty(request, target, record, fault, headers, status, first, length)
    return await respond(request, log, record, status=status, headers=headers, body=_read_file(target, first, length))


def _next_fault(request: web.Request) -> str | None:
    gets = request.app[GETS_KEY]
    gets.append(1)
    fault: str | None = request.app[FAULTS_KEY].get(len(gets))
    return fault


async def _faulty(
    request: web.Request, target: Path, record: dict[str, Any], fault: str, headers: dict[str, str], status: int,
    first: int, length: int,
) -> web.StreamResponse:  # fmt: skip
    """Fails a ``GET`` on purpose (see :data:`FAULTS_KEY`); the log record's status says how."""
    log = request.app[LOG_KEY]
    if fault in ("503", "429"):
        return await respond(request, log, record, status=int(fault), headers={"Content-Length": "0"})
    record["status"] = fault
    record["end"] = time.time()
    log.write(record)
    transport = request.transport
    if fault == "reset":
        if transport is not None:
            transport.abort()
        raise ConnectionResetError("reset on purpose")
    half = b"".join([chunk async for chunk in _read_file(target, first, length)])[: length // 2]
    if fault == "short":  # ends cleanly: the client sees a complete response of fewer bytes
        headers = {**headers, "Content-Length": str(len(half))}
    response = web.StreamResponse(status=status, headers=headers)
    await response.prepare(request)
    await response.write(half)
    if fault == "short":
        await response.write_eof()
        return response
    if fault == "stall":
        await asyncio.sleep(STALL_SECONDS)  # the rest comes too late, if the client still waits
    if transport is not None:
        transport.abort()  # the rest of the body never comes
    return response


async def _put(request: web.Request, target: Path, record: dict[str, Any]) -> web.StreamResponse:
    """Serve ``PUT``/``POST``: store the body at ``target`` atomically.

    Args:
        request: The request.
        target: Resolved target path.
        record: Log record.

    Returns:
        The response.
    """
    log = request.app[LOG_KEY]
    if target.is_dir():
        return await respond(request, log, record, status=409, headers={"Content-Length": "0"})
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(dir=target.parent, prefix=".upload-")
    try:
        with os.fdopen(fd, "wb") as handle:
            async for chunk in request.content.iter_chunked(CHUNK_SIZE):
                handle.write(chunk)
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return await respond(request, log, record, status=201, headers={"Content-Length": "0"})


async def _delete(request: web.Request, target: Path, record: dict[str, Any]) -> web.StreamResponse:
    """Serve ``DELETE``.

    Args:
        request: The request.
        target: Resolved target path.
        record: Log record.

    Returns:
        The response.
    """
    log = request.app[LOG_KEY]
    try:
        target.unlink()
    except (FileNotFoundError, NotADirectoryError):
        return await respond(request, log, record, status=404, headers={"Content-Length": "0"})
    except (IsADirectoryError, PermissionError):
        return await respond(request, log, record, status=409, headers={"Content-Length": "0"})
    return await respond(request, log, record, status=204, headers={})


async def handle(request: web.Request) -> web.StreamResponse:
    """Dispatch any request after the configured latency.

    Args:
        request: The request.

    Returns:
        The response.
    """
    record = new_record(request)
    latency = request.app[LATENCY_KEY]
    if latency > 0:
        await asyncio.sleep(latency)
    log = request.app[LOG_KEY]
    target = _resolve(request.app[ROOT_KEY], request)
    if target is None:
        return await respond(request, log, record, status=403, headers={"Content-Length": "0"})
    if request.method in ("GET", "HEAD"):
        return await _get(request, target, record)
    if request.method in ("PUT", "POST"):
        return await _put(request, target, record)
    if request.method == "DELETE":
        return await _delete(request, target, record)
    return await respond(
        request,
        log,
        record,
        status=405,
        headers={"Allow": "GET, HEAD, PUT, POST, DELETE", "Content-Length": "0"},
    )


def make_app(
    root: Path, latency: float = 0.0, log: Path | None = None, faults: dict[int, str] | None = None
) -> web.Application:
    """Build the application.

    Args:
        root: Directory to serve.
        latency: Seconds to sleep before handling each request.
        log: JSON-lines request log file, or ``None``.

    Returns:
        The aiohttp application.
    """
    app = web.Application(client_max_size=1 << 40)
    app[ROOT_KEY] = root.resolve()
    app[LATENCY_KEY] = float(latency)
    app[FAULTS_KEY] = dict(faults or {})
    app[GETS_KEY] = []
    app[LOG_KEY] = RequestLog(log)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).
    """
    parser: argparse.ArgumentParser = base_arg_parser(__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--dir", type=Path, required=True, help="directory to serve")
    parser.add_argument(
        "--faults",
        default="",
        help="faults by GET number, e.g. '2=503,3=cut,5=reset' (503, 429, reset, cut, stall, short)",
    )
    args = parser.parse_args(argv)
    faults = {int(number): kind for number, _, kind in (item.partition("=") for item in args.faults.split(",") if item)}
    if not args.dir.is_dir():
        parser.error(f"not a directory: {args.dir}")
    run(make_app(args.dir, args.latency, args.log, faults), args)


if __name__ == "__main__":
    main()
