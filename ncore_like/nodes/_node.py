"""The common part of groups and arrays.

A node is backed by zarr-python's node, or by a view of its metadata
(:class:`~ncore_like.store._metadata.ArrayView` / ``GroupView``) when its store serves them
(archives opened for reading): looking a member up then costs a dictionary lookup, and
zarr-python's node is built only when something needs it (:attr:`Node.zarr`, a read the
fast path doesn't take).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..store._metadata import NodeView

if TYPE_CHECKING:
    from .._compat import ZarrArray, ZarrGroup
    from ..store import Store

__all__ = ["Attributes", "Node"]

Attributes = dict[str, Any]
# By name: zarr-python's classes are imported only when a node needs them.
ZarrNode = TypeVar("ZarrNode", "ZarrGroup", "ZarrArray")


class Node(Generic[ZarrNode]):
    """A node (group or array) of a zarr hierarchy."""

    def __init__(self, node: ZarrNode | None, view: NodeView | None = None, store: Store | None = None) -> None:
        if node is None and (view is None or store is None):
            raise TypeError("a node needs zarr-python's node, or a view and its store")
        self._node: ZarrNode | None = node
        self._view = view
        self._store = store

    @property
    def zarr(self) -> ZarrNode:
        """The wrapped zarr-python node (built on first use for nodes looked up as views)."""
        node = self._node
        if node is None:
            assert self._store is not None and self._view is not None
            built: Any = self._store.zarr_node(self._view)
            node = self._node = built
        return node

    @property
    def path(self) -> str:
        """Path of the node in its hierarchy (``""`` for the root group)."""
        return self._view.path if self._view is not None else self.zarr.path

    @property
    def name(self) -> str:
        """Last component of the path (``""`` for the root group)."""
        return self.path.rpartition("/")[2]

    @property
    def attributes(self) -> MappingProxyType[str, Any]:
        """The attributes of the node (read-only; write them when creating the node)."""
        if self._view is not None:
            return MappingProxyType(dict(self._view.attributes))
        return MappingProxyType(dict(self.zarr.attrs))

    @property
    def read_only(self) -> bool:
        """True if the node's store was opened for reading."""
        if self._view is not None:
            assert self._store is not None
            return self._store.read_only
        return bool(self.zarr.read_only)

    def _where_store(self) -> str:
        return self._store.name if self._store is not None else str(self.zarr.store)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Node) or type(other) is not type(self) or other.path != self.path:
            return False
        if self._store is not None and other._store is not None:
            return other._store is self._store or other._store.name == self._store.name
        return bool(other.zarr == self.zarr)

    def __hash__(self) -> int:
        return hash((type(self), self.path))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path or '/'} of {self._where_store()}>"
