"""Archives as reference sets: ``store.to_references()`` and ``ncore-like refs`` describe
every chunk as a byte range of the archive, and a reader with only fsspec and zarr-python
(ncore_like not even imported) gets the same arrays from them, local, over HTTP and S3."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from upath import UPath

from ncore_like import BloscCompression, IndexedTarZarrStore
from ncore_like.cli import main
from tests.support.fixtures import HttpRoot

BLOB = b"\xff\xd8jpeg\x00\x01"
LIDAR = np.arange(6 * 10, dtype=np.float32).reshape(6, 10) * 0.25
POSES = np.arange(12, dtype=">f8")

# Runs in a fresh interpreter: fsspec and zarr-python only.
READER = """
import json, sys, warnings
import fsspec, numpy as np, zarr, zarr.storage
warnings.simplefilter("error")  # e.g. "consolidated metadata not found"
refs, zarr_format, options = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
if zarr.__version__.startswith("2."):  # zarr-python 2 reads a mapping of the reference filesystem
    root = zarr.open_consolidated(fsspec.filesystem("reference", fo=refs, **options).get_mapper(""), mode="r")
else:
    if "remote_protocol" in options:  # zarr-python 3 wants an async filesystem, and its targets must be too
        options["remote_options"] = {**options.get("remote_options", {}), "asynchronous": True}
    fs = fsspec.filesystem("reference", fo=refs, asynchronous=True, **options)
    store = zarr.storage.FsspecStore(fs, read_only=True, path="")
    root = zarr.open_consolidated(store, zarr_format=zarr_format, mode="r")
out = {
    "attrs": dict(root.attrs),
    "lidar": root["lidar"][:].tolist(),
    "poses": root["sensors/poses"][:].tolist(),
    "never_written": root["never_written"][:].tolist(),
    "blob": np.asarray(root["cameras/front/0000"][...]).tobytes().hex(),
    "ncore_like_imported": "ncore_like" in sys.modules,
}
print(json.dumps(out))
"""


def write_archive(location: Path | UPath, zarr_format: int) -> None:
    with IndexedTarZarrStore(location, mode="w") as store:
        root = store.create_root_group({"sequence": "drive-7"}, zarr_format=zarr_format)  # type: ignore[arg-type]
        root.create_group("cameras").create_group("front").create_bytes_array("0000", BLOB)
        root.create_array("lidar", LIDAR, chunks=(2, 10), compression=BloscCompression())
        root.create_group("sensors").create_array("poses", POSES, chunks=(5,), compression=None)
        root.create_empty_array("never_written", shape=(3,), dtype=np.int16, chunks=(2,), fill_value=7)
        store.consolidate()


def read_without_ncore_like(refs: Path, zarr_format: int, options: dict[str, Any] | None = None) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", READER, str(refs), str(zarr_format), json.dumps(options or {})],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    decoded: dict[str, Any] = json.loads(result.stdout)
    return decoded


def check(read: dict[str, Any], zarr_format: int) -> None:
    assert read["attrs"] == {"sequence": "drive-7"}
    np.testing.assert_array_equal(np.array(read["lidar"], np.float32), LIDAR)
    np.testing.assert_array_equal(read["poses"], POSES)
    assert read["never_written"] == [7, 7, 7]
    # zarr-python hands a 0-d fixed-length bytes value out as a numpy scalar, which drops
    # trailing NULs; format 3 stores blobs as uint8 and keeps every byte.
    blob = bytes.fromhex(read["blob"])
    assert blob == (BLOB if zarr_format == 3 else BLOB.rstrip(b"\x00"))
    assert read["ncore_like_imported"] is False


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_local_references_read_by_zarr_python_alone(tmp_path: Path, zarr_format: int) -> None:
    path = tmp_path / "seq.itar"
    write_archive(path, zarr_format)
    references = IndexedTarZarrStore(path).to_references()
    assert references["version"] == 1
    refs = references["refs"]
    chunk = refs["lidar/0.0" if zarr_format == 2 else "lidar/c/0/0"]
    assert (
        chunk[0] == str(path)
        and IndexedTarZarrStore(path).archive.read_range(
            "lidar/0.0" if zarr_format == 2 else "lidar/c/0/0", 0, chunk[2]
        )
        == path.read_bytes()[chunk[1] : chunk[1] + chunk[2]]
    )
    assert not {".zmetadata.cbor.xz", "zarr.json.cbor.zlib"} & set(refs)  # replaced by the inline forms
    metadata = [key for key in refs if key.rpartition("/")[2] in (".zarray", ".zgroup", ".zattrs", "zarr.json")]
    assert metadata and all(isinstance(json.loads(refs[key]), dict) for key in metadata)  # inline JSON
    refs_path = tmp_path / "refs.json"
    refs_path.write_text(json.dumps(references))
    check(read_without_ncore_like(refs_path, zarr_format), zarr_format)


def test_refs_command_and_a_url_of_the_published_archive(tmp_path: Path, http_root: HttpRoot) -> None:
    path = http_root.directory / "seq.itar"
    write_archive(path, 2)
    refs_path = tmp_path / "refs.json"
    url = f"{http_root.base_url}/seq.itar"
    assert main(["refs", str(path), "--url", url, "--output", str(refs_path)]) == 0
    refs = json.loads(refs_path.read_text())["refs"]
    assert refs["lidar/0.0"][0] == url
    check(read_without_ncore_like(refs_path, 2, {"remote_protocol": "http"}), 2)  # chunks come over HTTP


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_references_of_an_archive_on_s3(
    tmp_path: Path, s3_bucket: UPath, capsys: pytest.CaptureFixture[str], zarr_format: int
) -> None:
    location = s3_bucket / "seq.itar"
    write_archive(location, zarr_format)
    options = dict(s3_bucket.storage_options)
    argv = ["refs", str(location)] + [f"-o{key}={json.dumps(value)}" for key, value in options.items()]
    assert main(argv) == 0
    refs_path = tmp_path / "refs.json"
    refs_path.write_text(capsys.readouterr().out)
    first_chunk = "lidar/0.0" if zarr_format == 2 else "lidar/c/0/0"
    assert json.loads(refs_path.read_text())["refs"][first_chunk][0] == str(location)
    reader_options = {"remote_protocol": "s3", "remote_options": options}
    check(read_without_ncore_like(refs_path, zarr_format, reader_options), zarr_format)


def test_references_need_an_archive_opened_for_reading(tmp_path: Path) -> None:
    with IndexedTarZarrStore(tmp_path / "w.itar", mode="w") as store:
        with pytest.raises(ValueError, match="opened for reading"):
            store.to_references()
