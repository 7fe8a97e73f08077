"""The documentation site for tests: built with mkdocs, and served over HTTP on 127.0.0.1.

* :func:`build_site` runs ``mkdocs build --strict`` (the repository's ``mkdocs.yml``) into a
  folder and returns the finished process (its output holds the warnings);
* :func:`serve_folder` serves a folder's files from a free port of 127.0.0.1 in a thread of
  the test process, for as long as its ``with`` block lasts.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.servers import LOOPBACK

REPO = Path(__file__).resolve().parents[2]


def build_site(site_dir: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict --clean`` of the repository's docs into ``site_dir``."""
    mkdocs = Path(sys.executable).with_name("mkdocs")
    return subprocess.run(
        [
            str(mkdocs),
            "build",
            "--strict",
            "--clean",
            "--config-file",
            str(REPO / "mkdocs.yml"),
            "--site-dir",
            str(site_dir),
        ],
        cwd=REPO,
        # mkdocs-material announces its end of life in a banner that contains "WARNING";
        # the variable named in that banner turns it off (build warnings still show).
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # no line on stderr per request


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a page closed mid-transfer: fine
            super().handle_error(request, client_address)


@contextmanager
def serve_folder(folder: Path) -> Iterator[str]:
    """Serves ``folder`` at the URL yielded (``http://127.0.0.1:PORT/``), then stops."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = _Server((LOOPBACK, 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="docs-site-server", daemon=True)
    thread.start()
    try:
        yield f"http://{LOOPBACK}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
