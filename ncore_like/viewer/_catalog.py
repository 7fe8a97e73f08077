"""The hierarchy as the viewer shows it: every node by path (the only names requests may
use), what kind each is (group, array, blob), groups of frames, and the documents the page
gets (the tree, a node's details). Everything here comes from the node metadata and the
archive index: no chunk is read."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from .. import _compat
from ..backend import bytes_like, is_blob
from ..nodes import Array, Group
from ..store._documents import describe_codecs
from ._previews import preview_plan
from ._source import Source

__all__ = ["Catalog", "Entry", "NodeNotFound", "blob_size"]

Kind = Literal["group", "array", "blob"]
#: Arrays of more chunks than this show no stored size (summing it would take seconds).
_MAX_CHUNKS_SUMMED = 200_000
#: Attributes that name the columns of an array.
_LABEL_KEYS = ("fields", "columns", "names")
#: A group with at least this many blobs, all numbered (a digit in every name: an index, a
#: timestamp), is a sequence of frames, shown as a timeline.
_MIN_FRAMES = 2


class NodeNotFound(KeyError):
    """A request named something that is no node of the hierarchy."""


@dataclass
class Entry:
    """A node of the hierarchy."""

    path: str
    node: Group | Array
    kind: Kind
    frames: list[str] = field(default_factory=list)
    """Of a group of frames: the paths of its blobs in natural order (its timeline)."""
    frame_of: tuple[str, int] | None = None
    """Of a blob in a group of frames: that group's path and the blob's position."""


def _natural(name: str) -> list[Any]:
    """Sort key that orders ``frame_2`` before ``frame_10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def blob_size(array: Array) -> int:
    """The size in bytes of a blob, from its metadata."""
    return array.dtype.itemsize if not array.shape else array.shape[0]


def _is_blob(array: Array) -> bool:
    """:func:`ncore_like.backend.is_blob` from the array's metadata view where it has one:
    the backend's test builds zarr-python's node (~70 us each), and a sequence has
    thousands of frames."""
    view = array.view
    if view is None or view.unsupported is not None:
        return is_blob(array.zarr)
    if not bytes_like(view.shape, view.dtype):
        return False
    if not view.shape:
        return True
    return view.zarr_format == 3 and view.chunks[0] >= view.shape[0] and view.blosc is None


