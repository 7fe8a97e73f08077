"""xarray on archives: ``Dataset.to_zarr(store.zarr)`` into a new archive, ``xr.open_zarr``
of an archive's store without a warning (zarr-python sees the consolidated record in its own
form, never stored twice), and ``xr.open_dataset(..., engine="ncore_like")`` for local paths
and URLs; every dataset read back is compared with the one written."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from upath import UPath

from ncore_like import IndexedTarArchive, IndexedTarZarrStore
from tests.support import zarr_api
from tests.support.fixtures import HttpRoot

xr = pytest.importorskip("xarray", reason="xarray is an optional extra")

FORMATS = [2, 3]


def sample() -> Any:
    times = np.datetime64("2026-01-01T00:00:00", "ms") + np.arange(6) * np.timedelta64(100, "ms")
    return xr.Dataset(
        {
            "speed": (("time",), np.linspace(0, 5, 6), {"units": "m/s"}),
            "points": (("time", "point", "xyz"), np.arange(6 * 4 * 3, dtype=np.float32).reshape(6, 4, 3)),
        },
        coords={"time": times},
        attrs={"sequence": "drive-0001"},
    )


def write_archive(location: Path | UPath, zarr_format: int, *, group: str | None = None) -> Any:
    dataset = sample()
    with IndexedTarZarrStore(location, mode="w") as store:
        if group is not None:
            zarr_api.open_group(store.zarr, "w", zarr_format=zarr_format)  # the root group first
        dataset.to_zarr(store.zarr, group=group, zarr_format=zarr_format, consolidated=False)
        store.consolidate()
    return dataset


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_to_zarr_then_open_zarr_without_a_warning(tmp_path: Path, zarr_format: int) -> None:
    path = tmp_path / "seq.itar"
    dataset = write_archive(path, zarr_format)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "consolidated metadata not found" would fail here
        opened = xr.open_zarr(IndexedTarZarrStore(path).zarr)
    xr.testing.assert_identical(opened.load(), dataset)
    # Served, not stored: the archive holds the compressed record only.
    assert not {".zmetadata"} & set(IndexedTarArchive(path).keys())
    group = zarr.open_group(IndexedTarZarrStore(path).zarr, mode="r")
    assert sorted(group.keys()) == ["points", "speed", "time"]  # the served record is no member


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_open_dataset_with_the_engine(tmp_path: Path, zarr_format: int) -> None:
    path = tmp_path / "seq.itar"
    dataset = write_archive(path, zarr_format)
    with xr.open_dataset(path, engine="ncore_like") as opened:
        xr.testing.assert_identical(opened.load(), dataset)
    with xr.open_dataset(str(path)) as guessed:  # the engine is found by the .itar suffix
        xr.testing.assert_identical(guessed.load(), dataset)
    with xr.open_dataset(path, engine="ncore_like", drop_variables=["points"], chunks={}) as lazy:
        assert set(lazy.data_vars) == {"speed"}
        np.testing.assert_array_equal(lazy["speed"].values, dataset["speed"].values)


def test_open_dataset_of_a_group(tmp_path: Path) -> None:
    path = tmp_path / "seq.itar"
    dataset = write_archive(path, 2, group="sensors/imu")
    with xr.open_dataset(path, engine="ncore_like", group="sensors/imu") as opened:
        xr.testing.assert_identical(opened.load(), dataset)


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_open_dataset_over_http_and_s3(tmp_path: Path, http_root: HttpRoot, s3_bucket: UPath, zarr_format: int) -> None:
    dataset = write_archive(http_root.directory / "seq.itar", zarr_format)
    with xr.open_dataset(f"{http_root.base_url}/seq.itar", engine="ncore_like") as opened:
        xr.testing.assert_identical(opened.load(), dataset)
    write_archive(s3_bucket / "seq.itar", zarr_format)
    url, options = str(s3_bucket / "seq.itar"), dict(s3_bucket.storage_options)
    with xr.open_dataset(url, engine="ncore_like", storage_options=options) as opened:
        xr.testing.assert_identical(opened.load(), dataset)


def test_a_damaged_consolidated_record_still_opens_unconsolidated(tmp_path: Path) -> None:
    written = tmp_path / "written.itar"
    dataset = write_archive(written, 2)
    path = tmp_path / "seq.itar"
    with IndexedTarArchive(written) as source, IndexedTarArchive(path, "w") as damaged:
        for key in source.keys():
            damaged[key] = b"not an xz stream" if key == ".zmetadata.cbor.xz" else source[key]
    with pytest.warns(RuntimeWarning, match="consolidated"):
        opened = xr.open_zarr(IndexedTarZarrStore(path).zarr)
    xr.testing.assert_identical(opened.load(), dataset)


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_an_extracted_hierarchy_opens_consolidated_in_zarr_python(tmp_path: Path, zarr_format: int) -> None:
    from ncore_like.cli import main

    path = tmp_path / "seq.itar"
    dataset = write_archive(path, zarr_format)
    folder = tmp_path / "seq.zarr"
    assert main(["extract", "-q", str(path), "-C", str(folder)]) == 0
    assert not (folder / "zarr.json.cbor.zlib").exists() and not (folder / ".zmetadata.cbor.xz").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opened = xr.open_zarr(folder)
    xr.testing.assert_identical(opened.load(), dataset)


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_the_engine_reads_values_through_the_fast_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zarr_format: int
) -> None:
    from ncore_like import Array

    path = tmp_path / "seq.itar"
    dataset = write_archive(path, zarr_format)
    reads: list[tuple[str, Any]] = []
    original = Array.read

    def spy(self: Array, selection: Any = (), **kwargs: Any) -> Any:
        reads.append((self.path, selection))
        return original(self, selection, **kwargs)

    monkeypatch.setattr(Array, "read", spy)
    with xr.open_dataset(path, engine="ncore_like") as opened:
        assert {name for name, _ in reads} == {"time"}  # opening reads the index coordinate only
        xr.testing.assert_identical(opened.load(), dataset)
        np.testing.assert_array_equal(opened["points"][[0, 4], 1:3, -1].values, dataset["points"][[0, 4], 1:3, -1])
    assert {name for name, _ in reads} == {"points", "speed", "time"}


def masked_sample() -> Any:
    """A dataset with xarray's missing-value conventions at work: a float variable with NaNs
    stored as -9999, integers with a mask value, integers with zeros and no mask (which a fill
    value of 0 taken for a mask would turn into NaN), a time coordinate."""
    times = np.datetime64("2026-01-01T00:00:00", "ms") + np.arange(6) * np.timedelta64(100, "ms")
    dataset = xr.Dataset(
        {
            "temperature": (("time", "x"), np.array([[1.5, np.nan], [0.0, 2.0]] * 3, dtype=np.float32), {"units": "K"}),
            "count": (("time",), np.array([0.0, 3.0, np.nan, 7.0, 0.0, 1.0])),
            "flags": (("time",), np.array([0, 1, 0, 0, 2, 0], dtype=np.int8), {"meaning": "bits"}),
        },
        coords={"time": times, "x": np.array([10.0, 20.0])},
        attrs={"sequence": "drive-0001"},
    )
    dataset["temperature"].encoding = {"_FillValue": np.float32(-9999.0)}
    dataset["count"].encoding = {"dtype": "int16", "_FillValue": -1}
    return dataset


@pytest.mark.parametrize(("source_format", "zarr_format"), [(3, 2), (2, 3), (2, 2), (3, 3)])
def test_pack_carries_dimension_names_and_xarray_attributes_across_formats(
    tmp_path: Path, source_format: int, zarr_format: int
) -> None:
    if max(source_format, zarr_format) > max(zarr_api.WRITABLE_FORMATS):
        pytest.skip(f"zarr format 3 needs zarr-python 3 (zarr {zarr.__version__} is installed)")
    from ncore_like.cli import main

    directory = tmp_path / "source.zarr"
    masked_sample().to_zarr(directory, zarr_format=source_format, consolidated=False)
    written = xr.open_zarr(directory, consolidated=False).load()
    converted = tmp_path / "converted.itar"
    # Re-encoded in every case (another format, or another compression).
    options = ["--zarr-format", str(zarr_format), "--compression", "zstd:1"]
    assert main(["pack", "-q", *options, str(directory), str(converted)]) == 0
    back = tmp_path / "back.itar"
    assert main(["pack", "-q", "--zarr-format", str(source_format), str(converted), str(back)]) == 0
    for path in (converted, back):
        with xr.open_dataset(path, engine="ncore_like") as opened:
            loaded = opened.load()
        xr.testing.assert_identical(loaded, written)
        assert loaded["temperature"].encoding["_FillValue"] == -9999.0
        assert loaded["count"].encoding["_FillValue"] == -1 and loaded["count"].encoding["dtype"] == np.int16
        assert "_FillValue" not in loaded["flags"].encoding  # zeros are values, not missing
    # The names are where zarr-python and xarray look for them in each format.
    node = zarr.open_group(IndexedTarZarrStore(converted).zarr, mode="r")["temperature"]
    document = zarr_api.metadata_document(node)
    if zarr_format == 3:
        assert document["dimension_names"] == ("time", "x") and "_ARRAY_DIMENSIONS" not in document["attributes"]
    else:
        assert document["attributes"]["_ARRAY_DIMENSIONS"] == ["time", "x"]
        assert "_FillValue" not in document["attributes"] and document["fill_value"] == -9999.0


@pytest.mark.skipif(
    zarr_api.ZARR_MAJOR < 3,
    reason="xarray itself fails on zarr-python 2's consolidated stores here (TypeError, also without ncore_like)",
)
def test_the_engine_names_missing_dimension_names(tmp_path: Path) -> None:
    # A format 2 array without xarray's attribute: xarray's own error, not one of the store
    # (it asks the store for NCZarr metadata without a buffer prototype).
    path = tmp_path / "plain.itar"
    with IndexedTarZarrStore(path, "w") as store:
        store.create_root_group().create_array("values", np.arange(4.0))
        store.consolidate()
    with pytest.raises(KeyError, match="_ARRAY_DIMENSIONS"):
        xr.open_dataset(path, engine="ncore_like")


OUTER_SELECTIONS = [
    {"time": [0, 3, 5], "y": [1, 4]},
    {"time": 0, "x": [1, 5]},
    {"time": 2, "y": slice(1, 4), "x": [6, 0, 2]},
    {"time": -1, "y": [0, -1], "x": 3},
    {"time": [5, 0], "y": slice(None, None, 2), "x": [1, 1, 4]},
]


@pytest.mark.parametrize("selection", OUTER_SELECTIONS, ids=lambda selection: ",".join(map(str, selection)))
def test_the_engine_takes_xarrays_outer_and_pointwise_selections(tmp_path: Path, selection: dict[str, Any]) -> None:
    """xarray's outer indexing keeps each index array's axis (``read()`` pairs several
    index arrays, as numpy does): the engine reads one, xarray applies the others; an int
    apart from the array must not move the array's axis first. The values as the Dataset's."""
    rng = np.random.default_rng(3)
    ds = xr.Dataset({"t": (("time", "y", "x"), rng.standard_normal((6, 5, 7)))})
    with IndexedTarZarrStore(tmp_path / "o.itar", mode="w") as store:
        ds.to_zarr(store.zarr, consolidated=False)
        store.consolidate()
    opened = xr.open_dataset(tmp_path / "o.itar", engine="ncore_like")
    np.testing.assert_array_equal(opened.t.isel(**selection).values, ds.t.isel(**selection).values)
    points = {"time": xr.DataArray([0, 5, 2], dims="p"), "y": xr.DataArray([2, 3, 0], dims="p")}
    np.testing.assert_array_equal(opened.t.isel(**points).values, ds.t.isel(**points).values)
