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

# Reading whole arrays to verify them.
from ._verify import verify_arrays  # noqa: E402 - appended after the existing imports and install()

__all__ += ["verify_arrays"]
