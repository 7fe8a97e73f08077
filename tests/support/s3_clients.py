"""Counting the S3 clients a piece of code sets up (each costs ~0.1 s: botocore loads its
models), in a fresh process, so that no filesystem object cached by earlier tests hides one."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_COUNTING = """
import s3fs
clients = []
setup = s3fs.S3FileSystem.set_session

async def counted(self, *args, **kwargs):
    if self._s3 is None:  # a client is made on the first call only
        clients.append(id(self))
    return await setup(self, *args, **kwargs)

s3fs.S3FileSystem.set_session = counted
"""


def s3_clients_set_up(code: str) -> int:
    """Runs ``code`` in a new Python process; the number of S3 clients it set up (an
    AssertionError with its stderr if it failed)."""
    script = _COUNTING + textwrap.dedent(code) + "\nprint(len(clients))\n"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[-1])
