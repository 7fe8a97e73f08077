"""Everything that touches zarr-python 3 (>= 3.1), behind the names of :mod:`ncore_like._compat`.

The semi-public pieces used here (building nodes from metadata dictionaries, the
byte-request classes, the indexers, the loop that runs zarr's coroutines) are what a
zarr-python 2 module beside this one would provide in its own way.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Coroutine, Iterable, Sequence
from typing import Any, Literal, NamedTuple, TypeVar

import numcodecs
import numpy as np
import zarr
from numcodecs import Blosc  # how Blosc compression is passed: zarr format 2's compressor
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store as ZarrStore, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.core.group import AsyncGroup
from zarr.core.sync import _get_loop
from zarr.storage import FsspecStore, LocalStore, StorePath

from .._concurrency import sync
from .._json import indented_json
from .._lru import LRUCache, process_cache
from ._shared import JsonTemplate, StorePrimitives, checked_format, empty_bytes, json_document, parsing

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

T = TypeVar("T")
ZarrFormat = Literal[2, 3]
ZarrArray = zarr.Array[Any]
ZarrGroup = zarr.Group
ZarrNode = ZarrGroup | ZarrArray


class SyncZarrStore(ZarrStore, StorePrimitives):
    """A zarr-python 3 store built on :class:`StorePrimitives` (e.g. archives). Nodes are
    then opened and records written without a round trip through zarr's event-loop thread,
    which costs a few hundred microseconds per call."""

    # -- zarr-python 3's protocol -------------------------------------------------------

    def _bounds(self, key: str, byte_range: ByteRequest | None) -> tuple[int, int] | None:
        size = self.value_size(key)
        return None if size is None else byte_range_bounds(byte_range, size)

    def get_sync(
        self, key: str, *, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """The value of ``key`` (None if missing)."""
        if byte_range is None:
            data = self.read_value(key)
        else:
            bounds = self._bounds(key, byte_range)
            data = None if bounds is None else self.read_range(key, *bounds)
        return None if data is None else (prototype or default_buffer_prototype()).buffer.from_bytes(data)

    async def get(
        self, key: str, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        # The prototype is optional, as for zarr-python's own stores (xarray, for one, leaves it out).
        prototype = prototype or default_buffer_prototype()
        if byte_range is None:
            data = await self.read_value_async(key)
        else:
            bounds = self._bounds(key, byte_range)
            data = None if bounds is None else await self.read_range_async(key, *bounds)
        return None if data is None else prototype.buffer.from_bytes(data)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return list(await asyncio.gather(*(self.get(key, prototype, request) for key, request in key_ranges)))

    async def exists(self, key: str) -> bool:
        return self.exists_sync(key)

    async def getsize(self, key: str) -> int:
        size = self.value_size(key)
        if size is None:
            raise FileNotFoundError(f"{self}: no record {key!r}")
        return size

    def _payload(self, value: Buffer) -> memoryview:
        self._check_writable()
        if not isinstance(value, Buffer):
            raise TypeError(f"{type(self).__name__}.set expects a zarr Buffer, got {type(value).__name__}")
        return value.as_numpy_array().data

    def set_sync(self, key: str, value: Buffer) -> None:
        """Stores ``value`` under ``key``."""
        self.set_bytes_sync(key, self._payload(value))

    async def set(self, key: str, value: Buffer) -> None:
        await self.set_bytes_async(key, self._payload(value))

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        if not self.exists_sync(key):
            await self.set(key, value)

    async def delete(self, key: str) -> None:
        self.delete_sync(key)

    async def delete_dir(self, prefix: str) -> None:
        self._check_writable()
        self.delete_prefix_sync(prefix)

    async def list(self) -> AsyncIterator[str]:
        for key in self.listed_keys():
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in self.listed_keys():
            if key.startswith(prefix):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        for name in self.list_dir_sync(prefix.rstrip("/")):
            yield name


#: The zarr formats zarr-python 3 reads and writes.
ZARR_FORMATS: tuple[ZarrFormat, ...] = (2, 3)


def check_zarr_format(zarr_format: object) -> ZarrFormat:
    """``zarr_format`` if zarr-python 3 writes it (2 or 3), ValueError otherwise."""
    return checked_format(zarr_format, ZARR_FORMATS, zarr.__version__)


def zarr_loop() -> asyncio.AbstractEventLoop:
    """The loop zarr-python runs its coroutines on."""
    return _get_loop()


def run_zarr(coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine of a zarr store on zarr's own loop (from synchronous code)."""
    return sync(coroutine, zarr_loop())


