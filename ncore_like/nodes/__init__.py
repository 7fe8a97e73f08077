"""Layer 4: the typed API (``Group``, ``Array``, ``EncodedArray``, ``BloscCompression``,
``NodeCache``), and the public stores whose root groups are typed groups (``Store``,
``IndexedTarZarrStore``, ``ZarrStoreAdapter``, ``ArchiveCollection``). Verification of whole
arrays is imported on first use."""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._array import Array, Selection
from ._cache import NodeCache
from ._collection import ArchiveCollection
from ._compression import BloscCompression
from ._encoding import EncodedArray
from ._group import Group
from ._stores import IndexedTarZarrStore, Store, ZarrStoreAdapter

if TYPE_CHECKING:
    from ._verify import verify_arrays as verify_arrays

__all__ = [
    "ArchiveCollection",
    "Array",
    "BloscCompression",
    "EncodedArray",
    "Group",
    "IndexedTarZarrStore",
    "NodeCache",
    "Selection",
    "Store",
    "ZarrStoreAdapter",
    "verify_arrays",
]

__getattr__, __dir__ = lazy_exports(__name__, {"verify_arrays": "._verify"}, globals())
