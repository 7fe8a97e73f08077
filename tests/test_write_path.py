"""Arrays written by the typed API are byte for byte what zarr-python writes for the same
metadata and values: node metadata records (built from cached templates, with the
attributes serialised per array) and chunk records (encoded on the worker pool)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
import zarr.storage
from hypothesis import HealthCheck, example, given, settings, strategies as st

import ncore_like._compat
from ncore_like import BloscCompression, IndexedTarArchive, IndexedTarZarrStore, ReadOnlyError, RecordExistsError
from tests.support import zarr_api
from tests.support.zarr_version import ZARR_MAJOR

DTYPES = ["<f4", ">f8", "|u1", "<i2", ">i4", "|b1", "<c8", "<M8[ns]", "<u8"]
JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
JSON = st.recursive(
    JSON_SCALARS | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
COMPRESSIONS = [
    None,
    BloscCompression(),
    BloscCompression("zstd", 3, "shuffle", 0),
    BloscCompression("lz4", 1, "noshuffle"),
]


def zarr_python_records(
    zarr_format: int, name: str, data: np.ndarray, chunks: tuple[int, ...], compression: BloscCompression | None,
    attributes: dict[str, Any], *, write: bool = True,
) -> dict[str, bytes]:  # fmt: skip
    """The records zarr-python itself writes for the array (in a memory store); ``write``:
    with its values (else its node metadata only). Compared as :func:`zarr_api.comparable_records`."""
    records: dict[str, Any] = {}
    store = zarr_api.dict_store(records)
    dtype = data.dtype if zarr_format == 2 or data.dtype.byteorder != ">" else data.dtype.newbyteorder("<")
    if zarr_format == 3:  # zarr-python 3 only
        from zarr.codecs import BloscCodec

        root = zarr.open_group(store, mode="w", zarr_format=3)
        compressors = None
        if compression is not None:
            compressors = BloscCodec(
                typesize=dtype.itemsize, cname=compression.cname, clevel=compression.clevel,
                shuffle=compression.shuffle, blocksize=compression.blocksize,
            )  # fmt: skip
        array = root.create_array(
            name, shape=data.shape, dtype=dtype, chunks=chunks, compressors=compressors, filters=None,
            fill_value=np.zeros((), dtype)[()], attributes=attributes, config={"write_empty_chunks": True},
        )  # fmt: skip
    else:
        root = zarr_api.open_group(store, "w", zarr_format=2)
        compressor = None
        if compression is not None:
            shuffle = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}[compression.shuffle]
            compressor = numcodecs.Blosc(compression.cname, compression.clevel, shuffle, compression.blocksize)
        array = zarr_api.create_array(
            root, name, shape=data.shape, dtype=dtype, chunks=chunks, compressor=compressor,
            fill_value=np.zeros((), dtype)[()], attributes=attributes,
        )  # fmt: skip
    if write and data.size:
        array[...] = data
    return zarr_api.comparable_records(
        {key: zarr_api.record_bytes(value) for key, value in records.items() if key.startswith(f"{name}/")}
    )


def our_records(path: Path, name: str) -> dict[str, Any]:
    """The records of ``name`` in the archive, compared as :func:`zarr_api.comparable_records`."""
    archive = IndexedTarArchive(path)
    return zarr_api.comparable_records({key: archive[key] for key in archive.keys() if key.startswith(f"{name}/")})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    zarr_format=st.sampled_from(zarr_api.WRITABLE_FORMATS),
    dtype=st.sampled_from(DTYPES),
    shape=st.lists(st.integers(0, 9), min_size=0, max_size=3).map(tuple),
    chunk_seed=st.lists(st.integers(1, 5), min_size=3, max_size=3),
    compression=st.sampled_from(COMPRESSIONS),
    attributes=st.dictionaries(st.text(max_size=6), JSON, max_size=4),
    seed=st.integers(0, 2**32 - 1),
)
def test_create_array_writes_what_zarr_python_writes(
    tmp_path_factory: pytest.TempPathFactory, zarr_format: int, dtype: str, shape: tuple[int, ...],
    chunk_seed: list[int], compression: BloscCompression | None, attributes: dict[str, Any], seed: int,
) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    data = np.asarray(rng.integers(0, 100, size=shape) * rng.integers(0, 2, size=shape)).astype(dtype)
    chunks = tuple(max(1, min(c, s)) for c, s in zip(chunk_seed, shape, strict=False))
    path = tmp_path_factory.mktemp("w") / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        root.create_array("x", data, chunks=chunks, compression=compression, attributes=attributes)
        root.create_empty_array(
            "e", shape=shape, dtype=dtype, chunks=chunks, compression=compression, attributes=attributes
        )
    if ZARR_MAJOR < 3 and not shape and compression is not None:
        # zarr-python 2 never compresses 0-dimensional arrays, zarr-python 3 does; ncore_like
        # writes zarr-python 3's records under either: zarr-python 2 reads them.
        group = zarr_api.open_group(IndexedTarZarrStore(path).zarr, "r")
        for name, values in (("x", data), ("e", np.zeros((), dtype))):
            assert zarr_api.values(group[name]).tobytes() == values.tobytes()
            assert dict(group[name].attrs) == attributes and group[name].compressor is not None
        return
    assert our_records(path, "x") == zarr_python_records(zarr_format, "x", data, chunks, compression, attributes)
    assert our_records(path, "e") == zarr_python_records(
        zarr_format, "e", data, chunks, compression, attributes, write=False
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    zarr_format=st.sampled_from(zarr_api.WRITABLE_FORMATS),
    dtype=st.sampled_from(DTYPES),
    compression=st.sampled_from(COMPRESSIONS),
    ndim=st.integers(0, 3),
    sizes=st.lists(st.lists(st.integers(0, 40), min_size=6, max_size=6), min_size=2, max_size=6),
)
def test_arrays_of_many_shapes_get_zarr_pythons_metadata_each(
    tmp_path_factory: pytest.TempPathFactory, zarr_format: int, dtype: str, compression: BloscCompression | None,
    ndim: int, sizes: list[list[int]],
) -> None:  # fmt: skip
    # One metadata template serves every shape of a rank (frames of different sizes): each
    # array's records are still zarr-python's for its own shape and chunk shape.
    shapes = [(tuple(size[:ndim]), tuple(max(1, chunk) for chunk in size[3 : 3 + ndim])) for size in sizes]
    path = tmp_path_factory.mktemp("w") / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        for number, (shape, chunks) in enumerate(shapes):
            root.create_empty_array(
                f"a{number}", shape=shape, dtype=dtype, chunks=chunks, compression=compression, attributes={"n": number}
            )
    if ZARR_MAJOR < 3 and compression is not None and ndim == 0:
        return  # zarr-python 2 never compresses 0-dimensional arrays (see the test above)
    for number, (shape, chunks) in enumerate(shapes):
        name = f"a{number}"
        expected = zarr_python_records(
            zarr_format, name, np.zeros(shape, dtype), chunks, compression, {"n": number}, write=False
        )
        assert our_records(path, name) == expected, (shape, chunks)


@settings(max_examples=200, deadline=None)
@given(
    indent=st.sampled_from([None, 0, 2, 4]),
    shape=st.lists(st.integers(0, 2**40), max_size=4),
    chunks=st.lists(st.integers(1, 99), max_size=4),
    attributes=st.dictionaries(st.text(max_size=6), JSON, max_size=4) | JSON,
)
def test_metadata_text_with_open_values_is_json_of_the_filled_document(
    indent: int | None, shape: list[int], chunks: list[int], attributes: Any
) -> None:
    # The node metadata written per array fills a serialised template: it must be what
    # json.dumps writes for the whole document, at any nesting level and indent.
    from ncore_like._compat._shared import JsonTemplate

    def document(shape: Any, chunks: Any, attributes: Any) -> dict[str, Any]:
        return {"shape": shape, "grid": {"configuration": {"chunk_shape": chunks}}, "attributes": attributes, "z": 2}

    hole = JsonTemplate.hole
    template = JsonTemplate(document(hole("shape"), hole("chunks"), hole("attributes")), indent)
    expected = json.dumps(document(shape, chunks, attributes), allow_nan=True, indent=indent).encode()
    assert template.render({"shape": tuple(shape), "chunks": chunks, "attributes": attributes}) == expected


@pytest.mark.skipif(ZARR_MAJOR < 3, reason="zarr-python 3's json_indent setting")
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_metadata_follows_a_json_indent_changed_after_the_first_array(tmp_path: Path, zarr_format: int) -> None:
    # Templates are cached per process: one made with the default indent must not serve an
    # array created after the setting changed.
    data = np.arange(6, dtype="<i4").reshape(2, 3)
    with IndexedTarZarrStore(tmp_path / "a.itar", mode="w") as store:
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        root.create_array("before", data, chunks=(1, 3), compression=None, attributes={"k": [1, 2]})
        with zarr.config.set({"json_indent": 4}):
            root.create_array("after", data, chunks=(1, 3), compression=None, attributes={"k": [1, 2]})
            expected = zarr_python_records(zarr_format, "after", data, (1, 3), None, {"k": [1, 2]})
    assert our_records(tmp_path / "a.itar", "after") == expected


def test_a_large_compressed_array_is_encoded_on_the_pool_in_order(tmp_path: Path) -> None:
    values = np.arange(64 * 256 * 256, dtype=np.float32).reshape(64, 256, 256) % 1000
    path = tmp_path / "v.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        store.create_root_group({}).create_array("v", values, chunks=(1, 256, 256), compression=BloscCompression())
    assert our_records(path, "v") == zarr_python_records(2, "v", values, (1, 256, 256), BloscCompression(), {})
    archive = IndexedTarArchive(path)
    chunk_keys = [key for key in archive.keys() if key.startswith("v/") and not key.endswith((".zarray", ".zattrs"))]
    assert chunk_keys == [f"v/{index}.0.0" for index in range(64)]  # written in C order


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_creating_over_an_existing_node_is_refused_as_zarr_python_does(tmp_path: Path, zarr_format: int) -> None:
    with IndexedTarZarrStore(tmp_path / "a.itar", mode="w") as store:
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        root.create_group("g")
        root.create_array("a", [1, 2])
        with pytest.raises(zarr.errors.ContainsGroupError):
            root.create_array("g", [1])
        with pytest.raises(zarr.errors.ContainsArrayError):
            root.create_array("a", [3])
        with pytest.raises(zarr.errors.ContainsArrayError):
            root.create_empty_array("a", shape=(2,), dtype="i8", chunks=(2,))
    assert IndexedTarZarrStore(tmp_path / "a.itar").open_root_group(consolidated=False).array("a").read().tolist() == [
        1,
        2,
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    zarr_format=st.sampled_from(zarr_api.WRITABLE_FORMATS),
    dtype=st.sampled_from(DTYPES),
    rows=st.integers(1, 12),
    row_chunk=st.integers(1, 4),
    compression=st.sampled_from(COMPRESSIONS),
    by_slices=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
@example(zarr_format=2, dtype="<c8", rows=1, row_chunk=2, compression=None, by_slices=False, seed=0)  # an edge chunk
def test_chunk_by_chunk_writes_store_what_zarr_python_stores(
    tmp_path_factory: pytest.TempPathFactory, zarr_format: int, dtype: str, rows: int, row_chunk: int,
    compression: BloscCompression | None, by_slices: bool, seed: int,
) -> None:  # fmt: skip
    data = np.random.default_rng(seed).integers(0, 50, size=(rows, 6)).astype(dtype)
    chunks = (row_chunk, 3)
    path = tmp_path_factory.mktemp("w") / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store, pytest.MonkeyPatch.context() as patch:
        # Whole chunks are encoded and stored directly, never through zarr-python's writes.
        patch.setattr(ncore_like._compat, "write_basic_selection", None)
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        array = root.create_empty_array("x", shape=data.shape, dtype=dtype, chunks=chunks, compression=compression)
        if by_slices:  # blocks of whole chunks, the last one at the edge
            for start in range(0, rows, row_chunk):
                array.write(slice(start, start + row_chunk), data[start : start + row_chunk])
        elif row_chunk == 1:  # one row per chunk, by int: the DataLoader-style writer
            for index in range(rows):
                array.write(index, data[index])
        else:
            array.write(..., data)
    assert our_records(path, "x") == zarr_python_records(zarr_format, "x", data, chunks, compression, {})


def test_a_chunk_written_twice_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with IndexedTarZarrStore(tmp_path / "a.itar", mode="w") as store:
        array = store.create_root_group({}).create_empty_array("x", shape=(4, 2), dtype="f4", chunks=(1, 2))
        array.write(1, [1, 2])
        with pytest.raises(RecordExistsError, match=r"x/1\.0"):
            array.write(slice(0, 2), [[5, 6], [7, 8]])  # chunk 0 is new, chunk 1 exists
        array.write(0, [3, 4])  # chunk 0 was not written by the refused write
    np.testing.assert_array_equal(
        IndexedTarZarrStore(tmp_path / "a.itar").open_root_group(consolidated=False).array("x").read(),
        [[3, 4], [1, 2], [0, 0], [0, 0]],
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    zarr_format=st.sampled_from(zarr_api.WRITABLE_FORMATS),
    compression=st.sampled_from(COMPRESSIONS),
    writes=st.lists(
        st.tuples(st.integers(0, 9), st.integers(1, 10), st.integers(0, 5), st.integers(1, 6)), min_size=1, max_size=6
    ),
)
def test_rewritable_stores_complete_partial_chunk_writes_as_zarr_python_does(
    zarr_format: int, compression: BloscCompression | None, writes: list[tuple[int, int, int, int]]
) -> None:
    from ncore_like import ZarrStoreAdapter

    expected = np.zeros((10, 6), np.int32)
    ours = ZarrStoreAdapter(zarr.storage.MemoryStore())
    array = ours.create_root_group({}, zarr_format=zarr_format).create_empty_array(  # type: ignore[arg-type]
        "x", shape=expected.shape, dtype=np.int32, chunks=(4, 4), compression=compression
    )
    for number, (row, rows, column, columns) in enumerate(writes, start=1):
        selection = (slice(row, row + rows), slice(column, column + columns))
        array.write(selection, number)  # overlapping writes: chunks written again
        expected[selection] = number
    np.testing.assert_array_equal(array.read(), expected)


# -- one row at a time ----------------------------------------------------------------------

#: The index forms of one row, as recorders hand them out (numpy's integers from counters
#: and samplers, tuples of the row and full slices).
ROW_FORMS = {
    "int": lambda index, rows: index,
    "negative": lambda index, rows: index - rows,
    "int64": lambda index, rows: np.int64(index),
    "uint16": lambda index, rows: np.uint16(index),
    "0-d array": lambda index, rows: np.array(index),
    "(i, :)": lambda index, rows: (index, slice(None)),
    "(i, ...)": lambda index, rows: (index, ...),
}


def _no_general_path(patch: pytest.MonkeyPatch) -> None:
    """Makes every write but the row writer's fail: what a test of that writer writes then
    came through it."""
    from ncore_like.nodes._array import Array

    def refused(*args: object) -> None:
        raise AssertionError("a row write took the general path")

    patch.setattr(Array, "_write_whole_chunks", refused)
    patch.setattr(ncore_like._compat, "write_basic_selection", refused)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    zarr_format=st.sampled_from(zarr_api.WRITABLE_FORMATS),
    dtype=st.sampled_from(DTYPES),
    compression=st.sampled_from(COMPRESSIONS),
    row_shape=st.lists(st.integers(1, 5), min_size=0, max_size=2).map(tuple),
    rows=st.integers(1, 7),
    form=st.sampled_from(sorted(ROW_FORMS)),
    given_as=st.sampled_from(["array", "strided", "list", "float64"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_rows_written_one_by_one_are_what_zarr_python_stores(
    tmp_path_factory: pytest.TempPathFactory, zarr_format: int, dtype: str, compression: BloscCompression | None,
    row_shape: tuple[int, ...], rows: int, form: str, given_as: str, seed: int,
) -> None:  # fmt: skip
    data = np.random.default_rng(seed).integers(0, 50, size=(rows, *row_shape)).astype(dtype)
    if form in ("(i, :)",) and not row_shape:
        form = "int"  # (i, :) of a 1-d array selects a row of one dimension more: not a row
    path = tmp_path_factory.mktemp("w") / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store, pytest.MonkeyPatch.context() as patch:
        _no_general_path(patch)
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        array = root.create_empty_array(
            "x", shape=data.shape, dtype=dtype, chunks=(1, *row_shape), compression=compression
        )
        for index in np.random.default_rng(seed).permutation(rows):  # in any order
            row: Any = data[index]
            if given_as == "strided":  # every other element of a larger array: not contiguous
                spread = np.zeros((*row_shape[:-1], 2 * row_shape[-1]) if row_shape else (), data.dtype)
                if row_shape:
                    spread[..., ::2] = row
                    row = spread[..., ::2]
                else:
                    row = data[index]
            elif given_as == "list":
                row = row.tolist()
            elif given_as == "float64" and data.dtype.kind in "iuf":
                row = row.astype(np.float64)  # cast to the array's dtype, as numpy assigns
            array.write(ROW_FORMS[form](int(index), rows), row)
    assert our_records(path, "x") == zarr_python_records(zarr_format, "x", data, (1, *row_shape), compression, {})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    zarr_format=st.sampled_from(zarr_api.WRITABLE_FORMATS),
    dtype=st.sampled_from(DTYPES),
    compression=st.sampled_from(COMPRESSIONS),
    row_shape=st.lists(st.integers(1, 4), min_size=0, max_size=2).map(tuple),
    windows=st.lists(st.integers(1, 32), min_size=1, max_size=6),
    as_tuple=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_short_windows_of_rows_are_what_zarr_python_stores(
    tmp_path_factory: pytest.TempPathFactory, zarr_format: int, dtype: str, compression: BloscCompression | None,
    row_shape: tuple[int, ...], windows: list[int], as_tuple: bool, seed: int,
) -> None:  # fmt: skip
    """``arr.write(slice(t, t + k), rows)`` of up to 32 rows goes through the row writer."""
    rows = sum(windows)
    data = np.random.default_rng(seed).integers(0, 50, size=(rows, *row_shape)).astype(dtype)
    starts = np.cumsum([0, *windows[:-1]])
    path = tmp_path_factory.mktemp("w") / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store, pytest.MonkeyPatch.context() as patch:
        _no_general_path(patch)
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        array = root.create_empty_array(
            "x", shape=data.shape, dtype=dtype, chunks=(1, *row_shape), compression=compression
        )
        for index in np.random.default_rng(seed).permutation(len(windows)):  # in any order
            window = slice(int(starts[index]), int(starts[index]) + windows[index])
            array.write((window, ...) if as_tuple else window, data[window])
    assert our_records(path, "x") == zarr_python_records(zarr_format, "x", data, (1, *row_shape), compression, {})


def test_windows_of_rows_the_row_writer_leaves_keep_their_results(tmp_path: Path) -> None:
    """A window over a row written already is refused whole; windows of more than 32 rows,
    of another step, or of data to broadcast take the general path."""
    values = np.arange(100 * 3, dtype="i4").reshape(100, 3)
    path = tmp_path / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        array = store.create_root_group({}).create_empty_array("x", shape=values.shape, dtype="i4", chunks=(1, 3))
        array.write(5, values[5])
        records = len(store.archive)
        with pytest.raises(RecordExistsError, match=r"x/5\.0"):
            array.write(slice(0, 8), values[:8])
        assert len(store.archive) == records  # rows 0-4 were not written either
        array.write(slice(0, 5), values[:5])
        array.write(slice(6, 50), values[6:50])  # 44 rows
        with pytest.raises(ValueError, match="unit-step"):
            array.write(slice(50, 60, 2), values[50:60:2])
        array.write(slice(50, 60), values[50, 0])  # a scalar broadcast over the window
        array.write(slice(60, -10), values[60:90])
        array.write(slice(-10, None), values[-10:])
        store.consolidate()
    expected = values.copy()
    expected[50:60] = values[50, 0]
    np.testing.assert_array_equal(IndexedTarZarrStore(path).open_root_group().array("x").read(), expected)


@pytest.mark.parametrize("compression", [None, BloscCompression()], ids=["raw", "blosc"])
def test_a_row_written_again_is_refused_and_changes_nothing(
    tmp_path: Path, compression: BloscCompression | None
) -> None:
    path = tmp_path / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        array = store.create_root_group({}).create_empty_array(
            "poses", shape=(5, 3), dtype="f8", chunks=(1, 3), compression=compression
        )
        array.write(2, [1.0, 2.0, 3.0])
        records = len(store.archive)
        for index in (2, -3, np.int64(2), (2, slice(None))):
            with pytest.raises(RecordExistsError, match=r"array 'poses' of .*a\.itar.*poses/2\.0.*exists already"):
                array.write(index, [7.0, 8.0, 9.0])
            assert len(store.archive) == records  # nothing written
        store.consolidate()
    np.testing.assert_array_equal(IndexedTarZarrStore(path).open_root_group().array("poses").read(2), [1, 2, 3])


def test_row_writes_the_row_writer_leaves_keep_their_results(tmp_path: Path) -> None:
    """Data of another shape (broadcast), indices out of bounds and stores opened for reading
    get what the general path gives them."""
    path = tmp_path / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        array = store.create_root_group({}).create_empty_array("x", shape=(4, 3), dtype="i4", chunks=(1, 3))
        array.write(0, 7)  # a scalar broadcast over the row
        array.write(1, np.array([1, 2, 3], np.int8))  # another dtype: cast as numpy assigns
        with pytest.raises(ValueError, match="broadcast"):
            array.write(2, [1, 2])
        with pytest.raises(IndexError):
            array.write(4, [1, 2, 3])
        with pytest.raises(IndexError):
            array.write(-5, [1, 2, 3])
        store.consolidate()
    reader = IndexedTarZarrStore(path).open_root_group().array("x")
    np.testing.assert_array_equal(reader.read(), [[7, 7, 7], [1, 2, 3], [0, 0, 0], [0, 0, 0]])
    with pytest.raises(ReadOnlyError):
        reader.write(3, [1, 2, 3])


@pytest.mark.parametrize("chunks", [(1, 3), (2, 3), (4, 3), (1, 1)], ids=["rows", "two rows", "one chunk", "elements"])
@pytest.mark.parametrize(
    ("selection", "shape"),
    [(1, (1, 3)), (1, (1, 1, 3)), (np.s_[2:4], (1, 2, 3)), (np.s_[0:2], (1, 1, 3)), (-1, (1, 1)), (3, (2, 3))],
    ids=["row[None]", "row[None, None]", "block[None]", "a row broadcast", "a scalar in two axes", "two rows"],
)
def test_data_with_leading_axes_of_length_one_writes_as_numpy_assigns(
    tmp_path: Path, chunks: tuple[int, int], selection: Any, shape: tuple[int, ...]
) -> None:
    """``a[t] = row[None]``: numpy drops leading axes of length 1 the selection lacks, for
    every chunking (rows take the row writer or the whole-chunk path, others zarr-python)."""
    data = np.arange(1, math.prod(shape) + 1, dtype=np.int32).reshape(shape)
    expected = np.zeros((4, 3), np.int32)
    try:
        expected[selection] = data
    except ValueError:
        expected = None
    path = tmp_path / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        array = store.create_root_group({}).create_empty_array("x", shape=(4, 3), dtype="i4", chunks=chunks)
        if expected is None:
            with pytest.raises(ValueError, match="array 'x' of .*a\\.itar: .*broadcast"):
                array.write(selection, data)
            return
        array.write(selection, data)
    np.testing.assert_array_equal(
        IndexedTarZarrStore(path).open_root_group(consolidated=False).array("x").read(), expected
    )


@pytest.mark.parametrize("row_bytes", [64, 2 << 20], ids=["buffered", "written at once"])
def test_an_uncompressed_row_is_stored_as_it_was_when_written(tmp_path: Path, row_bytes: int) -> None:
    """Rows are handed to the archive without a copy: what it stores must not follow later
    changes of the caller's array (small records wait in the write buffer, large ones are
    written before the call returns)."""
    path = tmp_path / "a.itar"
    values = np.arange(3 * row_bytes, dtype=np.uint8).reshape(3, row_bytes)
    with IndexedTarZarrStore(path, mode="w") as store:
        array = store.create_root_group({}).create_empty_array(
            "x", shape=values.shape, dtype="u1", chunks=(1, row_bytes), compression=None
        )
        scratch = np.empty(row_bytes, np.uint8)  # a recorder's reused buffer
        for index in range(3):
            scratch[:] = values[index]
            array.write(index, scratch)
            scratch[:] = 255
        store.consolidate()
    np.testing.assert_array_equal(IndexedTarZarrStore(path).open_root_group().array("x").read(), values)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    zarr_format=st.sampled_from(zarr_api.WRITABLE_FORMATS),
    compression=st.sampled_from(COMPRESSIONS),
    shape=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    chunks=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    tile=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    seed=st.integers(0, 2**32 - 1),
)
# One chunk across the block, at column 4:
@example(zarr_format=2, compression=None, shape=(4, 8), chunks=(1, 4), tile=(2, 1), seed=0)
def test_blocks_of_whole_chunks_anywhere_store_what_zarr_python_stores(
    tmp_path_factory: pytest.TempPathFactory, zarr_format: int, compression: BloscCompression | None,
    shape: tuple[int, int], chunks: tuple[int, int], tile: tuple[int, int], seed: int,
) -> None:  # fmt: skip
    """An array written as blocks of whole chunks (``tile`` chunks each way, edge blocks
    smaller) at every position, in any order, holds zarr-python's records of the whole."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 50, size=shape).astype("<i4")
    steps = [t * c for t, c in zip(tile, chunks, strict=True)]
    blocks = [
        (slice(row, row + steps[0]), slice(column, column + steps[1]))
        for row in range(0, shape[0], steps[0])
        for column in range(0, shape[1], steps[1])
    ]
    path = tmp_path_factory.mktemp("w") / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store, pytest.MonkeyPatch.context() as patch:
        patch.setattr(ncore_like._compat, "write_basic_selection", None)  # whole chunks: never zarr-python's writes
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        array = root.create_empty_array("x", shape=shape, dtype="<i4", chunks=chunks, compression=compression)
        for index in rng.permutation(len(blocks)):
            array.write(blocks[index], data[blocks[index]])
        with pytest.raises(RecordExistsError):
            array.write(blocks[0], data[blocks[0]])
    assert our_records(path, "x") == zarr_python_records(zarr_format, "x", data, chunks, compression, {})


