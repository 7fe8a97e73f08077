"""``ncore_like.pack``: the packing engine as a library function (the command line's
``pack`` is a face over it). zarr-python writes the sources; its values are the oracle."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import ncore_like
from ncore_like import ArchiveExistsError, BloscCompression, IndexedTarArchive, IndexedTarZarrStore, Store
from ncore_like._pack import _engine as engine
from tests.support import zarr_api
from tests.support.zarr_version import zarr3_only

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


# -- copying a zarr directory: files read in batches, records written in batches ----------------

ROWS = np.arange(300 * 64, dtype=np.float32).reshape(300, 64)
BIG = np.random.default_rng(0).integers(0, 255, size=1_500_000, dtype=np.uint8)


def write_many_chunks(directory: Path, zarr_format: int = 2) -> Path:
    """A zarr directory as zarr-python writes it: 300 small chunk files and one chunk larger
    than a batch of reads (1 MB)."""
    root = zarr_api.open_group(zarr_api.directory_store(directory), "w", zarr_format=zarr_format)
    rows = zarr_api.create_array(root, "rows", shape=ROWS.shape, dtype="float32", chunks=(1, 64))
    zarr_api.write_values(rows, ROWS)
    big = zarr_api.create_array(root, "big", shape=BIG.shape, dtype="uint8", chunks=BIG.shape, compressor=None)
    zarr_api.write_values(big, BIG)
    return directory


def source_files(directory: Path) -> dict[str, bytes]:
    """Every file of a zarr directory by key (consolidated metadata left out: pack makes its own)."""
    files = {path.relative_to(directory).as_posix(): path for path in directory.rglob("*") if path.is_file()}
    return {key: path.read_bytes() for key, path in files.items() if not Store.is_consolidated_metadata_key(key)}


@pytest.mark.parametrize(
    ("zarr_format", "batch_files", "stat_chunk"),
    [
        (2, None, None),
        (2, 7, 5),
        pytest.param(3, None, None, marks=zarr3_only),
        pytest.param(3, 7, 5, marks=zarr3_only),
    ],
)
def test_every_file_of_a_directory_is_copied_byte_for_byte_in_key_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zarr_format: int, batch_files: int | None, stat_chunk: int | None
) -> None:
    if batch_files is not None:  # many batch and stat boundaries, one inside every array
        monkeypatch.setattr(engine, "_BATCH_FILES", batch_files)
    if stat_chunk is not None:
        monkeypatch.setattr(engine, "_STAT_CHUNK", stat_chunk)
    source = write_many_chunks(tmp_path / "scene.zarr", zarr_format)
    files = source_files(source)
    seen: list[int] = []
    # One thread with small batches: its stat and read tasks never wait for each other.
    workers = 1 if batch_files is not None else None
    result = ncore_like.pack(
        source, tmp_path / "scene.itar", workers=workers, progress=lambda _, advance, total: seen.append(advance)
    )
    assert result.verbatim and result.zarr_format == zarr_format
    assert sum(seen) == len(files)
    with IndexedTarZarrStore(tmp_path / "scene.itar") as store:
        archive = store.archive
        assert {key: archive[key] for key in archive.keys() if key in files} == files
        assert set(files) <= set(archive.keys())
        # Chunks in key order, whatever thread read them first.
        chunks = [key for key in files if key.rpartition("/")[2][0].isdigit()]
        assert sorted(chunks, key=lambda key: archive.records[key].offset) == sorted(chunks)
        root = store.open_root_group()
        np.testing.assert_array_equal(root.array("rows").read(), ROWS)
        np.testing.assert_array_equal(root.array("big").read(), BIG)

    # That archive as the source: its records read as spans, written in batches.
    copied: list[int] = []
    ncore_like.pack(tmp_path / "scene.itar", tmp_path / "again.itar", progress=lambda _, n, total: copied.append(n))
    with IndexedTarArchive(tmp_path / "scene.itar") as first, IndexedTarArchive(tmp_path / "again.itar") as again:
        assert set(again.keys()) == set(first.keys())
        assert all(again[key] == first[key] for key in first.keys() if key in files)
        assert sum(copied) == sum(len(data) for data in files.values())


@pytest.mark.parametrize("change", ["removed", "now a folder"])
def test_a_file_that_fails_to_read_mid_batch_is_named_and_nothing_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], change: str
) -> None:
    from ncore_like.cli import main

    source = write_many_chunks(tmp_path / "scene.zarr")
    broken = source / "rows" / "157.0"
    listed = engine._files

    def listing_then_change(folder: Path) -> Iterator[str]:
        keys = list(listed(folder))  # the file is listed, then changes before it is read
        broken.unlink()
        if change == "now a folder":
            broken.mkdir()
        return iter(keys)

    monkeypatch.setattr(engine, "_files", listing_then_change)
    dest = tmp_path / "scene.itar"
    with pytest.raises(OSError, match=re.escape(str(broken))):
        ncore_like.pack(source, dest)
    assert not list(tmp_path.glob("scene.itar*"))  # neither the archive nor a partial file
    if change == "removed":
        broken.write_bytes(b"")  # listed again and removed again by the command
    else:
        broken.rmdir()
    assert main(["pack", "-q", str(source), str(dest)]) == 1
    err = capsys.readouterr().err
    assert str(broken) in err and "Traceback" not in err
    assert not list(tmp_path.glob("scene.itar*"))


def test_a_file_is_read_whole_whatever_size_was_listed(tmp_path: Path) -> None:
    path = tmp_path / "chunk"
    for data in (b"", b"x", bytes(range(256)) * 5000):
        path.write_bytes(data)
        for listed in {0, 1, len(data) - 1, len(data), len(data) + 1, 2 * len(data) + 3} - {-1}:
            assert engine._read_file(str(path), listed) == data, (len(data), listed)


def test_a_source_with_a_key_no_writer_makes_is_refused_naming_the_source(tmp_path: Path) -> None:
    """A crafted archive's ``../evil``: the error names the source (not the destination the
    writer would have refused it for), and nothing is left at the destination."""
    from ncore_like.errors import InvalidKeyError
    from tests.support.archives import rewrite_index

    source = tmp_path / "dotdot.itar"
    with IndexedTarZarrStore(source, mode="w") as store:
        store.create_root_group({}).create_array("x", np.arange(4))
        store.archive["extra"] = b"1"

    def rename(keys: list[str], offsets: list[int], sizes: list[int]) -> None:
        keys[keys.index("extra")] = "../evil"

    rewrite_index(source, rename)
    with pytest.raises(InvalidKeyError, match=r"dotdot\.itar.*'\.\./evil'") as raised:
        ncore_like.pack(source, tmp_path / "out.itar")
    assert "out.itar" not in str(raised.value)
    assert not list(tmp_path.glob("out.itar*"))
