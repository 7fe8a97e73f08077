"""The seam between ncore_like and zarr-python: the only package that imports ``zarr``.

One module per zarr-python major version holds everything that depends on it
(:mod:`.zarr3` for zarr-python >= 3.1, :mod:`.zarr2` for zarr-python 2.18); this package
picks the one for the installed version and re-exports its names, so the rest of
ncore_like never branches on a version. Both define the same names (``__all__``); the type
checker sees zarr-python 3's.

The pick happens on the first name asked for (PEP 562), not at import: the layers above
import this package as ``_compat`` and look names up when they run, so that reading an
archive, which needs none of them, never imports zarr-python (~0.2 s).
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .zarr3 import *  # noqa: F403 - the names are zarr3.__all__
    from .zarr3 import __all__ as __all__

    ZARR_VERSION: str
    ZARR_MAJOR: int

_lock = threading.Lock()


def _load() -> None:
    """Imports zarr-python and the module of its major version, and takes over its names."""
    with _lock:
        if "ZARR_VERSION" in globals():
            return
        import zarr

        version: str = zarr.__version__
        major = int(version.split(".")[0])
        if major == 3 and version.startswith("3.0."):
            raise ImportError(f"ncore_like needs zarr-python >= 3.1 or 2.18; zarr {version} is installed")
        module = importlib.import_module(".zarr3" if major >= 3 else ".zarr2", __name__)
        names = list(module.__all__)
        globals().update({name: getattr(module, name) for name in names})
        globals().update(__all__=names, ZARR_MAJOR=major, ZARR_VERSION=version)


def installed_zarr_major() -> int:
    """The major version of the installed zarr-python, without importing it when it isn't
    yet (a reader that needs none of it checks formats against this)."""
    if "ZARR_MAJOR" in globals():
        return int(globals()["ZARR_MAJOR"])
    loaded = sys.modules.get("zarr")
    if loaded is not None:
        version: str | None = loaded.__version__
    else:
        version = _version_file_of_zarr()
        if version is None:
            from importlib.metadata import version as distribution_version

            version = distribution_version("zarr")
    assert version is not None
    return int(version.split(".")[0])


def _version_file_of_zarr() -> str | None:
    """The version the installed zarr-python's version file states (``zarr/_version.py`` in
    3, ``zarr/version.py`` in 2, both written by setuptools-scm), found without importing
    zarr or :mod:`importlib.metadata` (which imports the email package: ~10 ms of a reader's
    start); None where there is no such file or it says something else."""
    import importlib.util
    import os
    import re

    spec = importlib.util.find_spec("zarr")  # locates the package without running it
    folders = spec.submodule_search_locations if spec is not None else None
    for folder in folders or ():
        for name in ("_version.py", "version.py"):
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as file:
                    text = file.read()
            except OSError:
                continue
            found = re.search(r"^__version__ = version = '(\d+\.[^']*)'$", text, re.MULTILINE)
            if found:
                return found[1]
    return None


def __getattr__(name: str) -> Any:
    if name.startswith("__") and name != "__all__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _load()
    try:
        return globals()[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