@pytest.mark.parametrize("compression", [None, BloscCompression()], ids=["raw", "blosc"])
def test_a_block_of_many_batches_with_one_chunk_written_already_writes_nothing(
    tmp_path: Path, compression: BloscCompression | None
) -> None:
    """Blocks are written batch by batch (each laid out whole); a chunk written already in
    the last batch must stop the write before the first batch reaches the file."""
    values = np.random.default_rng(0).standard_normal((600, 1024)).astype(np.float32)  # 2.4 MB of rows
    path = tmp_path / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        array = store.create_root_group({}).create_empty_array(
            "x", shape=values.shape, dtype="f4", chunks=(1, 1024), compression=compression
        )
        array.write(599, values[599])
        records = len(store.archive)
        with pytest.raises(RecordExistsError, match=r"x/599\.0"):
            array.write(slice(0, 600), values)
        assert len(store.archive) == records
        array.write(slice(0, 599), values[:599])  # none of them was written
        store.consolidate()
    np.testing.assert_array_equal(IndexedTarZarrStore(path).open_root_group().array("x").read(), values)


@pytest.mark.parametrize(
    ("selection", "data", "error", "problem"),
    [
        (0, "abc", ValueError, "could not convert string to float"),
        (0, [1.0, 2.0], ValueError, r"data of shape \(2,\) doesn't broadcast to the selection's shape \(3,\)"),
        (slice(0, 4), np.ones((3, 3)), ValueError, r"shape \(3, 3\) doesn't broadcast .* \(4, 3\)"),
        (20, [1.0, 2.0, 3.0], IndexError, "out of bounds"),
        (slice(0, 4, 2), 1.0, ValueError, "writes take basic selections"),
        (0, {"a": 1}, TypeError, "float"),
    ],
    ids=["text", "short row", "short block", "out of bounds", "a step", "a dict"],
)
def test_a_bad_write_names_the_array_and_the_file_and_writes_nothing(
    tmp_path: Path, selection: Any, data: Any, error: type[Exception], problem: str
) -> None:
    path = tmp_path / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        array = store.create_root_group({}).create_empty_array("poses", shape=(10, 3), dtype="f4", chunks=(1, 3))
        records = len(store.archive)
        with pytest.raises(error, match=rf"array 'poses' of .*a\.itar: .*{problem}") as raised:
            array.write(selection, data)
        assert str(raised.value).count("array 'poses'") == 1  # named once
        assert len(store.archive) == records


