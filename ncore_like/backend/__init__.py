"""Layer 4: the read path of typed arrays (``Backend``)."""

from ._backend import Backend
from ._plan import bytes_like, is_blob, is_bytes_like

__all__ = ["Backend", "bytes_like", "is_blob", "is_bytes_like"]
