"""``ncore_like.pack``: the packing engine as a library function (the command line's
``pack`` is a face over it). zarr-python writes the sources; its values are the oracle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ncore_like
from ncore_like import ArchiveExistsError, BloscCompression, IndexedTarArchive, IndexedTarZarrStore
from tests.support import zarr_api

VALUES = np.arange(600, dtype=np.float32).reshape(30, 20)


def write_source(directory: Path) -> Path:
    """A zarr directory (format 2, which both zarr-python majors write) as zarr-python writes
    it: a group with attributes, a compressed array."""
    root = zarr_api.open_group(zarr_api.directory_store(directory), "w", zarr_format=2)
    group = zarr_api.create_group(root, "scans", {"rig": "roof"})
    array = zarr_api.create_array(group, "points", shape=VALUES.shape, dtype="float32", chunks=(8, 20))
    zarr_api.write_values(array, VALUES)
    return directory


def test_pack_copies_a_zarr_directory_verbatim(tmp_path: Path) -> None:
    source = write_source(tmp_path / "scene.zarr")
    dest = tmp_path / "scene.itar"
    seen: list[tuple[str, int, int]] = []
    result = ncore_like.pack(source, dest, progress=lambda *call: seen.append(call))
    assert result.verbatim and result.destination == str(dest) and result.zarr_format == 2
    with IndexedTarZarrStore(dest) as store:
        root = store.open_root_group()
        np.testing.assert_array_equal(root.array("scans/points").read(), VALUES)
        assert root.group("scans").attributes["rig"] == "roof"
        assert result.records == len(store.archive.keys()) and result.size == store.archive.file_size
        # Copied records are the source's files byte for byte.
        chunk = "scans/points/1.0"
        assert store.archive[chunk] == (source / chunk).read_bytes()
    # Progress counted every record of the zarr store once.
    assert {step for step, _, _ in seen} == {"copy"}
    assert (
        sum(advance for _, advance, _ in seen)
        == seen[-1][2]
        == len([path for path in source.rglob("*") if path.is_file()])
    )


def test_pack_re_encodes_when_asked(tmp_path: Path) -> None:
    source = write_source(tmp_path / "scene.zarr")
    dest = tmp_path / "scene.itar"
    steps: list[str] = []
    result = ncore_like.pack(source, dest, compression="zstd:3", progress=lambda step, *_: steps.append(step))
    assert not result.verbatim and result.zarr_format == 2 and result.compression == "zstd:3"
    assert set(steps) == {"encode"}
    with IndexedTarZarrStore(dest) as store:
        points = store.open_root_group().array("scans/points")
        assert points.compression == BloscCompression("zstd", 3)
        np.testing.assert_array_equal(points.read(), VALUES)


def test_pack_refuses_an_existing_destination_and_leaves_it(tmp_path: Path) -> None:
    source = write_source(tmp_path / "scene.zarr")
    dest = tmp_path / "scene.itar"
    dest.write_bytes(b"someone's file")
    with pytest.raises(ArchiveExistsError, match="scene.itar: exists; pass overwrite=True"):
        ncore_like.pack(source, dest)
    assert dest.read_bytes() == b"someone's file"
    ncore_like.pack(source, dest, overwrite=True)
    with IndexedTarArchive(dest) as archive:
        assert "scans/points/.zarray" in archive


def test_pack_names_bad_options_and_writes_nothing(tmp_path: Path) -> None:
    source = write_source(tmp_path / "scene.zarr")
    with pytest.raises(ValueError, match="compression 'zip': "):
        ncore_like.pack(source, tmp_path / "a.itar", compression="zip")
    with pytest.raises(ValueError, match="the source itself"):
        ncore_like.pack(tmp_path / "x.itar", tmp_path / "x.itar")
    with pytest.raises(ValueError, match="empty: an empty folder"):
        (tmp_path / "empty").mkdir()
        ncore_like.pack(tmp_path / "empty", tmp_path / "b.itar")
    assert not list(tmp_path.glob("*.itar*"))


def test_pack_many_runs_the_library_on_the_cluster_workers(tmp_path: Path) -> None:
    sources = [str(write_source(tmp_path / f"drive-{number}.zarr")) for number in range(2)]
    out = tmp_path / "out"
    results = ncore_like.pack_many(sources, str(out), cluster_workers=1)
    assert [result.destination for result in results if isinstance(result, ncore_like.PackResult)] == [
        f"{out}/drive-0.itar",
        f"{out}/drive-1.itar",
    ]
    # Packed before and verifying: skipped.
    assert ncore_like.pack_many(sources, str(out), cluster_workers=1) == [None, None]


def test_the_engine_imports_no_command_line() -> None:
    code = "import sys, ncore_like._pack; print(any(name.startswith('ncore_like.cli') for name in sys.modules))"
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "False"


@pytest.mark.parametrize("durable", [True, False])
def test_pack_syncs_only_when_durable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable: bool) -> None:
    import os

    source = write_source(tmp_path / "scene.zarr")
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    ncore_like.pack(source, tmp_path / "scene.itar", durable=durable)
    assert bool(synced) == durable  # the file before its rename, the folder after
    with IndexedTarZarrStore(tmp_path / "scene.itar") as store:
        np.testing.assert_array_equal(store.open_root_group().array("scans/points").read(), VALUES)


@pytest.mark.parametrize("flags", [[], ["--no-durable"]])
def test_the_command_syncs_unless_told_not_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str]
) -> None:
    import os

    from ncore_like.cli import main

    source = write_source(tmp_path / "scene.zarr")
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    assert main(["pack", "-q", *flags, str(source), str(tmp_path / "scene.itar")]) == 0
    assert bool(synced) == (not flags)
    with IndexedTarZarrStore(tmp_path / "scene.itar") as store:
        np.testing.assert_array_equal(store.open_root_group().array("scans/points").read(), VALUES)