# -- attributes with numpy values, and what JSON can't hold -----------------------------------

NUMPY_ATTRIBUTES = {
    "t": np.float64(1.5),
    "f32": np.float32(0.1),
    "count": np.int64(-3),
    "u8": np.uint8(200),
    "flag": np.bool_(True),
    "name": np.str_("front"),
    "pose": np.arange(7, dtype=np.float64) / 3,
    "matrix": np.eye(3, dtype=np.float32),
    "ids": np.array([1, 2, 3], dtype=np.int32),
    "nested": {"limits": (np.int16(-1), np.int16(1)), "list": [np.float16(0.5), np.arange(2)]},
}


def _python_values(value: Any) -> Any:
    """What numpy's own conversions make of ``value`` (the expected stored attributes)."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    if isinstance(value, dict):
        return {key: _python_values(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_python_values(item) for item in value]
    return value


@pytest.mark.parametrize("zarr_format", zarr_api.WRITABLE_FORMATS)
def test_numpy_attribute_values_are_stored_as_their_python_values(tmp_path: Path, zarr_format: int) -> None:
    expected = _python_values(NUMPY_ATTRIBUTES)
    data = np.arange(6, dtype="<i4")
    path = tmp_path / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group(NUMPY_ATTRIBUTES, zarr_format=zarr_format)  # type: ignore[arg-type]
        group = root.create_group("seq", attributes=NUMPY_ATTRIBUTES)
        array = group.create_array("x", data, compression=None, attributes=NUMPY_ATTRIBUTES)
        assert dict(array.attributes) == expected  # as the writing session sees them
        store.consolidate()
    assert our_records(path, "seq/x") == {
        f"seq/{key}": value for key, value in zarr_python_records(zarr_format, "x", data, (6,), None, expected).items()
    }
    reopened = IndexedTarZarrStore(path).open_root_group()
    for node in (reopened, reopened.group("seq"), reopened.array("seq/x")):
        assert dict(node.attributes) == expected


#: Keys ``json`` writes as strings (``1`` and ``True`` are one dict key: 2 and True here).
KEYED_ATTRIBUTES = {2: "two", True: "yes", None: "none", 1.5: "x", "nested": {3: [4], -0.5: {None: 1}}}


@pytest.mark.parametrize("zarr_format", zarr_api.WRITABLE_FORMATS)
@pytest.mark.parametrize("numpy_keys", [False, True], ids=["python keys", "numpy keys"])
def test_attribute_keys_json_writes_as_strings_are_those_strings_from_the_start(
    tmp_path: Path, zarr_format: int, numpy_keys: bool
) -> None:
    """Keys that are numbers, bools or None: what json makes of them, as the writing session
    sees them and after reopening (zarr-python refused them at the top level)."""
    expected = json.loads(json.dumps(KEYED_ATTRIBUTES))
    attributes: dict[Any, Any] = dict(KEYED_ATTRIBUTES)
    if numpy_keys:
        attributes = {np.int64(2): "two", np.bool_(True): "yes", np.float32(1.5): "x", None: "none",
                      "nested": {np.uint8(3): [4], np.float64(-0.5): {None: 1}}}  # fmt: skip
    path = tmp_path / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group(attributes, zarr_format=zarr_format)  # type: ignore[arg-type]
        group = root.create_group("seq", attributes=attributes)
        array = group.create_array("x", np.arange(3), attributes=attributes)
        for node in (root, group, array):
            assert dict(node.attributes) == expected
        store.consolidate()
    reopened = IndexedTarZarrStore(path).open_root_group()
    for node in (reopened, reopened.group("seq"), reopened.array("seq/x")):
        assert dict(node.attributes) == expected


@pytest.mark.parametrize(
    ("attributes", "problem"),
    [
        ({"tags": {"a", "b"}}, r"attribute\['tags'\] is a set"),
        ({"x": {"deep": [1, b"raw"]}}, r"attribute\['x'\]\['deep'\]\[1\] is a bytes"),
        ({"when": np.datetime64("2026-01-01")}, r"attribute\['when'\] is a datetime.date"),
        ({"x": {(1, 2): 3}}, r"key \(1, 2\) of attribute\['x'\] is a tuple"),
        ({"z": 1j}, r"attribute\['z'\] is a complex"),
    ],
    ids=["set", "bytes", "datetime", "tuple key", "complex"],
)
def test_attributes_json_cant_hold_are_refused_with_their_place_named(
    tmp_path: Path, attributes: dict[str, Any], problem: str
) -> None:
    path = tmp_path / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({})
        records = len(store.archive)
        creations = {
            "array 'x'": lambda: root.create_array("x", np.zeros(3), attributes=attributes),
            "array 'e'": lambda: root.create_empty_array(
                "e", shape=(3,), dtype="f4", chunks=(3,), attributes=attributes
            ),
            "group 'g/h'": lambda: root.create_group("g/h", attributes=attributes),
        }
        for node, create in creations.items():
            with pytest.raises(TypeError, match=rf"{node} of .*a\.itar: attributes must be JSON: {problem}"):
                create()
        with pytest.raises(TypeError, match=rf"root group of .*b\.itar: attributes must be JSON: {problem}"):
            IndexedTarZarrStore(tmp_path / "b.itar", mode="w").create_root_group(attributes)
        assert len(store.archive) == records and "x" not in root and "e" not in root


def test_create_array_errors_name_the_array(tmp_path: Path) -> None:
    with IndexedTarZarrStore(tmp_path / "a.itar", mode="w") as store:
        group = store.create_root_group({}).create_group("seq")
        with pytest.raises(ValueError, match=r"array 'seq/ragged' of .*a\.itar: .*inhomogeneous"):
            group.create_array("ragged", [[1, 2], [3]])
        with pytest.raises(TypeError, match=r"array 'seq/x' of .*a\.itar: compression must be a BloscCompression"):
            group.create_array("x", np.zeros(3), compression="lz4")  # type: ignore[arg-type]
        assert group.members() == []


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(1, 3000), min_size=1, max_size=5), seed=st.integers(0, 2**32 - 1))
@example(lengths=[1, 2, 100_000, 3, 100_000], seed=0)  # a length twice, large blobs
def test_blobs_of_any_length_are_what_zarr_python_writes(
    tmp_path_factory: pytest.TempPathFactory, lengths: list[int], seed: int
) -> None:
    """Format 2 blobs are 0-d fixed-length bytes, a dtype per length; their metadata comes
    from one template with the dtype open, and must stay zarr-python's for every length."""
    rng = np.random.default_rng(seed)
    blobs = [rng.bytes(length - 1) + b"\xd9" for length in lengths]  # no trailing NUL: numpy would strip it
    path = tmp_path_factory.mktemp("w") / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({}, zarr_format=2)
        for index, blob in enumerate(blobs):
            created = root.create_bytes_array(f"b{index}", blob)
            assert created.dtype == np.dtype(f"S{len(blob)}") and created.shape == ()  # as the session sees it
        # Fixed-length bytes arrays of other shapes and fill values take templates too.
        words = np.array([b"ab", b"cde", b""], dtype=f"S{lengths[0] + 2}")
        root.create_array("words", words, compression=None)
        root.create_empty_array("filled", shape=(2,), dtype="S4", chunks=(2,), fill_value=b"ab")
        store.consolidate()
    for index, blob in enumerate(blobs):
        data = np.array(blob, dtype=f"S{len(blob)}")
        assert our_records(path, f"b{index}") == zarr_python_records(2, f"b{index}", data, (), None, {})
    assert our_records(path, "words") == zarr_python_records(2, "words", words, (3,), None, {})
    reopened = IndexedTarZarrStore(path).open_root_group()
    assert [reopened.array(f"b{index}").read_bytes() for index in range(len(blobs))] == blobs
    assert reopened.array("filled").read().tolist() == [b"ab", b"ab"]


