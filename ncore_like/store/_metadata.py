"""Node metadata read without zarr-python: a small, immutable view of a node (pure).

Opening a member through zarr-python builds its metadata classes, data types and codecs
(~70 µs a node); most reads need a handful of facts: the shape, the dtype, the chunk grid,
whether chunks are raw or Blosc-compressed, the fill value, the chunk keys, the
attributes. :func:`parse_node` takes them from the node's metadata document (zarr's JSON,
as a consolidated record holds it) for the layouts ncore_like writes and most others; a
node it doesn't fully understand gets a view that says why (:attr:`ArrayView.unsupported`),
and its readers build the zarr-python node instead.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..errors import NodeMetadataError

__all__ = [
    "XARRAY_DIMENSIONS",
    "ArrayView",
    "ChunkKeys",
    "GroupView",
    "NodeView",
    "codecs_of",
    "dimension_names_of",
    "parse_node",
]

ZarrFormat = Literal[2, 3]
#: zarr format 3's data types the view understands, as numpy dtypes.
_V3_TYPES = {
    name: np.dtype(name)
    for name in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
}
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class ChunkKeys:
    """Store keys of an array's chunks by coordinates: ``prefix`` + the coordinates joined
    by ``separator`` (``zero_d`` for a 0-dimensional array's one chunk). Picklable."""

    def __init__(self, prefix: str, separator: str, zero_d: str) -> None:
        self._prefix, self._separator, self._zero_d = prefix, separator, zero_d

    def __call__(self, coords: tuple[int, ...]) -> str:
        if not coords:
            return self._zero_d
        return self._prefix + self._separator.join(map(str, coords))

    def first_axis(self, ndim: int) -> Callable[[int], str]:
        """The key of chunk ``(index, 0, ..., 0)`` of an ``ndim``-dimensional array by index
        (the chunks of rows, for reading rows by index)."""
        prefix, suffix = self._prefix, (self._separator + "0") * (ndim - 1)
        return lambda index: f"{prefix}{index}{suffix}"


@dataclass(frozen=True, eq=False)
class GroupView:
    """A group's metadata."""

    path: str
    zarr_format: ZarrFormat
    attributes: Mapping[str, Any]
    document: Mapping[str, Any]
    """The metadata document (zarr-python's consolidated form: v2 ``.zgroup`` plus
    ``"attributes"``, v3 ``zarr.json``)."""


@dataclass(frozen=True, eq=False)
class ArrayView:
    """An array's metadata, as far as reading it needs."""

    path: str
    zarr_format: ZarrFormat
    attributes: Mapping[str, Any]
    document: Mapping[str, Any]
    """The metadata document (see :class:`GroupView`)."""
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    """The array's dtype, as zarr-python gives it."""
    stored_dtype: np.dtype[Any]
    """The dtype of the elements in a decoded chunk (byte order as stored)."""
    chunks: tuple[int, ...]
    blosc: Mapping[str, Any] | None
    """numcodecs' Blosc configuration of the chunks, None if raw."""
    fill_value: Any
    chunk_key: ChunkKeys
    """The store key of a chunk by its coordinates."""
    unsupported: str | None
    """Why the view doesn't describe the chunks completely (other codecs, filters, Fortran
    order, ...): then readers use zarr-python. None if it does."""


NodeView = ArrayView | GroupView


def _fill_value(value: Any, dtype: np.dtype[Any], zarr_format: ZarrFormat) -> tuple[Any, str | None]:
    """The fill value as a numpy scalar of ``dtype``, or None and why it isn't understood."""
    try:
        if dtype.kind in "mMOUV":
            return None, f"fill value {value!r} of dtype {dtype}"
        if value is None:
            # zarr format 2's null: zarr-python fills with the dtype's zero.
            return (np.zeros((), dtype)[()], None) if zarr_format == 2 else (None, "no fill value")
        if dtype.kind == "S":
            if not isinstance(value, str):
                return None, f"fill value {value!r}"
            return np.array(base64.standard_b64decode(value), dtype=dtype)[()], None
        if isinstance(value, str):
            if value not in _FLOAT_WORDS or dtype.kind not in "fc":
                return None, f"fill value {value!r}"
            value = _FLOAT_WORDS[value]
        if isinstance(value, list | dict):
            return None, f"fill value {value!r}"
        return np.array(value, dtype=dtype)[()], None
    except (ValueError, TypeError, OverflowError) as error:
        return None, f"fill value {value!r} ({error})"


#: Keys the zarr specifications require of array metadata (zarr-python refuses documents
#: without them, and so does the view).
_REQUIRED = {
    2: ("shape", "chunks", "dtype", "compressor", "fill_value", "order", "filters", "zarr_format"),
    3: ("shape", "data_type", "chunk_grid", "chunk_key_encoding", "codecs", "fill_value", "zarr_format"),
}


def _check_required(document: Mapping[str, Any], zarr_format: ZarrFormat) -> None:
    missing = [key for key in _REQUIRED[zarr_format] if key not in document]
    if missing:
        raise ValueError(f"no {', '.join(missing)}")
    if document["zarr_format"] != zarr_format:
        raise ValueError(f"zarr_format {document['zarr_format']!r} in a hierarchy of zarr format {zarr_format}")


def _int_tuple(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(type(item) is int and item >= 0 for item in value):
        raise ValueError(f"{what} {value!r} is no list of non-negative integers")
    return tuple(value)


def _v2_array(path: str, document: Mapping[str, Any], attributes: Mapping[str, Any], prefix: str) -> ArrayView:
    _check_required(document, 2)
    shape = _int_tuple(document.get("shape"), "shape")
    chunks = _int_tuple(document.get("chunks"), "chunks")
    if len(chunks) != len(shape):
        raise ValueError(f"chunks {list(chunks)} don't match the shape {list(shape)}")
    raw_dtype = document.get("dtype")
    unsupported = None
    if not isinstance(raw_dtype, str):
        dtype = np.dtype("V1")
        unsupported = f"dtype {raw_dtype!r}"
    else:
        dtype = np.dtype(raw_dtype)
    compressor = document.get("compressor")
    blosc = None
    if compressor is not None:
        if isinstance(compressor, dict) and compressor.get("id") == "blosc":
            blosc = {key: value for key, value in compressor.items() if key != "id"}
        else:
            unsupported = unsupported or f"compressor {compressor!r}"
    if document.get("filters"):
        unsupported = unsupported or "filters"
    if document.get("order", "C") != "C":
        unsupported = unsupported or "Fortran-ordered chunks"
    fill_value, why = _fill_value(document.get("fill_value"), dtype, 2)
    separator = document.get("dimension_separator") or "."
    if separator not in (".", "/"):
        unsupported = unsupported or f"dimension separator {separator!r}"
    return ArrayView(
        path, 2, attributes, document, shape, dtype, dtype, chunks, blosc, fill_value,
        ChunkKeys(prefix, separator, prefix + "0"), unsupported or why,
    )  # fmt: skip


def _v3_array(path: str, document: Mapping[str, Any], prefix: str) -> ArrayView:
    _check_required(document, 3)
    shape = _int_tuple(document.get("shape"), "shape")
    grid = document.get("chunk_grid") or {}
    if not isinstance(grid, dict) or grid.get("name") != "regular":
        raise ValueError(f"chunk grid {grid!r}")
    chunks = _int_tuple((grid.get("configuration") or {}).get("chunk_shape"), "chunk shape")
    if len(chunks) != len(shape):
        raise ValueError(f"chunks {list(chunks)} don't match the shape {list(shape)}")
    attributes = document.get("attributes") or {}
    data_type = document.get("data_type")
    unsupported = None
    dtype = _V3_TYPES.get(data_type) if isinstance(data_type, str) else None
    if dtype is None:
        dtype, unsupported = np.dtype("V1"), f"data type {data_type!r}"
    stored = dtype
    codecs = document.get("codecs")
    blosc = None
    first = codecs[0] if isinstance(codecs, list) and codecs else None
    if not isinstance(first, dict) or first.get("name") != "bytes":
        unsupported = unsupported or "array-to-array codecs or sharding"
    else:
        endian = (first.get("configuration") or {}).get("endian", "little")
        if dtype.itemsize > 1 and endian is not None:
            stored = dtype.newbyteorder("<" if endian == "little" else ">")
        rest = codecs[1:]  # type: ignore[index]
        if len(rest) == 1 and isinstance(rest[0], dict) and rest[0].get("name") == "blosc":
            config = dict(rest[0].get("configuration") or {})
            shuffle = ("noshuffle", "shuffle", "bitshuffle")
            blosc = {
                "cname": config.get("cname"),
                "clevel": config.get("clevel"),
                "shuffle": shuffle.index(config["shuffle"]) if config.get("shuffle") in shuffle else -1,
                "blocksize": config.get("blocksize", 0),
            }
        elif rest:
            unsupported = unsupported or "codecs other than one Blosc compressor"
    fill_value, why = _fill_value(document.get("fill_value"), dtype, 3)
    encoding = document.get("chunk_key_encoding") or {"name": "default"}
    separator = (encoding.get("configuration") or {}).get("separator")
    name = encoding.get("name")
    if name == "default" and (separator or "/") in (".", "/"):
        separator = separator or "/"
        chunk_prefix, zero_d = f"{prefix}c{separator}", prefix + "c"
    elif name == "v2" and (separator or ".") in (".", "/"):
        separator = separator or "."
        chunk_prefix, zero_d = prefix, prefix + "0"
    else:
        separator, chunk_prefix, zero_d = "/", prefix, prefix
        unsupported = unsupported or f"chunk key encoding {encoding!r}"
    return ArrayView(
        path, 3, attributes, document, shape, dtype, stored, chunks, blosc, fill_value,
        ChunkKeys(chunk_prefix, separator, zero_d), unsupported or why,
    )  # fmt: skip


#: The attribute in which xarray keeps the dimension names of a zarr format 2 array.
XARRAY_DIMENSIONS = "_ARRAY_DIMENSIONS"


def codecs_of(document: Mapping[str, Any], zarr_format: ZarrFormat) -> tuple[dict[str, Any], ...]:
    """An array's codec chain from its metadata document, in the order chunks are encoded:
    zarr format 3's ``codecs`` (``{"name", "configuration"}``), format 2's ``filters`` then
    ``compressor`` (numcodecs' configurations, ``{"id", ...}``)."""
    if zarr_format == 3:
        chain = list(document.get("codecs") or [])
    else:
        chain = [*(document.get("filters") or []), *([document["compressor"]] if document.get("compressor") else [])]
    return tuple(dict(codec) for codec in chain if isinstance(codec, dict))


def dimension_names_of(document: Mapping[str, Any], zarr_format: ZarrFormat) -> tuple[str | None, ...] | None:
    """The names of an array's dimensions: zarr format 3's ``dimension_names``; in format 2,
    which has none, xarray's ``_ARRAY_DIMENSIONS`` attribute. None without names (or with
    names that aren't one string, or null in format 3, per dimension)."""
    if zarr_format == 3:
        names = document.get("dimension_names")
        allowed: tuple[type, ...] = (str, type(None))
    else:
        names = (document.get("attributes") or {}).get(XARRAY_DIMENSIONS)
        allowed = (str,)
    shape = document.get("shape")
    if not isinstance(names, list | tuple) or not isinstance(shape, list | tuple) or len(names) != len(shape):
        return None
    return tuple(names) if all(isinstance(name, allowed) for name in names) else None


def parse_node(path: str, document: Mapping[str, Any], zarr_format: ZarrFormat, where: str) -> NodeView:
    """The view of the node at ``path`` from its metadata document (zarr-python's
    consolidated form: v2 ``.zarray`` or ``.zgroup`` plus ``"attributes"``, v3
    ``zarr.json``).

    Raises:
        NodeMetadataError: For documents that can't be node metadata.
    """
    prefix = f"{path}/" if path else ""
    try:
        if zarr_format == 2:
            attributes = document.get("attributes") or {}
            if "shape" in document:
                return _v2_array(path, document, attributes, prefix)
            return GroupView(path, 2, attributes, document)
        kind = document.get("node_type")
        if kind == "array":
            return _v3_array(path, document, prefix)
        if kind == "group":
            return GroupView(path, 3, document.get("attributes") or {}, document)
        raise ValueError(f"node type {kind!r}")
    except (ValueError, TypeError, AttributeError, KeyError) as error:
        raise NodeMetadataError(
            f"the metadata of node {path or '/'!r} can't be understood ({error})", archive=where
        ) from error
