"""What an array keeps when ``pack`` re-encodes it, into the same zarr format or the other:
its attributes, its dimension names (zarr format 3's ``dimension_names`` <-> xarray's
``_ARRAY_DIMENSIONS`` attribute in format 2) and its fill value, with xarray's convention
for missing values carried across formats.

xarray marks missing values differently per format: in format 2 the array's fill value is
the mask (``_FillValue`` when read), in format 3 an attribute ``_FillValue`` is, encoded
(floats as base64 of their little-endian float64 bytes), and the fill value is not. An
array with dimension names is one xarray can read, so its mask moves between the two places;
other arrays keep their attributes and fill value as they are.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..nodes import Array
from ..store._documents import XARRAY_DIMENSIONS

__all__ = ["Carried", "carried_over"]

ZarrFormat = Literal[2, 3]
_FILL_VALUE = "_FillValue"


@dataclass(frozen=True)
class Carried:
    """What the re-encoded array is created with."""

    attributes: dict[str, Any]
    dimension_names: tuple[str | None, ...] | None
    fill_value: Any
    """A value of the dtype; None: zarr format 2's null (no mask for xarray), or (format 3)
    the dtype's zero."""


def carried_over(array: Array, source_format: ZarrFormat, zarr_format: ZarrFormat) -> Carried:
    """What ``array`` (of a hierarchy of ``source_format``) keeps when re-encoded into
    ``zarr_format``."""
    names = array.dimension_names
    attributes = dict(array.attributes)
    if names is not None and source_format == 2:
        attributes.pop(XARRAY_DIMENSIONS, None)  # written back from the names in format 2
    if zarr_format == 2 and names is not None and not all(isinstance(name, str) for name in names):
        names = None  # format 2 (xarray) names every dimension or none
    fill = array.fill_value
    if names is None or source_format == zarr_format:
        return Carried(attributes, names, fill)
    dtype = array.dtype
    if zarr_format == 2:
        # The attribute becomes the fill value; without one, no value is missing (null).
        encoded = attributes.pop(_FILL_VALUE, None)
        mask = None if encoded is None else _decoded_fill(encoded, dtype)
        if encoded is not None and mask is None:
            attributes[_FILL_VALUE] = encoded  # not xarray's encoding: kept as it is
        return Carried(attributes, names, mask)
    mask = fill if fill is not None else attributes.get(_FILL_VALUE)
    if mask is not None:
        encoded = _encoded_fill(mask, dtype)
        if encoded is not None:
            attributes[_FILL_VALUE] = encoded
    return Carried(attributes, names, fill)


def _float_text(value: float) -> str:
    return base64.standard_b64encode(struct.pack("<d", value)).decode()


def _float_of(text: Any) -> float:
    if not isinstance(text, str):
        raise TypeError(f"expected base64 text, got {text!r}")
    (value,) = struct.unpack("<d", base64.standard_b64decode(text))
    return float(value)


def _encoded_fill(value: Any, dtype: np.dtype[Any]) -> Any:
    """A fill value as xarray stores ``_FillValue`` in zarr format 3 (None: a dtype it has
    no encoding for)."""
    try:
        if dtype.kind == "f":
            return _float_text(float(value))
        if dtype.kind == "c":
            number = complex(value)
            return [_float_text(number.real), _float_text(number.imag)]
        if dtype.kind in "iu":
            return int(value)
        if dtype.kind == "b":
            return bool(value)
        if dtype.kind == "S":
            return base64.standard_b64encode(bytes(value)).decode()
        if dtype.kind == "U":
            return str(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return None


def _decoded_fill(value: Any, dtype: np.dtype[Any]) -> Any:
    """xarray's ``_FillValue`` of zarr format 3 as a value of the dtype (None: not xarray's
    encoding)."""
    try:
        if dtype.kind == "f":
            decoded: Any = _float_of(value)
        elif dtype.kind == "c":
            real, imag = value
            decoded = complex(_float_of(real), _float_of(imag))
        elif dtype.kind in "iub" or dtype.kind == "U":
            decoded = value
        elif dtype.kind == "S":
            decoded = base64.standard_b64decode(value)
        else:
            return None
        return np.asarray(decoded, dtype=dtype)[()]
    except (TypeError, ValueError, OverflowError, struct.error):
        return None