# -- names no member can have ------------------------------------------------------------------

BAD_NAMES = [
    ("..", ValueError, "no member can have this name"),
    ("a/../b", ValueError, "no member can have this name"),
    ("x\\y", ValueError, "no member can have this name"),
    ("a//b", ValueError, "no member can have this name"),
    ("", ValueError, "no member can have this name"),
    (5, TypeError, "names are strings, got int 5"),
    (b"x", TypeError, "names are strings, got bytes"),
]


@pytest.mark.parametrize(("name", "error", "problem"), BAD_NAMES, ids=[repr(name) for name, _, _ in BAD_NAMES])
def test_names_no_member_can_have_are_refused_naming_the_store_and_nothing_is_written(
    tmp_path: Path, name: Any, error: type[Exception], problem: str
) -> None:
    """zarr-python read a backslash as "/" (``x\\y`` made x/y), called ``a/../b`` bad
    metadata and an int name an AttributeError."""
    path = tmp_path / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({})
        records = len(store.archive)
        creations = {
            "group": lambda: root.create_group(name),
            "array": lambda: root.create_array(name, np.arange(3)),
            "empty array": lambda: root.create_empty_array(name, shape=(3,), dtype="f4", chunks=(3,)),
            "blob": lambda: root.create_bytes_array(name, b"jpeg"),
        }
        for kind, create in creations.items():
            with pytest.raises(error, match=rf"{problem}.*") as raised:
                create()
            assert str(path) in str(raised.value), kind
        assert len(store.archive) == records and not list(root.keys())


