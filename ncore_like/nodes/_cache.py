"""``NodeCache``: opened member nodes of one hierarchy, shared by its groups."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .._defaults import NODE_CACHE_SIZE
from .._lru import LRUCache

__all__ = ["NodeCache"]


class NodeCache:
    """A thread-safe, bounded (least recently used) cache of opened nodes by path.

    Opening a member of a hierarchy without consolidated metadata reads its node metadata
    records (one or more requests for remote archives); a group using a cache (see
    :meth:`Group.with_cache`) opens each member once, and so do its member groups, which
    share the cache. A cache belongs to one hierarchy: using it with the groups of another
    store raises ValueError.

    Args:
        max_size: Nodes kept; the least recently used one is dropped beyond.
    """

    def __init__(self, max_size: int = NODE_CACHE_SIZE) -> None:
        if max_size < 1:
            raise ValueError(f"NodeCache max_size must be positive, got {max_size}")
        self._nodes: LRUCache[str, Any] = LRUCache(max_size)
        self._owner: object | None = None
        self._owner_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # A pickled cache (e.g. of a group sent to a worker process) arrives empty: its nodes
        # belong to the sender's store objects.
        return {"max_size": self.max_size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["max_size"])  # type: ignore[misc]

    @property
    def max_size(self) -> int:
        """Nodes kept at most."""
        return self._nodes.max_weight

    def __len__(self) -> int:
        return len(self._nodes)

    def clear(self) -> None:
        """Drops all nodes."""
        self._nodes.clear()

    def bind(self, owner: object) -> None:
        """Ties the cache to one hierarchy (its zarr store), raising ValueError for another."""
        with self._owner_lock:
            if self._owner is None:
                self._owner = owner
            elif self._owner != owner:
                raise ValueError("this NodeCache serves another hierarchy; use one cache per store")

    def get(self, path: str, open_node: Callable[[], Any]) -> Any:
        """The node at ``path``, opened with ``open_node`` on a miss (None is not cached)."""
        return self._nodes.get_or_put(path, open_node)
