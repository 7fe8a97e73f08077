"""The hierarchy of an archive as ``info`` and ``tree`` describe it: one small outline of
groups and arrays, built from the node metadata documents and the archive index without
numpy or the typed layer (:func:`outline_documents`), or from typed groups
(:func:`outline_group`) for what the documents alone can't state exactly as numpy and
zarr-python would. :func:`archive_outline` picks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from .._pack._hierarchy import blob_size_of, open_root, open_root_documents
from ..store._documents import (
    VARIABLE_LENGTH_KINDS,
    array_layout,
    blob_layout,
    codecs_of,
    dtype_facts,
    is_array_document,
    plain_fill_value,
)
from ..store._itar_store import IndexedTarZarrStore as DocumentStore
from ._common import EXPECTED_ERRORS

if TYPE_CHECKING:
    from ..nodes import Array, Group

__all__ = ["ArrayOutline", "GroupOutline", "archive_outline", "outline_array", "outline_documents", "outline_group"]

ZarrFormat = Literal[2, 3]


class ArrayOutline(NamedTuple):
    """What ``info`` and ``tree`` say of an array."""

    name: str
    path: str
    attributes: Mapping[str, Any]
    shape: tuple[int, ...]
    dtype: str
    """The dtype as numpy prints it (``str(numpy.dtype)``)."""
    itemsize: int
    variable_length: bool
    chunks: tuple[int, ...]
    codecs: tuple[dict[str, Any], ...]
    blob_size: int | None
    """Size of the blob for binary blobs, else None."""
    chunk_key: Callable[[tuple[int, ...]], str]


class GroupOutline(NamedTuple):
    """What ``info`` and ``tree`` say of a group."""

    name: str
    path: str
    attributes: Mapping[str, Any]
    zarr_format: ZarrFormat
    member_count: int
    """How many members the group lists."""
    members: Sequence[GroupOutline | ArrayOutline] | None
    """The members (sorted by name), None below the depth asked for."""


def archive_outline(store: DocumentStore, max_depth: int | None = None) -> GroupOutline:
    """The outline of the archive's hierarchy (members down to ``max_depth`` levels below
    the root; all by default): from the node metadata documents where they say everything,
    else from the typed root group (the same outline; numpy and maybe zarr-python
    imported).

    Raises:
        ValueError: If the archive holds no zarr hierarchy; the errors of opening it.
    """
    try:
        outline = outline_documents(store, max_depth)
    except EXPECTED_ERRORS:
        outline = None  # the typed path meets the problem too, and reports it in its words
    if outline is not None:
        return outline
    from ..nodes import IndexedTarZarrStore  # the typed layer: numpy, zarr-python for some nodes

    typed = IndexedTarZarrStore._of_archive(store.archive)  # the archive stays open (and shared)
    return outline_group(open_root(typed, typed.archive), max_depth)


# -- from the node metadata documents ------------------------------------------------------


def outline_documents(store: DocumentStore, max_depth: int | None = None) -> GroupOutline | None:
    """The outline from the node metadata documents (opened as :func:`open_root` opens the
    root group), None if a node needs numpy or zarr-python to be described as the typed
    path describes it (a dtype or fill value the documents can't state, codecs other than
    Blosc, a document that isn't understood...)."""
    zarr_format = open_root_documents(store)
    root = store.node_document("", zarr_format)
    if root is None or _is_array(root, zarr_format) is not False or root.get("zarr_format") != zarr_format:
        return None  # the typed path says what is wrong
    return _group_documents(store, "", root, zarr_format, max_depth)


def _is_array(document: Mapping[str, Any], zarr_format: ZarrFormat) -> bool | None:
    try:
        return is_array_document(document, zarr_format)
    except ValueError:
        return None


def _group_documents(
    store: DocumentStore, path: str, document: Mapping[str, Any], zarr_format: ZarrFormat, depth_left: int | None
) -> GroupOutline | None:
    names = store.child_names(path, zarr_format) or []
    members: list[GroupOutline | ArrayOutline] = []
    for name in names:
        full = f"{path}/{name}" if path else name
        member = store.node_document(full, zarr_format)
        if member is None:
            continue  # listed by its records' keys, but no node (as Group.items skips it)
        is_array = _is_array(member, zarr_format)
        outline: GroupOutline | ArrayOutline | None
        if is_array is None:
            return None
        if is_array:
            outline = _array_documents(full, member, zarr_format)
        elif depth_left is not None and depth_left <= 1:
            count = len(store.child_names(full, zarr_format) or [])
            outline = _group(full, member, zarr_format, count, None)
        else:
            outline = _group_documents(store, full, member, zarr_format, None if depth_left is None else depth_left - 1)
        if outline is None:
            return None
        members.append(outline)
    return _group(path, document, zarr_format, len(names), members)


def _group(
    path: str,
    document: Mapping[str, Any],
    zarr_format: ZarrFormat,
    count: int,
    members: list[GroupOutline | ArrayOutline] | None,
) -> GroupOutline:
    name = path.rpartition("/")[2]
    return GroupOutline(name, path, document.get("attributes") or {}, zarr_format, count, members)


def _array_documents(path: str, document: Mapping[str, Any], zarr_format: ZarrFormat) -> ArrayOutline | None:
    """The outline of an array whose view the typed path builds from the document alone
    (the view understands it completely), None otherwise."""
    try:
        layout = array_layout(document, zarr_format, f"{path}/")
    except (ValueError, TypeError, AttributeError, KeyError):
        return None
    facts = dtype_facts(layout.data_type, zarr_format)
    if layout.unsupported is not None or facts is None:
        return None  # the typed path asks zarr-python for the dtype
    if not plain_fill_value(document.get("fill_value"), facts, zarr_format):
        return None
    shape, chunks = layout.shape, layout.chunks
    blob = blob_layout(zarr_format, shape, chunks, layout.blosc is not None, facts.kind, facts.itemsize)
    return ArrayOutline(
        name=path.rpartition("/")[2],
        path=path,
        attributes=document.get("attributes") or {},
        shape=shape,
        dtype=facts.text,
        itemsize=facts.itemsize,
        variable_length=facts.kind in VARIABLE_LENGTH_KINDS,
        chunks=chunks,
        codecs=codecs_of(document, zarr_format),
        blob_size=blob_size_of(shape, facts.itemsize) if blob else None,
        chunk_key=layout.chunk_key,
    )


# -- from typed groups -----------------------------------------------------------------------


def outline_group(group: Group, max_depth: int | None = None) -> GroupOutline:
    """The outline of a typed group (members down to ``max_depth`` levels below it)."""
    from ..nodes import Group

    members: list[GroupOutline | ArrayOutline] = []
    for _, node in group.items():
        if not isinstance(node, Group):
            members.append(outline_array(node))
        elif max_depth is not None and max_depth <= 1:
            count = len(node.members())
            members.append(GroupOutline(node.name, node.path, node.attributes, group.zarr_format, count, None))
        else:
            members.append(outline_group(node, None if max_depth is None else max_depth - 1))
    return GroupOutline(group.name, group.path, group.attributes, group.zarr_format, len(group.members()), members)


def outline_array(array: Array) -> ArrayOutline:
    """The outline of a typed array."""
    from .._pack._hierarchy import blob_size, is_blob, is_variable_length
    from ..nodes._array import chunk_key_of

    dtype = array.dtype
    return ArrayOutline(
        name=array.name,
        path=array.path,
        attributes=array.attributes,
        shape=array.shape,
        dtype=str(dtype),
        itemsize=dtype.itemsize,
        variable_length=is_variable_length(array),
        chunks=array.chunks,
        codecs=array.codecs,
        blob_size=blob_size(array) if is_blob(array) else None,
        chunk_key=lambda coords: chunk_key_of(array, coords),
    )