def test_a_blob_of_text_is_refused_with_a_hint(tmp_path: Path) -> None:
    with IndexedTarZarrStore(tmp_path / "a.itar", mode="w") as store:
        root = store.create_root_group({})
        with pytest.raises(TypeError, match=r"array 'b' of .*a\.itar: a blob is bytes .*got str .*encode"):
            root.create_bytes_array("b", "a string")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("dtype", "chunks", "selection", "value"),
    [("i2", (3,), 0, 10**6), ("u1", (2,), slice(0, 1), -1), ("u1", (2,), slice(0, 2), -1), ("i1", (1,), 2, 200)],
    ids=["partial chunk", "partial window", "whole chunk", "row writer"],
)
def test_python_ints_out_of_the_dtypes_range_raise_as_numpy_does_on_every_write_path(
    tmp_path: Path, dtype: str, chunks: tuple[int, ...], selection: Any, value: int
) -> None:
    """zarr-python's path (a part of a chunk) wrapped them silently (10**6 as int16: 16960)."""
    with pytest.raises(OverflowError):
        np.zeros(4, dtype)[selection] = value
    with IndexedTarZarrStore(tmp_path / "a.itar", mode="w") as store:
        array = store.create_root_group({}).create_empty_array("x", shape=(4,), dtype=dtype, chunks=chunks)
        records = len(store.archive)
        with pytest.raises(OverflowError, match=r"array 'x' of .*a\.itar: .*out of bounds"):
            array.write(selection, value)
        assert len(store.archive) == records


