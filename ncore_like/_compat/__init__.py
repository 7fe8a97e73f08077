"""The seam between ncore_like and zarr-python: the only package that imports ``zarr``.

One module per zarr-python major version holds everything that depends on it (today
:mod:`.zarr3`, for zarr-python >= 3.1); this package picks the one for the installed
version at import and re-exports its names, so the rest of ncore_like never branches on
a version.
"""

from __future__ import annotations

import zarr

_ZARR_VERSION: str = zarr.__version__
if int(_ZARR_VERSION.split(".")[0]) < 3:
    raise ImportError(f"ncore_like needs zarr-python >= 3.1; zarr {_ZARR_VERSION} is installed")

from .zarr3 import *  # noqa: E402, F403 - after the version check; the names are zarr3.__all__
from .zarr3 import __all__ as __all__  # noqa: E402
