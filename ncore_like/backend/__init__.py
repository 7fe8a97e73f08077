"""Layer 4: the read path of typed arrays (``Backend``)."""

from ._backend import Backend
from ._plan import is_blob, is_bytes_like

__all__ = ["Backend", "is_blob", "is_bytes_like"]