def is_zarr_store(value: object) -> bool:
    """True for stores of zarr-python 3."""
    return isinstance(value, ZarrStore)


def is_group(node: object) -> bool:
    """True for zarr-python groups."""
    return isinstance(node, zarr.Group)


def local_store(path: str, *, read_only: bool) -> ZarrStore:
    """zarr-python's store of a local directory."""
    return LocalStore(path, read_only=read_only)


def fsspec_store(fs: Any, path: str, *, read_only: bool) -> ZarrStore:
    """zarr-python's store of the keys under ``path`` of an fsspec filesystem (e.g. a
    ``UPath``'s, which has the storage options, chained URLs such as ``zip://a.zarr::b.zip``
    included: zarr-python's ``from_url`` would take the chain apart a second time)."""
    return FsspecStore.from_mapper(fs.get_mapper(path), read_only=read_only)


def byte_range_bounds(byte_range: ByteRequest | None, size: int) -> tuple[int, int]:
    """``[start, stop)`` of a zarr byte request within a value of ``size`` bytes (the one
    place that interprets byte requests)."""
    if byte_range is None:
        return 0, size
    if isinstance(byte_range, RangeByteRequest):
        start, stop = byte_range.start, byte_range.end
        if start < 0 or stop < start:
            raise ValueError(f"invalid byte range {start}-{stop}")
        return min(start, size), min(stop, size)
    if isinstance(byte_range, OffsetByteRequest):
        if byte_range.offset < 0:
            raise ValueError(f"invalid byte offset {byte_range.offset}")
        return min(byte_range.offset, size), size
    if isinstance(byte_range, SuffixByteRequest):
        if byte_range.suffix < 0:
            raise ValueError(f"invalid byte suffix {byte_range.suffix}")
        return max(0, size - byte_range.suffix), size
    raise TypeError(f"Unexpected byte_range, got {byte_range!r}")


def create_group(store: ZarrStore, attributes: dict[str, Any], zarr_format: ZarrFormat) -> zarr.Group:
    """Creates the root group (existing nodes elsewhere in the store are kept)."""
    return zarr.Group.from_store(store, attributes=attributes, zarr_format=zarr_format, overwrite=False)


def open_group(store: ZarrStore) -> zarr.Group:
    """Opens the root group for reading from its node metadata records."""
    with parsing(store, ""):
        return zarr.open_group(store=store, mode="r", use_consolidated=False)


def member_names(group: zarr.Group) -> list[str]:
    """Names of the direct members of a group (their metadata is parsed)."""
    with parsing(group.store, group.path):
        return [name for name, _ in group.members()]


def member_nodes(group: zarr.Group) -> list[tuple[str, ZarrNode]]:
    """The direct members of a group with their names."""
    with parsing(group.store, group.path):
        return list(group.members())


def group_from_node_metadata(store: ZarrStore, root: dict[str, Any], members: dict[str, dict[str, Any]]) -> zarr.Group:
    """The root group built from metadata dictionaries, without any store I/O: ``root`` is
    the root group's metadata, ``members`` that of every member by path (zarr-python's
    consolidated-metadata form: v2 nodes are their ``.zarray``/``.zgroup`` plus
    ``"attributes"``)."""
    metadata = {
        **root,
        "consolidated_metadata": {"kind": "inline", "must_understand": False, "metadata": members},
    }
    return zarr.Group(AsyncGroup.from_dict(StorePath(store, ""), metadata))


def guess_chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """zarr-python's chunk shape heuristic (``chunks="auto"``)."""
    from zarr.core.chunk_grids import _guess_chunks

    return tuple(int(size) for size in _guess_chunks(shape, itemsize))


def _compressors(blosc: Blosc | None, zarr_format: ZarrFormat, itemsize: int) -> Any:
    """``blosc`` as zarr-python's ``compressors=`` argument for ``zarr_format``."""
    from zarr.codecs import BloscCodec, BloscShuffle

    if blosc is None or zarr_format == 2:
        return blosc
    config = blosc.get_config()
    shuffle = (BloscShuffle.noshuffle, BloscShuffle.shuffle, BloscShuffle.bitshuffle)[config["shuffle"]]
    return BloscCodec(
        typesize=itemsize,
        cname=config["cname"],
        clevel=config["clevel"],
        shuffle=shuffle,
        blocksize=config["blocksize"],
    )


