"""Watching the S3 clients a piece of code sets up (each costs ~0.1 s: botocore loads its
models), in a fresh process, so that no filesystem object cached by earlier tests hides one.
The process reads S3 through s3fs (``NCORE_LIKE_S3_CLIENT=s3fs``): where the storage options
allow it, reads go through the plain-HTTP reader otherwise, which sets up no client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

_WATCHING = """
import gc, json, os
import s3fs
clients = []
setup = s3fs.S3FileSystem.set_session

async def watched(self, *args, **kwargs):
    if self._s3 is None:  # a client is made on the first call only
        clients.append({"pid": os.getpid(), "collector_on": gc.isenabled()})
    return await setup(self, *args, **kwargs)

s3fs.S3FileSystem.set_session = watched
"""


def s3_client_setups(code: str) -> list[dict[str, object]]:
    """Runs ``code`` in a new Python process (it may add setups made in children to
    ``clients``); one entry per S3 client set up: the process (``pid``) and whether the
    cyclic garbage collector was on meanwhile (``collector_on``). An AssertionError with the
    process's stderr if it failed."""
    script = _WATCHING + textwrap.dedent(code) + "\nprint(json.dumps(clients))\n"
    env = {**os.environ, "NCORE_LIKE_S3_CLIENT": "s3fs"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    setups: list[dict[str, object]] = json.loads(result.stdout.splitlines()[-1])
    return setups


def s3_clients_set_up(code: str) -> int:
    """The number of S3 clients ``code`` sets up in a new Python process."""
    return len(s3_client_setups(code))
