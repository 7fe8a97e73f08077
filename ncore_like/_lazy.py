"""Names of a package imported on first use (PEP 562), so that importing the package costs
only what is used: a script that reads records never imports zarr-python or the verifier."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any], submodules: frozenset[str] = frozenset()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (whose globals are ``namespace``):
    ``exports`` maps each public name to the relative module that defines it; ``submodules``
    are importable as attributes (``pkg.store`` after a bare ``import pkg``)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            if name in submodules:
                return importlib.import_module(f".{name}", package)
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