# Arrays created here write every chunk they are given, also chunks equal to the fill value
# (archives are write-once: a chunk skipped can't be written later).
_WRITE_CONFIG: Any = {"write_empty_chunks": True}


class _ArrayTemplate(NamedTuple):
    """The node metadata zarr-python writes for an array of one rank, without its shape,
    chunk shape and attributes (filled in per array)."""

    document: dict[str, Any]  # v3: zarr.json; v2: .zarray
    zarray: bytes | None
    """v2: zarr-python's ``.zarray`` record, kept only where re-serialising the document
    doesn't give it byte for byte (checked when a template is made): every shape then gets
    a template of its own."""
    text: JsonTemplate | None = None
    """The document serialised with its shape, chunk shape and (v3) attributes open."""


# Node metadata depends on rank, dtype, codecs and fill value only: the shape and chunk shape
# are two lists in the document (attributes are added per array). Frames of many different
# sizes then cost one zarr-python array creation, not one per size (~40 % of writing them).
_templates: LRUCache[tuple[Any, ...], _ArrayTemplate] = process_cache(256)


def _array_template(
    zarr_format: ZarrFormat, shape: tuple[int, ...], dtype: np.dtype[Any], chunks: tuple[int, ...], blosc: Blosc | None,
    fill_value: Any, dimension_names: tuple[str | None, ...] | None = None,
) -> _ArrayTemplate:  # fmt: skip
    config = None if blosc is None else tuple(sorted(blosc.get_config().items()))
    # Fixed-length bytes of format 2 (blobs, a dtype per length) with the empty fill value
    # share one template with the dtype open: zarr-python writes them alike but for the
    # length (a template per blob made each with zarr-python: ~0.9 ms a blob). The fill
    # value is looked at in its own length, not as a blob's worth of zero bytes.
    blob = zarr_format == 2 and dtype.kind == "S" and empty_bytes(fill_value, dtype.itemsize)
    fill_key = None if blob or fill_value is None else np.asarray(fill_value, dtype=dtype).tobytes()
    # dtypes compare by byte order too
    key = (zarr_format, len(shape), "S" if blob else dtype, config, None if blob else fill_key, dimension_names)

    def make(shape: tuple[int, ...], chunks: tuple[int, ...], dtype: np.dtype[Any]) -> _ArrayTemplate:
        records: dict[str, Buffer] = {}
        zarr.create_array(
            zarr.storage.MemoryStore(store_dict=records),
            shape=shape,
            dtype=dtype,
            chunks=chunks,
            compressors=_compressors(blosc, zarr_format, max(1, dtype.itemsize)),
            filters=None,
            fill_value=fill_value,
            zarr_format=zarr_format,
            dimension_names=dimension_names,
        )
        if zarr_format == 3:
            document = json.loads(records["zarr.json"].to_bytes())
            return _ArrayTemplate(document, None, _open_template(document, 3))
        zarray = records[".zarray"].to_bytes()
        document = json.loads(zarray)
        if _serialised(document) != zarray:
            return _ArrayTemplate(document, zarray)
        return _ArrayTemplate(document, None, _open_template(document, 2, open_dtype=blob))

    ones = (1,) * len(shape)
    template = _templates.get_or_put(key, lambda: make(ones, ones, np.dtype("S1") if blob else dtype))
    assert template is not None
    if template.zarray is not None:
        template = _templates.get_or_put((*key, dtype, shape, chunks), lambda: make(shape, chunks, dtype))
        assert template is not None
        return template
    document = _filled(template.document, zarr_format, list(shape), list(chunks))
    if blob:
        document["dtype"] = dtype.str  # as zarr-python writes fixed-length bytes: "|S<length>"
    return _ArrayTemplate(document, None, template.text)


def _filled(document: dict[str, Any], zarr_format: ZarrFormat, shape: Any, chunks: Any) -> dict[str, Any]:
    """The array document with its shape and chunk shape (the keys keep their positions)."""
    document = dict(document)
    document["shape"] = shape
    if zarr_format == 3:
        document["chunk_grid"] = {
            **document["chunk_grid"],
            "configuration": {**document["chunk_grid"]["configuration"], "chunk_shape": chunks},
        }
    else:
        document["chunks"] = chunks
    return document


