"""Packing zarr hierarchies into archives (:func:`pack`, and :func:`pack_many` on a dask
cluster): the engine of ``ncore-like pack``, above the typed layer.

The engine is imported on first use of one of its names, so that the commands that only
read (``info``, ``tree``, ``cat``) can use the hierarchy helpers (``_hierarchy.py``)
without loading it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._engine import (
        KEEP as KEEP,
        PackResult as PackResult,
        ProgressCallback as ProgressCallback,
        destination_in as destination_in,
        pack as pack,
        pack_many as pack_many,
        parse_compression as parse_compression,
    )

__all__ = ["KEEP", "PackResult", "ProgressCallback", "destination_in", "pack", "pack_many", "parse_compression"]

__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, "._engine"), globals())
