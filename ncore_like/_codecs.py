"""numcodecs' Blosc as ncore_like calls it directly (decoding into ``out=``, encoding on the
worker pool): the one place that imports it for that and sets its threading.

Blosc must not use its global context (``numcodecs.blosc.use_threads``), or the compressions
and decompressions of many threads serialise on its lock. It is set here, on the first use of
Blosc by ncore_like, so that encoding and decoding never depend on whether zarr-python was
imported first (zarr-python sets the same).
"""

from __future__ import annotations

import numcodecs.blosc as blosc

__all__ = ["blosc"]

blosc.use_threads = False
