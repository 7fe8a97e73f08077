"""Ctrl-C (SIGINT) and SIGTERM while a command runs: both raise in the main thread, so the
command cleans up what it started (``pack`` discards its unfinished archive, ``extract``
its temporary file) instead of dying where it stands; steps that create something to clean
up defer them until what they created can be cleaned up (:func:`deferred_signals`)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["Terminated", "deferred_signals", "handling_signals"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Signals received while deferred (None: not deferring).
_pending: list[int] | None = None


class Terminated(BaseException):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt."""


def _raise(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated


def _handle(signum: int, frame: FrameType | None) -> None:
    if _pending is not None:
        _pending.append(signum)
    else:
        _raise(signum)


@contextlib.contextmanager
def handling_signals() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt and SIGTERM :class:`Terminated` while the block runs
    (in the main thread only: signal handlers can't be set elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _handle) for signum in _SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Holds SIGINT and SIGTERM back while the block runs (e.g. while a file is created and
    its name kept for cleaning up), and raises for the first one received when it ends.
    Python runs signal handlers in the main thread whatever thread received the signal, so
    this works with other threads running."""
    global _pending
    # Nested blocks leave it to the outer one; other threads (e.g. of a cluster worker)
    # get no signals raised in them.
    if _pending is not None or threading.current_thread() is not threading.main_thread():
        yield
        return
    _pending = []
    try:
        yield
    finally:
        pending, _pending = _pending, None
        if pending:
            _raise(pending[0])
