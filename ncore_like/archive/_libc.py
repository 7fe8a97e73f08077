"""Linux system calls that :mod:`os` lacks (``sync_file_range``, ``fallocate``), bound
with ctypes when a writer first needs one (ctypes stays unimported for readers)."""

from __future__ import annotations

import functools
import sys
from typing import Any

__all__ = ["libc_function"]


@functools.cache
def libc_function(name: str, argtypes: tuple[Any, ...]) -> Any:
    """libc's function ``name`` taking ``argtypes`` and returning an ``int`` (check ``-1``
    and ``ctypes.get_errno()``), None where there is no such function or no Linux. Bound
    once per process."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        function = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (AttributeError, OSError):
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return function
