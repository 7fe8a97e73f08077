"""``view()``: open a hierarchy and serve the viewer; :class:`Viewer`, the running viewer."""

from __future__ import annotations

import ipaddress
import socket
import warnings
import webbrowser
from collections.abc import Mapping
from pathlib import PurePath
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._catalog import Catalog
from ._source import open_source

if TYPE_CHECKING:
    from upath import UPath

    from ._server import Server

__all__ = ["LOOPBACK", "Viewer", "view"]

#: Where the viewer listens unless told otherwise: this machine only.
LOOPBACK = "127.0.0.1"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _url_host(host: str) -> str:
    """How a URL names the address the viewer listens on (a wildcard address: this
    machine's name)."""
    bare = host.strip("[]")
    if bare in ("", "0.0.0.0", "::"):
        return socket.gethostname()
    return f"[{bare}]" if ":" in bare else bare


class Viewer:
    """A running viewer, as :func:`view` returns it: its :attr:`url` (with the access
    token), :meth:`stop`, :meth:`wait`. A context manager (stops at the end of the block);
    in a notebook it shows as a link."""

    def __init__(self, server: Server) -> None:
        self._server = server

    @property
    def url(self) -> str:
        """The address to open, with the access token."""
        return f"http://{_url_host(self._server.host)}:{self._server.port}/?token={self._server.token}"

    @property
    def host(self) -> str:
        return self._server.host

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def token(self) -> str:
        """The access token every request carries (in the URL, a cookie or a header)."""
        return self._server.token

    @property
    def name(self) -> str:
        """The archive (or zarr hierarchy) shown."""
        return self._server.catalog.source.name

    def stop(self) -> None:
        """Stops the server and closes the archive (idempotent)."""
        self._server.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Waits until the viewer stopped, at most ``timeout`` seconds; True if it did."""
        return self._server.wait(timeout)

    def __enter__(self) -> Viewer:
        return self

    def __exit__(
        self, error_type: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<Viewer of {self.name} at {self.url}>"

    def _repr_html_(self) -> str:
        from html import escape

        return f'<a href="{escape(self.url)}" target="_blank">ncore-like view: {escape(self.name)}</a>'


def view(
    location: str | PurePath | UPath,
    *,
    storage_options: Mapping[str, Any] | None = None,
    host: str = LOOPBACK,
    port: int = 0,
    open_browser: bool = True,
) -> Viewer:
    """Serves a web viewer of an archive, or of a zarr hierarchy that ``ncore-like pack``
    accepts (a zarr directory or store URL), and opens it in the browser.

    The viewer shows the hierarchy as a tree with each node's metadata and attributes,
    blobs as images (JPEG, PNG, WebP) or hex, groups of frames as a timeline, numeric
    arrays with statistics and a plot that fits their shape, point clouds from above. It
    reads lazily: what is shown, and the frames after the one shown.

    Returns at once (the server runs on a thread of its own, also in a notebook): call
    :meth:`Viewer.wait` to block until it stops, :meth:`Viewer.stop` to stop it.

    Args:
        location: A local path or a URL of any fsspec filesystem.
        storage_options: Options of the URL's filesystem (``endpoint_url``, ``anon``...).
        host: The address to listen on: this machine only unless told otherwise (any other
            address warns: anyone who reaches it with the token reads the archive).
        port: The port (default: a free one).
        open_browser: Open the viewer's URL in the default browser.

    Raises:
        ImportError: Without aiohttp (``pip install 'ncore-like[view]'``).
        FileNotFoundError, ValueError: For a location that holds no archive or hierarchy.
        OSError: If the address can't be bound.
    """
    try:
        from ._server import Server
    except ModuleNotFoundError as error:
        if error.name != "aiohttp":
            raise
        raise ImportError(
            "ncore_like.view (ncore-like view) needs aiohttp, which is not installed: pip install 'ncore-like[view]'"
        ) from error
    if not _is_loopback(host):
        warnings.warn(
            f"the viewer listens on {host!r}, beyond this machine: anyone who can reach it and holds the URL's "
            "token can read the archive",
            UserWarning,
            stacklevel=2,
        )
    source = open_source(location, storage_options)
    try:
        server = Server(Catalog(source), host=host, port=port)
    except BaseException:
        source.close()
        raise
    server.start()  # closes the source if it can't listen
    viewer = Viewer(server)
    if open_browser:
        webbrowser.open(viewer.url)
    return viewer
