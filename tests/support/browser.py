"""A real headless browser for tests of rendered pages (the docs site, the viewer).

The machine's Chromium (Debian's ``chromium`` package; ``.ci/run`` installs it) is driven
by Playwright's Python package with ``executable_path``: Playwright never downloads a
browser of its own here. ``NCORE_CHROMIUM`` names another binary. Where no Chromium is
found the tests that need one skip, saying so.

Fixtures (loaded through ``tests.support.fixtures``):

* ``chromium_path`` (session): the browser binary, or a skip with the reason;
* ``browser`` (module): a launched headless Chromium (``playwright.sync_api.Browser``),
  stopped after the module's tests: while Playwright's sync API is up, it keeps an
  asyncio loop marked as running in the main thread, so ``asyncio.run`` and the
  library's blocking calls in later tests would fail as if called inside a loop;
* ``page`` (function): a fresh page in a fresh context, closed after the test.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

__all__ = ["CHROMIUM_ARGS", "browser", "chromium_path", "find_chromium", "page"]

#: As the machine notes advise for a closed network: no background connections (they are
#: refused, many at a time), no sandbox (tests run as root), no GPU.
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def find_chromium() -> str | None:
    """The Chromium binary to drive: ``$NCORE_CHROMIUM``, else the first on ``PATH``."""
    named = os.environ.get("NCORE_CHROMIUM")
    if named:
        return named if os.access(named, os.X_OK) else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = find_chromium()
    if path is None:
        pytest.skip("no Chromium on this machine (install Debian's chromium package, or set NCORE_CHROMIUM)")
    return path


@pytest.fixture(scope="module")
def browser(chromium_path: str) -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright's Python package is not installed")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path, args=list(CHROMIUM_ARGS), headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    opened = context.new_page()
    try:
        yield opened
    finally:
        context.close()