BAD_EMPTY_ARRAYS = [
    ({"shape": (-1,)}, ValueError, "shape .* non-negative integers"),
    ({"shape": (2.5,)}, ValueError, "shape .* non-negative integers"),
    ({"dtype": [("a", "<i4")]}, ValueError, "unsupported dtype"),
    ({"dtype": "nope"}, TypeError, "not understood"),
    ({"chunks": (-1,)}, ValueError, "chunk sizes must be non-negative"),
    ({"chunks": (3, 1)}, ValueError, "don't match"),
    ({"fill_value": "x"}, ValueError, "invalid literal"),
    ({"fill_value": 1000}, OverflowError, "out of bounds"),
]


@pytest.mark.parametrize(("change", "error", "problem"), BAD_EMPTY_ARRAYS, ids=[str(c) for c, _, _ in BAD_EMPTY_ARRAYS])
def test_a_refused_empty_array_writes_nothing_and_names_itself(
    tmp_path: Path, change: dict[str, Any], error: type[Exception], problem: str
) -> None:
    """``shape=(-1,)`` wrote its node metadata before it was refused: the finished archive
    held a node zarr-python and ``verify`` couldn't open; ``shape=(2.5,)`` was taken as 2."""
    from ncore_like.archive import verify_archive

    path = tmp_path / "a.itar"
    arguments: dict[str, Any] = {"shape": (3,), "dtype": "i1", "chunks": (3,), **change}
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({})
        records = len(store.archive)
        with pytest.raises(error, match=rf"array 'e' of .*a\.itar: .*{problem}"):
            root.create_empty_array("e", **arguments)
        assert len(store.archive) == records
        store.consolidate()
    assert verify_archive(IndexedTarArchive(path)).ok
    assert list(zarr_api.open_group(IndexedTarZarrStore(path).zarr, "r").keys()) == []


