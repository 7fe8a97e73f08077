"""The ``ncore-like`` command line, run in-process with ``main([...])`` on local and S3
archives; outputs are checked against the library's own view of the archive."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import numcodecs
import numpy as np
import pytest
from upath import UPath

from ncore_like import Array, BloscCompression, Group, IndexedTarArchive, IndexedTarZarrStore, Store, ZarrStoreAdapter
from ncore_like.archive import is_node_metadata_key
from ncore_like.backend import is_blob
from ncore_like.cli import main, render_tree
from ncore_like.store import CONSOLIDATED_KEY_V2, CONSOLIDATED_KEY_V3
from tests.support import zarr_api
from tests.support.archives import FOREIGN_MESSAGES, die, foreign_files, rewrite_index
from tests.support.zarr_version import zarr3_only

REPO = Path(__file__).resolve().parent.parent
CORRUPTED_CHUNK = "lidar/points/1.0"
FRAME = b"\xff\xd8 not really a jpeg \xff\xd9"


@pytest.fixture(autouse=True)
def _quiet_zarr_dtype_warnings() -> Iterator[None]:
    # zarr-python warns that fixed-length bytes are not part of zarr format 3.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="zarr")
        warnings.filterwarnings("ignore", message=".*not part of the Zarr format 3.*")
        yield


# -- archives and where they live ---------------------------------------------------------


def build_archive(location: Path | UPath) -> None:
    """A zarr format 2 sequence: groups with attributes, a Blosc array of several chunks, an
    uncompressed array and a blob, consolidated."""
    with IndexedTarZarrStore(location, "w") as store:
        root = store.create_root_group({"sequence": "s-001", "frames": 2})
        lidar = root.create_group("lidar", attributes={"sensor": "top", "rate_hz": 10})
        lidar.create_array(
            "points",
            np.arange(400, dtype=np.float32).reshape(100, 4),
            chunks=(25, 4),
            compression=BloscCompression(),
            attributes={"unit": "m"},
        )
        root.create_array("poses", np.eye(4) * 2.5, compression=None, attributes={"frame": "world"})
        camera = root.create_group("camera")
        camera.create_bytes_array("frame0", FRAME, attributes={"codec": "jpeg"})
        store.consolidate()


@dataclass(frozen=True)
class Site:
    """Where test archives live, and how the command line names them."""

    base: Path | UPath
    options: list[str]
    """``--storage-option`` arguments of the site."""

    def path(self, name: str) -> Path | UPath:
        return self.base / name

    def arg(self, name: str) -> str:
        return str(self.base / name)

    def put(self, name: str, data: bytes) -> None:
        self.path(name).write_bytes(data)


def option_args(storage_options: dict[str, Any]) -> list[str]:
    """``--storage-option`` arguments: strings as they are (not JSON), the rest as JSON."""
    args = []
    for key, value in storage_options.items():
        text = value if isinstance(value, str) else json.dumps(value)
        args += ["--storage-option", f"{key}={text}"]
    return args


@pytest.fixture(params=["local", "s3"])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Site:
    if request.param == "local":
        return Site(tmp_path / "site", [])
    bucket: UPath = request.getfixturevalue("s3_bucket")
    return Site(bucket, option_args(dict(bucket.storage_options)))


@pytest.fixture
def archive(site: Site) -> tuple[Site, str]:
    if isinstance(site.base, Path):
        site.base.mkdir()
    build_archive(site.path("seq.itar"))
    return site, "seq.itar"


@pytest.fixture
def local_archive(tmp_path: Path) -> Path:
    path = tmp_path / "seq.itar"
    build_archive(path)
    return path


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def nodes(group: Group) -> Iterator[Group | Array]:
    """Every node below ``group``, through the library's API."""
    for _, node in group.items():
        yield node
        if isinstance(node, Group):
            yield from nodes(node)


def opened(location: Path | UPath) -> tuple[IndexedTarZarrStore, Group]:
    store = IndexedTarZarrStore(location)
    return store, store.open_root_group(consolidated="auto")


def corrupt_chunk(source: Path, target: Path, key: str = CORRUPTED_CHUNK) -> None:
    """A copy of ``source`` whose chunk record ``key`` is overwritten with garbage."""
    shutil.copyfile(source, target)
    with IndexedTarArchive(source) as archive:
        record = archive.records[key]
    with target.open("r+b") as file:
        file.seek(record.offset)
        file.write(b"\xff" * record.size)


# -- ls, tree, info, cat -------------------------------------------------------------------


def test_ls(archive: tuple[Site, str], capsys: pytest.CaptureFixture[str]) -> None:
    site, name = archive
    with IndexedTarArchive(site.path(name)) as library:
        keys = library.keys()
        records = dict(library.records)

    code, out, _ = cli(capsys, "ls", *site.options, site.arg(name))
    assert code == 0
    assert out.splitlines() == keys

    code, out, _ = cli(capsys, "ls", *site.options, "--long", site.arg(name))
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    assert [(int(offset), int(size), key) for offset, size, key in rows] == [
        (records[key].offset, records[key].size, key) for key in keys
    ]

    code, out, _ = cli(capsys, "ls", *site.options, "--json", site.arg(name))
    assert code == 0
    assert json.loads(out) == [{"key": key, "offset": records[key].offset, "size": records[key].size} for key in keys]


