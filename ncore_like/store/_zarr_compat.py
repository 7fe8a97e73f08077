"""Everything that depends on zarr-python's version, in one place.

zarr-python 3 (>= 3.1) is supported now; the semi-public pieces used here (building a group
from metadata dictionaries, the byte-request classes, the loop that runs zarr's coroutines)
are what a zarr-python 2 port would replace.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

import zarr
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.abc.store import Store as ZarrStore
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.core.group import AsyncGroup
from zarr.core.sync import sync
from zarr.storage import StorePath

__all__ = [
    "Buffer",
    "BufferPrototype",
    "ByteRequest",
    "ZarrStore",
    "byte_range_bounds",
    "create_group",
    "default_buffer_prototype",
    "group_from_node_metadata",
    "open_group",
    "run_zarr",
]

T = TypeVar("T")
ZarrFormat = Literal[2, 3]


def run_zarr(coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine of a zarr store on zarr's own loop (from synchronous code)."""
    return sync(coroutine)


def byte_range_bounds(byte_range: ByteRequest | None, size: int) -> tuple[int, int]:
    """``[start, stop)`` of a zarr byte request within a value of ``size`` bytes (the one
    place that interprets byte requests)."""
    if byte_range is None:
        return 0, size
    if isinstance(byte_range, RangeByteRequest):
        start, stop = byte_range.start, byte_range.end
        if start < 0 or stop < start:
            raise ValueError(f"invalid byte range {start}-{stop}")
        return min(start, size), min(stop, size)
    if isinstance(byte_range, OffsetByteRequest):
        if byte_range.offset < 0:
            raise ValueError(f"invalid byte offset {byte_range.offset}")
        return min(byte_range.offset, size), size
    if isinstance(byte_range, SuffixByteRequest):
        if byte_range.suffix < 0:
            raise ValueError(f"invalid byte suffix {byte_range.suffix}")
        return max(0, size - byte_range.suffix), size
    raise TypeError(f"Unexpected byte_range, got {byte_range!r}")


def create_group(store: ZarrStore, attributes: dict[str, Any], zarr_format: ZarrFormat) -> zarr.Group:
    """Creates the root group (existing nodes elsewhere in the store are kept)."""
    return zarr.Group.from_store(store, attributes=attributes, zarr_format=zarr_format, overwrite=False)


def open_group(store: ZarrStore) -> zarr.Group:
    """Opens the root group for reading from its node metadata records."""
    return zarr.open_group(store=store, mode="r", use_consolidated=False)


def group_from_node_metadata(store: ZarrStore, root: dict[str, Any], members: dict[str, dict[str, Any]]) -> zarr.Group:
    """The root group built from metadata dictionaries, without any store I/O: ``root`` is
    the root group's metadata, ``members`` that of every member by path (zarr-python's
    consolidated-metadata form: v2 nodes are their ``.zarray``/``.zgroup`` plus
    ``"attributes"``)."""
    metadata = {
        **root,
        "consolidated_metadata": {"kind": "inline", "must_understand": False, "metadata": members},
    }
    return zarr.Group(AsyncGroup.from_dict(StorePath(store, ""), metadata))
