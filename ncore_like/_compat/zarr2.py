"""Everything that touches zarr-python 2 (>= 2.18.3), behind the names of :mod:`ncore_like._compat`.

zarr-python 2 reads and writes zarr format 2 only: format 3 raises a ValueError that says
so. Its stores are mutable mappings of keys to bytes, its nodes read their metadata from
the store when built, and its indexers take the array itself. Node metadata that
ncore_like writes is serialised as zarr-python 3 does (see :mod:`._shared`), so archives
written under either version are byte-identical.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, MutableMapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, TypeAlias

import numcodecs
import numpy as np
import zarr
from numcodecs import Blosc  # how Blosc compression is passed: zarr format 2's compressor
from zarr.errors import ContainsArrayError, ContainsGroupError, MetadataError
from zarr.meta import Metadata2

from .._lru import LRUCache, process_cache
from ..errors import ReadOnlyError
from ._shared import (
    JSON_INDENT,
    JsonTemplate,
    StorePrimitives,
    checked_format,
    empty_bytes,
    encode_json,
    group_records_v2,
    json_document,
    parsing,
)

__all__ = [
    "ZARR_FORMATS",
    "Blosc",
    "SelectionKind",
    "SyncZarrStore",
    "ZarrArray",
    "ZarrFormat",
    "ZarrGroup",
    "ZarrNode",
    "ZarrStore",
    "array_document",
    "array_from_document",
    "array_zarr_format",
    "blosc_compressor",
    "check_zarr_format",
    "chunk_key",
    "chunk_key_parts",
    "chunk_projections",
    "create_group",
    "create_subgroup",
    "fsspec_store",
    "group_from_document",
    "group_from_node_metadata",
    "guess_chunks",
    "is_group",
    "is_zarr_store",
    "local_store",
    "member_names",
    "member_nodes",
    "open_group",
    "open_member",
    "raw_chunk_layout",
    "read_record",
    "read_selection",
    "reading_store",
    "record_exists",
    "record_size",
    "selection_kind",
    "selection_shape",
    "store_keys",
    "store_read_only",
    "touched_chunk_keys",
    "write_array_metadata",
    "write_basic_selection",
    "write_record",
    "write_records",
]

# zarr-python 2 has no type hints: its classes are ``Any`` to the type checker.
ZarrFormat = Literal[2, 3]
ZarrArray: TypeAlias = Any
ZarrGroup: TypeAlias = Any
ZarrNode: TypeAlias = Any
ZarrStore: TypeAlias = Any
SelectionKind = Literal["basic", "orthogonal", "fancy"]

#: The zarr formats zarr-python 2 reads and writes.
ZARR_FORMATS: tuple[ZarrFormat, ...] = (2,)


def _parsing(where: object, path: str) -> AbstractContextManager[None]:
    # zarr-python 2 raises its MetadataError (no ValueError) for metadata it can't decode.
    return parsing(where, path, (MetadataError,))


def check_zarr_format(zarr_format: object) -> ZarrFormat:
    """``zarr_format`` if zarr-python 2 writes it (2), ValueError otherwise."""
    return checked_format(zarr_format, ZARR_FORMATS, zarr.__version__)


class SyncZarrStore(zarr.storage.Store, StorePrimitives):  # type: ignore[misc]
    """A zarr-python 2 store (a mutable mapping of keys to bytes) built on
    :class:`StorePrimitives` (e.g. archives)."""

    def __init__(self, *, read_only: bool) -> None:
        self._read_only = read_only

    @property
    def read_only(self) -> bool:
        """True if the store refuses writes."""
        return self._read_only

    def _check_writable(self) -> None:
        if self._read_only:
            raise ReadOnlyError(f"{self!r} is opened for reading, can't write")

    def is_writeable(self) -> bool:
        return not self._read_only

    def is_erasable(self) -> bool:
        return bool(getattr(self, "supports_deletes", True)) and not self._read_only

    def with_read_only(self, read_only: bool = False) -> SyncZarrStore:
        raise NotImplementedError

    def __getitem__(self, key: str) -> bytes:
        value = self.read_value(key)
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        self._check_writable()
        self.set_bytes_sync(key, memoryview(numcodecs.compat.ensure_contiguous_ndarray(value)).cast("B"))

    def __delitem__(self, key: str) -> None:
        self.delete_sync(key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.exists_sync(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.listed_keys())

    def __len__(self) -> int:
        return len(self.listed_keys())

    def listdir(self, path: str = "") -> list[str]:
        return sorted(self.list_dir_sync(path.strip("/")))

    def rmdir(self, path: str = "") -> None:
        self._check_writable()
        self.delete_prefix_sync(path)

    def getsize(self, path: str = "") -> int:
        return self.value_size(path) or 0

    def getitems(self, keys: Any, *, contexts: Any) -> dict[str, bytes]:
        found = {}
        for key in keys:
            value = self.read_value(key)
            if value is not None:
                found[key] = value
        return found


class _ReadOnlyStore(zarr.storage.Store):  # type: ignore[misc]
    """Another zarr-python 2 store, read only (zarr-python 2's own stores have no such mode)."""

    read_only = True

    def __init__(self, store: MutableMapping[str, Any]) -> None:
        self.store = store

    def __getitem__(self, key: str) -> Any:
        return self.store[key]

    def __setitem__(self, key: str, value: Any) -> None:
        raise ReadOnlyError(f"{self!r} is opened for reading, can't write")

    def __delitem__(self, key: str) -> None:
        raise ReadOnlyError(f"{self!r} is opened for reading, can't delete")

    def __contains__(self, key: object) -> bool:
        return key in self.store

    def __iter__(self) -> Iterator[str]:
        return iter(self.store)

    def __len__(self) -> int:
        return len(self.store)

    def is_writeable(self) -> bool:
        return False

    def is_erasable(self) -> bool:
        return False

    def listdir(self, path: str = "") -> list[str]:
        return list(zarr.storage.listdir(self.store, path))

    def getsize(self, path: str = "") -> int:
        return int(zarr.storage.getsize(self.store, path))

    def close(self) -> None:
        closing = getattr(self.store, "close", None)
        if closing is not None:
            closing()

    def __repr__(self) -> str:
        return f"{self.store!r} (read only)"


def is_zarr_store(value: object) -> bool:
    """True for stores of zarr-python 2 (mutable mappings of keys to bytes, e.g. a dict)."""
    return isinstance(value, MutableMapping)


def is_group(node: object) -> bool:
    """True for zarr-python groups."""
    return isinstance(node, zarr.Group)


def local_store(path: str, *, read_only: bool) -> ZarrStore:
    """zarr-python's store of a local directory."""
    store = zarr.storage.DirectoryStore(path)
    return _ReadOnlyStore(store) if read_only else store


def fsspec_store(fs: Any, path: str, *, read_only: bool) -> ZarrStore:
    """zarr-python's store of the keys under ``path`` of an fsspec filesystem (e.g. a
    ``UPath``'s, with its storage options; chained URLs included)."""
    return zarr.storage.FSStore(path, fs=fs, mode="r" if read_only else "w")


def store_read_only(store: ZarrStore) -> bool:
    """True if the store refuses writes."""
    if isinstance(store, zarr.storage.FSStore):
        return bool(store.mode == "r")
    return bool(getattr(store, "read_only", False))


def reading_store(store: ZarrStore) -> ZarrStore:
    """The store, refusing writes (itself if it does already)."""
    if store_read_only(store):
        return store
    if isinstance(store, SyncZarrStore):
        try:
            return store.with_read_only(True)
        except NotImplementedError:
            pass
    return _ReadOnlyStore(store)


def _refuse_format_3(store: ZarrStore, path: str) -> None:
    """Format 3 nodes get the ValueError that says which zarr-python reads them."""
    prefix = f"{path}/" if path else ""
    if record_exists(store, prefix + "zarr.json"):
        check_zarr_format(3)


def _new_group(store: ZarrStore, path: str, attributes: dict[str, Any]) -> ZarrGroup:
    """Writes the records of a group at ``path`` (an error if a node is there) and returns it."""
    _refuse_existing_node(store, path)
    prefix = f"{path}/" if path else ""
    for name, data in group_records_v2(attributes).items():
        write_record(store, prefix + name, data)
    return group_from_document(store, path, {"zarr_format": 2, "attributes": attributes})


def create_group(store: ZarrStore, attributes: dict[str, Any], zarr_format: ZarrFormat) -> ZarrGroup:
    """Creates the root group (existing nodes elsewhere in the store are kept)."""
    check_zarr_format(zarr_format)
    return _new_group(store, "", attributes)


def create_subgroup(group: ZarrGroup, name: str, attributes: dict[str, Any]) -> ZarrGroup:
    """Creates a member group ``name`` (a direct member) of ``group`` (an error if a member
    of that name exists)."""
    return _new_group(group.store, f"{group.path}/{name}" if group.path else name, attributes)


def open_group(store: ZarrStore) -> ZarrGroup:
    """Opens the root group for reading from its node metadata records."""
    _refuse_format_3(store, "")
    if not record_exists(store, ".zgroup"):
        # What zarr-python 3 raises (zarr-python 2's error is a ValueError).
        raise FileNotFoundError(f"No group found in store {store!r} at path ''")
    with _parsing(store, ""):
        return zarr.open_group(store=store, mode="r")


def member_names(group: ZarrGroup) -> list[str]:
    """Names of the direct members of a group (their metadata is parsed)."""
    with _parsing(group.store, group.path):
        return [name for name, _ in group.items()]


def member_nodes(group: ZarrGroup) -> list[tuple[str, ZarrNode]]:
    """The direct members of a group with their names."""
    with _parsing(group.store, group.path):
        return list(group.items())


class _MetadataOverlay(zarr.storage.Store):  # type: ignore[misc]
    """A store whose node metadata records come from metadata documents (e.g. of a
    consolidated record), read only; everything else comes from the store underneath."""

    read_only = True

    def __init__(self, store: ZarrStore, records: dict[str, bytes]) -> None:
        self.store = store
        self._records = records

    def __getitem__(self, key: str) -> Any:
        if key in self._records:
            return self._records[key]
        return self.store[key]

    def __setitem__(self, key: str, value: Any) -> None:
        raise ReadOnlyError(f"{self.store!r} is opened for reading, can't write")

    def __delitem__(self, key: str) -> None:
        raise ReadOnlyError(f"{self.store!r} is opened for reading, can't delete")

    def __contains__(self, key: object) -> bool:
        return key in self._records or key in self.store

    def __iter__(self) -> Iterator[str]:
        yield from self._records
        yield from (key for key in self.store if key not in self._records)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def listdir(self, path: str = "") -> list[str]:
        start = f"{path.strip('/')}/" if path.strip("/") else ""
        names = {key[len(start) :].partition("/")[0] for key in self._records if key.startswith(start)}
        names.update(zarr.storage.listdir(self.store, path))
        return sorted(names)

    def __repr__(self) -> str:
        return repr(self.store)


def group_from_node_metadata(store: ZarrStore, root: dict[str, Any], members: dict[str, dict[str, Any]]) -> ZarrGroup:
    """The root group built from metadata dictionaries, without reading metadata records:
    ``root`` is the root group's metadata, ``members`` that of every member by path (v2
    nodes are their ``.zarray``/``.zgroup`` plus ``"attributes"``)."""
    records: dict[str, bytes] = {}
    for path, document in {"": root, **members}.items():
        prefix = f"{path}/" if path else ""
        node = {key: value for key, value in document.items() if key != "attributes"}
        if node.get("zarr_format") != 2:
            check_zarr_format(node.get("zarr_format"))
        name = ".zarray" if "shape" in node else ".zgroup"
        records[prefix + name] = json.dumps(node).encode()
        records[prefix + ".zattrs"] = json.dumps(document.get("attributes") or {}).encode()
    with _parsing(store, ""):
        return zarr.open_group(store=_MetadataOverlay(store, records), mode="r")


def guess_chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """zarr-python's chunk shape heuristic (``chunks="auto"``)."""
    from zarr.util import guess_chunks as zarr_guess_chunks

    return tuple(int(size) for size in zarr_guess_chunks(shape, itemsize))


# The ``.zarray`` document of an array without its shape and chunk shape, by dtype, codecs and
# fill value (the shape and chunks are filled in per array), bounded by count.
# With it, its text with the shape and chunks open (see JsonTemplate).
_templates: LRUCache[tuple[Any, ...], tuple[dict[str, Any], JsonTemplate]] = process_cache(256)


def _zarray_document(
    shape: tuple[int, ...], dtype: np.dtype[Any], chunks: tuple[int, ...], blosc: Blosc | None, fill_value: Any
) -> tuple[dict[str, Any], JsonTemplate]:
    config = None if blosc is None else tuple(sorted(blosc.get_config().items()))
    # Fixed-length bytes (blobs, a dtype per length) with the empty fill value share one
    # template with the dtype open, as in the zarr-python 3 module.
    blob = dtype.kind == "S" and empty_bytes(fill_value, dtype.itemsize)
    fill_key = None if blob or fill_value is None else np.asarray(fill_value, dtype=dtype).tobytes()
    key = ("S", config, None) if blob else (dtype, config, fill_key)
    made_dtype = np.dtype("S1") if blob else dtype

    def make() -> tuple[dict[str, Any], JsonTemplate]:
        # The keys in zarr-python 3's order, the values encoded as format 2 prescribes.
        document = {
            "shape": [],
            "chunks": [],
            "dtype": Metadata2.encode_dtype(made_dtype),
            "fill_value": Metadata2.encode_fill_value(fill_value, made_dtype),
            "order": "C",
            "filters": None,
            "dimension_separator": ".",
            "compressor": None if blosc is None else blosc.get_config(),
            "zarr_format": 2,
        }
        stored: dict[str, Any] = json.loads(encode_json(document))  # as stored (e.g. lists, not tuples)
        hole = JsonTemplate.hole
        opened = {**stored, "shape": hole("shape"), "chunks": hole("chunks")}
        if blob:
            opened["dtype"] = hole("dtype")
        return stored, JsonTemplate(opened, JSON_INDENT)

    made = _templates.get_or_put(key, make)
    assert made is not None
    template, text = made
    document = {**template, "shape": list(shape), "chunks": list(chunks)}  # the keys keep their positions
    if blob:
        document["dtype"] = Metadata2.encode_dtype(dtype)
    return document, text


def array_metadata_records(
    zarr_format: ZarrFormat,
    *,
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    chunks: tuple[int, ...],
    blosc: Blosc | None,
    fill_value: Any,
    attributes: dict[str, Any] | None,
    dimension_names: tuple[str | None, ...] | None = None,
) -> tuple[dict[str, bytes], dict[str, Any]]:
    """The ``.zarray`` and ``.zattrs`` records of an array, byte for byte as zarr-python 3
    writes them, and the node's metadata document (``.zarray`` plus ``"attributes"``).
    ``dimension_names`` are zarr format 3's (format 2 has none: ValueError)."""
    check_zarr_format(zarr_format)
    if dimension_names is not None:
        raise ValueError("zarr format 2 has no dimension names (xarray keeps them in an attribute)")
    document, text = _zarray_document(shape, dtype, chunks, blosc, fill_value)
    attributes = dict(attributes or {})
    zarray = text.render({"shape": shape, "chunks": chunks, "dtype": document["dtype"]})
    return {".zarray": zarray, ".zattrs": encode_json(attributes)}, {
        **document,
        "attributes": attributes,
    }


def _refuse_existing_node(store: ZarrStore, path: str) -> None:
    """Raises zarr-python's error for an existing node at ``path``."""
    prefix = f"{path}/" if path else ""
    if record_exists(store, prefix + ".zarray"):
        raise ContainsArrayError(path)
    if record_exists(store, prefix + ".zgroup"):
        raise ContainsGroupError(path)


def write_array_metadata(
    group: ZarrGroup,
    name: str,
    *,
    shape: tuple[int, ...],
    dtype: Any,
    chunks: tuple[int, ...],
    blosc: Blosc | None,
    fill_value: Any,
    attributes: dict[str, Any] | None,
    dimension_names: tuple[str | None, ...] | None = None,
) -> tuple[str, dict[str, Any]]:
    """Writes the node metadata records of a new array ``name`` (a direct member: no ``/``)
    of ``group`` and returns its path and metadata document.

    Raises:
        ContainsArrayError, ContainsGroupError: zarr-python's errors for an existing node.
    """
    store = group.store
    path = f"{group.path}/{name}" if group.path else name
    _refuse_existing_node(store, path)
    records, document = array_metadata_records(
        2, shape=shape, dtype=np.dtype(dtype), chunks=chunks, blosc=blosc, fill_value=fill_value, attributes=attributes,
        dimension_names=dimension_names,
    )  # fmt: skip
    for record_name, data in records.items():
        write_record(store, f"{path}/{record_name}", data)
    return path, document


def chunk_key(array: ZarrArray, coords: tuple[int, ...]) -> str:
    """The store key of a chunk of an array."""
    # zarr-python 2 keys the one chunk of a 0-dimensional array as chunk (0,).
    return str(array._chunk_key(coords or (0,)))


def chunk_key_parts(array: ZarrArray) -> tuple[str, str, str] | None:
    """The prefix of every chunk key of ``array``, the separator of the coordinates, and the
    key of a 0-dimensional array's one chunk."""
    separator = array._dimension_separator
    if separator not in (".", "/"):
        return None
    prefix = f"{array.path}/" if array.path else ""
    return prefix, separator, prefix + "0"


def array_zarr_format(array: ZarrArray | ZarrGroup) -> ZarrFormat:
    """The zarr format of a node (zarr-python 2 opens format 2 only)."""
    return 2


def _is_bool_array(item: Any) -> bool:
    return isinstance(item, np.ndarray) and item.dtype == np.bool_


def selection_kind(array: ZarrArray, selection: Any) -> SelectionKind:
    """How ``array[selection]`` reads a selection, as zarr-python 3 classifies it (zarr-python
    2's ``[]`` takes no boolean arrays, which it reads through ``vindex`` and ``oindex``)."""
    from zarr.indexing import is_pure_fancy_indexing, is_pure_orthogonal_indexing, pop_fields

    _, pure = pop_fields(selection)
    if _is_bool_array(pure):
        # A mask over the whole array selects elements; a shorter one selects along axis 0.
        return "fancy" if pure.ndim == array.ndim else "orthogonal"
    if isinstance(pure, tuple) and any(_is_bool_array(item) for item in pure):
        return "orthogonal"
    if is_pure_fancy_indexing(pure, array.ndim):
        return "fancy"
    if is_pure_orthogonal_indexing(pure, array.ndim):
        return "orthogonal"
    return "basic"


def _indexer(array: ZarrArray, selection: Any, kind: SelectionKind) -> Any:
    from zarr.indexing import BasicIndexer, OrthogonalIndexer

    return (BasicIndexer if kind == "basic" else OrthogonalIndexer)(selection, array)


def selection_shape(array: ZarrArray, selection: Any, kind: SelectionKind) -> tuple[int, ...]:
    """The shape of ``array[selection]`` (raises zarr-python's errors for invalid selections)."""
    if kind == "fancy":
        return tuple(np.empty(array.shape, dtype=np.bool_)[selection].shape) if array.ndim else ()
    return tuple(_indexer(array, selection, kind).shape)


def read_selection(
    array: ZarrArray, selection: Any, kind: SelectionKind, out: np.ndarray[Any, Any] | None
) -> np.ndarray[Any, Any]:
    """zarr-python's reading of a selection, into ``out`` if given."""
    if out is None:
        # Read into an array of the selection's shape: single fixed-length bytes keep their
        # trailing NULs (a numpy scalar would drop them).
        out = np.empty(selection_shape(array, selection, kind), dtype=array.dtype)
    if array.fill_value is None:
        # zarr format 2's null fill value: zarr-python 2 leaves the elements of unwritten
        # chunks as they were; they read as the dtype's zero, as on the fast path.
        out[...] = np.zeros((), out.dtype)
    if kind == "basic":
        array.get_basic_selection(selection, out=out)
    elif kind == "orthogonal":
        array.get_orthogonal_selection(selection, out=out)
    elif _is_bool_array(selection):
        array.get_mask_selection(selection, out=out)
    else:
        array.get_coordinate_selection(selection, out=out)
    return out


def write_basic_selection(array: ZarrArray, selection: Any, values: Any) -> None:
    """Writes through zarr-python, storing every touched chunk (also chunks equal to the
    fill value)."""
    if not array._write_empty_chunks:
        array = zarr.Array(array.store, path=array.path, read_only=array.read_only, write_empty_chunks=True)
    array.set_basic_selection(selection, values)


def blosc_compressor(array: ZarrArray) -> Blosc | Literal["other"] | None:
    """The array's Blosc compression as numcodecs' codec, None if uncompressed, ``"other"``
    for other codecs or filters."""
    if array.filters:
        return "other"
    compressor = array.compressor
    if compressor is None:
        return None
    return compressor if isinstance(compressor, numcodecs.Blosc) else "other"


def array_document(array: ZarrArray) -> dict[str, Any]:
    """The array's metadata document as JSON holds it (``.zarray`` plus ``"attributes"``),
    the form views of node metadata have."""
    prefix = f"{array.path}/" if array.path else ""
    zarray = json.loads(read_record(array.store, prefix + ".zarray") or b"{}")
    document: dict[str, Any] = json_document({**zarray, "attributes": array.attrs.asdict()})
    return document


def write_record(store: ZarrStore, key: str, data: bytes | memoryview) -> None:
    """Stores one record (a memoryview without a copy where the store can)."""
    if isinstance(store, SyncZarrStore):
        store.set_bytes_sync(key, data)
    else:
        store[key] = bytes(data)


def write_records(store: ZarrStore, items: Sequence[tuple[str, bytes | memoryview]]) -> None:
    """Stores records in order (an archive's store writes them as one batch)."""
    if isinstance(store, SyncZarrStore):
        store.set_many_sync(items)
    else:
        for key, data in items:
            write_record(store, key, data)


def read_record(store: ZarrStore, key: str) -> bytes | None:
    """The record ``key`` of the store, None if there is none."""
    if isinstance(store, SyncZarrStore):
        return store.read_value(key)
    try:
        return bytes(store[key])
    except KeyError:
        return None


def record_exists(store: ZarrStore, key: str) -> bool:
    """True if the store holds ``key``."""
    return key in store


def record_size(store: ZarrStore, key: str) -> int | None:
    """The size of record ``key``, None if there is none."""
    if isinstance(store, SyncZarrStore):
        return store.value_size(key)
    data = read_record(store, key)
    return None if data is None else len(data)


def store_keys(store: ZarrStore) -> list[str]:
    """Every key of the store."""
    return list(store.keys())


def raw_chunk_layout(array: ZarrArray) -> tuple[np.dtype[Any], tuple[int, ...]] | str:
    """The dtype and shape of an array's decoded chunks if they are plain C-order elements,
    or why not."""
    if array.order != "C":
        return "Fortran-ordered chunks"
    if array.filters:
        return "filters"
    return np.dtype(array.dtype), tuple(array.chunks)


def chunk_projections(
    array: ZarrArray, selection: Any, kind: SelectionKind
) -> tuple[tuple[int, ...], list[Any], tuple[int, ...]]:
    """zarr-python's indexer for a basic or orthogonal selection: the output shape, the
    chunk projections, and the axes dropped from each chunk's values."""
    indexer = _indexer(array, selection, kind)
    return tuple(indexer.shape), list(indexer), tuple(getattr(indexer, "drop_axes", ()) or ())


def open_member(group: ZarrGroup, path: str) -> ZarrGroup | ZarrArray | None:
    """The member at ``path`` (nested paths too) of ``group``, None if there is none."""
    store = group.store
    full = f"{group.path}/{path}" if group.path else path
    _refuse_format_3(store, full)
    with _parsing(store, full):
        if record_exists(store, f"{full}/.zarray"):
            return zarr.Array(store, path=full, read_only=group.read_only)
        if record_exists(store, f"{full}/.zgroup"):
            return zarr.Group(store, path=full, read_only=group.read_only)
    return None


def _with_attributes(node: Any, document: dict[str, Any]) -> Any:
    """Hands the node its attributes from the document: no ``.zattrs`` read."""
    attrs = node.attrs
    if attrs.cache:
        attrs._cached_asdict = dict(document.get("attributes") or {})
    return node


def array_from_document(store: ZarrStore, path: str, document: dict[str, Any]) -> ZarrArray:
    """zarr-python's array at ``path`` with the attributes of its metadata document
    (``.zarray`` plus ``"attributes"``); writes store every chunk, as arrays created by
    ncore_like do."""
    if document.get("zarr_format") != 2:
        check_zarr_format(document.get("zarr_format"))
    with _parsing(store, path):
        array = zarr.Array(store, path=path, read_only=store_read_only(store), write_empty_chunks=True)
    return _with_attributes(array, document)


def group_from_document(store: ZarrStore, path: str, document: dict[str, Any]) -> ZarrGroup:
    """zarr-python's group at ``path`` with the attributes of its metadata document."""
    if document.get("zarr_format") != 2:
        check_zarr_format(document.get("zarr_format"))
    with _parsing(store, path):
        group = zarr.Group(store, path=path, read_only=store_read_only(store))
    return _with_attributes(group, document)


def touched_chunk_keys(array: ZarrArray, selection: Any) -> list[str]:
    """Keys of the chunks a basic selection touches."""
    return [chunk_key(array, projection.chunk_coords) for projection in _indexer(array, selection, "basic")]