def _open_template(document: dict[str, Any], zarr_format: ZarrFormat, *, open_dtype: bool = False) -> JsonTemplate:
    """The document serialised with its shape, chunk shape, (v3) attributes and (``open_dtype``)
    dtype open."""
    hole = JsonTemplate.hole
    opened = _filled(document, zarr_format, hole("shape"), hole("chunks"))
    if zarr_format == 3:
        opened["attributes"] = hole("attributes")  # keeps the key's position
    if open_dtype:
        opened["dtype"] = hole("dtype")
    return JsonTemplate(opened, zarr.config.get("json_indent"))


def _serialised(document: dict[str, Any]) -> bytes:
    """A metadata document as zarr-python 3 serialises it (``json.dumps`` with its indent)."""
    return indented_json(document, zarr.config.get("json_indent")).encode()


def _rendered(template: _ArrayTemplate, document: dict[str, Any], values: dict[str, Any]) -> bytes:
    """:func:`_serialised` of ``document``, the filled ``template``, from its open text when
    the indent is still the one it was made with."""
    text = template.text
    if text is None or text.indent != zarr.config.get("json_indent"):
        return _serialised(document)
    return text.render(values)


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
    """The node metadata records of an array (by name within the node: ``zarr.json``, or
    ``.zarray`` and ``.zattrs``), byte for byte as zarr-python writes them, and the node's
    metadata document (v2: ``.zarray`` plus ``"attributes"``). ``dimension_names``: zarr
    format 3's (format 2 has none: ValueError).

    The codec chain is exactly one Blosc compressor (``blosc``) or none, with no filters, so
    chunk records are ``blosc(C-order bytes)`` (little-endian bytes in format 3). zarr-python
    builds the metadata once per rank, dtype, codecs and fill value (the shape and chunk shape
    are filled in); the records are serialised here the way it does (``json.dumps`` with its
    configured indent).
    """
    if dimension_names is not None and zarr_format != 3:
        raise ValueError("zarr format 2 has no dimension names (xarray keeps them in an attribute)")
    template = _array_template(zarr_format, shape, dtype, chunks, blosc, fill_value, dimension_names)
    attributes = dict(attributes or {})
    values = {"shape": shape, "chunks": chunks, "attributes": attributes, "dtype": dtype.str}
    if zarr_format == 3:
        document = {**template.document, "attributes": attributes}  # keeps the key's position
        return {"zarr.json": _rendered(template, document, values)}, document
    zarray = template.zarray if template.zarray is not None else _rendered(template, template.document, values)
    records = {".zarray": zarray, ".zattrs": _serialised(attributes)}
    return records, {**template.document, "attributes": attributes}


def _refuse_existing_node(store: ZarrStore, path: str, zarr_format: ZarrFormat) -> None:
    """Raises zarr-python's error for an existing node at ``path``, as its array creation
    does (archives refuse rewriting a record anyway; other stores would overwrite it)."""
    from zarr.errors import ContainsArrayError, ContainsGroupError

    prefix = f"{path}/" if path else ""
    if zarr_format == 2:
        kind = (
            "array"
            if record_exists(store, prefix + ".zarray")
            else "group"
            if record_exists(store, prefix + ".zgroup")
            else None
        )
    elif record_exists(store, prefix + "zarr.json"):
        try:
            node_type = json.loads(read_record(store, prefix + "zarr.json") or b"{}").get("node_type")
        except (ValueError, AttributeError):  # damaged metadata: a node exists all the same
            node_type = None
        kind = "group" if node_type == "group" else "array"
    else:
        kind = None
    if kind == "array":
        raise ContainsArrayError(f"An array exists in store {store!r} at path {path!r}.")
    if kind == "group":
        raise ContainsGroupError(f"A group exists in store {store!r} at path {path!r}.")


