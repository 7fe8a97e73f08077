"""Previews of numeric arrays: which plots fit a shape, the values read for one (a bounded
selection, through the array's own read path), their statistics, and the compact binary
form the page draws from.

The page draws on a canvas; the server sends values, thinned to what a screen shows (at
most a few thousand buckets of a series, a megapixel of an image, a quarter million points).
A payload is ``[u32 header length][JSON header][padding to 8 bytes][values]``, the values
little-endian in C order of the header's ``shape`` and of its ``dtype``: ``float64`` for
series (timestamps in microseconds need its precision), ``float32`` for images and point
clouds, ``uint8`` for colour images.
"""

from __future__ import annotations

import json
import math
import struct
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..nodes import Array

__all__ = ["MAX_READ_BYTES", "PreviewError", "pack", "preview", "preview_plan"]

#: Values read for one preview at most: larger arrays show their first rows (and say so).
MAX_READ_BYTES = 64 << 20
#: Columns of an ``(N, ...)`` array that are plotted as series: trailing sizes up to this.
_MAX_COLUMNS = 32
#: A series of more rows than twice this is sent as the minimum and maximum of each bucket.
_MAX_BUCKETS = 2000
#: Images are thinned to at most this many pixels a side, point clouds to this many points.
_MAX_IMAGE_SIDE = 1024
_MAX_POINTS = 250_000
#: Point clouds: ``(..., N, k)`` float arrays with at least this many points of 3 to 16 values.
_MIN_POINTS = 64
_POINT_VALUES = range(3, 17)
#: Non-numeric arrays show this many values as text.
_MAX_TEXT_VALUES = 200


class PreviewError(ValueError):
    """A preview that doesn't apply to the array (a bad view or index)."""


def _column_labels(trailing: Sequence[int], attributes: Mapping[str, Any]) -> list[str]:
    count = math.prod(trailing)
    for key in ("fields", "columns", "names"):  # see Catalog.labelling_attributes
        names = attributes.get(key)
        if isinstance(names, list) and len(names) == count and all(isinstance(name, str) for name in names):
            return list(names)
    if len(trailing) == 1:
        return [str(i) for i in range(count)]
    return ["[" + ",".join(map(str, index)) + "]" for index in np.ndindex(*trailing)]


