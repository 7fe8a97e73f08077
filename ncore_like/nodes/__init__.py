"""Layer 3: the typed API (``Group``, ``Array``, ``EncodedArray``, ``BloscCompression``,
``NodeCache``)."""

from . import _root
from ._array import Array, Selection
from ._cache import NodeCache
from ._compression import BloscCompression
from ._encoding import EncodedArray
from ._group import Group

_root.install()

__all__ = ["Array", "BloscCompression", "EncodedArray", "Group", "NodeCache", "Selection"]
