"""``python -m tests.support.exec_interrupt ARGS``: ``ncore-like ARGS`` run the way
``python -m ncore_like ARGS`` runs it, except that the first opening of the file named by
``NCORE_TEST_INTERRUPT_OPEN`` raises KeyboardInterrupt from inside a string ``exec``: what
Ctrl-C does when it comes while a dataclass or named tuple is being made. The command cleans
up and exits 130; CPython would make that a death by SIGINT at exit unless the entry point
clears what it remembers of the exec (see ``ncore_like/__main__.py``)."""

from __future__ import annotations

import os
import runpy
import sys
from typing import Any

_target = os.environ["NCORE_TEST_INTERRUPT_OPEN"]
_fired = False


def _interrupt_opening(event: str, args: tuple[Any, ...]) -> None:
    global _fired
    opened = args[0] if event == "open" and args else None
    if not _fired and isinstance(opened, (str, bytes, os.PathLike)) and os.fsdecode(opened) == _target:
        _fired = True
        exec("raise KeyboardInterrupt")


if __name__ == "__main__":
    sys.addaudithook(_interrupt_opening)
    sys.argv = ["ncore-like", *sys.argv[1:]]
    runpy.run_module("ncore_like", run_name="__main__", alter_sys=True)
