"""``python -m ncore_like``: the ``ncore-like`` command line."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    code = main()
    # CPython (3.11, 3.12) run with -m dies by SIGINT at exit, whatever the exit code, once a
    # KeyboardInterrupt has ended a string exec or eval (a dataclass or named tuple being made
    # when Ctrl-C came, say), even one that main() caught and cleaned up after: 4 in 30
    # interrupted packs exited -2, not 130. Every string exec starts by clearing that flag.
    exec("")
    sys.exit(code)
