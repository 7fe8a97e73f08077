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
