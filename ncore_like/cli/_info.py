"""``ncore-like info``: the format, index and hierarchy facts of an archive."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from .._pack._hierarchy import consolidated_keys, root_zarr_format
from ..archive._format import INDEX_TYPE_CBOR_XZ
from ..store._itar_store import IndexedTarZarrStore as DocumentStore
from ._common import add_json_option, archive_documents, format_bytes, print_json
from ._outline import ArrayOutline, GroupOutline, archive_outline

__all__ = ["FORMAT", "archive_info", "register", "run"]

FORMAT = "indexed tar (itar) v1"
_INDEX_TYPE_NAMES = {INDEX_TYPE_CBOR_XZ: "xz-compressed CBOR"}


def _below(group: GroupOutline) -> Iterator[GroupOutline | ArrayOutline]:
    for node in group.members or ():
        yield node
        if isinstance(node, GroupOutline):
            yield from _below(node)


def archive_info(store: DocumentStore) -> dict[str, Any]:
    """The facts ``info`` prints, as a JSON-ready dictionary."""
    archive = store.archive
    index = archive.index_record
    assert index is not None  # archives opened for reading have their index record
    zarr_format = root_zarr_format(archive)
    consolidated = consolidated_keys(archive)
    groups: int | None = None
    arrays: int | None = None
    blobs: int | None = None
    if zarr_format is not None:
        groups, arrays, blobs = 1, 0, 0  # the root group counts
        for node in _below(archive_outline(store)):
            if isinstance(node, GroupOutline):
                groups += 1
            elif node.blob_size is not None:  # encoded images and other binary payloads
                blobs += 1
            else:
                arrays += 1
    # Opening rejects index types it doesn't know, so an open archive has the one known type.
    index_type = INDEX_TYPE_CBOR_XZ
    return {
        "archive": store.name,
        "format": FORMAT,
        "index_type": index_type,
        "index_type_name": _INDEX_TYPE_NAMES[index_type],
        "records": len(archive),
        "index_offset": index.offset,
        "index_size": index.size,
        "file_size": archive.file_size,
        "zarr_format": zarr_format,
        "consolidated": bool(consolidated),
        "consolidated_keys": consolidated,
        "groups": groups,
        "arrays": arrays,
        "blobs": blobs,
    }


def _text(info: dict[str, Any]) -> list[str]:
    consolidated = f"yes ({', '.join(info['consolidated_keys'])})" if info["consolidated"] else "no"
    hierarchy = info["zarr_format"] is not None
    rows = [
        ("archive", info["archive"]),
        ("format", info["format"]),
        ("index type", f"{info['index_type']} ({info['index_type_name']})"),
        ("records", str(info["records"])),
        ("index", f"offset {info['index_offset']}, {info['index_size']} bytes"),
        ("file size", f"{info['file_size']} bytes ({format_bytes(info['file_size'])})"),
        ("zarr format", str(info["zarr_format"]) if hierarchy else "- (no zarr hierarchy)"),
        ("consolidated", consolidated),
        ("groups", f"{info['groups']} (with the root)" if hierarchy else "-"),
        ("arrays", f"{info['arrays']} (besides the blobs)" if hierarchy else "-"),
        ("blobs", f"{info['blobs']} (binary payloads, e.g. encoded images)" if hierarchy else "-"),
    ]
    width = max(len(label) for label, _ in rows) + 1
    return [f"{label + ':':<{width}} {value}" for label, value in rows]


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Adds the ``info`` command."""
    parser = commands.add_parser(
        "info",
        parents=parents,
        help="show the format, index and hierarchy of an archive",
        description="Show the format of an archive, its index (type, offset, size), record count and file "
        "size, and its zarr hierarchy: zarr format, consolidated metadata, number of groups, arrays and blobs.",
    )
    parser.add_argument("archive", metavar="ARCHIVE", help="the .itar archive (path or URL)")
    add_json_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Prints the facts."""
    with archive_documents(args) as store:
        info = archive_info(store)
    if args.json:
        print_json(info)
    else:
        print("\n".join(_text(info)))
    return 0
