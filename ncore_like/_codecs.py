"""numcodecs' Blosc as ncore_like calls it directly (decoding into ``out=``, encoding on the
worker pool): the one place that imports it for that and sets its threading.

Blosc must not use its global context (``numcodecs.blosc.use_threads``), or the compressions
and decompressions of many threads serialise on its lock. It is set here, on the first use of
Blosc by ncore_like, so that encoding and decoding never depend on whether zarr-python was
imported first (zarr-python sets the same).
"""

from __future__ import annotations

from typing import Any

import numcodecs.blosc as blosc
import numpy as np

__all__ = ["blosc", "blosc_compress"]

blosc.use_threads = False


def blosc_compress(
    raw: np.ndarray[Any, Any], cname: str, clevel: int, shuffle: int, blocksize: int, typesize: int
) -> bytes:
    """Blosc of the bytes ``raw`` (a contiguous ``uint8`` array) with elements of ``typesize``
    bytes. numcodecs before 0.16 (which zarr-python 2 needs) takes the element size from the
    buffer only: the bytes are handed over as elements of that size then."""
    if _TAKES_TYPESIZE:
        return blosc.compress(raw, cname.encode(), clevel, shuffle, blocksize, typesize)  # type: ignore[no-any-return]
    elements = raw.view(np.dtype(f"V{typesize}")) if typesize > 1 else raw
    return blosc.compress(elements, cname.encode(), clevel, shuffle, blocksize)  # type: ignore[no-any-return]


def _takes_typesize() -> bool:
    try:
        blosc.compress(np.zeros(2, np.uint8), b"lz4", 1, 0, 0, 1)
    except TypeError:  # compress() takes at most 5 positional arguments
        return False
    return True


_TAKES_TYPESIZE = _takes_typesize()
