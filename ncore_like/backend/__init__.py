"""Layer 4: the read path of typed arrays (``Backend``)."""

from ._backend import Backend, default_backend

__all__ = ["Backend", "default_backend"]
