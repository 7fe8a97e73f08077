"""zarr-python's own API as the tests use it as the oracle, under zarr-python 3 or 2.

The tests compare ncore_like with what zarr-python itself writes and reads; these helpers
call whichever zarr-python is installed the way its users would (keyword names and
defaults differ between the two majors), so the same test runs under both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import zarr

from tests.support.zarr_version import ZARR_MAJOR

#: zarr-python's default compression of new arrays (``"auto"`` / the default compressor).
DEFAULT = "default"


def memory_store() -> Any:
    """zarr-python's in-memory store."""
    return zarr.storage.MemoryStore()


def directory_store(path: str | Path, *, read_only: bool = False) -> Any:
    """zarr-python's store of a local directory (zarr-python 2's has no read-only mode)."""
    if ZARR_MAJOR >= 3:
        return zarr.storage.LocalStore(str(path), read_only=read_only)
    return zarr.storage.DirectoryStore(str(path))  # type: ignore[attr-defined]  # zarr-python 2


def fsspec_store(url: str, *, read_only: bool = False) -> Any:
    """zarr-python's store of an fsspec URL."""
    if ZARR_MAJOR >= 3:
        return zarr.storage.FsspecStore.from_url(url, read_only=read_only)
    return zarr.storage.FSStore(url, mode="r" if read_only else "w")  # type: ignore[attr-defined]  # zarr-python 2


def open_group(store: Any, mode: str = "r", *, zarr_format: int = 2, attributes: dict[str, Any] | None = None) -> Any:
    """``zarr.open_group`` (for mode ``"w"``: a new root group with ``attributes``)."""
    if ZARR_MAJOR >= 3:
        if mode == "w":
            return zarr.open_group(store, mode="w", zarr_format=zarr_format, attributes=attributes or {})  # type: ignore[arg-type]
        return zarr.open_group(store, mode=mode)  # type: ignore[arg-type]
    group = zarr.open_group(store, mode=mode)  # type: ignore[arg-type]
    if mode == "w" and attributes:
        group.attrs.update(attributes)
    return group


def open_unconsolidated(store: Any) -> Any:
    """``zarr.open_group`` for reading from the node metadata records alone (zarr-python 3
    would use consolidated metadata where the store has some)."""
    if ZARR_MAJOR >= 3:
        return zarr.open_group(store, mode="r", use_consolidated=False)  # type: ignore[arg-type]
    return zarr.open_group(store, mode="r")  # type: ignore[arg-type]


def open_consolidated(store: Any) -> Any:
    """``zarr.open_consolidated`` for reading."""
    return zarr.open_consolidated(store, mode="r")


def create_group(group: Any, name: str, attributes: dict[str, Any] | None = None) -> Any:
    """A member group (nested names create the groups in between)."""
    if ZARR_MAJOR >= 3:
        return group.create_group(name, attributes=attributes or {})
    created = group.create_group(name)
    if attributes:
        created.attrs.update(attributes)
    return created


def create_array(
    group: Any,
    name: str,
    *,
    shape: tuple[int, ...],
    dtype: Any,
    chunks: tuple[int, ...],
    compressor: Any = DEFAULT,
    fill_value: Any = 0,
    attributes: dict[str, Any] | None = None,
) -> Any:
    """A member array as zarr-python creates it (no filters; ``compressor``: a numcodecs
    codec, None, or :data:`DEFAULT`), every chunk written (also chunks of the fill value)."""
    if ZARR_MAJOR >= 3:
        compressors: Any = "auto" if compressor == DEFAULT else compressor
        return group.create_array(
            name, shape=shape, dtype=dtype, chunks=chunks, compressors=compressors, fill_value=fill_value,
            attributes=attributes or {}, config={"write_empty_chunks": True},
        )  # fmt: skip
    options: dict[str, Any] = {} if compressor == DEFAULT else {"compressor": compressor}
    array = group.create_dataset(
        name, shape=shape, dtype=dtype, chunks=chunks, fill_value=fill_value, write_empty_chunks=True, **options
    )
    if attributes:
        array.attrs.update(attributes)
    return array


