"""``ncore-like tree``: the zarr hierarchy of an archive, as text (:func:`render_tree`) or
as a nested JSON document (:func:`tree_document`)."""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import _compat
from ..store._documents import describe_codecs
from ..store._itar_store import IndexedTarZarrStore as DocumentStore
from ._common import (
    add_json_option,
    archive_documents,
    format_bytes,
    format_json_value,
    non_negative_int,
    positive_int,
    print_json,
)
from ._outline import ArrayOutline, GroupOutline, archive_outline, outline_array, outline_group

if TYPE_CHECKING:
    from ..nodes import Array, Group

__all__ = [
    "ArraySummary",
    "outline_document",
    "record_size_lookup",
    "register",
    "render_outline",
    "render_tree",
    "run",
    "summarize",
    "summarize_array",
    "tree_document",
]

RecordSize = Callable[[str], int | None]

#: Members per group the text output shows unless ``--limit`` says otherwise (a sequence of
#: thousands of frames would print thousands of lines).
DEFAULT_LIMIT = 25


class ArraySummary(NamedTuple):
    """What the tree shows of an array."""

    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[int, ...]
    compression: str
    """``blosc <cname>/<clevel>/<shuffle>``, ``none``, or the codec chain (``zstd 3``,
    ``vlen-bytes + zstd 0``...)."""
    nbytes: int | None
    """Size of the values uncompressed (None for variable-length elements: unknown unread)."""
    stored_bytes: int
    """Sum of the sizes of the array's chunk records."""
    chunks_stored: int
    chunks_total: int
    blob_size: int | None
    """Size of the blob for binary blobs, else None."""

    @property
    def ratio(self) -> float | None:
        """Compression ratio (uncompressed / stored bytes), None if nothing is stored or the
        uncompressed size is unknown."""
        return self.nbytes / self.stored_bytes if self.stored_bytes and self.nbytes is not None else None


def archive_record_size(store: DocumentStore) -> RecordSize:
    """Sizes of the archive's records by key, from its index (no I/O; None for missing
    records)."""
    records = store.archive.records

    def archive_size(key: str) -> int | None:
        record = records.get(key)
        return None if record is None else record.size

    return archive_size


def record_size_lookup(group: Group) -> RecordSize:
    """Sizes of records of the group's store by key (None for missing records): from the
    archive index for archives (no I/O), from the zarr store otherwise."""
    store = group.store
    if isinstance(store, DocumentStore):
        return archive_record_size(store)
    zarr_store = group.zarr.store
    return lambda key: _compat.record_size(zarr_store, key)


def summarize(array: ArrayOutline, record_size: RecordSize) -> ArraySummary:
    """The summary of an array, its stored size from the sizes of its chunk records."""
    stored = count = total = 0
    grid = (math.ceil(size / chunk) for size, chunk in zip(array.shape, array.chunks, strict=True))
    chunk_key = array.chunk_key
    for coords in itertools.product(*(range(n) for n in grid)):
        total += 1
        size = record_size(chunk_key(coords))
        if size is not None:
            stored += size
            count += 1
    return ArraySummary(
        shape=array.shape,
        dtype=array.dtype,
        chunks=array.chunks,
        compression=describe_codecs(array.codecs),
        nbytes=None if array.variable_length else math.prod(array.shape) * array.itemsize,
        stored_bytes=stored,
        chunks_stored=count,
        chunks_total=total,
        blob_size=array.blob_size,
    )


def summarize_array(array: Array, record_size: RecordSize) -> ArraySummary:
    """:func:`summarize` of a typed array."""
    return summarize(outline_array(array), record_size)


# -- text ----------------------------------------------------------------------------------


def _array_text(summary: ArraySummary) -> str:
    if summary.blob_size is not None:
        return f"blob, {summary.blob_size} bytes"
    parts = [
        f"{summary.dtype} {summary.shape}",
        f"chunks {summary.chunks}",
        summary.compression,
        f"{format_bytes(summary.stored_bytes)} stored",
    ]
    if summary.chunks_stored != summary.chunks_total:
        parts.append(f"{summary.chunks_stored}/{summary.chunks_total} chunks stored")
    ratio = summary.ratio
    parts.append(f"ratio {ratio:.2f}" if ratio is not None else "ratio -")
    return ", ".join(parts)


def _attribute_lines(attributes: Mapping[str, Any], prefix: str) -> list[str]:
    return [f"{prefix}@ {key}: {format_json_value(value)}" for key, value in sorted(attributes.items())]


def render_tree(
    group: Group, *, attributes: bool = False, max_members: int | None = None, max_depth: int | None = None
) -> list[str]:
    """The hierarchy below ``group`` as lines of text: groups end in ``/``, arrays show
    dtype, shape, chunks, compression, stored size (from the archive index, no chunk is
    read) and compression ratio; blobs their size.

    Args:
        group: The group to render (typically a root group).
        attributes: Also show the attributes of every node (``@ key: value`` in JSON).
        max_members: Show at most this many members of each group (and how many more).
        max_depth: Show the members of groups down to this many levels below ``group``
            (deeper groups show their member count only).

    Returns:
        The lines, without line ends.
    """
    outline = outline_group(group, max_depth)
    return render_outline(outline, record_size_lookup(group), attributes=attributes, max_members=max_members)


