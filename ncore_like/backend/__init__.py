"""Layer 3: the read path of typed arrays (``Backend``)."""

from ._backend import Backend
from ._plan import bytes_like, is_blob, is_bytes_like
from ._state import ArrayState

__all__ = ["ArrayState", "Backend", "bytes_like", "is_blob", "is_bytes_like"]
