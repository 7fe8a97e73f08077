"""``Group``: a group of a zarr hierarchy (typed wrapper of a zarr-python group)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import zarr

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["Group"]


class Group:
    """A group of a zarr hierarchy."""

    def __init__(self, group: zarr.Group, cache: object | None = None, store: Store | None = None) -> None:
        self._group = group
        self._cache = cache
        self._store = store

    @property
    def zarr(self) -> zarr.Group:
        """The wrapped zarr-python group."""
        return self._group

    @property
    def store(self) -> Store | None:
        """The store of the group (None for groups not opened or created through a Store)."""
        return self._store

    @property
    def attributes(self) -> dict[str, Any]:
        """The attributes of the group."""
        return dict(self._group.attrs)