def render_outline(
    group: GroupOutline, record_size: RecordSize, *, attributes: bool = False, max_members: int | None = None
) -> list[str]:
    """:func:`render_tree` of an outline (its depth is the outline's)."""
    lines = [f"{'/' + group.path}  (zarr v{group.zarr_format})"]
    if attributes:
        lines += _attribute_lines(group.attributes, "")
    _render_members(group, "", record_size, attributes, lines, max_members)
    return lines


def _render_members(
    group: GroupOutline,
    prefix: str,
    record_size: RecordSize,
    attributes: bool,
    lines: list[str],
    max_members: int | None,
) -> None:
    members = list(group.members or ())
    hidden = 0
    if max_members is not None and len(members) > max_members:
        hidden = len(members) - max_members
        members = members[:max_members]
    for position, node in enumerate(members):
        last = position == len(members) - 1 and not hidden
        branch, inner = ("└── ", "    ") if last else ("├── ", "│   ")
        if isinstance(node, GroupOutline):
            if node.members is None:
                lines.append(f"{prefix}{branch}{node.name}/  ({node.member_count} members, below --depth)")
                continue
            lines.append(f"{prefix}{branch}{node.name}/")
            if attributes:
                lines += _attribute_lines(node.attributes, prefix + inner)
            _render_members(node, prefix + inner, record_size, attributes, lines, max_members)
        else:
            lines.append(f"{prefix}{branch}{node.name}  {_array_text(summarize(node, record_size))}")
            if attributes:
                lines += _attribute_lines(node.attributes, prefix + inner)
    if hidden:
        lines.append(f"{prefix}└── ... {hidden} more")


# -- JSON ----------------------------------------------------------------------------------


def tree_document(group: Group, *, attributes: bool = False) -> dict[str, Any]:
    """The hierarchy below ``group`` as a nested JSON document: each node has ``name``,
    ``path`` and ``type`` (``group`` or ``array``); groups list their ``members``; arrays have
    ``shape``, ``dtype``, ``chunks``, ``compression``, ``codecs`` (as stored), ``nbytes`` (null for
    variable-length elements), ``stored_bytes``,
    ``chunks_stored``, ``chunks_total``, ``ratio``, ``blob`` and ``blob_size``; with
    ``attributes``, every node has its ``attributes``."""
    return outline_document(outline_group(group), record_size_lookup(group), attributes=attributes)


def outline_document(group: GroupOutline, record_size: RecordSize, *, attributes: bool = False) -> dict[str, Any]:
    """:func:`tree_document` of an outline (of the whole hierarchy)."""
    document = _group_document(group, record_size, attributes)
    document["zarr_format"] = group.zarr_format
    return document


def _group_document(group: GroupOutline, record_size: RecordSize, attributes: bool) -> dict[str, Any]:
    document: dict[str, Any] = {"name": group.name, "path": group.path, "type": "group"}
    if attributes:
        document["attributes"] = dict(group.attributes)
    members = []
    for node in group.members or ():
        if isinstance(node, GroupOutline):
            members.append(_group_document(node, record_size, attributes))
        else:
            members.append(_array_document(node, record_size, attributes))
    document["members"] = members
    return document


def _array_document(array: ArrayOutline, record_size: RecordSize, attributes: bool) -> dict[str, Any]:
    summary = summarize(array, record_size)
    document: dict[str, Any] = {
        "name": array.name,
        "path": array.path,
        "type": "array",
        "shape": list(summary.shape),
        "dtype": summary.dtype,
        "chunks": list(summary.chunks),
        "compression": summary.compression,
        "codecs": list(array.codecs),
        "nbytes": summary.nbytes,
        "stored_bytes": summary.stored_bytes,
        "chunks_stored": summary.chunks_stored,
        "chunks_total": summary.chunks_total,
        "ratio": summary.ratio,
        "blob": summary.blob_size is not None,
        "blob_size": summary.blob_size,
    }
    if attributes:
        document["attributes"] = dict(array.attributes)
    return document


# -- command -------------------------------------------------------------------------------


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Adds the ``tree`` command."""
    parser = commands.add_parser(
        "tree",
        parents=parents,
        help="show the zarr hierarchy of an archive",
        description="Show the zarr hierarchy of an archive (opened from its consolidated metadata if it has "
        "some): groups, and arrays with dtype, shape, chunks, compression, stored size (from the archive index) "
        "and compression ratio; binary blobs with their size.",
    )
    parser.add_argument("archive", metavar="ARCHIVE", help="the .itar archive (path or URL)")
    parser.add_argument("-a", "--attributes", action="store_true", help="show the attributes of every node")
    parser.add_argument(
        "--depth",
        type=positive_int,
        metavar="N",
        help="show groups down to N levels below the root (text; default: all)",
    )
    parser.add_argument(
        "--limit",
        type=non_negative_int,
        metavar="N",
        help=f"show at most N members per group, 0 for all (default: {DEFAULT_LIMIT} in text, all in JSON)",
    )
    add_json_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Prints the hierarchy."""
    with archive_documents(args) as store:
        record_size = archive_record_size(store)
        if args.json:
            document = outline_document(archive_outline(store), record_size, attributes=args.attributes)
        else:
            limit = DEFAULT_LIMIT if args.limit is None else args.limit or None
            outline = archive_outline(store, args.depth)
            lines = render_outline(outline, record_size, attributes=args.attributes, max_members=limit)
    if args.json:
        print_json(document)
    else:
        print("\n".join(lines))
    return 0