def blosc(cname: str = "lz4", clevel: int = 5, shuffle: int = numcodecs.Blosc.SHUFFLE) -> numcodecs.Blosc:
    """A numcodecs Blosc compressor (both majors take it for zarr format 2)."""
    return numcodecs.Blosc(cname=cname, clevel=clevel, shuffle=shuffle)


def zarr_format_of(node: Any) -> int:
    """The zarr format of a zarr-python node."""
    return int(node.metadata.zarr_format) if ZARR_MAJOR >= 3 else 2


def values(array: Any) -> np.ndarray[Any, Any]:
    """All values of a zarr-python array."""
    return np.asarray(array[...])


def delete(store: Any, key: str) -> None:
    """Deletes ``key`` through zarr-python's store protocol."""
    if ZARR_MAJOR >= 3:
        from zarr.core.sync import sync

        sync(store.delete(key))
    else:
        del store[key]


def members(group: Any) -> list[tuple[str, Any]]:
    """The direct members of a zarr-python group, with their names."""
    return list(group.members()) if ZARR_MAJOR >= 3 else list(group.items())


#: The zarr formats the installed zarr-python reads and writes (zarr-python 2: format 2 only).
WRITABLE_FORMATS: tuple[int, ...] = (2, 3) if ZARR_MAJOR >= 3 else (2,)


def auto_chunks(shape: tuple[int, ...], dtype: Any) -> tuple[int, ...]:
    """The chunk shape zarr-python picks for a new array (``chunks="auto"`` / ``chunks=True``)."""
    if ZARR_MAJOR >= 3:
        array = zarr.create_array(zarr.storage.MemoryStore(), shape=shape, dtype=dtype, chunks="auto")
    else:
        array = zarr.create(shape=shape, dtype=dtype, chunks=True, store=zarr.storage.MemoryStore())
    return tuple(int(size) for size in array.chunks)


def write_values(array: Any, data: Any, selection: Any = Ellipsis) -> None:
    """``array[selection] = data`` through zarr-python, storing every touched chunk (also
    chunks equal to the fill value)."""
    if ZARR_MAJOR >= 3:
        array.with_config({"write_empty_chunks": True})[selection] = data
        return
    if not array.write_empty_chunks:
        array = zarr.Array(array.store, path=array.path, chunk_store=array.chunk_store, write_empty_chunks=True)  # type: ignore[call-arg]
    array[selection] = data


def metadata_document(node: Any) -> dict[str, Any]:
    """The node metadata of a zarr-python node as a dictionary (zarr-python 3's
    ``metadata.to_dict()``; under zarr-python 2 its ``.zarray``/``.zgroup`` record with
    ``"attributes"``)."""
    if ZARR_MAJOR >= 3:
        return dict(node.metadata.to_dict())
    import json

    prefix = f"{node.path}/" if node.path else ""
    record = ".zarray" if isinstance(node, zarr.Array) else ".zgroup"
    return {**json.loads(bytes(node.store[prefix + record])), "attributes": dict(node.attrs)}


def create_array_with(
    group: Any,
    name: str,
    *,
    shape: tuple[int, ...],
    dtype: Any,
    chunks: tuple[int, ...],
    compressor: Any = DEFAULT,
    filters: list[Any] | None = None,
    order: str = "C",
) -> Any:
    """A member array with zarr-python's defaults but for what is given: ``compressor`` (a
    numcodecs codec, None or :data:`DEFAULT`), ``filters`` (numcodecs codecs), ``order``
    (``"C"`` or ``"F"``); ``dtype=str`` is variable-length UTF-8 strings."""
    options: dict[str, Any] = {}
    if compressor != DEFAULT:
        options["compressors" if ZARR_MAJOR >= 3 else "compressor"] = compressor
    if filters is not None:
        options["filters"] = filters
    if order != "C":
        options["order"] = order
    if ZARR_MAJOR >= 3:
        return group.create_array(name, shape=shape, dtype=dtype, chunks=chunks, **options)
    return group.create_dataset(name, shape=shape, dtype=dtype, chunks=chunks, **options)


