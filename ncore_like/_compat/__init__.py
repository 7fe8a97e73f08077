"""The seam between ncore_like and zarr-python: the only package that imports ``zarr``.

One module per zarr-python major version holds everything that depends on it
(:mod:`.zarr3` for zarr-python >= 3.1, :mod:`.zarr2` for zarr-python 2.18); this package
picks the one for the installed version at import and re-exports its names, so the rest of
ncore_like never branches on a version. Both define the same names (``__all__``); the type
checker sees zarr-python 3's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import zarr

ZARR_VERSION: str = zarr.__version__
ZARR_MAJOR = int(ZARR_VERSION.split(".")[0])
if ZARR_MAJOR == 3 and ZARR_VERSION.startswith("3.0."):
    raise ImportError(f"ncore_like needs zarr-python >= 3.1 or 2.18; zarr {ZARR_VERSION} is installed")

if TYPE_CHECKING or ZARR_MAJOR >= 3:
    from .zarr3 import *  # noqa: F403 - the names are zarr3.__all__
    from .zarr3 import __all__ as __all__
else:
    from .zarr2 import *  # type: ignore[assignment]  # noqa: F403 - the names are zarr2.__all__
    from .zarr2 import __all__ as __all__  # type: ignore[assignment]
