"""The typed API: Group, Array, EncodedArray, BloscCompression, NodeCache."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import math
import threading
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
import zarr.storage
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from ncore_like import (
    Array,
    BloscCompression,
    EncodedArray,
    Group,
    IndexedTarArchive,
    IndexedTarZarrStore,
    NodeCache,
    RecordExistsError,
    ZarrStoreAdapter,
)
from ncore_like._compat import chunk_key
from tests.support import zarr_api
from tests.support.zarr_version import ZARR_MAJOR

FORMATS = [2, 3]


def new_store(tmp_path: Path, name: str = "a.itar") -> IndexedTarZarrStore:
    return IndexedTarZarrStore(tmp_path / name, mode="w")


def reopen(tmp_path: Path, name: str = "a.itar", consolidated: bool | str = "auto") -> Group:
    return IndexedTarZarrStore(tmp_path / name).open_root_group(consolidated)  # type: ignore[arg-type]


# -- BloscCompression ----------------------------------------------------------------------


def test_blosc_defaults_and_numcodecs_round_trip() -> None:
    default = BloscCompression()
    assert (default.cname, default.clevel, default.shuffle, default.blocksize) == ("lz4", 5, "bitshuffle", 0)
    codec = BloscCompression("zstd", 3, "shuffle", 4096).to_numcodecs()
    assert codec.get_config() == {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 1, "blocksize": 4096}
    assert BloscCompression.from_numcodecs(codec) == BloscCompression("zstd", 3, "shuffle", 4096)
    config = {"typesize": 4, "cname": "lz4hc", "clevel": 9, "shuffle": "noshuffle", "blocksize": 0}
    assert BloscCompression.from_config_v3(config) == BloscCompression("lz4hc", 9, "noshuffle", 0)
    with pytest.raises(AttributeError):
        default.clevel = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs",
    [{"cname": "snappy"}, {"clevel": 10}, {"clevel": -1}, {"clevel": True}, {"shuffle": "auto"}, {"blocksize": -1}],
)
def test_blosc_rejects_invalid_values(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        BloscCompression(**kwargs)


def test_blosc_from_other_codecs() -> None:
    with pytest.raises(ValueError, match="not a blosc compressor"):
        BloscCompression.from_numcodecs(numcodecs.Zstd())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="automatic"):
        BloscCompression.from_numcodecs(numcodecs.Blosc(shuffle=-1))
    with pytest.raises(ValueError, match="without"):
        BloscCompression.from_config_v3({"cname": "lz4"})


# -- EncodedArray --------------------------------------------------------------------------


@pytest.mark.parametrize("zarr_format", FORMATS)
@pytest.mark.parametrize("compression", [BloscCompression(), None, BloscCompression("zstd", 2, "shuffle")])
@pytest.mark.parametrize(
    "data",
    [
        np.arange(37 * 5, dtype=np.float32).reshape(37, 5),
        np.array([True, False, True]),
        np.arange(10, dtype=">i4"),
        np.array(2.5),
        np.zeros((0, 3), dtype=np.int16),
        (np.arange(6) * (1 + 2j)).astype(np.complex128),
    ],
    ids=["f4", "bool", "be-i4", "0d", "empty", "c16"],
)
@pytest.mark.parametrize("chunks", ["single", "auto", "small"])
def test_encoded_records_are_what_zarr_python_writes(
    tmp_path: Path, zarr_format: int, compression: BloscCompression | None, data: np.ndarray, chunks: str
) -> None:
    chunk_shape: Any = chunks if chunks != "small" else tuple(4 for _ in data.shape)
    encoded = EncodedArray.encode(data, chunks=chunk_shape, compression=compression, zarr_format=zarr_format)  # type: ignore[arg-type]
    store = new_store(tmp_path)
    root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
    empty = root.create_empty_array(
        "via_zarr", shape=encoded.shape, dtype=encoded.dtype, chunks=encoded.chunks, compression=compression
    )
    if data.size:
        zarr_api.write_values(empty.zarr, data)  # zarr-python encodes and stores
    store.close()
    archive = IndexedTarArchive(tmp_path / "a.itar")
    stored = {key: archive[key] for key in archive.keys() if key.startswith("via_zarr/") and "zarr.json" not in key}
    stored = {key: value for key, value in stored.items() if not key.endswith((".zarray", ".zattrs"))}
    expected = {chunk_key(empty.zarr, coords): record for coords, record in encoded.chunk_records.items()}
    assert stored == expected
    assert encoded.shape == data.shape and encoded.chunks == tuple(empty.chunks)


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_dimension_names_are_written_where_zarr_python_and_xarray_look(tmp_path: Path, zarr_format: int) -> None:
    names = ("time", "point") if zarr_format == 2 else ("time", None)
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    with new_store(tmp_path) as store:
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        created = root.create_array("a", values, attributes={"units": "m"}, dimension_names=names)
        encoded = EncodedArray.encode(values, zarr_format=zarr_format)  # type: ignore[arg-type]
        root.create_encoded_array("b", encoded, dimension_names=names)
        root.create_empty_array("c", shape=(3, 4), dtype="f4", chunks=(3, 4), dimension_names=names)
        assert created.dimension_names == names
        for wrong in (("time",), ("time", 3), "ab"):
            with pytest.raises(ValueError, match="dimension_names must hold"):
                root.create_array("d", values, dimension_names=wrong)  # type: ignore[arg-type]
        if zarr_format == 2:
            with pytest.raises(ValueError, match="a string per dimension"):
                root.create_array("d", values, dimension_names=("time", None))
        store.consolidate()
    archive = IndexedTarArchive(tmp_path / "a.itar")
    if zarr_format == 3:
        # Byte for byte the zarr.json zarr-python writes for the same array.
        from zarr.codecs import BloscCodec

        records: dict[str, Any] = {}
        blosc = BloscCodec(typesize=4, cname="lz4", clevel=5, shuffle="bitshuffle", blocksize=0)  # the default
        zarr.create_array(
            zarr_api.dict_store(records), shape=(3, 4), dtype="float32", chunks=(3, 4), dimension_names=names,
            compressors=blosc, zarr_format=3, attributes={"units": "m"},
        )  # fmt: skip
        assert archive["a/zarr.json"] == zarr_api.record_bytes(records["zarr.json"])
    else:
        # xarray's attribute, as xarray writes it.
        assert json.loads(archive["a/.zattrs"]) == {"units": "m", "_ARRAY_DIMENSIONS": ["time", "point"]}
    root = reopen(tmp_path)
    for name in "abc":
        array = root.array(name)
        assert array.dimension_names == names, name
        document = zarr_api.metadata_document(array.zarr)
        stored = document.get("dimension_names") or document["attributes"]["_ARRAY_DIMENSIONS"]
        assert tuple(stored) == names


def test_encode_resolves_chunks_and_converts_dtype() -> None:
    data = np.zeros((0, 1000, 3))
    assert EncodedArray.encode(data).chunks == (1, 1000, 3)  # zero sizes clamped
    assert EncodedArray.encode(data, chunks=(0, 10, 3)).chunks == (1, 10, 3)
    assert EncodedArray.encode(np.zeros((4096, 4096), np.uint8), chunks="auto", compression=None).chunks == (
        zarr_api.auto_chunks((4096, 4096), np.uint8)
    )
    converted = EncodedArray.encode([1, 2, 3], dtype=np.float32, compression=None)
    assert converted.dtype == np.float32 and converted.chunk_records[(0,)] == np.float32([1, 2, 3]).tobytes()
    assert converted.fill_value == 0 and isinstance(converted.fill_value, np.float32)
    assert EncodedArray.encode(np.array(["ab"], dtype="S2")).fill_value == b""
    assert EncodedArray.encode([True]).fill_value is np.False_


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"zarr_format": 4}, "unsupported zarr format 4"),
        ({"chunks": (2,)}, "don't match"),
        ({"chunks": (2, -1)}, "non-negative"),
        ({"dtype": object}, "unsupported dtype"),
    ],
)
def test_encode_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EncodedArray.encode(np.zeros((3, 3)), **kwargs)


def test_encoding_on_threads_gives_the_same_records() -> None:
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((64, 64)).astype(np.float32) for _ in range(16)]
    serial = [EncodedArray.encode(a, chunks=(16, 64)) for a in arrays]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(lambda a: EncodedArray.encode(a, chunks=(16, 64)), arrays))
    assert [e.chunk_records for e in parallel] == [e.chunk_records for e in serial]


# -- Group: creating -----------------------------------------------------------------------


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_create_and_open_members(tmp_path: Path, zarr_format: int) -> None:
    with new_store(tmp_path) as store:
        root = store.create_root_group({"seq": 1}, zarr_format=zarr_format)  # type: ignore[arg-type]
        assert root.store is store and root.path == "" and root.zarr_format == zarr_format
        cameras = root.create_group("cameras", attributes={"count": 2})
        front = cameras.require_group("front")
        assert cameras.require_group("front") == front
        front.create_bytes_array("0000", b"\xff\xd8jpeg\x00\x00", attributes={"t": 0.1})
        root.create_array("poses", np.eye(4)[None].repeat(3, 0), attributes={"frame": "world"})
        root.create_array("lidar", np.arange(300, dtype=np.float32).reshape(100, 3), chunks=(30, 3))
        with pytest.raises(zarr.errors.ContainsGroupError):
            root.create_group("cameras")
        store.consolidate()
    for consolidated in (True, False):
        root = reopen(tmp_path, consolidated=consolidated)
        assert root.attributes == {"seq": 1}
        assert root.members() == root.keys() == ["cameras", "lidar", "poses"]
        assert [name for name, _ in root.groups()] == ["cameras"]
        assert [(name, type(node).__name__) for name, node in root.items()] == [
            ("cameras", "Group"),
            ("lidar", "Array"),
            ("poses", "Array"),
        ]
        frame = root.array("cameras/front/0000")
        assert frame.read_bytes() == b"\xff\xd8jpeg\x00\x00" and frame.attributes == {"t": 0.1}
        assert root.group("cameras").attributes == {"count": 2}
        assert root.group("cameras").group("front").array("0000").path == "cameras/front/0000"
        assert root.get("nothing") is None and "lidar" in root and "nothing" not in root
        np.testing.assert_array_equal(root.array("lidar").read(), np.arange(300, dtype=np.float32).reshape(100, 3))
        assert root.array("lidar").chunks == (30, 3) and root.array("poses").chunks == (3, 4, 4)


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_missing_or_wrong_kind_members_raise_key_error(tmp_path: Path, zarr_format: int) -> None:
    with new_store(tmp_path) as store:
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        root.create_group("g")
        root.create_array("a", [1, 2])
    root = reopen(tmp_path)
    for call, path in ((root.node, "x"), (root.group, "a"), (root.array, "g"), (root.group, "x"), (root.array, "x")):
        with pytest.raises(KeyError, match=f"'{path}'"):
            call(path)


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_bytes_arrays_layout(tmp_path: Path, zarr_format: int) -> None:
    blob = bytes(range(256)) * 3 + b"\x00\x00"
    with new_store(tmp_path) as store:
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        array = root.create_bytes_array("blob", blob)
        if zarr_format == 2:
            assert array.shape == () and array.dtype == np.dtype(f"S{len(blob)}")
        else:
            assert array.shape == (len(blob),) and array.dtype == np.uint8
        assert array.compression is None
    array = reopen(tmp_path).array("blob")
    record = IndexedTarArchive(tmp_path / "a.itar")[chunk_key(array.zarr, (0,) * len(array.shape))]
    assert record == blob
    assert array.read_bytes() == blob


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_empty_blob_in_v2_is_rejected_and_fine_in_v3(tmp_path: Path, zarr_format: int) -> None:
    with new_store(tmp_path) as store:
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        if zarr_format == 2:
            with pytest.raises(ValueError, match="empty blob"):
                root.create_bytes_array("b", b"")
            return
        root.create_bytes_array("b", b"")
    assert reopen(tmp_path).array("b").read_bytes() == b""


def test_read_bytes_of_a_non_blob_raises_type_error(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        store.create_root_group({}).create_array("a", np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="no binary blob"):
        reopen(tmp_path).array("a").read_bytes()


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_multi_chunk_blobs_are_copied_once(tmp_path: Path, zarr_format: int) -> None:
    blob = bytes(range(200))
    with new_store(tmp_path) as store:
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        root.create_array("b", np.frombuffer(blob, np.uint8), chunks=(64,))
    assert reopen(tmp_path).array("b").read_bytes() == blob


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_create_empty_array_metadata_matches_create_array(tmp_path: Path, zarr_format: int) -> None:
    with new_store(tmp_path) as store:
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        root.create_array("full", np.zeros((10, 4), np.int16), chunks=(5, 4))
        root.create_empty_array("empty", shape=(10, 4), dtype=np.int16, chunks=(5, 4))
        sparse = root.create_empty_array("sparse", shape=(10,), dtype="f8", chunks=(4,), fill_value=np.nan)
        sparse.write(slice(4, 8), np.arange(4.0))
        with pytest.raises(ValueError, match="don't match"):
            root.create_empty_array("bad", shape=(10, 4), dtype="i2", chunks=(5,))
    root = reopen(tmp_path)
    full, empty = root.array("full").zarr, root.array("empty").zarr
    assert zarr_api.metadata_document(full) == zarr_api.metadata_document(empty)
    np.testing.assert_array_equal(root.array("sparse").read(), [np.nan] * 4 + [0, 1, 2, 3] + [np.nan] * 2)
    np.testing.assert_array_equal(root.array("empty").read(), np.zeros((10, 4), np.int16))
    keys = IndexedTarArchive(tmp_path / "a.itar").keys()
    assert [key for key in keys if key.startswith("sparse/") and "z" not in key.rpartition("/")[2]] == [
        "sparse/1" if zarr_format == 2 else "sparse/c/1"
    ]


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_create_encoded_array_validates_before_writing(tmp_path: Path, zarr_format: int) -> None:
    other = 3 if zarr_format == 2 else 2
    store = new_store(tmp_path)
    root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
    good = EncodedArray.encode(np.arange(10), chunks=(5,), zarr_format=zarr_format)  # type: ignore[arg-type]
    if ZARR_MAJOR >= 3:
        of_other_format = EncodedArray.encode(np.arange(10), zarr_format=other)  # type: ignore[arg-type]
    else:  # zarr-python 2 encodes no format 3 records (EncodedArray.encode raises): made up
        of_other_format = dataclasses.replace(good, zarr_format=other)  # type: ignore[arg-type]
    bad_cases = [
        (of_other_format, "zarr format"),
        (EncodedArray(good.shape, good.dtype, (5, 5), None, good.zarr_format, 0, {}), "don't match"),
        (EncodedArray(good.shape, good.dtype, (5,), None, good.zarr_format, 0, {(2,): b"x" * 40}), "outside"),
        (EncodedArray(good.shape, good.dtype, (5,), None, good.zarr_format, 0, {(0,): b"short"}), "bytes"),
    ]
    for encoded, message in bad_cases:
        with pytest.raises(ValueError, match=message):
            root.create_encoded_array("x", encoded)
        assert "x" not in root
    root.create_encoded_array("x", good)
    taken = "y/0" if zarr_format == 2 else "y/c/0"
    store.archive[taken] = b"a chunk record written already"
    with pytest.raises(RecordExistsError) as raised:
        root.create_encoded_array("y", good)
    assert raised.value.key == taken
    store.close()


def test_writes_to_a_store_opened_for_reading_raise_before_writing(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        root = store.create_root_group({})
        root.create_array("a", np.zeros(4), chunks=(2,))
    before = (tmp_path / "a.itar").read_bytes()
    root = reopen(tmp_path)
    for action in (
        lambda: root.create_group("g"),
        lambda: root.create_array("b", [1]),
        lambda: root.create_bytes_array("c", b"x"),
        lambda: root.create_empty_array("d", shape=(1,), dtype="i1", chunks=(1,)),
        lambda: root.create_encoded_array("e", EncodedArray.encode([1])),
        lambda: root.array("a").write(slice(0, 2), [1, 2]),
    ):
        with pytest.raises(ValueError, match="opened for reading"):
            action()
    assert (tmp_path / "a.itar").read_bytes() == before


# -- Array.write ---------------------------------------------------------------------------


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_array_write_completes_partial_chunks_and_is_write_once(tmp_path: Path, zarr_format: int) -> None:
    store = new_store(tmp_path)
    root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
    array = root.create_empty_array("a", shape=(6, 4), dtype="i4", chunks=(3, 4), fill_value=-1)
    array.write((slice(0, 2), Ellipsis), np.ones((2, 4), "i4"))  # partial chunk: rest = fill
    array.write((slice(3, 6),), 0)  # a whole chunk equal to zero is stored too
    with pytest.raises(RecordExistsError):
        array.write((0, 0), 5)
    for selection in ([0, 1], slice(0, 4, 2), np.array([True] * 6), (Ellipsis, [1])):
        with pytest.raises(ValueError, match="basic selections"):
            array.write(selection, 1)
    store.close()
    array = reopen(tmp_path).array("a")
    expected = np.full((6, 4), -1, "i4")
    expected[:2] = 1
    expected[3:] = 0
    np.testing.assert_array_equal(array.read(), expected)
    keys = IndexedTarArchive(tmp_path / "a.itar").keys()
    assert sum(1 for key in keys if key.startswith("a/") and "z" not in key.rpartition("/")[2]) == 2


# -- Array.read ----------------------------------------------------------------------------


def basic_selections(shape: tuple[int, ...]) -> st.SearchStrategy[Any]:
    return hnp.basic_indices(shape, min_dims=0, allow_newaxis=False, allow_ellipsis=True).filter(
        lambda s: all(
            not isinstance(i, slice) or i.step in (None, 1) or i.step > 0 for i in (s if isinstance(s, tuple) else (s,))
        )
    )


@st.composite
def array_cases(draw: st.DrawFn) -> tuple[np.ndarray, Any, int, BloscCompression | None, Any]:
    dtype = draw(st.sampled_from([np.uint8, np.int16, np.int64, np.float32, np.float64, np.bool_, np.complex64]))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=9))
    data = draw(hnp.arrays(dtype, shape, elements=None if dtype is np.bool_ else {"allow_nan": False}))
    chunks = draw(
        st.one_of(
            st.just("single"),
            st.just("auto"),
            st.tuples(*(st.integers(1, 10) for _ in shape)),
        )
    )
    compression = draw(st.sampled_from([None, BloscCompression(), BloscCompression("zstd", 1, "shuffle")]))
    zarr_format = draw(st.sampled_from(zarr_api.WRITABLE_FORMATS))
    selection = draw(basic_selections(shape))
    return data, chunks, zarr_format, compression, selection


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=array_cases())
def test_read_equals_numpy_indexing(tmp_path_factory: pytest.TempPathFactory, case: Any) -> None:
    data, chunks, zarr_format, compression, selection = case
    path = tmp_path_factory.mktemp("prop") / "p.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({}, zarr_format=zarr_format)
        root.create_array("x", data, chunks=chunks, compression=compression)
        store.consolidate()
    array = IndexedTarZarrStore(path).open_root_group().array("x")
    expected = data[selection]
    result = array.read(selection)
    assert not result.flags.writeable
    assert result.shape == np.shape(expected) and result.dtype == data.dtype
    np.testing.assert_array_equal(result, expected)
    out = np.empty(np.shape(expected), dtype=data.dtype)
    assert array.read(selection, out=out) is out
    assert out.flags.writeable
    np.testing.assert_array_equal(out, expected)


def test_read_returns_read_only_arrays_and_views_of_single_uncompressed_chunks(tmp_path: Path) -> None:
    frame = np.arange(480 * 640 * 3, dtype=np.uint8).reshape(480, 640, 3)
    with new_store(tmp_path) as store:
        root = store.create_root_group({})
        root.create_array("frame", frame, compression=None)
        root.create_array("packed", frame, compression=BloscCompression())
    root = reopen(tmp_path)
    view = root.array("frame").read()
    assert not view.flags.writeable and not view.flags.owndata  # a view of the record
    np.testing.assert_array_equal(view, frame)
    copy = root.array("packed").read()
    assert not copy.flags.writeable
    np.testing.assert_array_equal(copy, frame)
    scalar = root.array("frame").read((1, 2, 0))
    assert scalar.shape == () and scalar == frame[1, 2, 0]


def test_read_into_out_keeps_its_type(tmp_path: Path) -> None:
    data = np.arange(100, dtype=np.float32).reshape(10, 10)
    with new_store(tmp_path) as store:
        store.create_root_group({}).create_array("a", data, chunks=(3, 3))
    array = reopen(tmp_path).array("a")
    memmap = np.memmap(tmp_path / "out.bin", dtype=np.float32, mode="w+", shape=(4, 10))
    result = array.read(slice(2, 6), out=memmap)
    assert result is memmap and isinstance(result, np.memmap) and result.flags.writeable
    np.testing.assert_array_equal(np.asarray(memmap), data[2:6])


@pytest.mark.parametrize(
    ("out", "problem"),
    [
        (np.zeros((4, 10), np.float64), "dtype float64"),
        (np.zeros((4, 9), np.float32), "shape"),
        (np.zeros((10, 4), np.float32).T, "C-contiguous"),
        (np.zeros((4, 10), np.float32)[:, :].view(), None),
        ([[0.0] * 10] * 4, "numpy array"),
    ],
)
def test_invalid_out_raises_before_reading(tmp_path: Path, out: Any, problem: str | None) -> None:
    data = np.arange(100, dtype=np.float32).reshape(10, 10)
    with new_store(tmp_path) as store:
        store.create_root_group({}).create_array("a", data, chunks=(3, 3))
    array = reopen(tmp_path).array("a")
    if problem is None:
        assert array.read(slice(2, 6), out=out) is out
        return
    with pytest.raises(ValueError, match=problem):
        array.read(slice(2, 6), out=out)


def test_read_only_out_is_rejected(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        store.create_root_group({}).create_array("a", np.zeros(4, np.int8))
    out = np.zeros(4, np.int8)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="not writeable"):
        reopen(tmp_path).array("a").read(out=out)


@pytest.mark.parametrize("selection", [(slice(None), slice(None), 0), 10, (0, 10), -11, "a"])
def test_invalid_selections_raise_what_zarr_python_raises(tmp_path: Path, selection: Any) -> None:
    with new_store(tmp_path) as store:
        store.create_root_group({}).create_array("a", np.zeros((10, 10)), chunks=(3, 3))
    array = reopen(tmp_path).array("a")
    with pytest.raises(Exception) as ours:
        array.read(selection)
    with pytest.raises(type(ours.value)):
        array.zarr[selection]


async def test_read_async_and_read_bytes_async(tmp_path: Path) -> None:
    import asyncio

    data = np.arange(1000, dtype=np.int32)
    with new_store(tmp_path) as store:
        root = store.create_root_group({})
        root.create_array("a", data, chunks=(100,))
        root.create_bytes_array("b", b"blob")
    root = reopen(tmp_path)
    parts = await asyncio.gather(*(root.array("a").read_async(slice(i, i + 100)) for i in range(0, 1000, 100)))
    np.testing.assert_array_equal(np.concatenate(parts), data)
    out = np.zeros(10, np.int32)
    assert await root.array("a").read_async(slice(5, 15), out=out) is out
    assert await root.array("b").read_bytes_async() == b"blob"


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_array_properties(tmp_path: Path, zarr_format: int) -> None:
    with new_store(tmp_path) as store:
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        root.create_array("a", np.zeros((3, 4), np.float32), compression=BloscCompression("zstd", 7, "shuffle", 0))
    array = reopen(tmp_path).array("a")
    assert array.shape == (3, 4) and array.dtype == np.float32 and isinstance(array.zarr, zarr.Array)
    assert array.compression == BloscCompression("zstd", 7, "shuffle", 0)
    assert array.name == "a" and array.read_only


def test_compression_of_other_codecs_raises(tmp_path: Path) -> None:
    store = zarr_api.memory_store()
    group = zarr_api.open_group(store, "w", zarr_format=2)
    zarr_api.create_array_with(group, "z", shape=(4,), dtype="i4", chunks=(4,), compressor=numcodecs.Zstd())
    array = ZarrStoreAdapter(store).open_root_group(False).array("z")
    with pytest.raises(ValueError, match="other than one Blosc"):
        _ = array.compression


# -- NodeCache -----------------------------------------------------------------------------


def test_node_cache_opens_each_member_once_and_is_shared(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        root = store.create_root_group({})
        sub = root.create_group("sub")
        for i in range(5):
            sub.create_array(f"a{i}", np.arange(i + 1))
    root = reopen(tmp_path, consolidated=False)
    cache = NodeCache(max_size=3)
    cached = root.with_cache(cache)
    assert cached.cache is cache and root.cache is None
    first = cached.array("sub/a1")
    assert cached.array("sub/a1") is first
    assert cached.group("sub").cache is cache
    assert cached.group("sub").array("a1") is first  # the member group shares the cache
    for i in range(5):
        cached.array(f"sub/a{i}")
    assert len(cache) == 3  # bounded
    other_root = ZarrStoreAdapter(zarr.storage.MemoryStore()).create_root_group({})
    with pytest.raises(ValueError, match="another hierarchy"):
        other_root.with_cache(cache)
    # Another opening of the same archive is the same hierarchy.
    again = IndexedTarZarrStore(tmp_path / "a.itar").open_root_group(False).with_cache(cache)
    assert again.array("sub/a0").read()[0] == 0


def test_node_cache_is_thread_safe(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        root = store.create_root_group({})
        for i in range(20):
            root.create_array(f"a{i}", np.full(3, i))
    cached = reopen(tmp_path).with_cache(NodeCache(8))
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(200):
                i = int(rng.integers(20))
                assert cached.array(f"a{i}").read()[0] == i
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_node_cache_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="positive"):
        NodeCache(0)


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_groups_of_adapters(tmp_path: Path, zarr_format: int) -> None:
    store = ZarrStoreAdapter.directory(tmp_path / "d")
    root = store.create_root_group({"a": 1}, zarr_format=zarr_format)  # type: ignore[arg-type]
    root.create_array("x", np.arange(math.prod((3, 3))).reshape(3, 3), chunks=(2, 2))
    root.create_bytes_array("b", b"bytes")
    reread = ZarrStoreAdapter.directory(tmp_path / "d").open_root_group(False)
    np.testing.assert_array_equal(reread.array("x").read((slice(1, 3), 1)), [4, 7])
    assert reread.array("b").read_bytes() == b"bytes"
    assert isinstance(reread.array("x"), Array)


# -- behaviour found while documenting -----------------------------------------------------


def test_arrays_and_cached_groups_pickle(tmp_path: Path) -> None:
    import pickle

    data = np.arange(50, dtype=np.int16)
    with new_store(tmp_path) as store:
        store.create_root_group({}).create_array("a", data, chunks=(7,))
        store.consolidate()
    root = reopen(tmp_path).with_cache(NodeCache(16))
    array = root.array("a")
    array.read()  # the backend's memo and statistics are filled: they must not break pickling
    clone = pickle.loads(pickle.dumps(array))
    np.testing.assert_array_equal(clone.read(np.s_[3:40]), data[3:40])
    group = pickle.loads(pickle.dumps(root))
    assert group.cache is not None and len(group.cache) == 0
    np.testing.assert_array_equal(group.array("a").read(), data)


def test_invalid_selections_name_the_array_and_keep_zarrs_error_class(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        store.create_root_group({}).create_array("a", np.zeros(32), chunks=(8,))
        store.consolidate()
    array = reopen(tmp_path).array("a")
    with pytest.raises(IndexError) as ours:
        array.read(40)
    with pytest.raises(type(ours.value)):
        array.zarr[40]
    assert "'a'" in str(ours.value) and "a.itar" in str(ours.value)
    with pytest.raises(IndexError, match="a.itar"):
        array.read(40, out=np.zeros((), np.float64))


def test_writes_to_read_only_stores_raise_read_only_error(tmp_path: Path) -> None:
    from ncore_like import ReadOnlyError

    with new_store(tmp_path) as store:
        store.create_root_group({}).create_array("a", np.zeros(4), chunks=(2,))
        store.consolidate()
    root = reopen(tmp_path)
    with pytest.raises(ReadOnlyError, match="opened for reading"):
        root.create_group("g")
    with pytest.raises(ReadOnlyError, match="opened for reading"):
        root.array("a").write(slice(0, 2), [1, 2])


def test_a_write_touching_a_written_chunk_changes_nothing(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    array = store.create_root_group({}).create_empty_array("a", shape=(10,), dtype="i2", chunks=(5,))
    array.write(np.s_[2:4], [7, 8])
    with pytest.raises(RecordExistsError) as raised:
        array.write(np.s_[4:6], [1, 1])  # chunk 0 is written, chunk 1 is not
    assert raised.value.key == "a/0"
    store.close()
    keys = IndexedTarArchive(tmp_path / "a.itar").keys()
    assert "a/1" not in keys  # nothing of the rejected write was stored
    np.testing.assert_array_equal(reopen(tmp_path, consolidated=False).array("a").read(), [0, 0, 7, 8, 0] + [0] * 5)


async def test_open_async_keeps_no_second_copy_of_records_in_the_tail(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        store.create_root_group({}).create_array("a", np.zeros(4))
        store.consolidate()
    opened = await IndexedTarZarrStore.open_async(tmp_path / "a.itar")
    assert opened.archive._impl._prefetched == {}  # the consolidated record lies in the tail read
    assert opened.open_root_group().array("a").shape == (4,)
