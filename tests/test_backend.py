"""The fast read backend: equality with zarr-python, the path taken, remote concurrency."""

from __future__ import annotations

import asyncio
import logging
import struct
import tracemalloc
import uuid
import warnings
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
import zarr.storage
from hypothesis import HealthCheck, example, given, settings, strategies as st
from hypothesis.extra import numpy as hnp
from upath import UPath

from ncore_like import Array, BloscCompression, IndexedTarArchive, IndexedTarZarrStore, ZarrStoreAdapter
from ncore_like._lru import LRUCache
from ncore_like.backend import Backend
from tests.support import zarr_api
from tests.support.servers import max_in_flight, start_http
from tests.support.zarr_version import ZARR_MAJOR, zarr3_only


def write(path: Path | UPath, build: Any, zarr_format: int = 2) -> None:
    with IndexedTarZarrStore(path, mode="w") as store:
        build(store.create_root_group({}, zarr_format=zarr_format))
        store.consolidate()


def open_array(path: Path | UPath, name: str, backend: Backend | None = None) -> Array:
    return Array(IndexedTarZarrStore(path).open_root_group().array(name).zarr, backend=backend or Backend())


# -- equality with zarr-python -------------------------------------------------------------


def selections(shape: tuple[int, ...]) -> st.SearchStrategy[Any]:
    basic = hnp.basic_indices(shape, min_dims=0, allow_newaxis=False, allow_ellipsis=True)

    def positive_steps(selection: Any) -> bool:
        items = selection if isinstance(selection, tuple) else (selection,)
        return all(not isinstance(item, slice) or item.step is None or item.step > 0 for item in items)

    strategies = [basic.filter(positive_steps)]
    if shape and all(size > 0 for size in shape):
        # Orthogonal: an increasing integer index list on one axis.
        def orthogonal(draw_axis: int, indices: list[int]) -> tuple[Any, ...]:
            return tuple(sorted(set(indices)) if axis == draw_axis else slice(None) for axis in range(len(shape)))

        axis = st.integers(0, len(shape) - 1)
        strategies.append(
            axis.flatmap(
                lambda a: st.lists(st.integers(0, shape[a] - 1), min_size=1, max_size=5).map(
                    lambda indices: orthogonal(a, indices)
                )
            )
        )
    return st.one_of(*strategies)


