"""``Array`` as an array-like: numpy, dask and other array libraries take it directly
(``ndim``, ``size``, ``nbytes``, ``len``, ``[...]``, ``numpy.asarray``), reading through the
fast backend; every result is compared with numpy's on the same values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.extra import numpy as hnp

from ncore_like import Array, BloscCompression, IndexedTarZarrStore

VALUES = np.arange(7 * 6 * 5, dtype=np.float32).reshape(7, 6, 5) * 0.5


@pytest.fixture(scope="module")
def arrays(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Array]:
    path = tmp_path_factory.mktemp("protocol") / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({})
        root.create_array("chunked", VALUES, chunks=(2, 4, 5), compression=BloscCompression())
        root.create_array("raw", VALUES[0, 0], compression=None)
        root.create_array("scalar", np.float64(2.5))
        store.consolidate()
    root = IndexedTarZarrStore(path).open_root_group()
    return {name: root.array(name) for name in ("chunked", "raw", "scalar")}


def test_sizes_are_numpys(arrays: dict[str, Array]) -> None:
    for array, expected in (
        (arrays["chunked"], VALUES),
        (arrays["raw"], VALUES[0, 0]),
        (arrays["scalar"], np.array(2.5)),
    ):
        assert (array.ndim, array.size, array.nbytes) == (expected.ndim, expected.size, expected.nbytes)
        assert array.shape == expected.shape and array.dtype == expected.dtype
    assert len(arrays["chunked"]) == 7 and len(arrays["raw"]) == 5
    with pytest.raises(TypeError, match="0-dimensional"):
        len(arrays["scalar"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(selection=hnp.basic_indices(VALUES.shape, allow_newaxis=False, allow_ellipsis=True))
def test_getitem_is_numpys(arrays: dict[str, Array], selection: Any) -> None:
    np.testing.assert_array_equal(arrays["chunked"][selection], VALUES[selection])


def test_numpy_asarray_and_array(arrays: dict[str, Array]) -> None:
    chunked, raw = arrays["chunked"], arrays["raw"]
    np.testing.assert_array_equal(np.asarray(chunked), VALUES)
    assert np.asarray(chunked, dtype=np.float64).dtype == np.float64
    np.testing.assert_array_equal(np.asarray(chunked, dtype=np.float64), VALUES.astype(np.float64))
    assert float(np.asarray(arrays["scalar"])) == 2.5
    # numpy.array copies into memory of its own: writeable, also for a raw record's view.
    copied = np.array(raw)
    assert copied.flags.writeable and copied.tolist() == VALUES[0, 0].tolist()
    copied[0] = -1  # the next read is unaffected
    assert raw[0] == VALUES[0, 0, 0]
    assert np.add(chunked, 1)[1, 2, 3] == VALUES[1, 2, 3] + 1  # ufuncs take it too
    with pytest.raises(ValueError, match="copy=False"):
        np.array(chunked, copy=False)


def test_reads_go_through_the_fast_backend(arrays: dict[str, Array]) -> None:
    array = arrays["chunked"]
    before = sum(array.backend.stats.values())
    np.asarray(array)
    array[1:3, :, 2]
    stats = array.backend.stats
    assert sum(stats.values()) == before + 2 and not any(path.startswith("fallback") for path in stats)


def test_dask_takes_an_array_as_it_is(arrays: dict[str, Array]) -> None:
    da = pytest.importorskip("dask.array", reason="dask is an optional extra")
    array = arrays["chunked"]
    lazy = da.from_array(array, chunks=array.chunks)
    assert lazy.shape == VALUES.shape and lazy.dtype == VALUES.dtype
    np.testing.assert_array_equal(lazy.sum(axis=0).compute(scheduler="threads"), VALUES.sum(axis=0))
    np.testing.assert_array_equal((lazy[2:5, 1] * 2).compute(scheduler="sync"), VALUES[2:5, 1] * 2)


# -- blobs read the same bytes on every store ------------------------------------------------


BLOB = b"\x00jpeg\xff\x00\x00"  # NULs at both ends: fixed-length bytes must keep them


def blob_stores(tmp_path: Path) -> dict[str, Any]:
    import zarr.storage

    from ncore_like import ZarrStoreAdapter

    return {
        "archive": IndexedTarZarrStore(tmp_path / "b.itar", mode="w"),
        "memory": ZarrStoreAdapter(zarr.storage.MemoryStore()),
        "directory": ZarrStoreAdapter.directory(tmp_path / "b.zarr"),
    }


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("kind", ["archive", "memory", "directory"])
def test_blobs_keep_their_trailing_nuls_on_every_store(tmp_path: Path, zarr_format: int, kind: str) -> None:
    store = blob_stores(tmp_path)[kind]
    root = store.create_root_group({}, zarr_format=zarr_format)
    stored = np.array(BLOB, dtype=f"S{len(BLOB)}") if zarr_format == 2 else np.frombuffer(BLOB, np.uint8)
    arrays = [
        root.create_bytes_array("raw", BLOB),
        root.create_array("compressed", stored, compression=BloscCompression()),
    ]
    if kind == "archive":
        store.consolidate()
        store.close()
        reopened = IndexedTarZarrStore(tmp_path / "b.itar").open_root_group()
        arrays = [reopened.array("raw"), reopened.array("compressed")]
    for array in arrays:
        assert array.read_bytes() == BLOB, (kind, array.path)
        assert np.asarray(array).tobytes() == BLOB


# -- a store holds the values as they were when written ---------------------------------------


@pytest.mark.parametrize("kind", ["archive", "memory", "directory"])
def test_stored_values_do_not_follow_later_changes_of_the_callers_arrays(tmp_path: Path, kind: str) -> None:
    """Uncompressed chunks are handed to stores without a copy where the store writes them
    at once; a store that keeps what it is given (zarr-python's ``MemoryStore``) must not
    end up holding the caller's array, which a recorder reuses for the next frame."""
    store = blob_stores(tmp_path)[kind]
    root = store.create_root_group({})
    frame = np.arange(12, dtype="i4")
    rows = np.arange(20, dtype="i4").reshape(4, 5)
    expected = {"frame": frame.copy(), "rows": rows.copy(), "filled": rows.copy(), "by_row": rows.copy()}
    root.create_array("frame", frame, compression=None)  # one chunk
    root.create_array("rows", rows, chunks=(1, 5), compression=None)  # chunks of rows
    filled = root.create_empty_array("filled", shape=(4, 5), dtype="i4", chunks=(2, 5), compression=None)
    filled.write(..., rows)  # whole chunks
    by_row = root.create_empty_array("by_row", shape=(4, 5), dtype="i4", chunks=(1, 5), compression=None)
    for index in range(4):
        by_row.write(index, rows[index])
    frame[:] = -1
    rows[:] = -1
    if kind == "archive":
        store.consolidate()
        store.close()
        root = IndexedTarZarrStore(tmp_path / "b.itar").open_root_group()
    for name, values in expected.items():
        np.testing.assert_array_equal(root.array(name).read(), values, err_msg=f"{kind}: {name}")