def dict_store(records: dict[str, Any]) -> Any:
    """zarr-python's in-memory store keeping its records in ``records`` (read them with
    :func:`record_bytes`); zarr-python 2 takes the dictionary itself."""
    return zarr.storage.MemoryStore(store_dict=records) if ZARR_MAJOR >= 3 else records


def record_bytes(value: Any) -> bytes:
    """The bytes of a record in the dictionary of :func:`dict_store`."""
    return bytes(value.to_bytes()) if ZARR_MAJOR >= 3 else bytes(numcodecs.compat.ensure_bytes(value))


#: Names of node metadata records of zarr format 2.
_METADATA_RECORDS_V2 = (".zarray", ".zgroup", ".zattrs", ".zmetadata")


def comparable_records(records: dict[str, bytes]) -> dict[str, Any]:
    """Records to compare with the ones zarr-python writes: under zarr-python 3 the bytes
    themselves. ncore_like writes node metadata byte for byte as zarr-python 3 does under
    either major; zarr-python 2 serialises the same documents otherwise (sorted keys, indent
    4, no default ``"dimension_separator"`` ".", no empty ``.zattrs``): under zarr-python 2
    node metadata records are compared as documents (canonical JSON), chunk records as bytes."""
    if ZARR_MAJOR >= 3:
        return dict(records)
    import json

    comparable: dict[str, Any] = {}
    for key, value in records.items():
        name = key.rpartition("/")[2]
        if name not in _METADATA_RECORDS_V2:
            comparable[key] = bytes(value)
            continue
        document = json.loads(bytes(value))
        if name == ".zarray":
            document.setdefault("dimension_separator", ".")
        if name == ".zattrs" and document == {}:
            continue
        comparable[key] = json.dumps(document, sort_keys=True)
    return comparable


def chunk_reading() -> tuple[Any, str]:
    """Where zarr-python reads and decodes chunk records, as a class and the name of its
    method (to patch in tests checking that it's not used): zarr-python 3's codec pipeline,
    zarr-python 2's ``Array._chunk_getitems``."""
    if ZARR_MAJOR >= 3:
        import zarr.core.codec_pipeline

        return zarr.core.codec_pipeline.BatchedCodecPipeline, "read"
    import zarr.core

    return zarr.core.Array, "_chunk_getitems"  # type: ignore[attr-defined]


def indexing_module() -> Any:
    """zarr-python's module of indexers (``BasicIndexer``, ``OrthogonalIndexer``,
    ``CoordinateIndexer``, ``MaskIndexer``)."""
    import importlib

    return importlib.import_module("zarr.core.indexing" if ZARR_MAJOR >= 3 else "zarr.indexing")


def create_vlen_bytes_array(group: Any, name: str, values: list[bytes], *, chunks: tuple[int, ...]) -> Any:
    """A 1-dimensional array of variable-length bytes (e.g. one chunk of many encoded
    frames) as zarr-python writes it: the ``vlen-bytes`` codec (zarr format 3) or filter
    (format 2), with zarr-python's default compression."""
    data = np.empty(len(values), dtype=object)
    data[:] = values
    if ZARR_MAJOR >= 3:
        array = group.create_array(name, shape=(len(values),), dtype=zarr.dtype.VariableLengthBytes(), chunks=chunks)
    else:
        array = group.create_dataset(
            name, shape=(len(values),), dtype=object, object_codec=numcodecs.VLenBytes(), chunks=chunks
        )
    array[:] = data
    return array
