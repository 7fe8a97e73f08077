"""numcodecs' Blosc as ncore_like calls it directly (decoding into ``out=``, encoding on the
worker pool): the one place that imports it for that and sets its threading.

numcodecs is imported on the first Blosc call, not with this module: importing it loads
every codec it registers (~30-60 ms), which a process reading raw frames or a command
describing a hierarchy never needs. Callers look up :data:`blosc` here at call time
(``_codecs.blosc.decompress``); after the first use it is a plain module attribute.

Blosc must not use its global context (``numcodecs.blosc.use_threads``), or the compressions
and decompressions of many threads serialise on its lock. It is set here, on the first use of
Blosc by ncore_like, so that encoding and decoding never depend on whether zarr-python was
imported first (zarr-python sets the same).

Small chunks of one Blosc block (rows of a few KB) are decompressed by python-blosc instead
(:data:`decompress_one_block`): its call costs ~0.9 us less than numcodecs' (which looks up
the current process and thread on every call), a fifth of a whole row read. It runs on
Blosc's global context with the GIL held, which for one block never starts Blosc's threads;
larger streams keep numcodecs' contexts, which release the GIL. Small chunks compressed on
the calling thread go through python-blosc too (``blosc_compressor(..., small=True)``, ~1.3
us less a chunk), unless a ``BLOSC_*`` variable is set or python-blosc's block size was
forced (``blosc.set_blocksize``): Blosc's global context takes its settings from those over
the call's (numcodecs' contexts don't). Both are looked at whenever a compressor is made.

Large chunks the typed API writes are compressed into memory used again once they are
written (:func:`blosc_compressor_into`): numcodecs' ``compress`` returns new bytes, whose
pages the kernel faults in and zeroes one by one (a quarter of the CPU time of encoding a
volume of 4 MB chunks). The C function numcodecs calls for it, ``blosc_compress_ctx``
(exported by its extension), is called through ``ctypes``, which releases the GIL as
numcodecs does: the same bytes. Without that symbol, numcodecs' ``compress`` is used.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numcodecs.blosc as blosc

    #: python-blosc's ``decompress(stream, as_bytearray)``, called as ``(stream, False)``:
    #: the decompressed bytes of a Blosc stream of one block (see the module's docstring).
    decompress_one_block: Callable[[bytes, bool], bytes]

__all__ = [
    "BLOSC_MAX_OVERHEAD",
    "blosc",
    "blosc_compress",
    "blosc_compressor",
    "blosc_compressor_into",
    "decompress_one_block",
]

_loading = threading.RLock()
#: Whether the fork in progress holds :data:`_loading` (see :func:`_before_fork`).
_held_for_fork = False


def _before_fork() -> None:
    """A fork waits for a codec being loaded by another thread: a child forked in the
    middle of that import would find the import's own lock held by a thread it doesn't
    have, and hang at its first Blosc call. (Re-entrant: a load that forks, e.g. a
    subprocess, takes it again. Bounded: a fork never waits forever.)"""
    global _held_for_fork
    _held_for_fork = _loading.acquire(timeout=30)


def _after_fork_in_parent() -> None:
    global _held_for_fork
    if _held_for_fork:
        _held_for_fork = False
        _loading.release()


def _after_fork_in_child() -> None:
    global _loading, _held_for_fork
    _loading, _held_for_fork = threading.RLock(), False


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)
_takes_typesize: bool | None = None


def __getattr__(name: str) -> Any:
    # Module attributes are found before this is called: it runs until each is loaded.
    if name == "blosc":
        return _load()
    if name == "decompress_one_block":
        return _load_one_block()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _python_blosc() -> Any:
    """python-blosc's extension module: importing the package sets up Blosc's global context
    (~15 ms once, where numcodecs takes 30-60 ms), under the loader's lock (see fork)."""
    with _loading:
        import blosc.blosc_extension as extension
    return extension


def _load_one_block() -> Callable[[bytes, bool], bytes]:
    loaded: Callable[[bytes, bool], bytes] = _python_blosc().decompress
    globals()["decompress_one_block"] = loaded
    return loaded


def _load() -> ModuleType:
    global _takes_typesize
    with _loading:
        loaded: Any = globals().get("blosc")
        if loaded is None:
            import numcodecs.blosc

            loaded = numcodecs.blosc
            loaded.use_threads = False
            _takes_typesize = _check_typesize(loaded)
            globals()["blosc"] = loaded  # published last: other threads see it configured
    return loaded  # type: ignore[no-any-return]


