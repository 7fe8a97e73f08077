"""Layer 3: the typed API (``Group``, ``Array``, ``EncodedArray``, ``BloscCompression``,
``NodeCache``). Verification of whole arrays is imported on first use."""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from . import _root
from ._array import Array, Selection
from ._cache import NodeCache
from ._compression import BloscCompression
from ._encoding import EncodedArray
from ._group import Group

if TYPE_CHECKING:
    from ._verify import verify_arrays as verify_arrays

_root.install()

__all__ = ["Array", "BloscCompression", "EncodedArray", "Group", "NodeCache", "Selection", "verify_arrays"]

__getattr__, __dir__ = lazy_exports(__name__, {"verify_arrays": "._verify"}, globals())
