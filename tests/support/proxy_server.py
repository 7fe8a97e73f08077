"""Reverse proxy with latency injection and a request log (for S3 tests against moto).

Run as a subprocess by :func:`tests.support.servers.start_proxy`::

    python -m tests.support.proxy_server --upstream http://127.0.0.1:PORT \
        [--port 0] [--latency 0.02] [--log FILE] [--faults 2=503,3=cut,5=reset]

It binds ``127.0.0.1`` only, prints ``PORT <n>`` on stdout once listening, and
refuses any upstream that is not ``http://127.0.0.1:PORT``.

Every request is forwarded unchanged (method, raw path and query, headers
including ``Host``, ``Range`` and ``Authorization``, body) except for
hop-by-hop headers and ``Expect`` (the proxy has already read the whole body).
The upstream status, headers and body are returned as they are (no
decompression, no redirect following). Keeping ``Host`` means an S3 SigV4
signature computed by the client for the proxy's address stays consistent.
Each request first sleeps ``--latency`` seconds (``asyncio.sleep``, so
concurrent requests overlap) and is then logged, see
:class:`tests.support._serving.RequestLog`.

``--faults`` fails chosen ``GET`` requests on purpose, by their number (from 1, counted
since the proxy started, retries included), as :mod:`tests.support.http_server` does, in
the shapes S3 clients meet: ``503`` (an S3 ``SlowDown`` error), ``500`` (``InternalError``)
and ``429`` answered without asking upstream; ``reset`` (the connection closed before any
response); ``cut`` (the upstream's headers and half its body, then the connection closed);
``stall`` (the same half, then nothing for :data:`STALL_SECONDS`); ``short`` (the upstream's
headers with a ``Content-Length`` of half its body, and that half: a well-formed response of
fewer bytes than asked for, no transport error). The log record's ``status`` says which
fault hit the request.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from tests.support._serving import LOOPBACK, RequestLog, base_arg_parser, new_record, respond, run

CHUNK_SIZE = 1 << 20

#: Headers that are never forwarded (RFC 9110 section 7.6.1, plus framing headers
#: that the proxy recomputes and ``Expect``).
HOP_BY_HOP = frozenset(
    name.lower()
    for name in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Expect",
    )
)

UPSTREAM_KEY = web.AppKey("upstream", URL)
LATENCY_KEY = web.AppKey("latency", float)
LOG_KEY = web.AppKey("log", RequestLog)
SESSION_KEY = web.AppKey("session", aiohttp.ClientSession)
#: Faults by the number of the ``GET`` they hit (1-based), see the module's docstring.
FAULTS_KEY = web.AppKey("faults", dict)
GETS_KEY = web.AppKey("gets", list)
#: The faults answered without asking upstream, as S3 words them (code, message).
_ERROR_FAULTS = {
    "503": ("SlowDown", "Please reduce your request rate."),
    "500": ("InternalError", "We encountered an internal error. Please try again."),
    "429": ("SlowDown", "Please reduce your request rate."),
}
_BODY_FAULTS = frozenset({"cut", "stall", "short"})
FAULT_KINDS = frozenset({*_ERROR_FAULTS, "reset", *_BODY_FAULTS})
#: How long a ``stall`` fault holds the rest of the body back (the client gives up first).
STALL_SECONDS = 60.0


def parse_faults(text: str) -> dict[int, str]:
    """``"2=503,3=cut"`` as ``{2: "503", 3: "cut"}``.

    Raises:
        ValueError: For an unknown kind or a number that is not a positive integer.
    """
    faults: dict[int, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        number, _, kind = item.partition("=")
        if kind not in FAULT_KINDS or not number.isdigit() or int(number) < 1:
            msg = f"bad fault {item!r}: expected N={'|'.join(sorted(FAULT_KINDS))} with N >= 1"
            raise ValueError(msg)
        faults[int(number)] = kind
    return faults


def check_upstream(upstream: str) -> URL:
    """Validate that ``upstream`` is a plain-HTTP loopback URL.

    Args:
        upstream: e.g. ``http://127.0.0.1:5000``.

    Returns:
        The parsed origin URL.

    Raises:
        ValueError: If it is not ``http://127.0.0.1:PORT`` (optionally with a
            trailing ``/``).
    """
    url = URL(upstream)
    if (
        url.scheme != "http"
        or url.host != LOOPBACK
        or url.explicit_port is None
        or url.path not in ("", "/")
        or url.query_string
        or url.user
    ):
        msg = f"upstream must look like http://{LOOPBACK}:PORT, got {upstream!r}"
        raise ValueError(msg)
    return url.origin()


def _filter_headers(headers: Iterable[tuple[str, str]], *, keep_length: bool) -> CIMultiDict[str]:
    """Drop hop-by-hop headers (and those named in ``Connection``).

    Args:
        headers: Header items (duplicates allowed).
        keep_length: Whether to keep ``Content-Length``.

    Returns:
        The filtered headers.
    """
    items = list(headers)
    dropped = set(HOP_BY_HOP)
    for name, value in items:
        if name.lower() == "connection":
            dropped.update(token.strip().lower() for token in value.split(","))
    if not keep_length:
        dropped.add("content-length")
    return CIMultiDict((name, value) for name, value in items if name.lower() not in dropped)


async def _body_chunks(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """Stream the upstream body.

    Args:
        response: Upstream response.

    Yields:
        Body chunks.
    """
    async for chunk in response.content.iter_chunked(CHUNK_SIZE):
        yield chunk


def _next_fault(request: web.Request) -> str | None:
    if request.method != "GET":
        return None
    gets = request.app[GETS_KEY]
    gets.append(1)
    fault: str | None = request.app[FAULTS_KEY].get(len(gets))
    return fault


async def _fail_early(request: web.Request, record: dict[str, Any], fault: str) -> web.StreamResponse:
    """Answers a faulty request without asking upstream: an S3 error, or a reset connection."""
    log = request.app[LOG_KEY]
    if fault == "reset":
        record["status"] = fault
        record["end"] = time.time()
        log.write(record)
        if request.transport is not None:
            request.transport.abort()
        raise ConnectionResetError("reset on purpose")
    code, message = _ERROR_FAULTS[fault]
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message><Resource>{request.path}</Resource></Error>"
    ).encode()
    headers = {"Content-Type": "application/xml", "Content-Length": str(len(body))}
    return await respond(request, log, record, status=int(fault), headers=headers, body=body)


async def _cut(
    request: web.Request, record: dict[str, Any], status: int, headers: CIMultiDict[str], body: bytes, fault: str
) -> web.StreamResponse:
    """Sends the upstream's headers (the full ``Content-Length``) and half its body, then
    (``stall``: after a long wait) closes the connection: the rest of the body never comes.
    ``short``: the half, announced as the whole body (``Content-Length``), ended cleanly."""
    record["status"] = fault
    record["bytes"] = len(body) // 2
    record["end"] = time.time()
    request.app[LOG_KEY].write(record)
    half = body[: len(body) // 2]
    if fault == "short":
        headers = CIMultiDict(headers)
        headers["Content-Length"] = str(len(half))
    response = web.StreamResponse(status=status, headers=headers)
    await response.prepare(request)
    await response.write(half)
    if fault == "short":
        await response.write_eof()
        return response
    if fault == "stall":
        await asyncio.sleep(STALL_SECONDS)
    if request.transport is not None:
        request.transport.abort()
    return response


async def handle(request: web.Request) -> web.StreamResponse:
    """Forward one request upstream after the configured latency (or fail it on purpose,
    see :data:`FAULTS_KEY`).

    Args:
        request: The request.

    Returns:
        The upstream's response, relayed.
    """
    record = new_record(request)
    app = request.app
    latency = app[LATENCY_KEY]
    if latency > 0:
        await asyncio.sleep(latency)
    fault = _next_fault(request)
    if fault is not None and fault not in _BODY_FAULTS:
        return await _fail_early(request, record, fault)
    log = app[LOG_KEY]
    body = await request.read()
    headers = _filter_headers(request.headers.items(), keep_length=True)
    url = URL(str(app[UPSTREAM_KEY]).rstrip("/") + request.raw_path, encoded=True)
    try:
        upstream = await app[SESSION_KEY].request(
            request.method,
            url,
            headers=headers,
            data=body if body else None,
            allow_redirects=False,
            skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
        )
    except (TimeoutError, aiohttp.ClientError) as exc:
        record["error"] = repr(exc)
        message = f"proxy error: {exc!r}".encode()
        return await respond(
            request,
            log,
            record,
            status=502,
            headers={"Content-Type": "text/plain", "Content-Length": str(len(message))},
            body=message,
        )
    async with upstream:
        out_headers = _filter_headers(upstream.headers.items(), keep_length=True)
        if fault in _BODY_FAULTS:
            return await _cut(request, record, upstream.status, out_headers, await upstream.read(), fault)
        has_body = request.method != "HEAD" and upstream.status not in (204, 304)
        chunks: bytes | AsyncIterator[bytes] = _body_chunks(upstream) if has_body else b""
        return await respond(request, log, record, status=upstream.status, headers=out_headers, body=chunks)


async def _client_session(app: web.Application) -> AsyncIterator[None]:
    """Own the upstream client session for the app's lifetime.

    Args:
        app: The application.

    Yields:
        Nothing; the session lives in ``app[SESSION_KEY]`` meanwhile.
    """
    connector = aiohttp.TCPConnector(limit=256, force_close=False)
    async with aiohttp.ClientSession(
        connector=connector,
        trust_env=False,
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=120),
    ) as session:
        app[SESSION_KEY] = session
        yield


def make_app(
    upstream: str, latency: float = 0.0, log: Path | None = None, faults: dict[int, str] | None = None
) -> web.Application:
    """Build the proxy application.

    Args:
        upstream: Upstream origin, ``http://127.0.0.1:PORT``.
        latency: Seconds to sleep before forwarding each request.
        log: JSON-lines request log file, or ``None``.
        faults: ``GET`` requests to fail on purpose, by number (see the module's docstring).

    Returns:
        The aiohttp application.
    """
    app = web.Application(client_max_size=1 << 40)
    app[UPSTREAM_KEY] = check_upstream(upstream)
    app[LATENCY_KEY] = float(latency)
    app[LOG_KEY] = RequestLog(log)
    app[FAULTS_KEY] = dict(faults or {})
    app[GETS_KEY] = []
    app.cleanup_ctx.append(_client_session)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).
    """
    parser: argparse.ArgumentParser = base_arg_parser(__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--upstream", required=True, help="http://127.0.0.1:PORT")
    parser.add_argument(
        "--faults",
        default="",
        help="faults by GET number, e.g. '2=503,3=cut,5=reset' (503, 500, 429, reset, cut, stall, short)",
    )
    args = parser.parse_args(argv)
    try:
        check_upstream(args.upstream)
        faults = parse_faults(args.faults)
    except ValueError as exc:
        parser.error(str(exc))
    run(make_app(args.upstream, args.latency, args.log, faults), args)


if __name__ == "__main__":
    main()
