"""``python -m moto.server`` plus a parent-death watchdog.

Run by :func:`tests.support.servers.start_moto` as::

    python -m tests.support.moto_runner -H 127.0.0.1 -p PORT

It runs moto's own standalone server (:func:`moto.server.main`, the code
behind the ``moto_server`` script) in this process, with one addition: a
daemon thread blocks on stdin and, when stdin reaches EOF (the parent closed
it, or died), sends SIGTERM to this process (moto exits on SIGTERM) and hard
exits if that has not worked within a few seconds. So moto does not outlive a
test run that was killed before it could stop its servers.

And one change of behaviour (:func:`read_only_the_range`): a ranged ``GetObject``
reads only the bytes asked for, as S3 does. Stock moto materialises the whole object
for every ranged GET and slices it (a 200 KB range of a 200 MB object costs ~120 ms
instead of ~4 ms), so any timing of ranged reads of a large object would measure moto.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

GRACE_SECONDS = 5.0


def _exit_on_stdin_eof() -> None:
    """Block until stdin is closed, then terminate this process."""
    # Read the raw fd: a thread blocked inside sys.stdin's buffered reader would
    # make interpreter shutdown abort ("could not acquire lock for <stdin>").
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE_SECONDS)
    os._exit(0)


class _LazyValue:
    """A key's value for a ranged ``GetObject``: moto asks for its length and slices it
    once (``S3Response._handle_range_header``), which reads only that slice."""

    def __init__(self, key: Any) -> None:
        self._key = key

    def __len__(self) -> int:
        return int(self._key.size)

    def __getitem__(self, item: slice) -> bytes:
        start, stop, _ = item.indices(len(self))
        with self._key.lock:
            self._key._value_buffer.seek(start)
            data: bytes = self._key._value_buffer.read(max(0, stop - start))
        return data

    def __bytes__(self) -> bytes:
        return bytes(self._key.value)


def read_only_the_range() -> None:
    """Makes moto's ``GetObject`` with a ``Range`` header read only that range of the
    object: its ``key.value`` is a :class:`_LazyValue` there, and any answer that would
    still carry it whole (a range moto ignores) gets the real bytes."""
    from moto.s3.models import FakeKey
    from moto.s3.responses import S3Response

    ranged = threading.local()  # moto serves requests on threads
    value = FakeKey.value

    def lazy_value(key: Any) -> Any:
        return _LazyValue(key) if getattr(ranged, "on", False) else value.fget(key)  # type: ignore[attr-defined]

    get_object, handle_range = S3Response.get_object, S3Response._handle_range_header

    def ranged_get_object(response: Any) -> Any:
        ranged.on = bool(response.headers.get("range"))
        try:
            return get_object(response)
        finally:
            ranged.on = False

    def handle_range_header(response: Any, *args: Any) -> Any:
        status, headers, body = handle_range(response, *args)
        return status, headers, bytes(body) if isinstance(body, _LazyValue) else body

    FakeKey.value = property(lazy_value, value.fset)  # type: ignore[attr-defined,method-assign,assignment]
    S3Response.get_object = ranged_get_object  # type: ignore[method-assign,assignment]
    S3Response._handle_range_header = handle_range_header  # type: ignore[method-assign,assignment]


def main(argv: list[str] | None = None) -> None:
    """Run moto's server with the watchdog.

    Args:
        argv: moto server arguments (default: ``sys.argv[1:]``), e.g.
            ``["-H", "127.0.0.1", "-p", "5000"]``.
    """
    from moto.server import main as moto_main

    read_only_the_range()
    threading.Thread(target=_exit_on_stdin_eof, name="stdin-watchdog", daemon=True).start()
    moto_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
