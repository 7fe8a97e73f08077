"""``python -m moto.server`` plus a parent-death watchdog.

Run by :func:`tests.support.servers.start_moto` as::

    python -m tests.support.moto_runner -H 127.0.0.1 -p PORT

It runs moto's own standalone server (:func:`moto.server.main`, the code
behind the ``moto_server`` script) in this process, with one addition: a
daemon thread blocks on stdin and, when stdin reaches EOF (the parent closed
it, or died), sends SIGTERM to this process (moto exits on SIGTERM) and hard
exits if that has not worked within a few seconds. So moto does not outlive a
test run that was killed before it could stop its servers.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

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


def main(argv: list[str] | None = None) -> None:
    """Run moto's server with the watchdog.

    Args:
        argv: moto server arguments (default: ``sys.argv[1:]``), e.g.
            ``["-H", "127.0.0.1", "-p", "5000"]``.
    """
    from moto.server import main as moto_main

    threading.Thread(target=_exit_on_stdin_eof, name="stdin-watchdog", daemon=True).start()
    moto_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
