"""Layer 2: zarr hierarchies in stores: ``IndexedTarZarrStore`` (a zarr-python store over
an archive), ``ZarrStoreAdapter`` (any other zarr-python store) and the compressed
consolidated metadata records. Their root groups are zarr-python's: the public classes of
the same names, whose root groups are typed, are composed in :mod:`ncore_like.nodes`.
Recovery is imported on first use."""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ..errors import ConsolidatedMetadataError
from ._adapter import ZarrStoreAdapter
from ._base import Store
from ._consolidated import CONSOLIDATED_KEY_V2, CONSOLIDATED_KEY_V3, is_consolidated_metadata_key
from ._itar_store import IndexedTarZarrStore, is_itar_zarr_store

if TYPE_CHECKING:
    from ._recover import RecoveryReport as RecoveryReport, recover as recover
    from ._zarr_store import ItarZarrStore as ItarZarrStore

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
    "is_itar_zarr_store",
    "recover",
]

# zarr-python's store of an archive imports zarr-python: on first use, as recovery.
__getattr__, __dir__ = lazy_exports(
    __name__, {**dict.fromkeys(["RecoveryReport", "recover"], "._recover"), "ItarZarrStore": "._zarr_store"}, globals()
)
