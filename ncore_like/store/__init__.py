"""Layer 2: zarr hierarchies in stores: ``IndexedTarZarrStore`` (a zarr-python 3 store over
an archive), ``ZarrStoreAdapter`` (any other zarr-python store) and the compressed
consolidated metadata records."""

from ._adapter import ZarrStoreAdapter
from ._base import Store
from ._consolidated import (
    CONSOLIDATED_KEY_V2,
    CONSOLIDATED_KEY_V3,
    ConsolidatedMetadataError,
    is_consolidated_metadata_key,
)
from ._itar_store import IndexedTarZarrStore, clear_caches
from ._zarr_store import ItarZarrStore

__all__ = [
    "CONSOLIDATED_KEY_V2",
    "CONSOLIDATED_KEY_V3",
    "ConsolidatedMetadataError",
    "IndexedTarZarrStore",
    "ItarZarrStore",
    "Store",
    "ZarrStoreAdapter",
    "clear_caches",
    "is_consolidated_metadata_key",
]