def blosc_compress(
    raw: np.ndarray[Any, Any], cname: str, clevel: int, shuffle: int, blocksize: int, typesize: int
) -> bytes:
    """Blosc of the bytes ``raw`` (a contiguous ``uint8`` array) with elements of ``typesize``
    bytes."""
    return blosc_compressor(cname, clevel, shuffle, blocksize, typesize)(raw)


#: Buffers below this are one Blosc block when Blosc chooses the block size (below its L1
#: size, 32 KB, the whole buffer is the block).
SMALL_CHUNK_BYTES = (32 << 10) - 1


def blosc_compressor(
    cname: str, clevel: int, shuffle: int, blocksize: int, typesize: int, *, small: bool = False
) -> Callable[[np.ndarray[Any, Any]], bytes]:
    """:func:`blosc_compress` with these settings, as a function of the bytes alone (many
    small chunks: the settings are converted once, not per chunk). numcodecs before 0.16
    (which zarr-python 2 needs) takes the element size from the buffer only: the bytes are
    handed over as elements of that size then.

    ``small``: every buffer has at most :data:`SMALL_CHUNK_BYTES` and is compressed on the
    calling thread (python-blosc's call holds the GIL, which a few microseconds barely
    notice, but larger chunks compressed side by side on the worker pool would)."""
    if small and blocksize == 0 and not any(name.startswith("BLOSC_") for name in os.environ):
        extension = _python_blosc()
        if extension.get_blocksize() == 0:  # not forced by the process's own use of python-blosc
            compress_one_block = extension.compress
            return lambda raw: compress_one_block(raw, typesize, clevel, shuffle, cname)
    module: ModuleType = globals().get("blosc") or _load()
    compress = module.compress
    name = cname.encode()
    if _takes_typesize:
        return lambda raw: compress(raw, name, clevel, shuffle, blocksize, typesize)
    if typesize > 1:
        elements = np.dtype(f"V{typesize}")
        return lambda raw: compress(raw.view(elements), name, clevel, shuffle, blocksize)
    return lambda raw: compress(raw, name, clevel, shuffle, blocksize)


def _check_typesize(module: ModuleType) -> bool:
    try:
        module.compress(np.zeros(2, np.uint8), b"lz4", 1, 0, 0, 1)
    except TypeError:  # compress() takes at most 5 positional arguments
        return False
    return True


#: Bytes a Blosc stream may have beyond its input's (a destination of the input's size plus
#: this always holds the stream: numcodecs allocates as much).
BLOSC_MAX_OVERHEAD = 16

#: numcodecs' ``blosc_compress_ctx`` through ctypes, once looked up (False: not available).
_compress_ctx: Any = None


def blosc_compressor_into(
    cname: str, clevel: int, shuffle: int, blocksize: int, typesize: int
) -> Callable[[np.ndarray[Any, Any], np.ndarray[Any, Any]], int] | None:
    """:func:`blosc_compressor`'s compression into a given destination: a function of the
    bytes ``raw`` (a contiguous ``uint8`` array) and ``dest`` (a contiguous ``uint8`` array of
    at least ``raw.size + BLOSC_MAX_OVERHEAD`` bytes) that writes the stream numcodecs'
    ``compress`` returns at the start of ``dest`` and returns its size. None where numcodecs'
    C function can't be reached (see the module's docstring)."""
    function = _compress_ctx if _compress_ctx is not None else _load_compress_ctx()
    if function is False:
        return None
    name = cname.encode()

    def compress_into(raw: np.ndarray[Any, Any], dest: np.ndarray[Any, Any]) -> int:
        if dest.size < raw.size + BLOSC_MAX_OVERHEAD:  # Blosc would give up, not overflow: said early
            raise ValueError(f"a destination of {dest.size} bytes can't hold {raw.size} compressed")
        size: int = function(
            clevel, shuffle, typesize, raw.size, raw.ctypes.data, dest.ctypes.data, dest.size, name, blocksize, 1
        )
        if size <= 0:  # numcodecs' error for it
            raise RuntimeError(f"error during blosc compression: {size}")
        return size

    return compress_into


def _load_compress_ctx() -> Any:
    global _compress_ctx
    module = globals().get("blosc") or _load()
    with _loading:
        if _compress_ctx is None:
            import ctypes

            try:
                function = ctypes.CDLL(module.__file__).blosc_compress_ctx
            except (OSError, AttributeError, TypeError):  # no such library or symbol
                _compress_ctx = False
            else:
                size_t, pointer = ctypes.c_size_t, ctypes.c_void_p
                function.argtypes = [ctypes.c_int, ctypes.c_int, size_t, size_t, pointer, pointer, size_t,
                                     ctypes.c_char_p, size_t, ctypes.c_int]  # fmt: skip
                function.restype = ctypes.c_int
                _compress_ctx = function
    return _compress_ctx
