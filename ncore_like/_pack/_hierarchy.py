"""The zarr hierarchy of an archive as packing and the commands see it: where it is, how
to walk it, and how arrays are described (blobs, compression).

The typed layer (and with it numpy) is imported by the helpers that take typed nodes, when
they run: ``info`` and ``tree`` of an archive describe its node metadata documents with
the rest alone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from ..archive import IndexedTarArchive
from ..errors import ArchiveFormatError
from ..store._consolidated import is_consolidated_metadata_key
from ..store._documents import VARIABLE_LENGTH_KINDS, describe_codecs
from ..store._itar_store import IndexedTarZarrStore as DocumentStore

if TYPE_CHECKING:
    from ..nodes import Array, Group, Store

__all__ = [
    "ROOT_METADATA_KEYS",
    "blob_size",
    "blob_size_of",
    "compression_label",
    "consolidated_keys",
    "has_hierarchy",
    "is_blob",
    "is_variable_length",
    "open_root",
    "open_root_documents",
    "root_zarr_format",
    "walk",
]

ZarrFormat = Literal[2, 3]
#: The records of a root group, by zarr format.
ROOT_METADATA_KEYS: dict[ZarrFormat, str] = {2: ".zgroup", 3: "zarr.json"}


def has_hierarchy(archive: IndexedTarArchive) -> bool:
    """True if the archive holds a root group (of either zarr format)."""
    return any(key in archive for key in ROOT_METADATA_KEYS.values())


def root_zarr_format(archive: IndexedTarArchive) -> ZarrFormat | None:
    """The zarr format of the archive's root group, from its ``.zgroup`` or ``zarr.json``
    record (None without one).

    Raises:
        ArchiveFormatError: For a root metadata record that isn't JSON of a known zarr format.
    """
    name = archive.location.name
    for zarr_format, key in ROOT_METADATA_KEYS.items():
        if key not in archive:
            continue
        try:
            declared = json.loads(archive[key]).get("zarr_format")
        except (ValueError, AttributeError) as error:
            raise ArchiveFormatError(f"root metadata record {key} is no JSON object", archive=name, key=key) from error
        if declared != zarr_format:
            detail = f"root metadata record {key} declares zarr_format {declared!r}"
            raise ArchiveFormatError(detail, archive=name, key=key)
        return zarr_format
    return None


def consolidated_keys(archive: IndexedTarArchive) -> list[str]:
    """Keys of the consolidated metadata records in the archive (in archive order)."""
    return [key for key in archive.keys() if is_consolidated_metadata_key(key)]


def _prepare_root(store: Store | DocumentStore, archive: IndexedTarArchive) -> None:
    """ValueError unless the archive holds a hierarchy; the node metadata of a remote archive
    without a consolidated record read at once."""
    if not has_hierarchy(archive):
        raise ValueError(
            f"{store.name}: no zarr hierarchy in the archive (no {' or '.join(ROOT_METADATA_KEYS.values())} record)"
        )
    if archive.is_remote and isinstance(store, DocumentStore) and not consolidated_keys(archive):
        # The commands walk whole hierarchies: without a consolidated record, the node
        # metadata of a remote archive is read at once instead of a request per node.
        store.load_node_metadata()


def open_root(store: Store, archive: IndexedTarArchive) -> Group:
    """The root group of the archive's hierarchy, from its consolidated metadata if there is
    one.

    Raises:
        ValueError: If the archive holds no zarr hierarchy.
    """
    _prepare_root(store, archive)
    return store.open_root_group(consolidated="auto")


def open_root_documents(store: DocumentStore) -> ZarrFormat:
    """:func:`open_root` for the node metadata documents of the archive's hierarchy (see
    :meth:`~ncore_like.store.IndexedTarZarrStore.open_root_documents`): its zarr format.

    Raises:
        ValueError: If the archive holds no zarr hierarchy.
    """
    _prepare_root(store, store.archive)
    return store.open_root_documents(consolidated="auto")


def walk(group: Group) -> Iterator[Group | Array]:
    """Every node below ``group`` (not ``group`` itself), parents before their members,
    members sorted by name."""
    from ..nodes import Group

    stack: list[Iterator[tuple[str, Group | Array]]] = [group.items()]
    while stack:
        member = next(stack[-1], None)
        if member is None:
            stack.pop()
            continue
        node = member[1]
        yield node
        if isinstance(node, Group):
            stack.append(node.items())


def is_blob(array: Array) -> bool:
    """True for binary blobs as :meth:`Group.create_bytes_array` stores them (see
    :func:`ncore_like.backend.is_blob`)."""
    from ..nodes._array import is_blob as typed_is_blob

    return typed_is_blob(array)


def blob_size(array: Array) -> int:
    """The size in bytes of a blob (see :func:`is_blob`), without reading it."""
    return blob_size_of(array.shape, array.dtype.itemsize)


def blob_size_of(shape: tuple[int, ...], itemsize: int) -> int:
    """:func:`blob_size` from a blob's shape and item size: a 0-dimensional blob is one item
    of fixed-length bytes, a 1-dimensional one a byte per element."""
    return itemsize if not shape else shape[0]


def compression_label(array: Array) -> str:
    """How the chunks are encoded: ``blosc lz4/5/bitshuffle``, ``none``, or the codec chain
    (``zstd 3``, ``vlen-bytes + zstd 0``, ``delta + gzip 5``, ``crc32c``), from
    :attr:`Array.codecs`."""
    return describe_codecs(array.codecs)


def is_variable_length(array: Array) -> bool:
    """True for arrays of variable-length elements (zarr-python's ``vlen-bytes``,
    ``vlen-utf8``...: an object or string dtype), whose size is unknown until read."""
    return array.dtype.kind in VARIABLE_LENGTH_KINDS