def preview_plan(shape: Sequence[int], dtype: np.dtype[Any], attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The previews that fit an array, the first one the default: ``views`` (each with the
    shape its ``index`` slider ranges over, ``lead``), column labels and the columns shown
    first. Nothing is read."""
    shape = tuple(shape)
    views: dict[str, dict[str, Any]] = {}
    plan: dict[str, Any] = {"views": views}
    if dtype.kind not in "biuf":
        views["text"] = {"lead": []}
        return plan
    if not shape:
        views["scalar"] = {"lead": []}
        return plan
    if len(shape) == 1:
        views["series"] = {"lead": []}
        return plan
    trailing = shape[1:]
    points = dtype.kind == "f" and shape[-1] in _POINT_VALUES and shape[-2] >= _MIN_POINTS
    columns = math.prod(trailing) <= _MAX_COLUMNS
    # Labels only where columns are shown: one per column of a (2, 20_000_000) array took
    # ~1.5 GB for a request of its metadata.
    labels = _column_labels(trailing, attributes) if columns else []
    if points:
        point_labels = _column_labels(shape[-1:], attributes)
        colour = point_labels.index("intensity") if "intensity" in point_labels else min(3, shape[-1] - 1)
        views["points"] = {"lead": list(shape[:-2]), "columns": point_labels, "colour": colour}
    if columns:
        if trailing in ((4, 4), (3, 4)):  # poses: the translation column
            shown = [labels.index(f"[{row},3]") for row in range(3)]
        else:
            shown = list(range(min(4, len(labels))))
        views["columns"] = {"lead": [], "columns": labels, "shown": shown}
    if points and len(shape) == 2 and shape[0] < 1000 and columns:
        views = {"columns": views.pop("columns"), **views}  # a short table: its columns first
        plan["views"] = views
    if not columns and not points:
        rgb = len(shape) >= 3 and shape[-1] in (3, 4) and dtype == np.uint8
        views["image"] = {"lead": list(shape[:-3] if rgb else shape[:-2]), "rgb": rgb}
    return plan


def _stats(values: np.ndarray) -> dict[str, Any]:
    """Count, NaNs, minimum, maximum, mean and standard deviation (of the finite values)."""
    flat = values.reshape(-1)
    stats: dict[str, Any] = {"count": int(flat.size)}
    if flat.dtype.kind == "f":
        finite = np.isfinite(flat)
        stats["nan"] = int(np.isnan(flat).sum())
        stats["inf"] = int(flat.size - finite.sum() - stats["nan"])
        flat = flat[finite]
    if flat.size == 0:
        return stats
    as_python = int if flat.dtype.kind in "biu" else float
    stats["min"] = as_python(flat.min())
    stats["max"] = as_python(flat.max())
    wide = flat.astype(np.float64)
    stats["mean"] = float(wide.mean())
    stats["std"] = float(wide.std())
    return stats


def pack(header: Mapping[str, Any], values: np.ndarray | None = None) -> bytes:
    """A payload: the JSON header and the values (see the module's docstring)."""
    text = json.dumps(header, allow_nan=False).encode()
    text += b" " * (-(len(text) + 4) % 8)  # the values start aligned for any typed array
    body = b"" if values is None else np.ascontiguousarray(values).astype(values.dtype.newbyteorder("<")).tobytes()
    return struct.pack("<I", len(text)) + text + body


def _first_elements(array: Array, count: int) -> np.ndarray:
    """The first ``count`` elements in C order, reading no more than the slab that holds
    them (200 values of a ``(3, 20_000_000)`` array: not three whole rows)."""
    if not array.shape or not count:
        return array.read().reshape(-1)[:count]
    selection: list[Any] = []
    for axis, size in enumerate(array.shape):
        inner = math.prod(array.shape[axis + 1 :])
        if inner >= count and axis < len(array.shape) - 1:
            selection.append(0)  # all of them lie in the first slab along this axis
            continue
        selection.append(slice(0, min(size, -(-count // max(inner, 1)))))
        break
    values: np.ndarray = array.read(tuple(selection)).reshape(-1)[:count]
    return values


def _lead_index(lead: Sequence[int], index: int) -> tuple[int, ...]:
    count = math.prod(lead)
    if not 0 <= index < max(count, 1):
        raise PreviewError(f"index {index} out of range 0..{count - 1}")
    return tuple(int(i) for i in np.unravel_index(index, tuple(lead))) if lead else ()


def _rows(array: Array, lead: tuple[int, ...], row_bytes: int) -> int:
    """Rows (of the axis after ``lead``) read within :data:`MAX_READ_BYTES`."""
    available = array.shape[len(lead)]
    return max(1, min(available, MAX_READ_BYTES // max(row_bytes, 1)))


def _envelope(values: np.ndarray) -> tuple[np.ndarray, int]:
    """``(n, k)`` values as they are, or as the minimum and maximum of each of at most
    :data:`_MAX_BUCKETS` buckets of rows: ``(2, buckets, k)``, and the rows per bucket."""
    n = values.shape[0]
    if n <= 2 * _MAX_BUCKETS:
        return values[None], 1
    step = math.ceil(n / _MAX_BUCKETS)
    padded = np.full((math.ceil(n / step) * step, values.shape[1]), np.nan, dtype=np.float64)
    padded[:n] = values
    buckets = padded.reshape(-1, step, values.shape[1])
    with warnings.catch_warnings():  # buckets of NaNs only: NaN, without numpy's warning
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.stack([np.nanmin(buckets, axis=1), np.nanmax(buckets, axis=1)]), step


def preview(array: Array, view: str, index: int, attributes: Mapping[str, Any]) -> bytes:
    """Reads what ``view`` of ``array`` shows (its ``index``-th slice along the view's
    ``lead`` dimensions) and returns the payload (see :func:`pack`).

    Raises:
        PreviewError: For a view that doesn't fit the array, or an index out of range.
    """
    plan = preview_plan(array.shape, array.dtype, attributes)["views"]
    if view not in plan:
        raise PreviewError(f"no {view!r} preview for an array of shape {array.shape} and dtype {array.dtype}")
    lead = _lead_index(plan[view]["lead"], index)
    itemsize = array.dtype.itemsize
    header: dict[str, Any] = {"view": view, "index": index, "lead": list(lead)}
    if view == "scalar":
        value = array.read()
        header["stats"] = _stats(value)
        header["value"] = value.item() if np.isfinite(value).all() else str(value)
        return pack(header)
    if view == "text":
        values = _first_elements(array, min(array.size, _MAX_TEXT_VALUES))
        header["values"] = [str(value) for value in values]
        header["total"] = array.size
        return pack(header)
    trailing = array.shape[len(lead) + 1 :]
    rows = _rows(array, lead, math.prod(trailing) * itemsize)
    values = array.read((*lead, slice(0, rows)))
    total = array.shape[len(lead)]
    header["rows"] = [0, rows, total]
    if rows < total:
        header["note"] = f"the first {rows} of {total} rows (the preview reads at most {MAX_READ_BYTES >> 20} MiB)"
    if view in ("series", "columns"):
        table = values.reshape(rows, -1)
        header["stats"] = _stats(values)
        header["column_stats"] = [_stats(table[:, i]) for i in range(table.shape[1])] if table.shape[1] > 1 else []
        thinned, step = _envelope(table.astype(np.float64))
        header["step"] = step
        header["envelope"] = step > 1
        header["shape"] = list(thinned.shape)
        header["dtype"] = "float64"
        return pack(header, thinned)
    if view == "points":
        header["stats"] = _stats(values)
        header["column_stats"] = [_stats(values[:, i]) for i in range(values.shape[1])]
        step = math.ceil(values.shape[0] / _MAX_POINTS)
        points = values[::step]
        header["step"] = step
        header["shape"] = list(points.shape)
        header["dtype"] = "float32"
        return pack(header, points.astype(np.float32))
    # An image: the last two dimensions (and colour channels), thinned to the screen.
    header["stats"] = _stats(values)
    stride = max(1, math.ceil(max(values.shape[:2]) / _MAX_IMAGE_SIDE))
    pixels = values[::stride, ::stride]
    header["step"] = stride
    header["shape"] = list(pixels.shape)
    if plan[view]["rgb"]:
        header["dtype"] = "uint8"
        return pack(header, pixels.astype(np.uint8))
    header["dtype"] = "float32"
    return pack(header, pixels.astype(np.float32))