class Catalog:
    """Every node of ``source``'s hierarchy by path (the root group is ``""``)."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.entries: dict[str, Entry] = {"": Entry("", source.root, "group")}
        self._walk(source.root)

    def _walk(self, group: Group) -> None:
        parent = self.entries[group.path]
        for _, node in group.items():
            if isinstance(node, Group):
                self.entries[node.path] = Entry(node.path, node, "group")
                self._walk(node)
                continue
            kind: Kind = "blob" if _is_blob(node) else "array"
            self.entries[node.path] = Entry(node.path, node, kind)
            if kind == "blob":
                parent.frames.append(node.path)
        numbered = all(any(char.isdigit() for char in path.rpartition("/")[2]) for path in parent.frames)
        if len(parent.frames) < _MIN_FRAMES or not numbered:
            parent.frames = []  # blobs of their own, listed in the tree
            return
        parent.frames.sort(key=lambda path: _natural(path.rpartition("/")[2]))
        for position, path in enumerate(parent.frames):
            self.entries[path].frame_of = (parent.path, position)

    def entry(self, path: str) -> Entry:
        """The node at ``path``; :class:`NodeNotFound` for anything else (the one check
        every request goes through: names are looked up, never joined to other paths)."""
        found = self.entries.get(path)
        if found is None:
            raise NodeNotFound(path)
        return found

    def labelling_attributes(self, path: str) -> dict[str, Any]:
        """The attributes that name an array's columns (``fields``, ``columns`` or ``names``):
        the array's, else its group's (a group of lidar slabs names their fields once)."""
        attributes = dict(self.entry(path).node.attributes)
        if any(key in attributes for key in _LABEL_KEYS) or not path:
            return attributes
        return {**dict(self.entry(path.rpartition("/")[0]).node.attributes), **attributes}

    # -- the tree ------------------------------------------------------------------------

    def tree(self) -> dict[str, Any]:
        """The hierarchy as nested groups: each lists its member groups and arrays; blobs of
        a group of frames are counted, not listed (the timeline shows them)."""
        return self._tree_of(self.entries[""])

    def _tree_of(self, entry: Entry) -> dict[str, Any]:
        group = entry.node
        assert isinstance(group, Group)
        timeline = bool(entry.frames)
        members: list[dict[str, Any]] = []
        for name in group.members():
            path = f"{entry.path}/{name}" if entry.path else name
            member = self.entries.get(path)
            if member is None or (timeline and member.kind == "blob"):
                continue
            if member.kind == "group":
                members.append(self._tree_of(member))
            else:
                array = member.node
                assert isinstance(array, Array)
                shape, dtype = list(array.shape), str(array.dtype)
                members.append({"name": name, "path": path, "kind": member.kind, "shape": shape, "dtype": dtype})
        return {
            "name": group.name,
            "path": entry.path,
            "kind": "group",
            "frames": len(entry.frames) if timeline else 0,
            "members": members,
        }

    # -- details of one node ---------------------------------------------------------------

    def details(self, path: str) -> dict[str, Any]:
        """What the page shows of a node (its metadata; a group's frames; an array's
        previews), without reading a chunk."""
        entry = self.entry(path)
        node = entry.node
        document: dict[str, Any] = {
            "path": path,
            "name": node.name,
            "kind": entry.kind,
            "attributes": dict(node.attributes),
        }
        if isinstance(node, Group):
            document["zarr_format"] = node.zarr_format
            kinds = [self.entries[f"{path}/{name}" if path else name].kind for name in node.members()]
            document["members"] = {kind: kinds.count(kind) for kind in ("group", "array", "blob")}
            if entry.frames:
                document["frames"] = entry.frames
                # Whether the page asks for each frame's attributes as it shows it.
                document["frame_attributes"] = any(self.entries[frame].node.attributes for frame in entry.frames)
                first = self.entries[entry.frames[0]].node
                document["frame_size"] = blob_size(first) if isinstance(first, Array) else None
            return document
        document.update(self._array_facts(node))
        if entry.kind == "blob":
            document["size"] = blob_size(node)
            if entry.frame_of is not None:
                group, position = entry.frame_of
                document["frame_of"] = {"group": group, "index": position}
        else:
            document["preview"] = preview_plan(node.shape, node.dtype, self.labelling_attributes(path))
        return document

    def _array_facts(self, array: Array) -> dict[str, Any]:
        stored = self._stored(array)
        return {
            "shape": list(array.shape),
            "dtype": str(array.dtype),
            "chunks": list(array.chunks),
            "codecs": _codecs(array),
            "nbytes": array.nbytes,
            "stored_bytes": None if stored is None else stored[0],
            "chunks_stored": None if stored is None else stored[1],
            "chunks_total": math.prod(_grid(array)),
        }

    def _stored(self, array: Array) -> tuple[int, int] | None:
        """Bytes and number of the array's chunk records, from the archive index (the store's
        listing otherwise); None for arrays of very many chunks."""
        grid = _grid(array)
        if math.prod(grid) > _MAX_CHUNKS_SUMMED:
            return None
        archive, view = self.source.archive, array.view
        sizes: Iterator[int | None]
        coords = itertools.product(*(range(n) for n in grid))
        if archive is not None and view is not None:
            records = archive.records
            sizes = (getattr(records.get(view.chunk_key(c)), "size", None) for c in coords)
        else:
            store, zarr_array = self.source.store.zarr, array.zarr
            sizes = (_compat.record_size(store, _compat.chunk_key(zarr_array, c)) for c in coords)
        found = [size for size in sizes if size is not None]
        return sum(found), len(found)


def _grid(array: Array) -> tuple[int, ...]:
    return tuple(math.ceil(size / chunk) if chunk else 0 for size, chunk in zip(array.shape, array.chunks, strict=True))


def _codecs(array: Array) -> dict[str, Any]:
    """How the chunks are encoded: the label ``ncore-like tree`` shows, and the codec chain
    as the node metadata stores it."""
    chain = list(array.codecs)
    return {"label": describe_codecs(chain), "chain": chain}