@st.composite
def read_cases(draw: st.DrawFn) -> dict[str, Any]:
    dtype = draw(st.sampled_from([np.uint8, np.int16, np.int32, np.float32, np.float64, np.bool_, np.complex64]))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=12))
    chunks = tuple(draw(st.integers(1, max(1, size + 2))) for size in shape)
    data = draw(hnp.arrays(dtype, shape, elements=None if dtype is np.bool_ else {"allow_nan": False}))
    grid = [range(-(-size // chunk)) for size, chunk in zip(shape, chunks, strict=True)]
    coords = [tuple(c) for c in np.ndindex(*[len(g) for g in grid])] if shape else [()]
    stored = draw(st.lists(st.sampled_from(coords), unique=True)) if coords else []
    return {
        "data": data,
        "chunks": chunks,
        "stored": stored,  # chunks not listed are missing: they read as the fill value
        "fill": draw(st.sampled_from([0, 7])),
        "compression": draw(st.sampled_from([None, BloscCompression(), BloscCompression("zstd", 1, "shuffle")])),
        "zarr_format": draw(st.sampled_from(zarr_api.WRITABLE_FORMATS)),
        "selection": draw(selections(shape)),
        "with_out": draw(st.booleans()),
    }


#: A write of part of a complex array's edge chunk (one element of a chunk of 3), in format 2.
COMPLEX_EDGE_CHUNK = {
    "data": np.zeros(1, np.complex64), "chunks": (3,), "stored": [(0,)], "fill": 0, "compression": None,
    "zarr_format": 2, "selection": (0,), "with_out": False,
}  # fmt: skip


def build_sparse(case: dict[str, Any]) -> Any:
    def build(root: Any) -> None:
        data, chunks = case["data"], case["chunks"]
        array = root.create_empty_array(
            "x",
            shape=data.shape,
            dtype=data.dtype,
            chunks=chunks,
            compression=case["compression"],
            fill_value=case["fill"],
        )
        for coords in case["stored"]:
            region = tuple(
                slice(c * n, min((c + 1) * n, s)) for c, n, s in zip(coords, chunks, data.shape, strict=True)
            )
            array.write(region, data[region])

    return build


def check_against_zarr(array: Array, selection: Any, with_out: bool) -> None:
    expected = np.asarray(array.zarr[selection])
    if with_out:
        out = np.full(expected.shape, 1, dtype=array.dtype)
        result = array.read(selection, out=out)
        assert result is out
    else:
        result = array.read(selection)
    assert result.shape == expected.shape and result.dtype == expected.dtype
    np.testing.assert_array_equal(result, expected)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=read_cases())
@example(case=COMPLEX_EDGE_CHUNK)
def test_fast_path_equals_zarr_python(tmp_path_factory: pytest.TempPathFactory, case: dict[str, Any]) -> None:
    path = tmp_path_factory.mktemp("fast") / "a.itar"
    write(path, build_sparse(case), case["zarr_format"])
    backend = Backend(inline_bytes=0)  # exercise the worker threads even for tiny reads
    array = open_array(path, "x", backend)
    check_against_zarr(array, case["selection"], case["with_out"])
    assert set(backend.stats) <= {"fast", "view"}, backend.stats


@pytest.mark.s3
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=read_cases())
@example(case=COMPLEX_EDGE_CHUNK)
def test_fast_path_equals_zarr_python_on_s3(s3_bucket: UPath, case: dict[str, Any]) -> None:
    path = s3_bucket / f"{np.random.default_rng().integers(1 << 30)}.itar"
    write(path, build_sparse(case), case["zarr_format"])
    backend = Backend()
    array = open_array(path, "x", backend)
    check_against_zarr(array, case["selection"], case["with_out"])
    assert set(backend.stats) <= {"fast", "view"}, backend.stats


async def test_read_async_equals_zarr_python(tmp_path: Path) -> None:
    data = np.arange(40 * 30, dtype=np.float32).reshape(40, 30)
    write(tmp_path / "a.itar", lambda root: root.create_array("x", data, chunks=(7, 11)))
    array = open_array(tmp_path / "a.itar", "x")
    selections = [np.s_[...], np.s_[3:17, 5], np.s_[-5:, -20:-3], np.s_[9:9], np.s_[[1, 5, 30], 2:8]]
    results = await asyncio.gather(*(array.read_async(selection) for selection in selections))
    for selection, result in zip(selections, results, strict=True):
        np.testing.assert_array_equal(result, np.asarray(array.zarr[selection]))


async def test_small_local_async_reads_run_on_the_loop_and_large_ones_on_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ncore_like.archive._sources as sources_module
    import ncore_like.backend._backend as backend_module
    from ncore_like._defaults import INLINE_READ_BYTES

    small = np.arange(80 * 256, dtype=np.float32).reshape(80, 256)  # rows of 1 KB, 80 KB in all
    large = np.arange(4 * (INLINE_READ_BYTES + 1), dtype=np.uint8).reshape(4, -1)  # rows over the limit
    write(tmp_path / "a.itar", lambda root: (
        root.create_array("small", small, chunks=(1, 256)), root.create_array("tiles", small, chunks=(8, 32)),
        root.create_array("large", large, chunks=(1, INLINE_READ_BYTES + 1)),
    ))  # fmt: skip
    root = IndexedTarZarrStore(tmp_path / "a.itar").open_root_group()
    handed: list[str] = []
    real = backend_module.run_in_worker

    async def counted(function: Any, *args: Any) -> Any:
        handed.append(getattr(function, "__name__", "?"))
        return await real(function, *args)

    for module in (backend_module, sources_module):  # the backend's hand-offs, and the archive's
        monkeypatch.setattr(module, "run_in_worker", counted)
    array = root.array("small")
    out = np.empty((8, 256), np.float32)
    # A row, rows by index, a window, part of a row, a small region: no worker thread (a
    # hand-off costs more than these reads), the same values as the blocking read.
    for selection in (5, np.int64(-1), [3, 60, 3], np.s_[10:18], np.s_[7, :9], np.s_[2:4, 100:200]):
        np.testing.assert_array_equal(await array.read_async(selection), small[selection])
    assert await array.read_async(np.s_[20:28], out=out) is out
    np.testing.assert_array_equal(out, small[20:28])
    np.testing.assert_array_equal(await root.array("tiles").read_async(np.s_[3:5, 40:50]), small[3:5, 40:50])
    assert handed == []
    # More than INLINE_READ_BYTES: decoded on the worker threads, the loop never blocked.
    np.testing.assert_array_equal(await root.array("large").read_async(2), large[2])
    np.testing.assert_array_equal(await array.read_async(), small)
    assert len(handed) == 2


# -- the path taken ------------------------------------------------------------------------


def test_fast_path_is_taken_and_zarr_codecs_are_not_called(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    write(tmp_path / "a.itar", lambda root: root.create_array("x", data, chunks=(16, 16)))
    backend = Backend()
    array = open_array(tmp_path / "a.itar", "x", backend)

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("zarr-python's chunk reading was used")

    owner, method = zarr_api.chunk_reading()  # zarr-python 3's codec pipeline, or zarr-python 2's
    monkeypatch.setattr(owner, method, forbidden)
    np.testing.assert_array_equal(array.read(), data)
    np.testing.assert_array_equal(array.read((slice(3, 40), 7)), data[3:40, 7])
    assert backend.stats == {"fast": 2}
    with pytest.raises(AssertionError, match="chunk reading was used"):  # zarr-python's own read would use it
        array.zarr[...]


def test_single_raw_chunk_reads_are_views(tmp_path: Path) -> None:
    frame = np.arange(100 * 100, dtype=np.uint16).reshape(100, 100)
    write(tmp_path / "a.itar", lambda root: root.create_array("x", frame, compression=None))
    backend = Backend()
    array = open_array(tmp_path / "a.itar", "x", backend)
    view = array.read()
    base: Any = view
    while isinstance(base, np.ndarray):
        assert not base.flags.owndata
        base = base.base
    assert isinstance(base, bytes)  # the record itself
    np.testing.assert_array_equal(view, frame)
    assert backend.stats == {"view": 1}


def fallback_cases() -> list[tuple[str, Any, str, Any]]:
    data = np.arange(60, dtype=np.int32).reshape(6, 10)

    def v2(**kwargs: Any) -> Any:
        def build(root: Any) -> None:
            array = zarr_api.create_array_with(
                root.zarr, "x", shape=data.shape, chunks=(4, 4), dtype=data.dtype, **kwargs
            )
            array[...] = data

        return build

    return [
        ("other codec", v2(compressor=numcodecs.Zstd()), "codecs other than one Blosc", np.s_[1:5, 2:9]),
        ("filters", v2(filters=[numcodecs.Delta(dtype="i4")], compressor=None), "filters", np.s_[...]),
        ("fortran order", v2(order="F", compressor=None), "Fortran", np.s_[2, :]),
        ("coordinate selection", v2(compressor=None), "coordinate or mask", (np.array([0, 5]), np.array([1, 9]))),
        ("mask selection", v2(compressor=None), "coordinate or mask", data > 30),
    ]


@pytest.mark.parametrize(
    ("name", "build", "reason", "selection"),
    [pytest.param(*case, id=case[0]) for case in fallback_cases()],
)
def test_fallbacks_give_zarr_pythons_result(tmp_path: Path, name: str, build: Any, reason: str, selection: Any) -> None:
    write(tmp_path / "a.itar", build)
    backend = Backend()
    array = open_array(tmp_path / "a.itar", "x", backend)
    # zarr-python 2's [] takes no masks, its .vindex does.
    masked = ZARR_MAJOR < 3 and name == "mask selection"
    expected = array.zarr.vindex[selection] if masked else array.zarr[selection]
    np.testing.assert_array_equal(array.read(selection), np.asarray(expected))
    assert len(backend.stats) == 1
    assert reason in next(iter(backend.stats))


@zarr3_only  # sharding and the transpose codec are zarr format 3's (zarr-python 3's codecs)
def test_fallback_for_v3_sharding_and_transpose(tmp_path: Path) -> None:
    data = np.arange(64, dtype=np.float64).reshape(8, 8)

    def build(root: Any) -> None:
        root.zarr.create_array("sharded", shape=(8, 8), chunks=(2, 2), shards=(4, 4), dtype="f8")[...] = data
        root.zarr.create_array(
            "t", shape=(8, 8), chunks=(4, 4), dtype="f8", filters=[zarr.codecs.TransposeCodec(order=(1, 0))]
        )[...] = data

    write(tmp_path / "a.itar", build, zarr_format=3)
    for name in ("sharded", "t"):
        backend = Backend()
        array = open_array(tmp_path / "a.itar", name, backend)
        np.testing.assert_array_equal(array.read(np.s_[1:7, 3]), data[1:7, 3])
        assert next(iter(backend.stats)) == "fallback: array-to-array codecs or sharding"


def test_fallback_for_other_stores_and_writers(tmp_path: Path) -> None:
    data = np.arange(10.0)
    memory = ZarrStoreAdapter(zarr.storage.MemoryStore())
    memory.create_root_group({}).create_array("x", data, chunks=(3,))
    backend = Backend()
    array = Array(memory.open_root_group(False).array("x").zarr, backend=backend)
    np.testing.assert_array_equal(array.read(np.s_[2:8]), data[2:8])
    assert backend.stats == {"fallback: store is not an indexed tar archive": 1}
    with IndexedTarZarrStore(tmp_path / "w.itar", mode="w") as store:
        written = store.create_root_group({}).create_array("x", data, chunks=(3,))
        backend = Backend()
        np.testing.assert_array_equal(Array(written.zarr, backend=backend).read(), data)
        assert backend.stats == {"fallback: archive is opened for writing": 1}


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_fallback_for_variable_length_strings(tmp_path: Path, zarr_format: int) -> None:
    strings = np.array(["a", "bb", "ccc"], dtype=object)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write(
            tmp_path / "a.itar",
            lambda root: zarr_api.create_array_with(root.zarr, "s", shape=(3,), dtype=str, chunks=(2,)).__setitem__(
                Ellipsis, strings
            ),
            zarr_format=zarr_format,
        )
        backend = Backend()
        array = open_array(tmp_path / "a.itar", "s", backend)
        assert list(array.read()) == ["a", "bb", "ccc"]
    assert next(iter(backend.stats)).startswith("fallback: ")


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_fallback_is_logged_once_per_array_with_the_array_and_why(
    tmp_path: Path, zarr_format: int, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "a.itar"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")

        def build(root: Any) -> None:
            strings = np.array(["a", "bb", "c"], dtype=object)
            zarr_api.create_array_with(root.zarr, "s", shape=(3,), dtype=str, chunks=(2,))[...] = strings
            root.create_array("fast", np.arange(6.0), chunks=(2,))

        write(path, build, zarr_format=zarr_format)
        caplog.set_level(logging.DEBUG, logger="ncore_like.backend")
        backend = Backend()
        root = IndexedTarZarrStore(path).open_root_group(backend=backend)
        array = root.array("s")
        for _ in range(3):
            assert list(array.read()) == ["a", "bb", "c"]
        np.testing.assert_array_equal(root.array("fast").read(np.s_[1:5]), np.arange(1.0, 5.0))
        assert list(open_array(path, "s", backend).read()) == ["a", "bb", "c"]  # zarr-python's node alone
    reasons = tuple(path.removeprefix("fallback: ") for path in backend.stats if path.startswith("fallback: "))
    records = [record for record in caplog.records if record.name == "ncore_like.backend.fallback"]
    # Once per array (the typed one, and the one over zarr-python's node), not per read.
    assert len(records) == 2, [record.getMessage() for record in records]
    for record in records:
        message = record.getMessage()
        assert record.levelno == logging.DEBUG
        assert str(path) in message and "'/s'" in message and message.endswith(reasons), message


@pytest.mark.parametrize("dtype", ["<f8", "<M8[ns]"], ids=["fast", "fallback"])
def test_unwritten_chunks_of_a_null_fill_value_read_the_same_into_any_out(tmp_path: Path, dtype: str) -> None:
    # zarr format 2's null fill value: what unwritten chunks read as must not depend on what
    # the memory read into held (datetimes fall back to zarr-python, floats take the fast path).
    def build(root: Any) -> None:
        array = zarr_api.create_array(root.zarr, "x", shape=(4,), dtype=dtype, chunks=(2,), fill_value=None)
        array[0:1] = np.array([5], dtype=dtype)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python 3: datetimes are not in the zarr format 3 spec
        write(tmp_path / "a.itar", build)
    array = IndexedTarZarrStore(tmp_path / "a.itar").open_root_group().array("x")  # looked up as a view
    first, second = (array.read(out=np.full(4, value).astype(dtype)) for value in (7, 8))
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(array.read()[:1], np.array([5], dtype=dtype))
    assert any(path.startswith("fallback") for path in array.backend.stats) == (dtype == "<M8[ns]")


# -- bad records ---------------------------------------------------------------------------


@pytest.mark.parametrize("compressed", [True, False])
def test_corrupt_chunk_records_raise_naming_the_key(tmp_path: Path, compressed: bool) -> None:
    data = np.arange(100, dtype=np.int64)
    write(
        tmp_path / "a.itar",
        lambda root: root.create_array("x", data, chunks=(50,), compression=BloscCompression() if compressed else None),
    )
    good = IndexedTarArchive(tmp_path / "a.itar")
    with IndexedTarArchive(tmp_path / "bad.itar", mode="w") as bad:
        for key in good.keys():
            bad[key] = good[key][: len(good[key]) // 2] if key == "x/1" else good[key]
    array = open_array(tmp_path / "bad.itar", "x")
    with pytest.raises(ValueError, match="chunk record 'x/1'"):
        array.read()
    np.testing.assert_array_equal(array.read(np.s_[:50]), data[:50])


# -- decoded chunks kept -------------------------------------------------------------------


def counted_decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys of the chunks the backend decodes, or reads raw into memory, from here on."""
    import ncore_like.backend._backend as backend_module

    keys: list[str] = []
    decode, read_into = backend_module.decode_into, IndexedTarArchive.read_into

    def decoded(*args: Any, **kwargs: Any) -> None:
        keys.append(kwargs["key"])
        decode(*args, **kwargs)

    def read(archive: IndexedTarArchive, key: str, buffer: memoryview) -> None:
        keys.append(key)
        read_into(archive, key, buffer)

    monkeypatch.setattr(backend_module, "decode_into", decoded)
    monkeypatch.setattr(IndexedTarArchive, "read_into", read)
    return keys


@pytest.mark.parametrize("compression", [BloscCompression(), None])
def test_a_loop_over_the_rows_of_one_chunk_decodes_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compression: BloscCompression | None
) -> None:
    poses = np.random.default_rng(3).standard_normal((500, 7))
    # One chunk, the default: a loop over its rows decoded all of it for every row.
    write(tmp_path / "p.itar", lambda root: root.create_array("poses", poses, compression=compression))
    decodes = counted_decodes(monkeypatch)
    array = IndexedTarZarrStore(tmp_path / "p.itar").open_root_group().array("poses")
    out = np.empty(3)
    for t in range(len(poses)):
        row = array[t]
        np.testing.assert_array_equal(row, poses[t])
        assert not row.flags.writeable
        assert array.read((t, slice(2, 5)), out=out) is out
        np.testing.assert_array_equal(out, poses[t, 2:5])
        assert array[t, 6] == poses[t, 6]
    assert len(decodes) == 1
    np.testing.assert_array_equal(array.read(), poses)  # whole: straight into its result
    # Another store of the file keeps its own.
    store = IndexedTarZarrStore(tmp_path / "p.itar")
    other = store.open_root_group().array("poses")
    before = len(decodes)
    np.testing.assert_array_equal(other[-1], poses[-1])
    assert len(decodes) == before + 1
    # What is kept keeps no store, archive or file open once the store is gone.
    import gc
    import weakref

    gone = weakref.ref(store.archive)
    del store, other
    gc.collect()
    assert gone() is None


def test_chunks_kept_decoded_are_bounded_and_damaged_ones_never_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ncore_like.backend._backend as backend_module

    poses = np.random.default_rng(4).standard_normal((500, 7))  # 28 KB chunks
    write(tmp_path / "p.itar", lambda root: (
        root.create_array("a", poses, compression=BloscCompression()),
        root.create_array("b", poses + 1, compression=BloscCompression()),
        root.create_array("many", poses, chunks=(100, 7), compression=BloscCompression()),
    ))  # fmt: skip

    def bound(nbytes: int) -> None:
        cache = LRUCache(nbytes, weight=lambda entry: entry[1].nbytes)  # type: ignore[var-annotated]
        monkeypatch.setattr(backend_module, "_decoded", cache)

    bound(60_000)  # room for two chunks of 28 KB
    decodes = counted_decodes(monkeypatch)
    root = IndexedTarZarrStore(tmp_path / "p.itar").open_root_group()
    a, b, many = root.array("a"), root.array("b"), root.array("many")
    for t in range(20):
        np.testing.assert_array_equal(a[t], poses[t])
        np.testing.assert_array_equal(b[t], poses[t] + 1)
    assert len(decodes) == 2
    np.testing.assert_array_equal(many[5:250, 1], poses[5:250, 1])  # several chunks in one read: none kept
    np.testing.assert_array_equal(a[20], poses[20])
    np.testing.assert_array_equal(b[20], poses[20] + 1)
    assert len(decodes) == 5  # the three of "many"; a and b still kept
    np.testing.assert_array_equal(many[3], poses[3])  # one chunk: kept, the least recently used goes
    np.testing.assert_array_equal(many[4], poses[4])
    np.testing.assert_array_equal(a[21], poses[21])
    assert len(decodes) == 7 and decodes[-1] == "a/0.0"
    bound(50_000)  # a chunk over half of it: not kept
    small = IndexedTarZarrStore(tmp_path / "p.itar").open_root_group().array("a")
    for t in range(3):
        np.testing.assert_array_equal(small[t], poses[t])
    assert len(decodes) == 10
    # A damaged chunk fails every read, and is not kept as if read.
    from ncore_like import ChecksumError

    path = tmp_path / "p.itar"
    record = IndexedTarArchive(path).records["b/0.0"]
    with open(path, "r+b") as file:
        file.seek(record.offset + record.size // 2)
        byte = file.read(1)[0]
        file.seek(record.offset + record.size // 2)
        file.write(bytes([byte ^ 0x10]))
    damaged = IndexedTarZarrStore(path).open_root_group().array("b")
    for _ in range(2):
        with pytest.raises(ChecksumError, match="'b/0.0'"):
            damaged[0]


@pytest.mark.http
def test_a_remote_chunk_kept_decoded_is_not_requested_again(tmp_path: Path) -> None:
    poses = np.random.default_rng(5).standard_normal((65_536, 4))  # 2 MiB of noise: before the tail read
    write(tmp_path / "p.itar", lambda root: root.create_array("poses", poses, compression=BloscCompression()))
    with start_http(tmp_path) as server:
        array = IndexedTarZarrStore(UPath(f"{server.endpoint}/p.itar")).open_root_group().array("poses")
        server.clear_requests()
        for t in range(0, 65_536, 4096):
            np.testing.assert_array_equal(array[t], poses[t])
        gets = [r for r in server.requests() if r["method"] == "GET"]
    assert len(gets) == 1  # the chunk once, then its rows from the decoded chunk


# -- memory --------------------------------------------------------------------------------


def test_reading_into_out_allocates_nothing_proportional_to_the_array(tmp_path: Path) -> None:
    data = np.random.default_rng(2).standard_normal((32, 256, 256)).astype(np.float32)  # 8 MiB, 32 chunks
    write(tmp_path / "a.itar", lambda root: root.create_array("x", data, chunks=(1, 256, 256)))
    array = open_array(tmp_path / "a.itar", "x")
    out = np.empty_like(data)
    array.read(out=out)  # warm up: worker threads and their scratch buffers exist
    tracemalloc.start()
    try:
        array.read(out=out)
        array.read(np.s_[3:30, 10:200, 5], out=np.empty((27, 190), np.float32))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(out, data)
    chunk = 256 * 256 * 4
    assert peak < 8 * chunk < out.nbytes / 3  # a few records in flight, not the array


# -- remote --------------------------------------------------------------------------------


@pytest.mark.http
def test_remote_read_issues_all_chunk_requests_at_once(tmp_path: Path) -> None:
    # 4 MiB of noise: the chunks lie before the 1 MiB tail read.
    data = np.random.default_rng(3).standard_normal((16, 256, 256)).astype(np.float32)
    write(tmp_path / "a.itar", lambda root: root.create_array("x", data, chunks=(1, 256, 256)))
    with start_http(tmp_path, latency=0.2) as server:
        array = open_array(UPath(f"{server.endpoint}/a.itar"), "x")
        server.clear_requests()
        out = np.empty_like(data)
        array.read(out=out)
        logged = server.requests()
    np.testing.assert_array_equal(out, data)
    gets = [r for r in logged if r["method"] == "GET"]
    assert 12 <= len(gets) <= 16 and all(r["range"] for r in gets)
    assert max_in_flight(gets) >= len(gets) - 2  # concurrent, never one request per chunk in sequence


@pytest.mark.http
def test_gathered_remote_read_async_overlap(tmp_path: Path) -> None:
    frames = [np.full((32, 32), i, np.uint8) for i in range(10)]

    def build(root: Any) -> None:
        for i, frame in enumerate(frames):
            root.create_array(f"f{i}", frame, compression=BloscCompression())

    write(tmp_path / "a.itar", build)
    with start_http(tmp_path, latency=0.2) as server:
        group = IndexedTarZarrStore(UPath(f"{server.endpoint}/a.itar")).open_root_group()
        arrays = [group.array(f"f{i}") for i in range(10)]
        server.clear_requests()

        async def main() -> list[np.ndarray]:
            return list(await asyncio.gather(*(array.read_async() for array in arrays)))

        results = asyncio.run(main())
        logged = server.requests()
    for result, frame in zip(results, frames, strict=True):
        np.testing.assert_array_equal(result, frame)
    # Small frames may lie in the tail read (no request at all); the rest overlap.
    gets = [r for r in logged if r["method"] == "GET"]
    assert len(gets) <= 10 and (not gets or max_in_flight(gets) >= len(gets) - 1)


@pytest.mark.http
def test_remote_reads_keep_to_the_byte_budget(tmp_path: Path) -> None:
    data = np.random.default_rng(4).standard_normal((8, 256, 256)).astype(np.float32)
    write(tmp_path / "a.itar", lambda root: root.create_array("x", data, chunks=(1, 256, 256), compression=None))
    chunk = 256 * 256 * 4
    with start_http(tmp_path, latency=0.1) as server:
        store = IndexedTarZarrStore(UPath(f"{server.endpoint}/a.itar"), index_tail_read_size=None)
        array = Array(store.open_root_group().array("x").zarr, backend=Backend(max_bytes_in_flight=2 * chunk))
        server.clear_requests()
        np.testing.assert_array_equal(array.read(), data)
        logged = [r for r in server.requests() if r["method"] == "GET"]
    assert len(logged) == 8
    assert max_in_flight(logged) == 2  # two records' worth at a time, not all eight


def test_backend_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="max_bytes_in_flight"):
        Backend(max_bytes_in_flight=0)


async def test_gathered_fallback_reads_do_not_starve_the_worker_pool(tmp_path: Path) -> None:
    # A fallback read runs zarr-python, whose record reads use the worker pool; if fallback
    # reads themselves occupied the pool, a few of them at once would wait forever.
    from ncore_like import set_worker_threads

    data = np.random.default_rng(5).standard_normal((4, 256, 256))
    write(
        tmp_path / "a.itar",
        lambda root: zarr_api.create_array_with(
            root.zarr, "z", shape=data.shape, chunks=(1, 256, 256), dtype="f8", compressor=numcodecs.Zstd(level=1)
        ).__setitem__(Ellipsis, data),
    )
    set_worker_threads(1)
    try:
        arrays = [open_array(tmp_path / "a.itar", "z") for _ in range(4)]
        results = await asyncio.wait_for(asyncio.gather(*(array.read_async() for array in arrays)), timeout=60)
    finally:
        set_worker_threads(None)
    for result in results:
        np.testing.assert_array_equal(result, data)


# -- corrupt chunk records -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (b"certainly not blosc", "decompresses to 0 bytes, expected 16"),
        (numcodecs.blosc.compress(np.zeros(3, np.float32).tobytes(), b"lz4", 5, 1), "decompresses to 12 bytes"),
    ],
)
def test_corrupt_compressed_chunks_raise_a_format_error_naming_archive_and_key(
    tmp_path: Path, record: bytes, message: str
) -> None:
    from ncore_like import ArchiveFormatError, EncodedArray

    encoded = EncodedArray.encode(np.arange(8, dtype=np.float32), chunks=(4,), compression=BloscCompression())
    encoded.chunk_records[(1,)] = record  # the second chunk is damaged, the first is fine
    write(tmp_path / "c.itar", lambda root: root.create_encoded_array("x", encoded))
    array = open_array(tmp_path / "c.itar", "x")
    np.testing.assert_array_equal(array.read(slice(0, 4)), np.arange(4, dtype=np.float32))
    with pytest.raises(ArchiveFormatError, match=message) as raised:
        array.read()
    assert raised.value.key == "x/1" and raised.value.archive is not None
    assert raised.value.archive.endswith("c.itar") and str(raised.value).startswith(raised.value.archive)
    assert isinstance(raised.value, ValueError)


# -- plans made from the chunk layout --------------------------------------------------------


@st.composite
def basic_cases(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], Any]:
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.integers(1, 9)) for _ in range(ndim))
    chunks = tuple(draw(st.integers(1, size + 1)) for size in shape)
    items: list[Any] = []
    for size in shape:
        if draw(st.booleans()):
            items.append(draw(st.integers(-size, size - 1)))
        else:
            start = draw(st.none() | st.integers(-size - 2, size + 2))
            stop = draw(st.none() | st.integers(-size - 2, size + 2))
            items.append(slice(start, stop, draw(st.sampled_from([None, 1]))))
    if items and draw(st.booleans()):  # drop trailing items, or put an Ellipsis somewhere
        cut = draw(st.integers(0, len(items)))
        items = items[:cut] if draw(st.booleans()) else [*items[:cut], Ellipsis, *items[cut + 1 :]]
    selection: Any = tuple(items) if len(items) != 1 or draw(st.booleans()) else items[0]
    return shape, chunks, selection


@pytest.mark.parametrize("zarr_format", [2, 3])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=basic_cases())
def test_plans_from_the_layout_match_zarr_pythons_indexer(
    tmp_path: Path, zarr_format: int, case: tuple[tuple[int, ...], tuple[int, ...], Any]
) -> None:
    from ncore_like.backend._plan import chunk_layout, plan_basic, plan_with_zarr

    shape, chunks, selection = case
    path = tmp_path / f"p{zarr_format}-{uuid.uuid4().hex}.itar"
    values = np.arange(int(np.prod(shape)), dtype=np.int16).reshape(shape)
    write(path, lambda root: root.create_array("x", values, chunks=chunks, compression=None), zarr_format)
    array = IndexedTarZarrStore(path).open_root_group().array("x")
    layout = chunk_layout(array)
    assert not isinstance(layout, str) and array.view is not None
    # The layout from the metadata view is the one from zarr-python's metadata.
    from_zarr = chunk_layout(Array(array.zarr))
    assert not isinstance(from_zarr, str)
    for field in ("archive", "stored_dtype", "chunk_shape", "compressed", "shape", "dtype"):
        assert getattr(layout, field) == getattr(from_zarr, field), field
    assert np.array_equal(np.asarray(layout.fill_value), np.asarray(from_zarr.fill_value), equal_nan=True)
    corner = tuple(max(0, -(-size // chunk) - 1) for size, chunk in zip(shape, chunks, strict=True))
    assert layout.chunk_key(corner) == from_zarr.chunk_key(corner)
    ours = plan_basic(layout, selection)
    assert ours is not None, selection
    theirs = plan_with_zarr(array.zarr, layout, selection)
    assert not isinstance(theirs, str)
    assert ours.shape == theirs.shape == values[selection].shape
    if 0 not in ours.shape:  # zarr-python may plan empty reads of chunks; the layout plans none
        # zarr-python's plan marks whole chunks only for selections it calls basic (not a
        # lone int, which it indexes orthogonally): compare all but that flag...
        assert [task._replace(full=False) for task in ours.tasks] == [
            task._replace(full=False) for task in theirs.tasks
        ]
        assert ours.drop_axes == theirs.drop_axes
        # ... and check the flag itself: set exactly when the chunk is taken whole.
        for task in ours.tasks:
            whole = all(
                (item.indices(size) == (0, size, 1)) if isinstance(item, slice) else size == 1
                for item, size in zip(task.chunk_selection, chunks, strict=True)
            )
            assert task.full == whole, task


def test_reading_one_chunk_runs_no_zarr_indexer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    indexing = zarr_api.indexing_module()  # zarr-python 3's zarr.core.indexing, or 2's zarr.indexing
    values = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    write(tmp_path / "r.itar", lambda root: root.create_array("x", values, chunks=(1, 32)))
    array = open_array(tmp_path / "r.itar", "x")
    constructed: list[str] = []
    for name in ("BasicIndexer", "OrthogonalIndexer", "CoordinateIndexer", "MaskIndexer"):
        indexer = getattr(indexing, name)
        original = indexer.__init__

        def counting(self: Any, *args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> None:
            constructed.append(_name)
            _original(self, *args, **kwargs)

        monkeypatch.setattr(indexer, "__init__", counting)
    out = np.empty(32, np.float32)
    for row in (0, 17, -1):
        np.testing.assert_array_equal(array.read(row), values[row])
        np.testing.assert_array_equal(array.read(row, out=out), values[row])
    np.testing.assert_array_equal(array.read((slice(3, 9), slice(None))), values[3:9])
    assert constructed == []
    np.testing.assert_array_equal(array.read((slice(0, 4), [1, 3])), values[0:4][:, [1, 3]])
    assert constructed  # an index list on another axis still goes through zarr-python's indexers


@pytest.mark.parametrize("zarr_format", [2, 3])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_index_lists_on_the_first_axis_read_as_numpy_does(
    tmp_path: Path, zarr_format: int, data: st.DataObject
) -> None:
    shape = data.draw(st.tuples(st.integers(1, 12), st.integers(1, 5), st.integers(1, 4)))
    chunks = tuple(data.draw(st.integers(1, size)) for size in shape)
    rest = data.draw(st.sampled_from([(), (slice(1, None),), (Ellipsis,), (slice(None), slice(0, 2))]))
    if data.draw(st.booleans()):  # rows by index, none included
        rows: Any = np.array(data.draw(st.lists(st.integers(-shape[0], shape[0] - 1), max_size=8)), np.intp)
    else:  # a mask of the first axis, as a[labels == 3]
        rows = np.array(data.draw(st.lists(st.booleans(), min_size=shape[0], max_size=shape[0])), bool)
    values = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    path = tmp_path / f"r{uuid.uuid4().hex}.itar"
    write(path, lambda root: root.create_array("x", values, chunks=chunks), zarr_format)
    backend = Backend(inline_bytes=data.draw(st.sampled_from([0, 1 << 30])))  # worker threads or inline
    array = IndexedTarZarrStore(path).open_root_group(backend=backend).array("x")
    selection = (rows.tolist() if data.draw(st.booleans()) else rows, *rest)
    expected = values[(rows, *rest)]
    np.testing.assert_array_equal(array.read(selection), expected)
    out = np.empty_like(expected)
    assert array.read(selection, out=out) is out
    np.testing.assert_array_equal(out, expected)
    assert set(backend.stats) == {"fast"}


def test_index_lists_run_no_zarr_indexer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    indexing = zarr_api.indexing_module()
    values = np.arange(100 * 8, dtype=np.int32).reshape(100, 8)
    write(tmp_path / "b.itar", lambda root: root.create_array("x", values, chunks=(1, 8)))
    array = open_array(tmp_path / "b.itar", "x")
    constructed: list[str] = []
    for name in ("BasicIndexer", "OrthogonalIndexer", "CoordinateIndexer"):
        indexer = getattr(indexing, name)
        monkeypatch.setattr(indexer, "__init__", lambda self, *a, _n=name, **k: constructed.append(_n))
    batch = np.empty((4, 8), np.int32)
    array.read([42, 7, 99, 7], out=batch)
    np.testing.assert_array_equal(batch, values[[42, 7, 99, 7]])
    assert constructed == []


# -- rows by index: the row reader -----------------------------------------------------------


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("compression", [BloscCompression(), None])
@pytest.mark.parametrize("row_shape", [(), (7,), (3, 5), (5000,)])  # the last one larger than rows read as bytes
def test_rows_read_by_index_match_numpy_including_rows_never_written(
    tmp_path: Path, zarr_format: int, compression: BloscCompression | None, row_shape: tuple[int, ...],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    rows = 9
    expected = np.arange(rows * int(np.prod(row_shape)), dtype=np.float32).reshape((rows, *row_shape)) + 1
    written = [0, 2, 3, 8]  # the other rows are never written: they read as the fill value
    path = tmp_path / "r.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        array = root.create_empty_array(
            "x", shape=expected.shape, dtype=np.float32, chunks=(1, *row_shape), compression=compression,
            fill_value=-1,
        )  # fmt: skip
        for index in written:
            array.write(index, expected[index])
        store.consolidate()
    expected[[index for index in range(rows) if index not in written]] = -1
    array = IndexedTarZarrStore(path).open_root_group().array("x")
    out = np.empty(row_shape, np.float32)
    import ncore_like.backend._backend as backend_module

    def no_plan(*args: Any) -> None:
        raise AssertionError("a row read by index was planned: the row reader was not used")

    monkeypatch.setattr(backend_module, "plan_read", no_plan)
    for index in range(-rows, rows):
        row = array.read(index)
        np.testing.assert_array_equal(row, expected[index])
        assert not row.flags.writeable  # read-only, written or not, small or large
        assert array.read(index, out=out) is out
        np.testing.assert_array_equal(out, expected[index])
    assert array.backend.stats["fast"] == 4 * rows and not array.backend.stats.keys() - {"fast"}
    # Batches of rows by index (a DataLoader's) and windows, small together: read row by row,
    # no plan.
    batches = (
        [0, 1, -1, 1], np.array([8, 2, 3], np.uint16), [np.int64(4), np.int8(-9)], np.arange(rows)[::-2],
        slice(2, 6), slice(-3, None), slice(None, 4, 1), slice(7, 100),
    )  # fmt: skip
    for batch in batches if row_shape else ():
        wanted = expected[batch if type(batch) is slice else np.asarray(batch)]
        for selection in (batch, (batch, ...), (batch, *(slice(None) for _ in row_shape))):
            result = array.read(selection)
            np.testing.assert_array_equal(result, wanted)
            assert not result.flags.writeable
            many = np.full_like(wanted, np.nan)
            assert array.read(selection, out=many) is many and many.flags.writeable
            np.testing.assert_array_equal(many, wanted)
            np.testing.assert_array_equal(array[selection], wanted)
    # Part of a row (poses[i, :3], boxes[i, 0]): the row read whole, the part taken from it.
    # Parts of a few rows (poses[t:t + 8, :3], boxes[rows, 0]): the rows read as a batch.
    parts: dict[tuple[int, ...], list[tuple[Any, ...]]] = {
        (7,): [(2, slice(0, 3)), (-1, 4), (8, slice(5, None)), (1, slice(None))],
        (3, 5): [(2, 1), (2, slice(None), 4), (0, slice(1, 3), slice(0, 2)), (-4, 2, 3), (5, ..., 1)],
        (5000,): [(3, slice(10, 4000)), (1, 4999), (-2, slice(-3, None))],
    }
    parts[(7,)] += [([0, 3, -1], slice(0, 3)), (slice(2, 6), 4), (np.array([8, 1], np.int32), slice(5, None))]
    parts[(3, 5)] += [(slice(1, 4), 1), ([2, 2], slice(None), 4), (np.arange(3), slice(1, 3), slice(0, 2))]
    parts[(3, 5)] += [(slice(0, 9), ..., 1)]
    parts[(5000,)] += [([3, np.int16(1)], slice(10, 4000)), (slice(-2, None), 4999)]
    for selection in parts.get(row_shape, ()):
        wanted = expected[selection]
        for result in (array.read(selection), array[selection]):
            np.testing.assert_array_equal(result, wanted)
            assert type(result) is np.ndarray and result.shape == wanted.shape and not result.flags.writeable
        many = np.full_like(wanted, np.nan)
        assert array.read(selection, out=many) is many
        np.testing.assert_array_equal(many, wanted)
    monkeypatch.undo()  # out of bounds: the general path raises zarr-python's error
    for index in (rows, -rows - 1):
        with pytest.raises(IndexError):
            array.read(index)
    for selection in ((0, *row_shape), (rows, *(0 for _ in row_shape))) if row_shape else ():
        with pytest.raises(IndexError):
            array.read(selection)
    for batch in ([0, rows], [-rows - 1, 2]):
        with pytest.raises(IndexError):
            array.read(batch)
    mask = [index % 3 == 0 for index in range(rows)]  # a list of bools is a mask, not rows 0 and 1
    np.testing.assert_array_equal(array.read(mask), expected[mask])
    np.testing.assert_array_equal(array.read(np.array(mask)), expected[mask])


def row_chunked(tmp_path: Path, rows: int = 64, width: int = 32, **options: Any) -> tuple[Array, np.ndarray[Any, Any]]:
    """A Blosc array chunked by rows (written unless it is there), its row reader in place
    (one row read), and its values."""
    values = np.arange(rows * width, dtype=np.float32).reshape(rows, width) - 100
    if not (tmp_path / "rows.itar").exists():
        write(tmp_path / "rows.itar", lambda root: root.create_array("x", values, chunks=(1, width)))
    array = IndexedTarZarrStore(tmp_path / "rows.itar", **options).open_root_group().array("x")
    np.testing.assert_array_equal(array.read(0), values[0])
    return array, values


def test_every_integer_form_of_a_row_index_takes_the_row_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    array, values = row_chunked(tmp_path)
    import ncore_like.backend._backend as backend_module

    def no_plan(*args: Any) -> None:
        raise AssertionError("a row read by index was planned: the row reader was not used")

    monkeypatch.setattr(backend_module, "plan_read", no_plan)
    out = np.empty(values.shape[1], np.float32)
    for index in (5, -1, -64, 63):
        forms = [index, np.int64(index), np.int16(index), np.array(index), np.array(index, np.int8), (index,)]
        # numpy reads a[i, :] and a[i, ...] as a[i]: whole rows too
        forms += [(index, slice(None)), (index, ...), (np.int64(index), slice(None)), (np.array(index), ...)]
        forms += [(index, slice(None), ...), (index, ..., slice(None))]
        if index >= 0:
            forms += [np.uint8(index), np.uint32(index), np.uint64(index), np.array(index, np.uint16)]
        for form in forms:
            result = array.read(form)
            np.testing.assert_array_equal(result, values[form])
            assert result.shape == values[form].shape and not result.flags.writeable
            out[...] = np.nan
            assert array.read(form, out=out) is out and out.flags.writeable
            np.testing.assert_array_equal(out, values[form])
            np.testing.assert_array_equal(array[form], values[form])
    # A node's first read (the row reader not known yet) takes them to the row reader too.
    for form in ((3, slice(None)), (np.uint8(3), ...)):
        fresh = IndexedTarZarrStore(tmp_path / "rows.itar").open_root_group().array("x")
        np.testing.assert_array_equal(fresh.read(form), values[3])


def test_row_selections_numpy_rejects_or_reads_otherwise_are_not_taken_for_rows(tmp_path: Path) -> None:
    array, values = row_chunked(tmp_path)
    for selection in ((5, slice(None), slice(None)), (5, ..., ...), (5, ..., slice(None), slice(None))):
        with pytest.raises(IndexError):
            values[selection]
        with pytest.raises(IndexError):
            array.read(selection)
        with pytest.raises(IndexError):
            array[selection]
    # Slices that aren't whole, other steps, a column: read as numpy reads them.
    others = ((5, slice(0, 7)), (5, slice(None, None, 2)), (5, slice(None, None, -1)), (..., 5), (slice(None), 5))
    for selection in others:
        np.testing.assert_array_equal(array[selection], values[selection])
        if selection[1] != slice(None, None, -1):
            np.testing.assert_array_equal(array.read(selection), values[selection])


def test_row_reads_check_out_as_every_read_does(tmp_path: Path) -> None:
    array, values = row_chunked(tmp_path)
    width = values.shape[1]
    read_only = np.empty(width, np.float32)
    read_only.setflags(write=False)
    for out, problem in (
        (np.empty(width, np.float64), r"dtype float64 \(expected float32\)"),
        (np.empty(width + 1, np.float32), r"shape \(33,\) \(expected \(32,\)\)"),
        (np.empty((1, width), np.float32), r"shape \(1, 32\) \(expected \(32,\)\)"),
        (np.empty(2 * width, np.float32)[::2], "not C-contiguous"),
        (read_only, "not writeable"),
        (list(range(width)), "must be a numpy array, got list"),
    ):
        for index in (3, np.int64(3)):
            with pytest.raises(ValueError, match=f"out for array 'x'.*{problem}"):
                array.read(index, out=out)  # type: ignore[arg-type]
    with pytest.raises(IndexError):  # out of bounds: the index is the first error, as for other reads
        array.read(64, out=np.empty(width, np.float64))
    # An ndarray subclass of the right kind is filled and returned itself.
    memmap = np.memmap(tmp_path / "out.bin", dtype=np.float32, mode="w+", shape=(width,))
    assert array.read(7, out=memmap) is memmap
    np.testing.assert_array_equal(np.asarray(memmap), values[7])


def test_backend_stats_count_every_row_read_of_many_threads(tmp_path: Path) -> None:
    import threading

    array, values = row_chunked(tmp_path)
    stats = array.backend.stats
    assert stats == {"fast": 1} and array.backend.stats is stats  # one object, brought up to date
    threads, reads = 4, 300

    def read_rows(seed: int) -> None:
        out = np.empty(values.shape[1], np.float32)
        for index in np.random.default_rng(seed).integers(0, len(values), reads):
            array.read(index, out=out if index % 2 else None)
            array.backend.stats  # noqa: B018  (reading the stats meanwhile loses no read)

    workers = [threading.Thread(target=read_rows, args=(seed,)) for seed in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert stats == {"fast": 1 + threads * reads}
    array.read(slice(0, 3))  # a planned read counts as it did
    assert array.backend.stats == {"fast": 2 + threads * reads}
    stats.clear()  # a caller may reset the counts
    array.read(1)
    array.read(2)
    assert array.backend.stats == {"fast": 2}


#: A whole Blosc record of one row of 4 float32 (numcodecs' own: its header gives its length).
ROW_RECORD = numcodecs.blosc.compress(np.zeros(4, np.float32).tobytes(), b"lz4", 5, 1)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (b"certainly not blosc", "decompresses to 0 bytes, expected 16"),
        (numcodecs.blosc.compress(np.zeros(3, np.float32).tobytes(), b"lz4", 5, 1), "decompresses to 12 bytes"),
        (ROW_RECORD[:-1], f"is truncated: {len(ROW_RECORD) - 1} bytes of the {len(ROW_RECORD)} its Blosc header"),
    ],
)
def test_corrupt_rows_read_by_index_raise_a_format_error_naming_archive_and_key(
    tmp_path: Path, record: bytes, message: str
) -> None:
    from ncore_like import ArchiveFormatError, EncodedArray

    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    encoded = EncodedArray.encode(values, chunks=(1, 4), compression=BloscCompression())
    encoded.chunk_records[(1, 0)] = record  # the second row is damaged, the others are fine
    write(tmp_path / "c.itar", lambda root: root.create_encoded_array("x", encoded))
    array = IndexedTarZarrStore(tmp_path / "c.itar").open_root_group().array("x")
    for index in (0, 2, -1):
        np.testing.assert_array_equal(array.read(index), values[index])
    for read in (lambda: array.read(1), lambda: array.read(np.int64(-2), out=np.empty(4, np.float32))):
        with pytest.raises(ArchiveFormatError, match=message) as raised:
            read()
        assert raised.value.key == "x/1.0" and str(raised.value).startswith(str(raised.value.archive))
        assert raised.value.archive is not None and raised.value.archive.endswith("c.itar")


def test_rows_of_a_closed_store_raise(tmp_path: Path) -> None:
    from ncore_like import ArchiveClosedError

    array, _ = row_chunked(tmp_path, index_tail_read_size=None)  # rows outside the tail: read from the file
    array._store.close()  # type: ignore[union-attr]
    for read in (lambda: array.read(1), lambda: array.read(np.int64(1), out=np.empty(32, np.float32))):
        with pytest.raises(ArchiveClosedError, match=r"rows\.itar: archive is closed"):
            read()


@pytest.mark.parametrize("tail", [None, 1 << 20])  # the row read from the file, or from the tail read
def test_a_damaged_row_read_by_index_raises_a_checksum_error(tmp_path: Path, tail: int | None) -> None:
    from ncore_like import ChecksumError

    _, values = row_chunked(tmp_path)
    offset = IndexedTarArchive(tmp_path / "rows.itar").records["x/5.0"].offset
    with open(tmp_path / "rows.itar", "r+b") as file:  # one bit of row 5's record flipped
        file.seek(offset + 20)
        byte = file.read(1)[0]
        file.seek(offset + 20)
        file.write(bytes([byte ^ 0x10]))
    array, _ = row_chunked(tmp_path, index_tail_read_size=tail)
    out = np.full(values.shape[1], 7.0, np.float32)
    for read in (lambda: array.read(5), lambda: array.read(np.int64(-59), out=out), lambda: array[5]):
        with pytest.raises(ChecksumError, match="'x/5.0'"):
            read()
    assert np.all(out == 7.0)  # the damaged values never reach the caller
    np.testing.assert_array_equal(array.read(4), values[4])


@pytest.mark.parametrize(
    ("dtype", "width"),
    [
        ("f4", 1024),  # a few KB: decompressed into new bytes, then copied into out=
        ("f4", 5000),  # 20 KB, larger than the rows copied: Blosc decompresses into out= itself
        ("<M8[s]", 8),  # datetimes have no buffer format: decompressed into out= too
        (">i2", 16),  # not the machine's byte order
    ],
)
def test_rows_read_by_index_of_every_size_and_dtype_match_numpy(tmp_path: Path, dtype: str, width: int) -> None:
    values = (np.arange(6 * width).reshape(6, width) * 7 % 1000).astype(dtype)
    write(tmp_path / "w.itar", lambda root: root.create_array("x", values, chunks=(1, width)))
    array = open_array(tmp_path / "w.itar", "x")
    out = np.empty(width, values.dtype)
    for index in (0, 3, -1):
        row = array.read(index)
        np.testing.assert_array_equal(row, values[index])
        assert row.dtype == values.dtype and not row.flags.writeable  # a read-only result, as every read's
        assert array.read(np.int64(index), out=out) is out and out.flags.writeable
        np.testing.assert_array_equal(out, values[index])
    assert array.backend.stats == {"fast": 6}  # every read on the fast path


def test_rows_of_a_sparse_array_of_a_billion_rows_read_in_little_memory(tmp_path: Path) -> None:
    # Three rows written of 10**9: the row reader keeps what it found, nothing per row.
    def create(root: Any) -> None:
        array = root.create_empty_array("x", shape=(10**9, 4), dtype=np.float32, chunks=(1, 4), fill_value=-1)
        for index, row in ((5, [1, 2, 3, 4]), (10**9 - 1, [5, 6, 7, 8]), (123456789, [0, 0, 0, 9])):
            array.write(index, np.array(row, np.float32))

    write(tmp_path / "s.itar", create)
    array = open_array(tmp_path / "s.itar", "x")
    tracemalloc.start()
    try:
        rows = [array.read(index) for index in (5, -1, 123456789, 6, 10**9 - 2, 5)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    expected = [[1, 2, 3, 4], [5, 6, 7, 8], [0, 0, 0, 9], [-1] * 4, [-1] * 4, [1, 2, 3, 4]]
    np.testing.assert_array_equal(np.stack(rows), np.array(expected, np.float32))
    assert peak < 1 << 20, peak


@pytest.mark.parametrize("name", ["1", "a12", "12/3", "x0"])
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_rows_of_arrays_named_with_digits_are_their_own(tmp_path: Path, name: str, zarr_format: int) -> None:
    values = np.arange(30 * 3, dtype=np.int16).reshape(30, 3)
    write(tmp_path / "k.itar", lambda root: root.create_array(name, values, chunks=(1, 3)), zarr_format)
    array = IndexedTarZarrStore(tmp_path / "k.itar").open_root_group().array(name)
    for index in range(30):
        np.testing.assert_array_equal(array.read(index), values[index])


@pytest.mark.parametrize(
    "compression",
    [BloscCompression(), BloscCompression("zstd", 3, "shuffle", blocksize=1024), BloscCompression("blosclz", 0)],
    ids=["one block", "four blocks", "stored"],  # python-blosc decodes one block, numcodecs more
)
def test_blosc_rows_read_by_index_match_numpy_however_they_are_blocked(
    tmp_path: Path, compression: BloscCompression
) -> None:
    rng = np.random.default_rng(3)
    values = rng.standard_normal((40, 1000)).astype(np.float32)
    values[:, ::3] = 0
    write(tmp_path / "b.itar", lambda root: root.create_array("x", values, chunks=(1, 1000), compression=compression))
    array = open_array(tmp_path / "b.itar", "x")
    out = np.empty(1000, np.float32)
    for index in (0, 17, -1):
        np.testing.assert_array_equal(array.read(index), values[index])
        assert array.read(np.uint16(index % 40), out=out) is out
        np.testing.assert_array_equal(out, values[index])
    assert array.backend.stats == {"fast": 6}


@pytest.mark.parametrize("compression", [BloscCompression(), BloscCompression("zstd", 3, blocksize=1024)])
def test_a_row_whose_blosc_blocks_are_garbled_raises_a_format_error(
    tmp_path: Path, compression: BloscCompression
) -> None:
    from ncore_like import ArchiveFormatError, EncodedArray

    values = np.repeat(np.arange(3, dtype=np.float32), 1000).reshape(3, 1000)
    encoded = EncodedArray.encode(values, chunks=(1, 1000), compression=compression)
    whole = encoded.chunk_records[(1, 0)]
    start = 16 + 4 * (-(-4000 // struct.unpack_from("<I", whole, 8)[0]))  # header, block starts
    encoded.chunk_records[(1, 0)] = whole[:start] + bytes(byte ^ 0xA5 for byte in whole[start:])
    write(tmp_path / "g.itar", lambda root: root.create_encoded_array("x", encoded))
    array = open_array(tmp_path / "g.itar", "x")
    np.testing.assert_array_equal(array.read(2), values[2])
    out = np.full(1000, 7.0, np.float32)
    for into in (None, out):
        with pytest.raises(ArchiveFormatError, match="'x/1.0' can't be decompressed"):
            array.read(1, out=into)


@pytest.mark.parametrize("width", [4, 5000])  # decompressed into new bytes, or into out= itself
def test_corrupt_rows_of_every_size_raise_a_format_error(tmp_path: Path, width: int) -> None:
    from ncore_like import ArchiveFormatError, EncodedArray

    values = np.arange(3 * width, dtype=np.float32).reshape(3, width)
    encoded = EncodedArray.encode(values, chunks=(1, width), compression=BloscCompression())
    whole = encoded.chunk_records[(1, 0)]
    for record, message in [
        (whole[:-1], f"is truncated: {len(whole) - 1} bytes of the {len(whole)} its Blosc header gives"),
        (whole[:10], "is no Blosc stream: 10 bytes, shorter than a Blosc header"),
        (whole + b"\0", f"decompresses to|{len(whole) + 1}"),  # numcodecs' own checks say what
    ]:
        encoded.chunk_records[(1, 0)] = record
        (tmp_path / "c.itar").unlink(missing_ok=True)
        write(tmp_path / "c.itar", lambda root: root.create_encoded_array("x", encoded))
        array = IndexedTarZarrStore(tmp_path / "c.itar").open_root_group().array("x")
        np.testing.assert_array_equal(array.read(0), values[0])
        out = np.full(width, 7.0, np.float32)
        if record == whole + b"\0":  # trailing bytes: Blosc reads what its header gives
            np.testing.assert_array_equal(array.read(1), values[1])
            continue
        for into in (None, out):
            with pytest.raises(ArchiveFormatError, match=message) as raised:
                array.read(1, out=into)
            assert raised.value.key == "x/1.0" and str(raised.value).startswith(str(raised.value.archive))
        assert np.all(out == 7.0)


def test_a_raw_row_of_the_wrong_size_raises_a_format_error(tmp_path: Path) -> None:
    from ncore_like import ArchiveFormatError

    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    write(tmp_path / "good.itar", lambda root: root.create_array("x", values, chunks=(1, 4), compression=None))
    # Writers refuse such a record: the archive is copied with row 1 cut to three values.
    with IndexedTarArchive(tmp_path / "good.itar") as good, IndexedTarArchive(tmp_path / "c.itar", "w") as damaged:
        for key in good.keys():
            damaged[key] = good[key][:12] if key == "x/1.0" else good[key]
    array = IndexedTarZarrStore(tmp_path / "c.itar").open_root_group().array("x")
    row = array.read(2)
    np.testing.assert_array_equal(row, values[2])
    assert not row.flags.writeable
    with pytest.raises(ArchiveFormatError, match="chunk record 'x/1.0' has 12 bytes, expected 16") as raised:
        array.read(1)
    assert str(raised.value).startswith(str(raised.value.archive))
    with pytest.raises(ValueError, match="'x/1.0' has 12 bytes, buffer 16"):
        array.read(1, out=np.empty(4, np.float32))


def test_a_timeout_raised_by_a_signal_handler_during_a_read_comes_through_as_it_is(tmp_path: Path) -> None:
    """The classic timeout: a SIGALRM handler raising TimeoutError while a chunk is decoded.
    It was caught with the codec's errors and reported as a record that "can't be
    decompressed" (the archive blamed, the caller's TimeoutError lost)."""
    import signal

    from ncore_like import ArchiveFormatError

    values = np.random.default_rng(0).random((4, 1024, 1024)).astype(np.float32)  # 4 MB chunks: ms to decode
    path = tmp_path / "a.itar"
    with IndexedTarZarrStore(path, mode="w", durable=False) as store:
        store.create_root_group({}).create_array("v", values, chunks=(1, 1024, 1024), compression=BloscCompression())
        store.consolidate()
    array = IndexedTarZarrStore(path).open_root_group().array("v")

    def alarm(signum: int, frame: object) -> None:
        raise TimeoutError("read took too long")

    previous = signal.signal(signal.SIGALRM, alarm)
    outcomes: dict[str, int] = {}
    try:
        for index in range(200):
            result = None
            try:  # the alarm may also go off just before or after the read: caught all the same
                try:
                    signal.setitimer(signal.ITIMER_REAL, 0.0002 + 0.00001 * index)
                    result = array.read(index % 4)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                outcome = "read"
            except TimeoutError:
                outcome = "timeout"
            except ArchiveFormatError as error:  # the archive is sound: a wrong verdict
                outcome = f"blamed the archive: {error}"
            if result is not None:
                np.testing.assert_array_equal(result, values[index % 4])
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert set(outcomes) <= {"read", "timeout"}, outcomes
    assert outcomes.get("timeout", 0) > 0, outcomes  # the alarm did land during reads
