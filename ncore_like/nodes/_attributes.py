"""Node attributes as their JSON records hold them.

Attributes are JSON. Values often come out of numpy (a timestamp read from an array, a pose
as an array, a count from ``np.sum``), which ``json`` refuses, as zarr-python does: numpy
scalars are stored as the Python scalars they hold (``.item()``) and numpy arrays as nested
lists (``.tolist()``), as xarray does for the attributes it writes to zarr. Anything else
JSON can't hold is refused with the attribute named.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["json_attributes"]


def json_attributes(attributes: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    """The attributes with numpy values made Python's (see the module) and keys that are
    numbers, bools or None made the strings ``json`` writes for them (the writing session sees
    what a reader of the records sees), checked to be what ``json`` holds (NaN and infinities
    included, as zarr-python writes them). ``where`` names the node in errors.

    Raises:
        TypeError: For a key or a value JSON can't hold, named by its place.
    """
    if not attributes:
        return {}
    try:
        plain = {_key(key): _plain(value) for key, value in attributes.items()}
        problem = _first_problem(plain)
    except RecursionError:
        problem = "they contain themselves (or nest too deep)"
    if problem is not None:
        raise TypeError(f"{where}: attributes must be JSON: {problem}")
    return plain


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) and not value.dtype.hasobject:
        return value.tolist()
    if isinstance(value, dict):
        return {_key(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _key(key: Any) -> Any:
    """A key as ``json`` writes it: numbers, bools and None as strings (``1`` -> ``"1"``,
    ``True`` -> ``"true"``), numpy's scalars as the Python ones they hold; others (a tuple)
    as they are, for :func:`_first_problem` to refuse."""
    if isinstance(key, str):
        return str(key)
    if isinstance(key, np.generic):
        key = key.item()
    if not isinstance(key, (int, float, type(None))):
        return key
    return json.dumps({key: 0})[2:-5]  # json's own spelling: "true", "null", "NaN", "1.5"


def _first_problem(value: Any, path: str = "") -> str | None:
    """Where in ``value`` the first thing JSON can't hold is, and what it is; None if all is
    JSON."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"key {key!r} of attribute{path or 's'} is a {_kind(key)}, which JSON can't have as a key"
            problem = _first_problem(item, f"{path}[{key!r}]")
            if problem is not None:
                return problem
        return None
    if isinstance(value, list):
        for index, item in enumerate(value):
            problem = _first_problem(item, f"{path}[{index}]")
            if problem is not None:
                return problem
        return None
    if value is None or isinstance(value, (str, int, float)):  # bools are ints
        return None
    return f"attribute{path} is a {_kind(value)}, which JSON can't hold"


def _kind(value: Any) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
