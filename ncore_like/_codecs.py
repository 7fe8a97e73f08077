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
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numcodecs.blosc as blosc

__all__ = ["blosc", "blosc_compress", "blosc_compressor"]

_loading = threading.Lock()
_takes_typesize: bool | None = None


def __getattr__(name: str) -> ModuleType:
    # Module attributes are found before this is called: it runs until blosc is loaded.
    if name != "blosc":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _load()


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


def blosc_compressor(
    cname: str, clevel: int, shuffle: int, blocksize: int, typesize: int
) -> Callable[[np.ndarray[Any, Any]], bytes]:
    """:func:`blosc_compress` with these settings, as a function of the bytes alone (many
    small chunks: the settings are converted once, not per chunk). numcodecs before 0.16
    (which zarr-python 2 needs) takes the element size from the buffer only: the bytes are
    handed over as elements of that size then."""
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
