"""The viewer's web server (aiohttp): the page, and the JSON and binary documents it reads.

It runs on an event loop of its own, in a thread of its own, so that it serves a notebook
(whose loop is busy) as well as the command line; reads run on a small thread pool, off
the loop.

Safe by default: read-only (routes of ``GET`` and ``HEAD`` only, the hierarchy opened for
reading); every request carries the access token, in the URL (``?token=``, as printed), in
a cookie set by the first visit (then the page moves to ``/``, so the token leaves the
address bar and the history), or as ``Authorization: token ...``; nodes are named by their
path in the hierarchy and looked up, never joined to a file path; blobs are served as the
image type their first bytes say, or as bytes, never as something a browser would run
(``nosniff``, a strict content security policy).
"""

from __future__ import annotations

import asyncio
import hmac
import importlib.resources
import json
import math
import secrets
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aiohttp import web

from ..errors import NcoreLikeError
from ._catalog import Catalog, NodeNotFound
from ._frames import Frames
from ._previews import PreviewError, preview

__all__ = ["Server", "blob_type"]

T = TypeVar("T")

#: Files of the page, served by name (there is no other way to reach a file).
_STATIC = {
    "viewer.js": "text/javascript",
    "viewer.css": "text/css",
}
#: Image types by their first bytes; other blobs are bytes (shown as hex).
_MAGIC: tuple[tuple[bytes, int, str], ...] = (
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"WEBP", 8, "image/webp"),
)
#: Bytes of a blob that isn't an image sent for its hex preview.
HEX_PREVIEW_BYTES = 4096
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def blob_type(data: bytes) -> str:
    """The image type of a blob by its magic bytes (JPEG, PNG, WebP), else
    ``application/octet-stream``."""
    for magic, offset, content_type in _MAGIC:
        if data[offset : offset + len(magic)] == magic and (offset == 0 or data[:4] == b"RIFF"):
            return content_type
    return "application/octet-stream"


