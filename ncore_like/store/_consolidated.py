"""Compressed consolidated metadata records (pure: no I/O, no zarr).

* zarr format 2: ``.zmetadata.cbor.xz``, an xz stream of the CBOR map
  ``{"zarr_consolidated_format": 1, "metadata": {key: decoded .zgroup/.zarray/.zattrs}}``
  (nvidia-ncore 19.8's layout).
* zarr format 3: ``zarr.json.cbor.zlib``, a zlib stream of the same map over every
  ``zarr.json`` record, keys relative to the root (the root's own key is ``zarr.json``).

Both hold the decoded JSON of every node metadata record of the hierarchy, so a reader
builds the whole hierarchy from one record.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import cbor2

from .._defaults import DECODED_CONSOLIDATED_RECORDS
from .._json import encode_json
from .._lru import LRUCache, process_cache
from ..errors import ConsolidatedMetadataError

__all__ = [
    "CONSOLIDATED_KEY_V2",
    "CONSOLIDATED_KEY_V3",
    "ZARR_PYTHON_CONSOLIDATED_KEY_V2",
    "ConsolidatedMetadataError",
    "child_nodes",
    "collects",
    "decode_consolidated",
    "decoded_consolidated",
    "encode_consolidated",
    "is_consolidated_metadata_key",
    "standard_consolidated",
    "zarr_nodes",
]

CONSOLIDATED_KEY_V2 = ".zmetadata.cbor.xz"
CONSOLIDATED_KEY_V3 = "zarr.json.cbor.zlib"
#: zarr-python's own consolidated metadata record of format 2.
ZARR_PYTHON_CONSOLIDATED_KEY_V2 = ".zmetadata"
_V2_NAMES = frozenset({".zgroup", ".zarray", ".zattrs"})
_XZ_MAGIC = b"\xfd7zXZ\x00"


def is_consolidated_metadata_key(key: str) -> bool:
    """True for keys of consolidated metadata records: the compressed records of both zarr
    formats, and zarr-python 2's ``.zmetadata``."""
    return key in (CONSOLIDATED_KEY_V2, CONSOLIDATED_KEY_V3, ZARR_PYTHON_CONSOLIDATED_KEY_V2)


_NODE_NAMES = frozenset({".zarray", ".zgroup", "zarr.json"})


def child_nodes(keys: Iterable[str], path: str) -> set[str]:
    """Names of the nodes directly under ``path`` among the node metadata ``keys`` (e.g.
    of a consolidated record): children with a ``.zarray``, ``.zgroup`` or ``zarr.json``."""
    prefix = f"{path.rstrip('/')}/" if path.strip("/") else ""
    children = set()
    for key in keys:
        if key.startswith(prefix):
            child, _, name = key[len(prefix) :].partition("/")
            if child and name in _NODE_NAMES:
                children.add(child)
    return children


def collects(key: str, zarr_format: Literal[2, 3]) -> bool:
    """True if the consolidated record of ``zarr_format`` holds the metadata record ``key``."""
    name = key.rpartition("/")[2]
    return name in _V2_NAMES if zarr_format == 2 else name == "zarr.json"


def encode_consolidated(records: Mapping[str, bytes], zarr_format: Literal[2, 3]) -> bytes:
    """The compressed consolidated record of the given node metadata records (JSON bytes)."""
    table = {
        "zarr_consolidated_format": 1,
        "metadata": {key: json.loads(value) for key, value in sorted(records.items())},
    }
    encoded = cbor2.dumps(table)
    if zarr_format == 2:
        # Preset 0 (a 256 KiB dictionary): ~4x faster than the default preset 6 on a table of
        # 40 to 2000 nodes, and no larger (scripts/bench_ops ``frames`` measures the writes).
        import lzma  # zarr format 2's record only

        return lzma.compress(encoded, format=lzma.FORMAT_XZ, preset=0)
    return zlib.compress(encoded)


