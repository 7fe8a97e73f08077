"""Layer 2: zarr hierarchies in stores: ``IndexedTarZarrStore`` (a zarr-python store over
an archive), ``ZarrStoreAdapter`` (any other zarr-python store) and the compressed
consolidated metadata records. Their root groups are zarr-python's: the public classes of
the same names, whose root groups are typed, are composed in :mod:`ncore_like.nodes`.
Every name is imported on first use."""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ..errors import ConsolidatedMetadataError

if TYPE_CHECKING:
    from ._adapter import ZarrStoreAdapter as ZarrStoreAdapter
    from ._base import Store as Store
    from ._consolidated import (
        CONSOLIDATED_KEY_V2 as CONSOLIDATED_KEY_V2,
        CONSOLIDATED_KEY_V3 as CONSOLIDATED_KEY_V3,
        is_consolidated_metadata_key as is_consolidated_metadata_key,
    )
    from ._itar_store import IndexedTarZarrStore as IndexedTarZarrStore, is_itar_zarr_store as is_itar_zarr_store
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

# Every name on first use, as in the archive layer: a command that describes node metadata
# documents imports neither numpy (the views') nor zarr-python (the zarr-python store's).
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ZarrStoreAdapter": "._adapter",
        "Store": "._base",
        **dict.fromkeys(
            ["CONSOLIDATED_KEY_V2", "CONSOLIDATED_KEY_V3", "is_consolidated_metadata_key"], "._consolidated"
        ),
        **dict.fromkeys(["IndexedTarZarrStore", "is_itar_zarr_store"], "._itar_store"),
        **dict.fromkeys(["RecoveryReport", "recover"], "._recover"),
        "ItarZarrStore": "._zarr_store",
    },
    globals(),
)