def _safe(value: Any) -> Any:
    """``value`` with non-finite floats as strings (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_safe(item) for item in value]
    return value


def _json(document: Any, status: int = 200) -> web.Response:
    text = json.dumps(_safe(document), ensure_ascii=False)
    return web.Response(text=text, status=status, content_type="application/json")


def _error(status: int, error: BaseException | str, message: str | None = None) -> web.Response:
    name = error if isinstance(error, str) else type(error).__name__
    text = message if message is not None else str(error)
    if isinstance(error, KeyError) and message is None and error.args:
        text = str(error.args[0])
    return _json({"error": name, "message": text}, status)


def _node_path(request: web.Request) -> str:
    """The ``path`` parameter, if it can be a node's name; the catalog then looks it up.

    A node's path is relative and made of names: absolute paths, backslashes, control
    characters and the segments ``.``, ``..`` and empty ones are refused before any lookup
    (the query string is decoded once, so ``%2e%2e`` arrives as ``..`` and is refused too;
    what decodes to something else is simply no node).
    """
    path = request.query.get("path", "")
    segments = path.split("/")
    if path and (
        path.startswith("/")
        or "\\" in path
        or any(ord(char) < 32 for char in path)
        or any(segment in ("", ".", "..") for segment in segments)
    ):
        raise web.HTTPBadRequest(
            text=json.dumps({"error": "InvalidPath", "message": f"not the name of a node: {path!r}"}),
            content_type="application/json",
        )
    return path


class Server:
    """The web application over ``catalog``, run by :meth:`start` on a thread of its own."""

    def __init__(self, catalog: Catalog, *, host: str, port: int, token: str | None = None) -> None:
        self.catalog = catalog
        self.frames = Frames(catalog)
        self.host = host
        self.requested_port = port
        self.token = token or secrets.token_urlsafe(32)
        self.port = 0
        self._pool = ThreadPoolExecutor(8, thread_name_prefix="ncore_like-view")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._closed = False
        self._tree_json: bytes | None = None
        self._tree_lock = threading.Lock()

    @property
    def cookie(self) -> str:
        # Cookies don't tell ports apart: each viewer has a cookie of its own.
        return f"ncore_like_view_{self.port}"

    # -- the application -----------------------------------------------------------------

    def application(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/", self._page)
        app.router.add_get("/static/{name}", self._static)
        app.router.add_get("/api/tree", self._tree)
        app.router.add_get("/api/node", self._node)
        app.router.add_get("/api/blob", self._blob)
        app.router.add_get("/api/preview", self._preview)
        return app

    def _authorized(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        candidates = [
            request.query.get("token"),
            request.cookies.get(self.cookie),
            header[6:] if header.startswith("token ") else None,
        ]
        expected = self.token.encode()
        return any(candidate and hmac.compare_digest(candidate.encode(), expected) for candidate in candidates)

    @web.middleware
    async def _guard(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            if not self._authorized(request):
                raise web.HTTPForbidden(
                    text="ncore-like view: this address needs the viewer's access token: open the URL that "
                    "ncore-like view printed (with ?token=...)"
                )
            if request.path == "/" and "token" in request.query:
                # Keep the token in a cookie and take it out of the address bar.
                found = web.HTTPFound("/")
                found.set_cookie(self.cookie, self.token, httponly=True, samesite="Strict", path="/")
                raise found
            response = await handler(request)
        except web.HTTPException as error:
            error.headers.update(_HEADERS)
            raise
        response.headers.update(_HEADERS)
        return response

    async def _run(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` on the viewer's threads (reads block)."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, function, *args)

    async def _page(self, request: web.Request) -> web.StreamResponse:
        return web.Response(body=_resource("index.html"), content_type="text/html", charset="utf-8")

    async def _static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        content_type = _STATIC.get(name)
        if content_type is None:
            raise web.HTTPNotFound(text="no such file")
        return web.Response(body=_resource(name), content_type=content_type, charset="utf-8")

    def _tree_document(self) -> bytes:
        """The tree and the facts of the archive, as JSON (made once: archives don't change)."""
        with self._tree_lock:
            if self._tree_json is None:
                source = self.catalog.source
                archive = source.archive
                document = {
                    "name": source.name,
                    "archive": archive is not None,
                    "file_size": archive.file_size if archive is not None else None,
                    "checksums": archive.has_checksums if archive is not None else None,
                    "tree": self.catalog.tree(),
                }
                self._tree_json = json.dumps(_safe(document), ensure_ascii=False).encode()
            return self._tree_json

    async def _tree(self, request: web.Request) -> web.StreamResponse:
        return web.Response(body=await self._run(self._tree_document), content_type="application/json")

    async def _node(self, request: web.Request) -> web.StreamResponse:
        path = _node_path(request)
        try:
            return _json(await self._run(self.catalog.details, path))
        except NodeNotFound:
            return _error(404, "NodeNotFound", f"no node {path!r} in {self.catalog.source.name}")

    async def _blob(self, request: web.Request) -> web.StreamResponse:
        path = _node_path(request)
        try:
            data = await self._run(self.frames.read, path)
        except NodeNotFound:
            return _error(404, "NodeNotFound", f"no node {path!r} in {self.catalog.source.name}")
        except TypeError as error:
            return _error(400, error)
        except (NcoreLikeError, OSError, ValueError, KeyError) as error:
            return _error(500, error)
        content_type = blob_type(data)
        headers = {"X-Blob-Size": str(len(data))}
        if not content_type.startswith("image/"):
            data = data[:HEX_PREVIEW_BYTES]
        return web.Response(body=data, content_type=content_type, headers=headers)

    async def _preview(self, request: web.Request) -> web.StreamResponse:
        path = _node_path(request)
        view = request.query.get("view", "")
        try:
            index = int(request.query.get("index", "0"))
        except ValueError:
            return _error(400, "PreviewError", "index must be an integer")
        try:
            entry = self.catalog.entry(path)
        except NodeNotFound:
            return _error(404, "NodeNotFound", f"no node {path!r} in {self.catalog.source.name}")
        node = entry.node
        if entry.kind != "array":
            return _error(400, "PreviewError", f"{path!r} is a {entry.kind}, not an array")
        try:
            payload = await self._run(preview, node, view, index, self.catalog.labelling_attributes(path))
        except PreviewError as error:
            return _error(400, error)
        except (NcoreLikeError, OSError, ValueError, KeyError) as error:
            return _error(500, error)
        return web.Response(body=payload, content_type="application/octet-stream")

    # -- running ---------------------------------------------------------------------------

    def start(self) -> None:
        """Binds the address and serves on a thread of its own (returns once listening).

        Raises:
            OSError: If the address can't be bound (e.g. the port is taken).
        """
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            runner = web.AppRunner(self.application(), access_log=None, handle_signals=False)
            try:
                loop.run_until_complete(runner.setup())
                site = web.TCPSite(runner, self.host, self.requested_port)
                loop.run_until_complete(site.start())
                self.port = int(runner.addresses[0][1])
            except BaseException as error:
                failure.append(error)
                loop.run_until_complete(runner.cleanup())
                loop.close()
                ready.set()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(runner.cleanup())
                loop.close()
                self._stopped.set()

        self._thread = threading.Thread(target=serve, name="ncore_like-view-server", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._close_resources()
            raise failure[0]

    def stop(self) -> None:
        """Stops serving and closes the hierarchy (idempotent)."""
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
        self._stopped.set()
        self._close_resources()

    def _close_resources(self) -> None:
        # The reads in progress finish first (their scans are still running), then the rest.
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.frames.close()
        self.catalog.source.close()

    def wait(self, timeout: float | None = None) -> bool:
        """Waits until the server stopped (or ``timeout`` seconds passed); True if it did."""
        return self._stopped.wait(timeout)


def _resource(name: str) -> bytes:
    return (importlib.resources.files(__package__) / "static" / name).read_bytes()
