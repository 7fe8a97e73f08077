"""The common part of groups and arrays."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Generic, TypeVar

from .._compat import ZarrArray, ZarrGroup

__all__ = ["Attributes", "Node"]

Attributes = dict[str, Any]
ZarrNode = TypeVar("ZarrNode", ZarrGroup, ZarrArray)


class Node(Generic[ZarrNode]):
    """A node (group or array) of a zarr hierarchy."""

    def __init__(self, node: ZarrNode) -> None:
        self._node: ZarrNode = node

    @property
    def zarr(self) -> ZarrNode:
        """The wrapped zarr-python node."""
        return self._node

    @property
    def path(self) -> str:
        """Path of the node in its hierarchy (``""`` for the root group)."""
        return self._node.path

    @property
    def name(self) -> str:
        """Last component of the path (``""`` for the root group)."""
        return self._node.path.rpartition("/")[2]

    @property
    def attributes(self) -> MappingProxyType[str, Any]:
        """The attributes of the node (read-only; write them when creating the node)."""
        return MappingProxyType(dict(self._node.attrs))

    @property
    def read_only(self) -> bool:
        """True if the node's store was opened for reading."""
        return bool(self._node.read_only)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and type(other) is type(self) and other._node == self._node

    def __hash__(self) -> int:
        return hash((type(self), self.path))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path or '/'} of {self._node.store}>"