def test_tree(archive: tuple[Site, str], capsys: pytest.CaptureFixture[str]) -> None:
    site, name = archive
    code, out, _ = cli(capsys, "tree", *site.options, site.arg(name))
    assert code == 0
    assert "blosc lz4/5/bitshuffle" in out
    assert "none" in out
    assert f"frame0  blob, {len(FRAME)} bytes" in out
    store, root = opened(site.path(name))
    with store:
        assert out.splitlines() == render_tree(root)  # the command prints what the demo renders
        for node in nodes(root):
            assert node.name in out
        code, out, _ = cli(capsys, "tree", *site.options, "--attributes", site.arg(name))
        assert code == 0
        assert '@ sensor: "top"' in out and '@ unit: "m"' in out and '@ sequence: "s-001"' in out

        code, out, _ = cli(capsys, "tree", *site.options, "--json", "--attributes", site.arg(name))
        assert code == 0
        document = json.loads(out)
        assert document["zarr_format"] == root.zarr_format == 2
        assert document["attributes"] == dict(root.attributes)
        listed = {}

        def collect(entry: dict[str, Any]) -> None:
            listed[entry["path"]] = entry
            for member in entry.get("members", []):
                collect(member)

        collect(document)
        library_nodes = {node.path: node for node in nodes(root)}
        assert set(listed) == {"", *library_nodes}
        records = store.archive.records
        for path, node in library_nodes.items():
            entry = listed[path]
            assert entry["attributes"] == dict(node.attributes)
            if isinstance(node, Group):
                assert entry["type"] == "group"
                continue
            assert entry["type"] == "array"
            assert tuple(entry["shape"]) == node.shape and tuple(entry["chunks"]) == node.chunks
            assert entry["dtype"] == str(node.dtype)
            # Stored size: the chunk records under the array's path, from the index.
            chunk_keys = [
                key for key in store.archive.keys() if key.startswith(f"{path}/") and not is_node_metadata_key(key)
            ]
            assert entry["stored_bytes"] == sum(records[key].size for key in chunk_keys)
            assert entry["chunks_stored"] == len(chunk_keys) == node.zarr.nchunks
            assert entry["nbytes"] == node.dtype.itemsize * int(np.prod(node.shape))
            assert entry["ratio"] == pytest.approx(entry["nbytes"] / entry["stored_bytes"])
            compression = node.compression
            expected = "none" if compression is None else f"blosc {compression.cname}/{compression.clevel}/"
            assert entry["compression"].startswith(expected)
        assert listed["camera/frame0"]["blob"] is True
        frame = root.array("camera/frame0")
        assert listed["camera/frame0"]["blob_size"] == len(frame.read_bytes())
        assert listed["lidar/points"]["blob"] is False


def test_info(archive: tuple[Site, str], capsys: pytest.CaptureFixture[str]) -> None:
    site, name = archive
    code, out, _ = cli(capsys, "info", *site.options, "--json", site.arg(name))
    assert code == 0
    info = json.loads(out)
    store, root = opened(site.path(name))
    with store:
        library = store.archive
        assert library.index_record is not None
        all_nodes = list(nodes(root))
        assert info["format"] == "indexed tar (itar) v1"
        assert info["index_type"] == 1
        assert info["records"] == len(library)
        assert (info["index_offset"], info["index_size"]) == tuple(library.index_record)
        assert info["file_size"] == library.file_size
        assert info["zarr_format"] == root.zarr_format == 2
        assert info["consolidated"] is True
        assert info["consolidated_keys"] == [key for key in library.keys() if Store.is_consolidated_metadata_key(key)]
        assert info["consolidated_keys"] == [CONSOLIDATED_KEY_V2]
        assert info["groups"] == 1 + sum(isinstance(node, Group) for node in all_nodes)
        arrays = [node for node in all_nodes if isinstance(node, Array)]
        blobs = [array for array in arrays if is_blob(array.zarr)]
        assert blobs and info["blobs"] == len(blobs)  # counted apart from the other arrays
        assert info["arrays"] == len(arrays) - len(blobs)

    code, out, _ = cli(capsys, "info", *site.options, site.arg(name))
    assert code == 0
    assert "indexed tar (itar) v1" in out and CONSOLIDATED_KEY_V2 in out


