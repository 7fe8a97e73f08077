"""Layer 2: zarr hierarchies in stores: ``IndexedTarZarrStore`` (a zarr-python 3 store over
an archive), ``ZarrStoreAdapter`` (any other zarr-python store) and the compressed
consolidated metadata records."""

from ..errors import ConsolidatedMetadataError
from ._adapter import ZarrStoreAdapter
from ._base import Store
from ._consolidated import CONSOLIDATED_KEY_V2, CONSOLIDATED_KEY_V3, is_consolidated_metadata_key
from ._itar_store import IndexedTarZarrStore
from ._recover import RecoveryReport, recover
from ._zarr_store import ItarZarrStore

__all__ = [
    "CONSOLIDATED_KEY_V2",
    "CONSOLIDATED_KEY_V3",
    "ConsolidatedMetadataError",
    "IndexedTarZarrStore",
    "ItarZarrStore",
    "RecoveryReport",
    "Store",
    "ZarrStoreAdapter",
    "is_consolidated_metadata_key",
    "recover",
]