@pytest.mark.parametrize("variable", ["BLOSC_CLEVEL=1", "BLOSC_COMPRESSOR=zstd", "BLOSC_SHUFFLE=NOSHUFFLE"])
def test_small_chunks_are_compressed_as_asked_whatever_blosc_variables_say(tmp_path: Path, variable: str) -> None:
    # Blosc's global context (python-blosc's) takes its settings from BLOSC_* variables over
    # the call's; the records must be what the array's metadata says, as zarr-python's are.
    values = np.random.default_rng(5).standard_normal((6, 300)).astype(np.float32)
    values[:, ::2] = 0
    np.save(tmp_path / "values.npy", values)
    code = (
        "import sys\nimport numpy as np\nfrom ncore_like import BloscCompression, IndexedTarZarrStore\n"
        "values = np.load(sys.argv[1])\n"
        "with IndexedTarZarrStore(sys.argv[2], mode='w') as store:\n"
        "    root = store.create_root_group({})\n"
        "    root.create_array('x', values, chunks=(1, 300), compression=BloscCompression())\n"
        "    rows = root.create_empty_array('y', shape=values.shape, dtype=values.dtype, chunks=(1, 300),\n"
        "                                   compression=BloscCompression())\n"
        "    for index, row in enumerate(values):\n"
        "        rows.write(index, row)\n"
    )
    name, value = variable.split("=")
    environment = {**os.environ, name: value}
    path = tmp_path / "b.itar"
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "values.npy"), str(path)],
        env=environment,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    for name in ("x", "y"):
        _rows_as_numcodecs_encodes_them(path, name, values)