def test_cat(archive: tuple[Site, str], capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    site, name = archive
    with IndexedTarArchive(site.path(name)) as library:
        for key in (CORRUPTED_CHUNK, "camera/frame0/0", ".zattrs"):
            assert main(["cat", *site.options, site.arg(name), key]) == 0
            out, _ = capsysbinary.readouterr()
            assert out == library[key]
    assert main(["cat", *site.options, site.arg(name), "no/such/key"]) == 1
    out, err = capsysbinary.readouterr()
    assert out == b""
    assert b"no/such/key" in err and site.arg(name).encode() in err and b"Traceback" not in err


# -- extract -------------------------------------------------------------------------------


def test_extract(archive: tuple[Site, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    site, name = archive
    target = tmp_path / "out"
    code, _, err = cli(capsys, "extract", *site.options, site.arg(name), "-C", str(target))
    assert code == 0, err
    with IndexedTarArchive(site.path(name)) as library:
        files = sorted(str(path.relative_to(target)) for path in target.rglob("*") if path.is_file())
        # zarr-python's own consolidated metadata replaces the archive's compressed record.
        expected = [key for key in library.keys() if key != CONSOLIDATED_KEY_V2] + [".zmetadata"]
        assert files == sorted(expected)
        for key in library.keys():
            if key != CONSOLIDATED_KEY_V2:
                assert (target / key).read_bytes() == library[key]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # zarr-python opens the folder consolidated, without a warning
        folder = zarr_api.open_consolidated(zarr_api.directory_store(target, read_only=True))
    assert sorted(folder.keys()) == sorted(IndexedTarZarrStore(site.path(name)).open_root_group().members())
    with IndexedTarArchive(site.path(name)) as library:
        some = tmp_path / "some"
        code, _, _ = cli(capsys, "extract", *site.options, site.arg(name), "poses/0.0", ".zgroup", "-C", str(some))
        assert code == 0
        assert sorted(str(path.relative_to(some)) for path in some.rglob("*") if path.is_file()) == [
            ".zgroup",
            "poses/0.0",
        ]
        assert (some / "poses/0.0").read_bytes() == library["poses/0.0"]

    code, _, err = cli(capsys, "extract", *site.options, site.arg(name), "missing", "-C", str(tmp_path / "none"))
    assert code == 1 and "missing" in err


@pytest.mark.parametrize("bad_key", ["../escaped", "/tmp/absolute", "lidar/../../escaped"])
def test_extract_refuses_keys_outside_the_folder(
    local_archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], bad_key: str
) -> None:
    def rename(keys: list[str], offsets: list[int], sizes: list[int]) -> None:
        keys[keys.index("poses/0.0")] = bad_key

    rewrite_index(local_archive, rename)
    target = tmp_path / "deep" / "out"
    code, _, err = cli(capsys, "extract", str(local_archive), "-C", str(target))
    assert code == 1
    assert bad_key in err and "refusing" in err and str(local_archive) in err
    # Nothing was written, inside the folder or outside it.
    assert not any(path.is_file() for path in target.rglob("*"))
    assert not (tmp_path / "deep" / "escaped").exists() and not (tmp_path / "escaped").exists()


def test_extract_refuses_paths_through_symlinks(
    local_archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    target.mkdir()
    elsewhere.mkdir()
    (target / "lidar").symlink_to(elsewhere)
    code, _, err = cli(capsys, "extract", str(local_archive), "-C", str(target))
    assert code == 1 and "symbolic link" in err
    assert not any(elsewhere.iterdir())


# -- pack ----------------------------------------------------------------------------------


def assert_same_hierarchy(source: Group, packed: Group) -> None:
    """Same nodes, attributes and values (blobs compared as bytes, and still blobs)."""
    assert dict(packed.attributes) == dict(source.attributes)
    source_nodes = {node.path: node for node in nodes(source)}
    packed_nodes = {node.path: node for node in nodes(packed)}
    assert set(packed_nodes) == set(source_nodes)
    for path, node in source_nodes.items():
        copy = packed_nodes[path]
        assert type(copy) is type(node), path
        assert dict(copy.attributes) == dict(node.attributes), path
        if not isinstance(node, Array):
            continue
        assert isinstance(copy, Array)
        if node.zarr.ndim == 0 and node.dtype.kind == "S":
            assert copy.read_bytes() == node.read_bytes(), path  # TypeError if no blob any more
            continue
        assert copy.shape == node.shape and copy.chunks == node.chunks, path
        assert np.array_equal(copy.read(), node.read()), path


def test_pack_copies_an_archive(archive: tuple[Site, str], capsys: pytest.CaptureFixture[str]) -> None:
    site, name = archive
    code, _, err = cli(capsys, "pack", *site.options, site.arg(name), site.arg("copy.itar"), "--workers", "2")
    assert code == 0, err
    source_store, source = opened(site.path(name))
    packed_store, packed = opened(site.path("copy.itar"))
    with source_store, packed_store:
        assert_same_hierarchy(source, packed)
        # Verbatim: the same records in the same order, consolidated metadata regenerated.
        src, dst = source_store.archive, packed_store.archive
        copied = [key for key in src.keys() if not Store.is_consolidated_metadata_key(key)]
        assert [key for key in dst.keys() if not Store.is_consolidated_metadata_key(key)] == copied
        assert all(dst[key] == src[key] for key in copied)
        assert CONSOLIDATED_KEY_V2 in dst

    code, _, err = cli(capsys, "pack", *site.options, "--no-consolidate", site.arg(name), site.arg("plain.itar"), "-q")
    assert code == 0, err
    with IndexedTarArchive(site.path("plain.itar")) as plain:
        assert not any(Store.is_consolidated_metadata_key(key) for key in plain.keys())


@zarr3_only
def test_pack_reencodes_to_zarr_format_3(archive: tuple[Site, str], capsys: pytest.CaptureFixture[str]) -> None:
    site, name = archive
    code, _, err = cli(capsys, "pack", *site.options, site.arg(name), site.arg("v3.itar"), "--zarr-format", "3")
    assert code == 0, err
    source_store, source = opened(site.path(name))
    packed_store, packed = opened(site.path("v3.itar"))
    with source_store, packed_store:
        assert packed.zarr_format == 3
        assert CONSOLIDATED_KEY_V3 in packed_store.archive
        assert_same_hierarchy(source, packed)
        assert packed.array("camera/frame0").dtype == np.uint8  # a format 3 blob
        assert packed.array("lidar/points").compression == source.array("lidar/points").compression
        assert packed.array("poses").compression is None

    # And back to format 2: the blob is fixed-length bytes again.
    code, _, err = cli(capsys, "pack", *site.options, site.arg("v3.itar"), site.arg("v2.itar"), "--zarr-format", "2")
    assert code == 0, err
    source_store, source = opened(site.path(name))
    packed_store, packed = opened(site.path("v2.itar"))
    with source_store, packed_store:
        assert packed.zarr_format == 2
        assert packed.array("camera/frame0").dtype == source.array("camera/frame0").dtype
        assert_same_hierarchy(source, packed)


def write_zarr_hierarchy(store: Any) -> None:
    """A hierarchy written by zarr-python: Blosc, Zstd (another codec) and no compression."""
    root = zarr_api.open_group(store, "w", zarr_format=2, attributes={"title": "from zarr-python"})
    values = zarr_api.create_array(
        root, "values", shape=(50, 4), chunks=(20, 4), dtype="int32", attributes={"unit": "K"}
    )
    values[:] = np.arange(200, dtype=np.int32).reshape(50, 4)
    sub = zarr_api.create_group(root, "sub", {"k": [1, 2]})
    other = zarr_api.create_array(
        sub, "zstd", shape=(30,), chunks=(8,), dtype="float64", compressor=numcodecs.Zstd(level=1)
    )
    other[:] = np.linspace(0, 1, 30)
    blob = zarr_api.create_array(sub, "blob", shape=(), chunks=(), dtype="S5", compressor=None, fill_value=None)
    blob[()] = b"hello"


@pytest.mark.parametrize("zarr_format", [None, 3])
def test_pack_zarr_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str], zarr_format: int | None) -> None:
    directory = tmp_path / "hierarchy.zarr"
    write_zarr_hierarchy(zarr_api.directory_store(directory))
    extra = [] if zarr_format is None else ["--zarr-format", str(zarr_format)]
    code, out, err = cli(capsys, "pack", str(directory), str(tmp_path / "packed.itar"), *extra)
    assert code == 0, err
    source = ZarrStoreAdapter(zarr_api.directory_store(directory, read_only=True)).open_root_group(consolidated=False)
    packed_store, packed = opened(tmp_path / "packed.itar")
    with packed_store:
        assert packed.zarr_format == (zarr_format or 2)
        assert_same_hierarchy(source, packed)
        assert packed.array("values").compression == source.array("values").compression
        if zarr_format is None:
            # Same format: the records are copied, so Zstd stays Zstd, byte for byte.
            assert "codecs kept" in out
            for key in ("sub/zstd/.zarray", "sub/zstd/0", "values/0.0"):
                assert packed_store.archive[key] == (directory / key).read_bytes()
        else:
            # Re-encoded: a codec the typed API can't write becomes Blosc, and the summary says so.
            assert packed.array("sub/zstd").compression == BloscCompression()
            assert "sub/zstd" in out and "Blosc lz4" in out


def test_pack_compression_and_destinations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "hierarchy.zarr"
    write_zarr_hierarchy(zarr_api.directory_store(directory))
    code, out, err = cli(capsys, "pack", "--compression", "zstd:3", str(directory), str(tmp_path / "z.itar"))
    assert code == 0 and "compression zstd:3" in out, err
    packed_store, packed = opened(tmp_path / "z.itar")
    with packed_store:
        assert packed.array("values").compression == BloscCompression("zstd", 3)
        np.testing.assert_array_equal(packed.array("values").read(), np.arange(200).reshape(50, 4))
    code, _, err = cli(capsys, "pack", "--compression", "snappy", str(directory), str(tmp_path / "s.itar"))
    assert code == 2 and "--compression 'snappy'" in err and not (tmp_path / "s.itar").exists()  # usage
    code, _, err = cli(capsys, "pack", str(tmp_path / "z.itar"), str(tmp_path / "back.zarr"))
    assert code == 1 and "ncore-like extract" in err and not (tmp_path / "back.zarr").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = cli(capsys, "pack", str(empty), str(tmp_path / "e.itar"))
    assert code == 1 and "an empty folder" in err
    plain = tmp_path / "plain.tar"
    subprocess.run(["tar", "-cf", str(plain), "-C", str(tmp_path), "hierarchy.zarr"], check=True)
    code, _, err = cli(capsys, "pack", str(plain), str(tmp_path / "p.itar"))
    assert code == 1 and "plain tar file" in err and "tar -xf" in err


def test_pack_zarr_store_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"memory://cli-test-{tmp_path.name}/hierarchy.zarr"
    write_zarr_hierarchy(zarr_api.fsspec_store(url))
    try:
        code, _, err = cli(capsys, "pack", url, str(tmp_path / "packed.itar"))
        assert code == 0, err
        source = ZarrStoreAdapter(zarr_api.fsspec_store(url, read_only=True)).open_root_group(consolidated=False)
        packed_store, packed = opened(tmp_path / "packed.itar")
        with packed_store:
            assert_same_hierarchy(source, packed)
    finally:
        fsspec.filesystem("memory").rm(f"/cli-test-{tmp_path.name}", recursive=True)


def test_pack_and_read_through_chained_urls(
    tmp_path: Path, local_archive: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hierarchy inside a real zip file (Python's zipfile) packs from fsspec's chained URL;
    an archive inside a zip, or behind a cache, reads as one. fsspec's tar filesystem, which
    garbles concurrent reads, is refused with a way out."""
    directory = tmp_path / "hierarchy.zarr"
    write_zarr_hierarchy(zarr_api.directory_store(directory))
    bundle = tmp_path / "plain.zip"
    with zipfile.ZipFile(bundle, "w") as archive_file:
        for file in sorted(directory.rglob("*")):
            archive_file.write(file, file.relative_to(tmp_path).as_posix())
    plain = tmp_path / "plain.tar"
    subprocess.run(["tar", "-cf", str(plain), "-C", str(tmp_path), "hierarchy.zarr"], check=True)
    source = ZarrStoreAdapter(zarr_api.directory_store(directory, read_only=True)).open_root_group(consolidated=False)
    for extra in ([], ["--zarr-format", "2", "--compression", "zstd:1"]):  # records copied; re-encoded
        code, out, err = cli(capsys, "pack", f"zip://hierarchy.zarr::{bundle}", str(tmp_path / "zip.itar"), *extra)
        assert code == 0 and ("codecs kept" in out) is not bool(extra), err
        packed_store, packed = opened(tmp_path / "zip.itar")
        with packed_store:
            assert_same_hierarchy(source, packed)
            if not extra:
                assert packed_store.archive["sub/zstd/0"] == (directory / "sub/zstd/0").read_bytes()
        (tmp_path / "zip.itar").unlink()
    for command in (
        ["pack", f"tar://hierarchy.zarr::{plain}", str(tmp_path / "tar.itar")],
        ["ls", f"tar://x::{plain}"],
        ["ls", f"tar::file://{plain}"],
    ):
        code, _, err = cli(capsys, *command)
        assert code == 1 and "tar://" in err and "garble" in err and "tar -xf" in err, err
    assert not any(tmp_path.glob("tar.itar*"))

    # The zip's top holds no hierarchy: the message says what it holds instead.
    code, _, err = cli(capsys, "pack", f"zip://::{bundle}", str(tmp_path / "top.itar"))
    assert code == 1 and "no zarr hierarchy at its top" in err and "holds hierarchy.zarr" in err
    code, _, err = cli(capsys, "pack", f"zip://missing.zarr::{bundle}", str(tmp_path / "missing.itar"))
    assert code == 1 and "zip://missing.zarr" in err and "No such file" in err
    code, _, err = cli(capsys, "pack", f"zip://hierarchy.zarr::{plain}", str(tmp_path / "notzip.itar"))
    assert code == 1 and "can't be opened (BadZipFile" in err and "Traceback" not in err
    assert not any(tmp_path.glob("top.itar*")) and not any(tmp_path.glob("missing.itar*"))

    # An archive as a member of a zip, and behind fsspec's whole-file cache.
    with zipfile.ZipFile(tmp_path / "archives.zip", "w") as archive_file:
        archive_file.write(local_archive, "seq.itar")
    for url in (f"zip://seq.itar::{tmp_path / 'archives.zip'}", f"simplecache::file://{local_archive}"):
        code, out, err = cli(capsys, "verify", url)
        assert code == 0 and "OK" in out, err
        chained_store, chained = opened(UPath(url))
        with chained_store:
            points = chained.array("lidar/points").read()
        np.testing.assert_array_equal(points, np.arange(400, dtype=np.float32).reshape(100, 4))


def test_pack_failure_leaves_no_archive(
    local_archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.itar"
    corrupt_chunk(local_archive, broken)
    dest = tmp_path / "packed.itar"
    code, _, err = cli(capsys, "pack", str(broken), str(dest), "--compression", "zstd:3")  # re-encodes: reads chunks
    assert code == 1
    assert CORRUPTED_CHUNK in err and "Traceback" not in err
    assert not dest.exists()

    code, _, err = cli(capsys, "pack", str(local_archive), str(local_archive))
    assert code == 1 and "the source itself" in err
    assert IndexedTarArchive(local_archive).keys()  # untouched


# -- verify --------------------------------------------------------------------------------


def test_verify_passes(archive: tuple[Site, str], capsys: pytest.CaptureFixture[str]) -> None:
    site, name = archive
    code, out, err = cli(capsys, "verify", *site.options, site.arg(name))
    assert code == 0, out + err
    assert "OK" in out
    code, out, _ = cli(capsys, "verify", *site.options, "--json", site.arg(name))
    assert code == 0
    report = json.loads(out)
    store, root = opened(site.path(name))
    with store:
        assert report["ok"] is True and report["problems"] == []
        assert report["records"] == report["tar_members"] == len(store.archive)
        assert report["bytes_read"] == sum(record.size for record in store.archive.records.values())
        assert report["arrays"] == sum(isinstance(node, Array) for node in nodes(root))


def test_verify_finds_a_corrupted_chunk(
    site: Site, local_archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.itar"
    corrupt_chunk(local_archive, broken)
    if isinstance(site.base, Path):
        site.base.mkdir()
    site.put("broken.itar", broken.read_bytes())
    code, out, err = cli(capsys, "verify", *site.options, site.arg("broken.itar"))
    assert code == 1
    assert CORRUPTED_CHUNK in out and "lidar/points" in out
    assert "problem" in err and site.arg("broken.itar") in err

    code, out, _ = cli(capsys, "verify", *site.options, "--json", site.arg("broken.itar"))
    assert code == 1
    report = json.loads(out)
    assert report["ok"] is False
    assert [(problem["key"], problem["array"]) for problem in report["problems"]] == [(CORRUPTED_CHUNK, "lidar/points")]


def test_verify_finds_a_wrong_index_offset(local_archive: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def shift(keys: list[str], offsets: list[int], sizes: list[int]) -> None:
        offsets[keys.index("poses/0.0")] += 512

    rewrite_index(local_archive, shift)
    code, out, _ = cli(capsys, "verify", "--json", str(local_archive))
    assert code == 1
    problems = json.loads(out)["problems"]
    assert problems and {problem["key"] for problem in problems} == {"poses/0.0"}
    code, out, _ = cli(capsys, "verify", str(local_archive))
    assert code == 1 and "poses/0.0" in out


def test_verify_finds_members_missing_from_the_index(local_archive: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def drop(keys: list[str], offsets: list[int], sizes: list[int]) -> None:
        position = keys.index("poses/0.0")
        for values in (keys, offsets, sizes):
            del values[position]

    rewrite_index(local_archive, drop)
    code, out, _ = cli(capsys, "verify", "--json", str(local_archive))
    assert code == 1
    [problem] = json.loads(out)["problems"]
    assert problem["key"] == "poses/0.0" and "not in the index" in problem["message"]


def test_verify_reports_a_bad_tar_header_once(local_archive: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with IndexedTarArchive(local_archive) as library:
        keys = library.keys()
        header = library.records["poses/0.0"].offset - 512
    with local_archive.open("r+b") as file:
        file.seek(header + 148)  # the stored checksum of the member's header
        file.write(b"7")
    code, out, err = cli(capsys, "verify", "--json", str(local_archive))
    assert code == 1
    report = json.loads(out)
    [problem] = report["problems"]
    hidden = len(keys) - keys.index("poses/0.0")
    assert f"unreadable tar header at offset {header}" in problem["message"]
    assert f"{hidden} index entries from 'poses/0.0' on" in problem["message"]
    assert report["tar_members"] == keys.index("poses/0.0")
    code, out, err = cli(capsys, "verify", str(local_archive))
    assert code == 1 and len(out.splitlines()) == 1 and "1 problem found" in err


def test_messages_name_the_archive_once(
    local_archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.itar"
    corrupt_chunk(local_archive, broken)
    code, out, err = cli(capsys, "verify", str(broken))
    assert code == 1 and CORRUPTED_CHUNK in out
    assert str(broken) not in out and err.count(str(broken)) == 1

    def rename(keys: list[str], offsets: list[int], sizes: list[int]) -> None:
        keys[keys.index("poses/0.0")] = "../escaped"

    rewrite_index(local_archive, rename)
    code, _, err = cli(capsys, "extract", str(local_archive), "-C", str(tmp_path / "out"))
    assert code == 1 and "'../escaped'" in err and err.count(str(local_archive)) == 1


def test_verify_progress_shows_one_bar_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    from ncore_like.cli import _common

    events: list[tuple[Any, ...]] = []

    class Bar:
        def __init__(self, desc: str) -> None:
            self.desc = desc

        def update(self, n: float = 1) -> None:
            events.append((self.desc, n))

        def close(self) -> None:
            events.append((self.desc, "closed"))

    def bar(*, total: float | None, desc: str, quiet: bool, unit: str = "B") -> Bar:
        events.append((desc, total, unit))
        return Bar(desc)

    monkeypatch.setattr(_common, "progress", bar)
    with _common.step_progress({"members": ("tar headers", "member")}, quiet=False) as update:
        update("members", 1, 2)
        update("members", 1, 2)
        update("records", 700, 900)
    assert events == [
        ("tar headers", 2, "member"),
        ("tar headers", 1),
        ("tar headers", 1),
        ("tar headers", "closed"),
        ("records", 900, "B"),
        ("records", 700),
        ("records", "closed"),
    ]


# -- errors and usage ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["ls"],
        ["frobnicate", "x.itar"],
        ["ls", "--storage-option", "no-equals-sign", "x.itar"],
        ["pack", "a", "b", "--workers", "0"],
        ["pack", "a", "b", "--zarr-format", "4"],
        ["cat", "x.itar"],
    ],
)
def test_usage_errors(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, *args)
    assert code == 2
    assert "usage:" in err


@pytest.mark.parametrize(
    "command",
    [
        ["ls", "{}"],
        ["tree", "{}"],
        ["info", "{}"],
        ["verify", "{}"],
        ["cat", "{}", ".zgroup"],
        ["extract", "{}", "-C", "{out}"],
        ["pack", "{}", "{out}/packed.itar"],
    ],
)
def test_missing_archive(command: list[str], site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = site.arg("missing.itar")
    args = [part.replace("{}", missing).replace("{out}", str(tmp_path)) for part in command]
    code, out, err = cli(capsys, args[0], *site.options, *args[1:])
    assert code == 1
    assert err.startswith("ncore-like: error: ") and missing in err
    assert "Traceback" not in err and out == ""
    assert not (tmp_path / "packed.itar").exists()


def test_bad_archives(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.itar"
    junk.write_bytes(b"x" * 3000)
    code, _, err = cli(capsys, "info", str(junk))
    assert code == 1 and str(junk) in err and "not an indexed tar archive" in err
    # Plain tar, zip and compressed files: every command says what the file is and what to do.
    for kind, path in foreign_files(tmp_path / "foreign").items():
        for command in ("info", "ls", "verify", "tree", "pack"):
            code, out, err = cli(capsys, command, str(path), *([str(tmp_path / "p.itar")] if command == "pack" else []))
            assert code == 1 and out == "" and re.search(FOREIGN_MESSAGES[kind], err), (command, err)
            in_advice = "zip://FOLDER::" in err or f"tar -xf {path} -C FOLDER" in err
            assert err.count(str(path)) == 1 + in_advice, err  # named once (and in the advice)
            if "tar -xf" in err:  # the advice is safe as printed: a new folder, never files that exist
                assert "mkdir FOLDER && tar -xf" in err, err

    raw = tmp_path / "raw.itar"
    with IndexedTarArchive(raw, "w") as writer:
        writer["a/b"] = b"payload"
    code, _, err = cli(capsys, "tree", str(raw))
    assert code == 1 and "no zarr hierarchy" in err
    code, out, _ = cli(capsys, "info", "--json", str(raw))
    assert code == 0 and json.loads(out)["zarr_format"] is None
    code, out, _ = cli(capsys, "verify", str(raw))
    assert code == 0, out


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("ls", "tree", "info", "cat", "extract", "pack", "verify"):
        code, out, _ = cli(capsys, command, "--help")
        assert code == 0 and f"ncore-like {command}" in out and "--storage-option" in out
    code, out, _ = cli(capsys, "--version")
    assert code == 0 and out.startswith("ncore-like ")
    result = subprocess.run(
        [sys.executable, "-m", "ncore_like", "--help"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "usage: ncore-like" in result.stdout
    for command in ("ls", "tree", "info", "cat", "extract", "pack", "verify"):
        assert command in result.stdout


def test_a_command_interrupted_inside_a_string_exec_exits_130_under_python_m(tmp_path: Path) -> None:
    # Ctrl-C that ends a string exec (e.g. a dataclass being made) and that the command
    # handles: CPython run with -m would exit by SIGINT (-2), not with the command's 130.
    path = tmp_path / "small.itar"
    with IndexedTarArchive(path, "w") as archive:
        archive["a"] = b"x"
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.exec_interrupt", "ls", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "NCORE_TEST_INTERRUPT_OPEN": str(path)},
        timeout=60,
    )
    assert result.stderr.strip() == "ncore-like: interrupted"  # the interrupt came, and was handled
    assert result.returncode == 130


def test_missing_fsspec_object_says_not_found(capsys: pytest.CaptureFixture[str]) -> None:
    from ncore_like.cli import main as cli_main

    assert cli_main(["ls", "memory://no-such-archive.itar"]) == 1
    assert "no such file" in capsys.readouterr().err


# -- integrity: checksums, superseded metadata, recover ----------------------------------------


def test_verify_checks_checksums_of_records_arrays_cannot_see(
    local_archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One flipped bit in a blob's payload: every read that opts out of verification returns
    # it, tar has no checksum of its own, only the record's CRC32C tells.
    with IndexedTarArchive(local_archive) as library:
        record = library.records["camera/frame0/0"]
    with local_archive.open("r+b") as file:
        file.seek(record.offset + 3)
        byte = file.read(1)[0]
        file.seek(record.offset + 3)
        file.write(bytes([byte ^ 1]))
    assert IndexedTarArchive(local_archive, verify_checksums=False)["camera/frame0/0"] != FRAME
    code, out, _ = cli(capsys, "verify", "--json", str(local_archive))
    assert code == 1
    problems = json.loads(out)["problems"]
    assert [problem["key"] for problem in problems] == ["camera/frame0/0"]
    assert "doesn't match its CRC32C" in problems[0]["message"]


def test_verify_accepts_node_metadata_rewritten_after_a_flush(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "f.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({"version": 1})
        root.create_array("a", np.arange(10))
        store.flush()
        root.zarr.attrs["version"] = 2  # zarr-python rewrites .zattrs
        store.consolidate()
    assert IndexedTarZarrStore(path).open_root_group().attributes["version"] == 2
    code, out, _ = cli(capsys, "verify", str(path))
    assert code == 0, out
    assert "OK" in out


def test_recover_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "crashed.itar"
    store = IndexedTarZarrStore(path, mode="w")
    root = store.create_root_group({"sequence": "s-9"})
    root.create_array("poses", np.arange(12.0).reshape(3, 4), compression=None)
    store.flush()
    die(store.archive)
    with open(f"{path}.partial", "ab") as file:
        file.write(b"\x00torn" * 100)  # what a writer killed mid-record leaves
    code, out, err = cli(capsys, "recover", str(path))
    assert code == 0, err
    assert f"{path}: " in out and "recovered" in out and "consolidated metadata regenerated" in out
    np.testing.assert_array_equal(
        IndexedTarZarrStore(path).open_root_group().array("poses").read(), np.arange(12.0).reshape(3, 4)
    )
    code, out, _ = cli(capsys, "verify", str(path))
    assert code == 0, out
    code, _, err = cli(capsys, "recover", str(path))
    assert code == 1 and "needs no recovery" in err and "Traceback" not in err


def test_verbose_shows_the_library_log_records_on_stderr_and_is_quiet_without(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def crash(path: Path) -> None:
        store = IndexedTarZarrStore(path, mode="w")
        store.create_root_group({}).create_array("poses", np.arange(12.0), compression=None)
        store.flush()
        die(store.archive)

    quiet, verbose = tmp_path / "quiet.itar", tmp_path / "verbose.itar"
    crash(quiet)
    crash(verbose)
    code, _, err = cli(capsys, "recover", str(quiet))
    assert code == 0 and "ncore_like." not in err and "INFO" not in err, err
    code, _, err = cli(capsys, "-v", "recover", str(verbose))
    assert code == 0, err
    # The recovery decisions, as the library logs them (archive and store layers).
    lines = [line for line in err.splitlines() if line.startswith("ncore-like: INFO: ncore_like.")]
    assert any(f"{verbose}.partial: finished in place" in line for line in lines), err
    assert any(line.startswith("ncore-like: INFO: ncore_like.store.recover: ") for line in lines), err
    # The handler is the command's: the library is quiet again afterwards.
    assert not [h for h in logging.getLogger("ncore_like").handlers if not isinstance(h, logging.NullHandler)]
    np.testing.assert_array_equal(IndexedTarZarrStore(verbose).open_root_group().array("poses").read(), np.arange(12.0))


# -- first contact: pipes, options, plain URLs ------------------------------------------------


def test_a_closed_pipe_is_no_failure(tmp_path: Path) -> None:
    path = tmp_path / "many.itar"
    with IndexedTarArchive(path, "w") as archive:
        for index in range(20_000):  # more listing than a pipe buffer holds
            archive[f"records/{index:06d}"] = b"x"
    command = f"set -o pipefail; {sys.executable} -m ncore_like ls {path} | head -n 2"
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 2 and result.stderr == ""


def test_storage_options_on_a_local_path_are_reported(local_archive: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "ls", str(local_archive), "-o", "anon=true")
    assert code == 0 and out
    assert err.startswith("ncore-like: warning:") and "anon" in err and "ignored" in err


def test_plain_urls_take_storage_options(s3_bucket: UPath) -> None:
    options = dict(s3_bucket.storage_options)
    url = str(s3_bucket / "plain.itar")
    with IndexedTarZarrStore(url, mode="w", storage_options=options) as store:
        store.create_root_group({"plain": True}).create_array("x", np.arange(3))
        store.consolidate()
    root = IndexedTarZarrStore(url, storage_options=options).open_root_group()
    assert root.attributes == {"plain": True} and root.array("x").read().tolist() == [0, 1, 2]
    assert IndexedTarArchive(url, storage_options=options).keys() == IndexedTarArchive(s3_bucket / "plain.itar").keys()
    with pytest.raises(ValueError, match="storage options apply to URLs"):
        IndexedTarZarrStore(s3_bucket.path, storage_options=options)  # a local path


def test_tree_shortens_large_groups_and_stops_at_a_depth(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "frames.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({})
        frames = root.create_group("cameras").create_group("front")
        for index in range(60):
            frames.create_bytes_array(f"{index:04d}", b"\xff\xd8" + bytes(index))
        root.create_array("poses", np.zeros((60, 7)))
        store.consolidate()
    code, out, _ = cli(capsys, "tree", str(path))
    assert code == 0 and "0024" in out and "0025" not in out and "... 35 more" in out
    assert len(out.splitlines()) < 35
    code, out, _ = cli(capsys, "tree", "--limit", "0", str(path))
    assert code == 0 and "0059" in out and "more" not in out
    code, out, _ = cli(capsys, "tree", "--depth", "1", str(path))
    assert code == 0 and "cameras/  (1 members, below --depth)" in out and "front" not in out and "poses" in out
    code, out, _ = cli(capsys, "tree", "--json", str(path))  # JSON: everything
    front = json.loads(out)["members"][0]["members"][0]
    assert len(front["members"]) == 60
    code, _, err = cli(capsys, "tree", "--depth", "0", str(path))
    assert code == 2 and "positive" in err


def test_cat_and_extract_take_array_paths_prefixes_and_globs(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    path = tmp_path / "seq.itar"
    frames = {f"{index:05d}": b"\xff\xd8" + bytes([index]) * index + b"\x00" for index in range(4)}
    poses = np.arange(12.0).reshape(3, 4)
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({})
        front = root.create_group("cameras").create_group("front")
        for name, blob in frames.items():
            front.create_bytes_array(name, blob)
        root.create_array("poses", poses, compression=BloscCompression())
        store.consolidate()

    assert main(["cat", str(path), "cameras/front/00003"]) == 0  # an array path, not a record key
    assert capsysbinary.readouterr().out == frames["00003"]
    assert main(["cat", str(path), "poses"]) == 0  # not a blob: numpy's .npy (stdout is no terminal here)
    np.testing.assert_array_equal(np.load(io.BytesIO(capsysbinary.readouterr().out)), poses)
    assert main(["cat", str(path), "cameras/front/0003"]) == 1
    assert b"did you mean" in capsysbinary.readouterr().err
    for group in ("cameras/front", "cameras/front[1]"):  # a group: said so, with its members
        assert main(["cat", str(path), group]) == 1
        said = capsysbinary.readouterr().err.decode()
        assert "'cameras/front' is a group; cat writes a record or an array" in said
        assert "'cameras/front/00000', 'cameras/front/00001'" in said

    def extracted(*patterns: str) -> list[str]:
        folder = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        assert main(["extract", "-q", str(path), *patterns, "-C", str(folder)]) == 0
        return sorted(str(file.relative_to(folder)) for file in folder.rglob("*") if file.is_file())

    keys = IndexedTarArchive(path).keys()
    below = sorted(key for key in keys if key.startswith("cameras/front/"))
    assert extracted("cameras/front") == below
    assert extracted("cameras/*/0000[12]/*") == sorted(
        key for key in keys if key.startswith(("cameras/front/00001/", "cameras/front/00002/"))
    )
    assert main(["extract", "-q", str(path), "cameras/rear", "-C", str(tmp_path / "none")]) == 1
    assert b"no record matches 'cameras/rear'" in capsysbinary.readouterr().err
    assert not (tmp_path / "none").exists()


def test_pack_many_sources_on_a_cluster_resumes_and_reports_failures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("distributed", reason="distributed is an optional extra")
    sources = []
    for number in range(3):
        directory = tmp_path / f"drive-{number}.zarr"
        write_zarr_hierarchy(zarr_api.directory_store(directory))
        sources.append(str(directory))
    broken = tmp_path / "broken.zarr"
    broken.mkdir()  # an empty folder: no hierarchy
    out_dir = tmp_path / "packed"
    argv = ["pack", "-q", "--cluster-workers", "2", *sources, str(broken), str(out_dir)]
    code, _, err = cli(capsys, *argv)
    assert code == 1 and "3 packed, 0 skipped (verified), 1 failed" in err and "broken.zarr" in err
    assert sorted(path.name for path in out_dir.iterdir()) == ["drive-0.itar", "drive-1.itar", "drive-2.itar"]
    for number, source in enumerate(sources):
        _, packed = opened(out_dir / f"drive-{number}.itar")
        source_root = ZarrStoreAdapter(zarr_api.directory_store(source, read_only=True)).open_root_group(
            consolidated=False
        )
        assert_same_hierarchy(source_root, packed)
    # Resumed: verified archives are skipped; a damaged one is never replaced without
    # --overwrite (it may be someone's only copy), and said so.
    damaged = out_dir / "drive-1.itar"
    with IndexedTarArchive(damaged) as archive:
        record = archive.records["values/0.0"]
    with damaged.open("r+b") as file:
        file.seek(record.offset)
        file.write(b"\xff\xff\xff\xff")
    before = damaged.read_bytes()
    code, _, err = cli(capsys, *argv[:-2], str(out_dir))  # the sources that exist
    assert code == 1 and "0 packed, 2 skipped (verified), 1 failed" in err, err
    assert "drive-1.zarr" in err and "is not an archive that verifies" in err and "--overwrite" in err
    assert damaged.read_bytes() == before
    # --overwrite packs every source again.
    argv = ["pack", "-q", "--overwrite", "--cluster-workers", "2", *sources[:2], str(out_dir)]
    code, _, err = cli(capsys, *argv)
    assert code == 0 and "2 packed, 0 skipped (verified), 0 failed" in err, err
    np.testing.assert_array_equal(
        opened(damaged)[1].array("values").read(), np.arange(200, dtype=np.int32).reshape(50, 4)
    )


def test_cat_to_a_full_disk_says_it_could_not_write_standard_output(tmp_path: Path) -> None:
    path = tmp_path / "a.itar"
    with IndexedTarArchive(path, mode="w") as archive:
        archive["blob"] = bytes(range(256)) * 4096  # 1 MiB: more than any pipe buffer takes
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [sys.executable, "-m", "ncore_like", "cat", str(path), "blob"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert done.returncode == 1
    assert done.stderr.strip() == "ncore-like: error: can't write to standard output: No space left on device"


def test_refs_never_replaces_a_file_unless_asked_and_writes_it_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``refs --output`` replaced any file there (and wrote into a symlink's target)."""
    import os

    path = tmp_path / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        store.create_root_group({}).create_array("x", np.arange(4))
        store.consolidate()
    precious = tmp_path / "p.json"
    precious.write_text("precious")
    code, _, err = cli(capsys, "refs", str(path), "--output", str(precious))
    assert code == 1 and "exists already (pass --overwrite" in err and precious.read_text() == "precious"
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text("elsewhere")
    link.symlink_to(target)
    assert cli(capsys, "refs", str(path), "--output", str(link), "--overwrite")[0] == 0
    assert target.read_text() == "elsewhere" and not link.is_symlink()  # the link replaced, not its target
    assert json.loads(link.read_text())["refs"]
    umask = os.umask(0)
    os.umask(umask)
    assert link.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() creates files, not mkstemp's 0o600
    assert not list(tmp_path.glob("*.ncore-like-tmp"))


def test_cat_refuses_before_reading_arrays_too_large_or_bound_for_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 4 PB array was read until the process was killed; a 320 MB one was read whole and
    only then refused on a terminal."""
    import ncore_like.cli._cat as cat_module

    path = tmp_path / "huge.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({})
        root.create_empty_array("giant", shape=(10**15,), dtype="f4", chunks=(10**6,), fill_value=1.0)
        root.create_empty_array("wide", shape=(2, 1000), dtype="f8", chunks=(1, 1000), fill_value=0.0)
        store.consolidate()

    def no_read(*args: Any) -> Any:
        raise AssertionError("read before it was refused")

    monkeypatch.setattr(cat_module, "_values", no_read)
    code, _, err = cli(capsys, "cat", str(path), "giant")
    assert code == 1 and "array 'giant' holds 3638.0 TiB, more than cat reads at once" in err
    assert "select a part, e.g. 'giant[0:" in err
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, _, err = cli(capsys, "cat", str(path), "wide")
    assert code == 1 and "its values come as numpy's .npy format; redirect the output to a file" in err


@pytest.mark.parametrize("command", ["tree", "info", "ls", "verify"])
def test_json_output_is_strict_json_with_nan_and_infinities(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """Attributes and fill values of NaN or infinity came out as bare ``NaN``, which strict
    parsers (a browser's JSON.parse) refuse."""
    path = tmp_path / "nan.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({"nan": float("nan"), "limits": [float("-inf"), 1.5, float("inf")]})
        root.create_empty_array("x", shape=(3,), dtype="f4", chunks=(3,), fill_value=np.nan)
        store.consolidate()
    arguments = ["tree", "--json", "-a"] if command == "tree" else [command, "--json"]
    code, out, _ = cli(capsys, *arguments, str(path))

    def refuse(constant: str) -> None:
        raise ValueError(f"not strict JSON: {constant}")

    document = json.loads(out, parse_constant=refuse)
    assert code == 0 and document
    if command == "tree":
        assert document["attributes"] == {"nan": "NaN", "limits": ["-Infinity", 1.5, "Infinity"]}


def test_extract_refuses_records_that_would_be_a_file_and_a_folder_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An archive may hold ``a`` and ``a/b``; a file system can't: extract wrote ``a`` and
    then failed with ``File exists``."""
    path = tmp_path / "conflict.itar"
    with IndexedTarArchive(path, mode="w") as archive:
        archive["a"] = b"1"
        archive["a/b"] = b"2"
        archive["c"] = b"3"
    code, _, err = cli(capsys, "extract", "-q", str(path), "-C", str(tmp_path / "out"))
    assert code == 1 and "1 record(s) lie below another record" in err and "a/b" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert cli(capsys, "extract", "-q", str(path), "c", "-C", str(tmp_path / "apart"))[0] == 0
    assert (tmp_path / "apart" / "c").read_bytes() == b"3"


def test_recover_given_its_output_twice_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "recover", "--output", str(tmp_path / "x.itar"), str(tmp_path / "a.partial"), "y.itar")
    assert code == 2 and "give the recovered archive's name once" in err  # argparse's code for usage errors
