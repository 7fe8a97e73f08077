"""``ncore-like view``: a local web viewer of an archive (or a zarr hierarchy), until Ctrl-C."""

from __future__ import annotations

import argparse
import errno
import socket
import sys
import warnings
from typing import Any

from ._common import CommandError, Location, non_negative_int, reporting

__all__ = ["register", "run"]


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Adds the ``view`` command."""
    parser = commands.add_parser(
        "view",
        parents=parents,
        help="look at an archive in the browser (a local web viewer)",
        description="Serve a web viewer of an archive (or of a zarr directory or store URL, as pack takes "
        "them) on this machine and open it in the browser: the hierarchy as a tree with each node's metadata "
        "and attributes, images, groups of frames as a timeline, plots of numeric arrays, point clouds from "
        "above. Reads only what is shown (and the frames after it). The printed URL carries an access token; "
        "stop with Ctrl-C. Needs aiohttp: pip install 'ncore-like[view]'.",
    )
    parser.add_argument("archive", metavar="PATH_OR_URL", help="the .itar archive or zarr hierarchy (path or URL)")
    parser.add_argument("--port", type=_port, default=0, help="port to listen on (default: a free one)")
    parser.add_argument(
        "--host",
        default=None,
        help="address to listen on (default: 127.0.0.1, this machine only; another address is reachable from "
        "other machines: anyone with the token can read the archive)",
    )
    parser.add_argument("--no-browser", action="store_true", help="don't open the browser, only print the URL")
    parser.set_defaults(run=run)


def _port(text: str) -> int:
    """A TCP port (argparse ``type=``); 0 picks a free one."""
    port = non_negative_int(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"expected a port (0-65535), got {text!r}")
    return port


def run(args: argparse.Namespace) -> int:
    """Serves the viewer until Ctrl-C."""
    from ..viewer import LOOPBACK, view

    location = Location.parse(args.archive, args.storage_options)
    with reporting(location.name), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        host = args.host or LOOPBACK
        try:
            viewer = view(location.target, host=host, port=args.port, open_browser=not args.no_browser)
        except ImportError as error:  # no aiohttp: say what to install
            raise CommandError(str(error)) from error
        except OSError as error:
            if not _cant_listen(error):
                raise  # the archive's (reporting names it)
            where = f"{host}:{args.port}" if args.port else host
            raise CommandError(f"can't listen on {where} ({error.strerror or error})") from error
    for warning in caught:
        print(f"ncore-like: warning: {warning.message}", file=sys.stderr)
    try:
        print(f"ncore-like view: {viewer.name}", flush=True)
        print(f"  {viewer.url}", flush=True)
        print("  (Ctrl-C stops the viewer)", flush=True)
        while not viewer.wait(0.5):  # a short wait: Ctrl-C is seen at once
            pass
    except KeyboardInterrupt:
        print("ncore-like view: stopped", file=sys.stderr)
    finally:
        viewer.stop()
    return 0


def _cant_listen(error: OSError) -> bool:
    """True for errors of the address to listen on (a name that doesn't resolve, a port
    in use, an address this machine doesn't have), not of the archive."""
    return isinstance(error, socket.gaierror) or error.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL)
