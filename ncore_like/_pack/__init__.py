"""Packing zarr hierarchies into archives (:func:`pack`, and :func:`pack_many` on a dask
cluster): the engine of ``ncore-like pack``, above the typed layer."""

from __future__ import annotations

from ._engine import KEEP, PackResult, ProgressCallback, destination_in, pack, pack_many, parse_compression

__all__ = ["KEEP", "PackResult", "ProgressCallback", "destination_in", "pack", "pack_many", "parse_compression"]