def write_array_metadata(
    group: zarr.Group,
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
    of ``group`` and returns its path and metadata document (see
    :func:`array_metadata_records`). The records are written directly: zarr-python builds no
    array and makes no store round trip per array (~0.6 ms each in an archive).

    Raises:
        ContainsArrayError, ContainsGroupError: zarr-python's errors for an existing node.
    """
    zarr_format = array_zarr_format(group)
    store = group.store
    path = f"{group.path}/{name}" if group.path else name
    _refuse_existing_node(store, path, zarr_format)
    records, document = array_metadata_records(
        zarr_format, shape=shape, dtype=np.dtype(dtype), chunks=chunks, blosc=blosc, fill_value=fill_value,
        attributes=attributes, dimension_names=dimension_names,
    )  # fmt: skip
    for record_name, data in records.items():
        write_record(store, f"{path}/{record_name}", data)
    return path, document


def chunk_key(array: ZarrArray, coords: tuple[int, ...]) -> str:
    """The store key of a chunk of an array."""
    prefix = f"{array.path}/" if array.path else ""
    return prefix + array.metadata.encode_chunk_key(coords)


def chunk_key_parts(array: ZarrArray) -> tuple[str, str, str] | None:
    """For the standard chunk key encodings (``0.1``, ``0/1``, ``c/0/1``): the prefix of
    every chunk key of ``array``, the separator of the coordinates, and the key of a
    0-dimensional array's one chunk; None for other encodings (use :func:`chunk_key`)."""
    from zarr.core.chunk_key_encodings import DefaultChunkKeyEncoding, V2ChunkKeyEncoding

    path = f"{array.path}/" if array.path else ""
    metadata = array.metadata
    if metadata.zarr_format == 2:
        encoding: Any = V2ChunkKeyEncoding(separator=metadata.dimension_separator)
    else:
        encoding = metadata.chunk_key_encoding
    separator = getattr(encoding, "separator", None)
    if separator in (".", "/"):
        if type(encoding) is V2ChunkKeyEncoding:
            return path, separator, path + "0"
        if type(encoding) is DefaultChunkKeyEncoding:
            return f"{path}c{separator}", separator, path + "c"
    return None


def array_zarr_format(array: ZarrArray | zarr.Group) -> ZarrFormat:
    """The zarr format of a node."""
    return array.metadata.zarr_format


SelectionKind = Literal["basic", "orthogonal", "fancy"]


def selection_kind(array: ZarrArray, selection: Any) -> SelectionKind:
    """How zarr-python's ``array[selection]`` interprets a selection."""
    from zarr.core.indexing import is_pure_fancy_indexing, is_pure_orthogonal_indexing, pop_fields

    _, pure = pop_fields(selection)
    if is_pure_fancy_indexing(pure, array.ndim):
        return "fancy"
    if is_pure_orthogonal_indexing(pure, array.ndim):
        return "orthogonal"
    return "basic"


def selection_shape(array: ZarrArray, selection: Any, kind: SelectionKind) -> tuple[int, ...]:
    """The shape of ``array[selection]`` (raises zarr-python's errors for invalid selections)."""
    from zarr.core.indexing import BasicIndexer, OrthogonalIndexer

    if kind == "fancy":
        return tuple(np.empty(array.shape, dtype=np.bool_)[selection].shape) if array.ndim else ()
    indexer_class = BasicIndexer if kind == "basic" else OrthogonalIndexer
    return tuple(indexer_class(selection, array.shape, array.metadata.chunk_grid).shape)


def read_selection(
    array: ZarrArray, selection: Any, kind: SelectionKind, out: np.ndarray[Any, Any] | None
) -> np.ndarray[Any, Any]:
    """zarr-python's reading of a selection, into ``out`` if given."""
    from zarr.core.buffer.cpu import NDBuffer

    if out is None:
        values = np.asarray(array[selection])
        dtype = np.dtype(array.dtype)
        if dtype.kind == "S" and values.dtype != dtype:
            # zarr-python hands out single fixed-length bytes as numpy scalars, which drop
            # their trailing NULs: padded back, the bytes are the stored ones.
            values = values.astype(dtype)
        return values
    target = NDBuffer.from_numpy_array(out)
    if kind == "basic":
        array.get_basic_selection(selection, out=target)
    elif kind == "orthogonal":
        array.get_orthogonal_selection(selection, out=target)
    else:
        out[...] = np.asarray(array[selection])
    return out


def write_basic_selection(array: ZarrArray, selection: Any, values: Any) -> None:
    """Writes through zarr-python, storing every touched chunk (also chunks equal to the
    fill value, which zarr-python would otherwise delete)."""
    array.with_config({"write_empty_chunks": True}).set_basic_selection(selection, values)


def blosc_compressor(array: ZarrArray) -> Blosc | Literal["other"] | None:
    """The array's Blosc compression as numcodecs' codec, None if uncompressed, ``"other"``
    for other codecs or filters."""
    from zarr.codecs import BloscCodec, BytesCodec

    metadata = array.metadata
    if metadata.zarr_format == 2:
        if metadata.filters:
            return "other"
        compressor = metadata.compressor
        if compressor is None:
            return None
        if isinstance(compressor, numcodecs.Blosc):
            return compressor
        return "other"
    codecs = list(metadata.codecs)
    if not codecs or not isinstance(codecs[0], BytesCodec):
        return "other"
    rest = codecs[1:]
    if not rest:
        return None
    if len(rest) == 1 and isinstance(rest[0], BloscCodec):
        codec = rest[0]
        shuffle = ("noshuffle", "shuffle", "bitshuffle").index(codec.shuffle.value)
        return numcodecs.Blosc(cname=codec.cname.value, clevel=codec.clevel, shuffle=shuffle, blocksize=codec.blocksize)
    return "other"


def array_document(array: ZarrArray) -> dict[str, Any]:
    """The array's metadata document as JSON holds it (v2: ``.zarray`` plus ``"attributes"``;
    v3: ``zarr.json``), the form views of node metadata have."""
    document: dict[str, Any] = json_document(array.metadata.to_dict())
    return document


def write_record(store: ZarrStore, key: str, data: bytes | memoryview) -> None:
    """Stores one record (synchronously where the store can, else on zarr's loop). A
    memoryview (e.g. of the caller's values) is stored without a copy by this project's
    stores, which write it before returning; other stores get a copy, since some keep what
    they are given (a ``MemoryStore`` would otherwise change with the caller's array)."""
    if isinstance(store, SyncZarrStore):
        store.set_bytes_sync(key, data)
    else:
        owned = bytes(data) if isinstance(data, memoryview) else data
        run_zarr(store.set(key, default_buffer_prototype().buffer.from_bytes(owned)))


def write_records(store: ZarrStore, items: Sequence[tuple[str, bytes | memoryview]]) -> None:
    """Stores records in order (an archive's store writes them as one batch)."""
    if isinstance(store, SyncZarrStore):
        store.set_many_sync(items)
    else:
        for key, data in items:
            write_record(store, key, data)


def read_record(store: ZarrStore, key: str) -> bytes | None:
    """The record ``key`` of the store, None if there is none (synchronously where the store can)."""
    if isinstance(store, SyncZarrStore):
        return store.read_value(key)
    buffer = run_zarr(store.get(key, default_buffer_prototype()))
    return None if buffer is None else buffer.to_bytes()


def record_size(store: ZarrStore, key: str) -> int | None:
    """The size of record ``key``, None if there is none."""
    if isinstance(store, SyncZarrStore):
        return store.value_size(key)
    try:
        return int(run_zarr(store.getsize(key)))
    except FileNotFoundError:
        return None


def store_keys(store: ZarrStore) -> list[str]:
    """Every key of the store."""
    if isinstance(store, SyncZarrStore):
        return store.listed_keys()

    async def collect() -> list[str]:
        return [key async for key in store.list()]

    return run_zarr(collect())


def store_read_only(store: ZarrStore) -> bool:
    """True if the store refuses writes."""
    return bool(store.read_only)


def reading_store(store: ZarrStore) -> ZarrStore:
    """The store, refusing writes (itself if it does already, or if it can't be made to)."""
    if store.read_only:
        return store
    try:
        return store.with_read_only(True)
    except NotImplementedError:
        return store


def create_subgroup(group: zarr.Group, name: str, attributes: dict[str, Any]) -> zarr.Group:
    """Creates a member group of ``group`` (an error if a member of that name exists)."""
    return group.create_group(name, attributes=attributes)


def record_exists(store: ZarrStore, key: str) -> bool:
    """True if the store holds ``key`` (synchronously where the store can)."""
    if isinstance(store, SyncZarrStore):
        return store.exists_sync(key)
    return run_zarr(store.exists(key))


def raw_chunk_layout(array: ZarrArray) -> tuple[np.dtype[Any], tuple[int, ...]] | str:
    """The dtype (with the stored byte order) and shape of an array's decoded chunks if they
    are plain C-order elements, or why not (filters, Fortran order, sharding, ...)."""
    from zarr.codecs import BytesCodec

    metadata = array.metadata
    dtype = np.dtype(array.dtype)
    if metadata.zarr_format == 2:
        if metadata.order != "C":
            return "Fortran-ordered chunks"
        if metadata.filters:
            return "filters"
        return dtype, tuple(metadata.chunks)
    codecs = list(metadata.codecs)
    if not codecs or not isinstance(codecs[0], BytesCodec):
        return "array-to-array codecs or sharding"
    endian = codecs[0].endian
    if dtype.itemsize > 1 and endian is not None:
        dtype = dtype.newbyteorder("<" if endian.value == "little" else ">")
    grid_chunks = getattr(metadata.chunk_grid, "chunk_shape", None)
    if grid_chunks is None:
        return "irregular chunk grid"
    return dtype, tuple(grid_chunks)


def chunk_projections(
    array: ZarrArray, selection: Any, kind: SelectionKind
) -> tuple[tuple[int, ...], list[Any], tuple[int, ...]]:
    """zarr-python's indexer for a basic or orthogonal selection: the output shape, the
    chunk projections, and the axes dropped from each chunk's values."""
    from zarr.core.indexing import BasicIndexer, OrthogonalIndexer

    indexer_class = BasicIndexer if kind == "basic" else OrthogonalIndexer
    indexer = indexer_class(selection, array.shape, array.metadata.chunk_grid)
    return tuple(indexer.shape), list(indexer), tuple(getattr(indexer, "drop_axes", ()) or ())


def open_member(group: zarr.Group, path: str) -> zarr.Group | ZarrArray | None:
    """The member at ``path`` (nested paths too) of ``group``, None if there is none.

    Stores that read synchronously (:class:`SyncZarrStore`, e.g. archives) are read directly and the
    node built from its metadata, without a round trip through zarr-python's event-loop
    thread (which costs a few hundred microseconds per member); others go through zarr.
    """
    store = group.store
    full = f"{group.path}/{path}" if group.path else path
    if not isinstance(store, SyncZarrStore):
        try:
            return group[path]
        except KeyError:
            return None
    with parsing(store, full):
        return _open_member_sync(group, store, full)


def array_from_document(store: ZarrStore, path: str, document: dict[str, Any]) -> ZarrArray:
    """zarr-python's array at ``path`` from its metadata document (v2: ``.zarray`` plus
    ``"attributes"``; v3: ``zarr.json``), without store I/O (writes store every chunk, as
    arrays created by ncore_like do)."""
    from zarr.core.array import AsyncArray, parse_array_metadata

    with parsing(store, path):
        metadata = parse_array_metadata(document)
    array: Any = AsyncArray(metadata=metadata, store_path=StorePath(store, path), config=_WRITE_CONFIG)
    return zarr.Array(array)


def group_from_document(store: ZarrStore, path: str, document: dict[str, Any]) -> zarr.Group:
    """zarr-python's group at ``path`` from its metadata document, without store I/O."""
    with parsing(store, path):
        return zarr.Group(AsyncGroup.from_dict(StorePath(store, path), document))


def _open_member_sync(group: zarr.Group, store: SyncZarrStore, full: str) -> zarr.Group | ZarrArray | None:
    from zarr.core.array import AsyncArray, parse_array_metadata

    def load(name: str) -> Any:
        data = store.read_value(f"{full}/{name}")
        return None if data is None else json.loads(data)

    store_path = StorePath(store, full)
    if group.metadata.zarr_format == 3:
        node = load("zarr.json")
        if node is None:
            return None
        if node.get("node_type") == "array":
            return zarr.Array(AsyncArray(metadata=parse_array_metadata(node), store_path=store_path))
        return zarr.Group(AsyncGroup.from_dict(store_path, node))
    zarray: Any = load(".zarray")
    zgroup: Any = None
    if zarray is None:
        zgroup = load(".zgroup")
        if zgroup is None:
            return None
    attributes = load(".zattrs") or {}
    if zarray is not None:
        metadata = parse_array_metadata({**zarray, "attributes": attributes})
        return zarr.Array(AsyncArray(metadata=metadata, store_path=store_path))
    return zarr.Group(AsyncGroup.from_dict(store_path, {**zgroup, "attributes": attributes}))


def touched_chunk_keys(array: ZarrArray, selection: Any) -> list[str]:
    """Keys of the chunks a basic selection touches."""
    from zarr.core.indexing import BasicIndexer

    indexer = BasicIndexer(selection, array.shape, array.metadata.chunk_grid)
    return [chunk_key(array, projection.chunk_coords) for projection in indexer]
