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
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from ..errors import NodeMetadataError
from ._documents import V3_DATA_TYPES, ChunkKeys, GroupView, array_layout, grid_shapes, is_array_document

__all__ = ["ArrayView", "NodeView", "parse_node", "reshaped_view"]

ZarrFormat = Literal[2, 3]
#: zarr format 3's data types the view understands, as numpy dtypes.
_V3_TYPES = {name: np.dtype(name) for name in V3_DATA_TYPES}
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class ArrayView:
    """An array's metadata, as far as reading it needs (read-only by convention; a plain
    class, see :class:`~ncore_like.backend._plan.ChunkLayout`)."""

    __slots__ = (
        "__weakref__",  # the typed layer keeps what it learnt about the array by its view
        "attributes",
        "blosc",
        "chunk_key",
        "chunks",
        "document",
        "dtype",
        "fill_value",
        "path",
        "shape",
        "stored_dtype",
        "unsupported",
        "zarr_format",
    )

    def __init__(
        self,
        path: str,
        zarr_format: ZarrFormat,
        attributes: Mapping[str, Any],
        document: Mapping[str, Any],
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        stored_dtype: np.dtype[Any],
        chunks: tuple[int, ...],
        blosc: Mapping[str, Any] | None,
        fill_value: Any,
        chunk_key: ChunkKeys,
        unsupported: str | None,
    ) -> None:
        self.path = path
        self.zarr_format = zarr_format
        self.attributes = attributes
        #: The metadata document (see :class:`GroupView`).
        self.document = document
        self.shape = shape
        #: The array's dtype, as zarr-python gives it.
        self.dtype = dtype
        #: The dtype of the elements in a decoded chunk (byte order as stored).
        self.stored_dtype = stored_dtype
        self.chunks = chunks
        #: numcodecs' Blosc configuration of the chunks, None if raw.
        self.blosc = blosc
        self.fill_value = fill_value
        #: The store key of a chunk by its coordinates.
        self.chunk_key = chunk_key
        #: Why the view doesn't describe the chunks completely (other codecs, filters,
        #: Fortran order, ...): then readers use zarr-python. None if it does.
        self.unsupported = unsupported


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
            # What np.array(decoded, dtype)[()] is (cut to the itemsize, trailing NULs dropped),
            # without allocating an element: a 100 KB blob's "" fill took ~30 us.
            decoded = base64.standard_b64decode(value)[: dtype.itemsize].rstrip(b"\0")
            return dtype.type(decoded), None
        if isinstance(value, str):
            if value not in _FLOAT_WORDS or dtype.kind not in "fc":
                return None, f"fill value {value!r}"
            value = _FLOAT_WORDS[value]
        if isinstance(value, list | dict):
            return None, f"fill value {value!r}"
        return np.array(value, dtype=dtype)[()], None
    except (ValueError, TypeError, OverflowError) as error:
        return None, f"fill value {value!r} ({error})"


def _v2_array(path: str, document: Mapping[str, Any], attributes: Mapping[str, Any], prefix: str) -> ArrayView:
    layout = array_layout(document, 2, prefix)
    raw_dtype = layout.data_type
    unsupported = None
    if not isinstance(raw_dtype, str):
        dtype = np.dtype("V1")
        unsupported = f"dtype {raw_dtype!r}"
    else:
        dtype = np.dtype(raw_dtype)
    fill_value, why = _fill_value(document.get("fill_value"), dtype, 2)
    return ArrayView(
        path, 2, attributes, document, layout.shape, dtype, dtype, layout.chunks, layout.blosc, fill_value,
        layout.chunk_key, unsupported or layout.unsupported or why,
    )  # fmt: skip


def _v3_array(path: str, document: Mapping[str, Any], prefix: str) -> ArrayView:
    layout = array_layout(document, 3, prefix)
    attributes = document.get("attributes") or {}
    data_type = layout.data_type
    unsupported = None
    dtype = _V3_TYPES.get(data_type) if isinstance(data_type, str) else None
    if dtype is None:
        dtype, unsupported = np.dtype("V1"), f"data type {data_type!r}"
    stored = dtype
    endian = layout.endian
    if dtype.itemsize > 1 and endian is not None:
        stored = dtype.newbyteorder("<" if endian == "little" else ">")
    fill_value, why = _fill_value(document.get("fill_value"), dtype, 3)
    return ArrayView(
        path, 3, attributes, document, layout.shape, dtype, stored, layout.chunks, layout.blosc, fill_value,
        layout.chunk_key, unsupported or layout.unsupported or why,
    )  # fmt: skip


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
        if is_array_document(document, 3):
            return _v3_array(path, document, prefix)
        return GroupView(path, 3, document.get("attributes") or {}, document)
    except (ValueError, TypeError, AttributeError, KeyError) as error:
        raise NodeMetadataError(
            f"the metadata of node {path or '/'!r} can't be understood ({error})", archive=where
        ) from error


#: The keys of array documents that :func:`reshaped_view` lets differ.
_RESHAPED = {2: frozenset({"shape", "chunks", "attributes"}), 3: frozenset({"shape", "chunk_grid", "attributes"})}


def reshaped_view(prototype: ArrayView, path: str, document: Mapping[str, Any], where: str) -> ArrayView | None:
    """:func:`parse_node` of the array document ``document`` at ``path`` if it is
    ``prototype``'s document but for the shape, the chunk shape and the attributes; None if
    it differs in anything else. The rest of the view is the prototype's: writers of many
    arrays alike (camera frames of many sizes) skip working it out again (~2 us of ~3).

    Raises:
        NodeMetadataError: For shapes no array can have.
    """
    old = prototype.document
    zarr_format = prototype.zarr_format
    if len(document) != len(old):
        return None
    varying = _RESHAPED[zarr_format]
    for key, value in old.items():
        if key not in varying and (key not in document or document[key] != value):
            return None
    # Equal isn't the same fill value: -0.0 == 0.0, False == 0.
    if repr(document["fill_value"]) != repr(old["fill_value"]):
        return None
    if zarr_format == 3:  # the same chunk grid but for the chunk shape
        grid, old_grid = document.get("chunk_grid"), old["chunk_grid"]
        if not isinstance(grid, dict) or grid.keys() != old_grid.keys() or grid.get("name") != old_grid["name"]:
            return None
        configuration = grid.get("configuration")
        if not isinstance(configuration, dict) or configuration.keys() != {"chunk_shape"}:
            return None
    try:
        shape, chunks = grid_shapes(document, zarr_format)
    except (ValueError, TypeError, AttributeError) as error:
        raise NodeMetadataError(
            f"the metadata of node {path or '/'!r} can't be understood ({error})", archive=where
        ) from error
    keys = prototype.chunk_key.moved(f"{prototype.path}/" if prototype.path else "", f"{path}/" if path else "")
    p = prototype
    return ArrayView(
        path, zarr_format, document.get("attributes") or {}, document, shape, p.dtype, p.stored_dtype, chunks,
        p.blosc, p.fill_value, keys, p.unsupported,
    )  # fmt: skip
