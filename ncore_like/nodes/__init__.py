"""Layer 3: the typed API (``Group``, ``Array``, ...)."""

from ._group import Group

__all__ = ["Group"]
