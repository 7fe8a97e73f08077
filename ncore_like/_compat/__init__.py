"""The seam between ncore_like and zarr-python: the only package that imports ``zarr``.

One module per zarr-python major version holds everything that depends on it (today
:mod:`.zarr3`, for zarr-python >= 3.1); this package picks the one for the installed
version at import and re-exports its names, so the rest of ncore_like never branches on
a version.
"""

from __future__ import annotations

from importlib.metadata import version

_ZARR_VERSION = version("zarr")
if int(_ZARR_VERSION.split(".")[0]) < 3:
    raise ImportError(f"ncore_like needs zarr-python >= 3.1; zarr {_ZARR_VERSION} is installed")

from .zarr3 import (  # noqa: E402 - after the version check
    Blosc,
    Buffer,
    BufferPrototype,
    ByteRequest,
    SelectionKind,
    SyncZarrStore,
    ZarrArray,
    ZarrFormat,
    ZarrGroup,
    ZarrNode,
    ZarrStore,
    array_zarr_format,
    blosc_compressor,
    byte_range_bounds,
    chunk_key,
    chunk_projections,
    create_array_node,
    create_group,
    default_buffer_prototype,
    fsspec_store,
    group_from_node_metadata,
    guess_chunks,
    is_group,
    local_store,
    open_group,
    open_member,
    raw_chunk_layout,
    read_selection,
    record_exists,
    run_zarr,
    selection_kind,
    selection_shape,
    touched_chunk_keys,
    write_basic_selection,
    write_record,
    zarr_loop,
)

__all__ = [
    "Blosc",
    "Buffer",
    "BufferPrototype",
    "ByteRequest",
    "SelectionKind",
    "SyncZarrStore",
    "ZarrArray",
    "ZarrFormat",
    "ZarrGroup",
    "ZarrNode",
    "ZarrStore",
    "array_zarr_format",
    "blosc_compressor",
    "byte_range_bounds",
    "chunk_key",
    "chunk_projections",
    "create_array_node",
    "create_group",
    "default_buffer_prototype",
    "fsspec_store",
    "group_from_node_metadata",
    "guess_chunks",
    "is_group",
    "local_store",
    "open_group",
    "open_member",
    "raw_chunk_layout",
    "read_selection",
    "record_exists",
    "run_zarr",
    "selection_kind",
    "selection_shape",
    "touched_chunk_keys",
    "write_basic_selection",
    "write_record",
    "zarr_loop",
]