def decode_consolidated(data: bytes, zarr_format: Literal[2, 3], where: str) -> dict[str, Any]:
    """The node metadata by key of a compressed consolidated record."""
    key = CONSOLIDATED_KEY_V2 if zarr_format == 2 else CONSOLIDATED_KEY_V3
    if zarr_format == 2 and bytes(data[: len(_XZ_MAGIC)]) != _XZ_MAGIC:
        # lzma would also take other formats (lzma-alone, raw...) it happens to detect.
        raise ConsolidatedMetadataError(f"consolidated metadata record {key} is no xz stream", archive=where)
    errors: tuple[type[Exception], ...] = (zlib.error, cbor2.CBORDecodeError, ValueError, EOFError)
    try:
        if zarr_format == 2:
            import lzma  # zarr format 2's record only (xz)

            errors += (lzma.LZMAError,)
            raw = lzma.decompress(data, format=lzma.FORMAT_XZ)
        else:
            raw = zlib.decompress(data)
        table = cbor2.loads(raw)
    except errors as error:
        raise ConsolidatedMetadataError(
            f"corrupt consolidated metadata record {key} ({error})", archive=where
        ) from error
    if not isinstance(table, dict) or table.get("zarr_consolidated_format") != 1:
        raise ConsolidatedMetadataError(
            f"consolidated metadata record {key} is not of zarr_consolidated_format 1",
            archive=where,
        )
    metadata = table.get("metadata")
    if not isinstance(metadata, dict) or not all(isinstance(value, dict) for value in metadata.values()):
        raise ConsolidatedMetadataError(f"consolidated metadata record {key} has no metadata map", archive=where)
    return metadata


# Decoded consolidated records of recently opened hierarchies, by record: reopening an
# archive (its index comes from the archive layer's cache) then decodes nothing at all.
_decoded: LRUCache[tuple[int, bytes], dict[str, Any]] = process_cache(DECODED_CONSOLIDATED_RECORDS)


def decoded_consolidated(record: bytes, zarr_format: Literal[2, 3], where: str) -> dict[str, Any]:
    """:func:`decode_consolidated` with the checks of :func:`zarr_nodes`, memoised by the
    record's bytes. The result is shared: read it, never change it."""
    key = (zarr_format, record)
    metadata = _decoded.get(key)
    if metadata is None:
        metadata = decode_consolidated(record, zarr_format, where)
        zarr_nodes(metadata, zarr_format, where)
        _decoded.put(key, metadata)
    return metadata


def standard_consolidated(metadata: Mapping[str, Any], zarr_format: Literal[2, 3], root: Mapping[str, Any]) -> bytes:
    """zarr-python's own form of consolidated metadata, from decoded consolidated
    ``metadata``: format 2's ``.zmetadata`` record, or format 3's root ``zarr.json`` (the
    decoded ``root`` record) with the hierarchy's nodes inline."""
    if zarr_format == 2:
        return encode_json({"metadata": dict(metadata), "zarr_consolidated_format": 1})
    nodes = {key[: -len("/zarr.json")]: value for key, value in metadata.items() if key != "zarr.json"}
    inline = {"kind": "inline", "must_understand": False, "metadata": nodes}
    return encode_json({**root, "consolidated_metadata": inline})


def zarr_nodes(
    metadata: dict[str, Any], zarr_format: Literal[2, 3], where: str
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Splits decoded consolidated metadata into the root group's metadata and that of every
    member by path, in zarr-python's consolidated form (v2 nodes: their ``.zarray`` or
    ``.zgroup`` plus ``"attributes"``)."""
    if zarr_format == 3:
        root = metadata.get("zarr.json")
        if root is None or root.get("node_type") != "group":
            raise ConsolidatedMetadataError("consolidated metadata has no zarr format 3 root group", archive=where)
        members = {key[: -len("/zarr.json")]: value for key, value in metadata.items() if key != "zarr.json"}
        return dict(root), members
    if ".zgroup" not in metadata:
        raise ConsolidatedMetadataError("consolidated metadata has no zarr format 2 root group", archive=where)
    nodes: dict[str, dict[str, Any]] = {}
    for key, value in metadata.items():
        path, _, name = key.rpartition("/")
        node = nodes.setdefault(path, {})
        if name == ".zattrs":
            node["attributes"] = value
        elif name in (".zarray", ".zgroup"):
            node.update(value)
        else:
            raise ConsolidatedMetadataError(f"unexpected key {key!r} in consolidated metadata", archive=where)
    root = nodes.pop("")
    root.setdefault("attributes", {})
    for path, node in nodes.items():
        if "zarr_format" not in node:
            raise ConsolidatedMetadataError(
                f"consolidated metadata has attributes but no node at {path!r}", archive=where
            )
        node.setdefault("attributes", {})
    return root, nodes
