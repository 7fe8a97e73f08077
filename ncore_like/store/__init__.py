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
from ._itar_store import IndexedTarZarrStore
from ._zarr_store import ItarZarrStore

if TYPE_CHECKING:
    from ._recover import RecoveryReport as RecoveryReport, recover as recover

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

__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(["RecoveryReport", "recover"], "._recover"), globals())