def _rows_as_numcodecs_encodes_them(path: Path, name: str, values: np.ndarray[Any, Any]) -> None:
    codec = numcodecs.Blosc("lz4", 5, numcodecs.Blosc.BITSHUFFLE)
    archive = IndexedTarArchive(path)
    for index, row in enumerate(values):
        assert archive[f"{name}/{index}.0"] == codec.encode(row), (name, index)


def test_small_chunks_are_compressed_as_asked_after_the_process_forced_blosc_block_sizes(tmp_path: Path) -> None:
    # python-blosc's block size forced by the application's own use of it applies to every
    # compression on Blosc's global context: not to the library's records.
    import blosc

    values = np.random.default_rng(6).standard_normal((5, 1000)).astype(np.float32)
    blosc.set_blocksize(256)
    try:
        with IndexedTarZarrStore(tmp_path / "f.itar", mode="w") as store:
            root = store.create_root_group({})
            root.create_array("x", values, chunks=(1, 1000), compression=BloscCompression())
            rows = root.create_empty_array(
                "y", shape=values.shape, dtype=values.dtype, chunks=(1, 1000), compression=BloscCompression()
            )
            for index, row in enumerate(values):
                rows.write(index, row)
    finally:
        blosc.set_blocksize(0)
    for name in ("x", "y"):
        _rows_as_numcodecs_encodes_them(tmp_path / "f.itar", name, values)


def test_a_blosc_variable_set_after_arrays_were_written_is_noticed_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = np.random.default_rng(7).standard_normal((5, 1000)).astype(np.float32)
    values[:, ::2] = 0
    with IndexedTarZarrStore(tmp_path / "v.itar", mode="w") as store:
        root = store.create_root_group({})
        root.create_array("first", values, chunks=(1, 1000), compression=BloscCompression())
        monkeypatch.setenv("BLOSC_CLEVEL", "9")
        root.create_array("second", values, chunks=(1, 1000), compression=BloscCompression())
    for name in ("first", "second"):
        _rows_as_numcodecs_encodes_them(tmp_path / "v.itar", name, values)
