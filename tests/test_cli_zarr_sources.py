"""The command line and the typed API on hierarchies zarr-python wrote with codecs other
than Blosc, and with variable-length bytes (e.g. one chunk of many encoded frames): what
``tree`` and :attr:`Array.codecs` say, ``cat`` of selections, ``pack --bytes-as-blobs``.
zarr-python's own metadata and values are the oracle."""

from __future__ import annotations

import io
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest

from ncore_like import BloscCompression, IndexedTarArchive, IndexedTarZarrStore
from ncore_like.cli import main
from tests.support import zarr_api

FRAMES = [b"\xff\xd8" + bytes([index]) * (index * 37 % 200) + b"\x00\xff\xd9" for index in range(23)]


@pytest.fixture(autouse=True)
def _quiet_zarr_warnings() -> Iterator[None]:
    # zarr-python warns that variable-length bytes have no zarr format 3 specification yet.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="zarr")
        yield


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def codec(name: str, zarr_format: int) -> Any:
    """A compressor of zarr-python's own kind for the format: numcodecs' (format 2), zarr's
    codec classes (format 3)."""
    if zarr_format == 2:
        return {"zstd": numcodecs.Zstd(level=3), "gzip": numcodecs.GZip(level=5), "blosc": zarr_api.blosc()}[name]
    from zarr import codecs

    return {
        "zstd": codecs.ZstdCodec(level=3),
        "gzip": codecs.GzipCodec(level=5),
        "crc32c": codecs.Crc32cCodec(),
        "blosc": codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
    }[name]


def write_mixed(directory: Path, zarr_format: int) -> Any:
    """A hierarchy as zarr-python writes it: zstd, gzip, (format 3) crc32c, (format 2) a delta
    filter, Blosc, raw chunks, and variable-length bytes; returns its root group."""
    root = zarr_api.open_group(zarr_api.directory_store(directory), "w", zarr_format=zarr_format)
    values = np.arange(120, dtype=np.int32).reshape(30, 4)

    def array(name: str, compressor: Any, filters: list[Any] | None = None) -> None:
        created = zarr_api.create_array_with(
            root, name, shape=values.shape, dtype="int32", chunks=(8, 4), compressor=compressor, filters=filters
        )
        created[:] = values

    for name in ["zstd", "gzip", "blosc"] + (["crc32c"] if zarr_format == 3 else []):
        array(name, codec(name, zarr_format))
    if zarr_format == 2:
        array("delta", numcodecs.GZip(level=5), [numcodecs.Delta(dtype="<i4")])
    array("raw", None)
    cameras = zarr_api.create_group(root, "cameras", {"rig": "roof"})
    front = zarr_api.create_vlen_bytes_array(cameras, "front", FRAMES, chunks=(len(FRAMES),))
    front.attrs.update({"codec": "jpeg", "fps": 10})
    return root


def stored_codecs(array: Any) -> list[dict[str, Any]]:
    """The codec chain in zarr-python's own metadata document, as JSON holds it."""
    document = json.loads(json.dumps(zarr_api.metadata_document(array)))
    if "codecs" in document:
        return list(document["codecs"])
    return [*(document["filters"] or []), *([document["compressor"]] if document["compressor"] else [])]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_tree_names_codecs_and_compression_points_to_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], zarr_format: int
) -> None:
    source = write_mixed(tmp_path / "mixed.zarr", zarr_format)
    archive = tmp_path / "mixed.itar"
    assert main(["pack", "-q", str(tmp_path / "mixed.zarr"), str(archive)]) == 0  # records copied as they are
    code, out, err = cli(capsys, "tree", str(archive))
    assert code == 0, err
    lines = {line.split()[1]: line for line in out.splitlines() if line.startswith(("├", "└", "│ "))}
    assert "zstd 3," in lines["zstd"] and "gzip 5," in lines["gzip"]
    assert "blosc lz4/5/shuffle," in lines["blosc"] and "int32 (30, 4), chunks (8, 4), none," in lines["raw"]
    if zarr_format == 3:
        assert ", crc32c," in lines["crc32c"]
    else:
        assert "delta + gzip 5," in lines["delta"]
    assert "other" not in out
    front = next(line for line in out.splitlines() if "front" in line)
    # Variable-length bytes: named, and no ratio (their size unread is unknown, not 8 bytes each).
    assert "vlen-bytes" in front and front.endswith("ratio -"), front

    code, out, _ = cli(capsys, "tree", "--json", str(archive))
    document = json.loads(out)
    members = {member["name"]: member for member in document["members"]}
    frames = members["cameras"]["members"][0]
    assert frames["nbytes"] is None and frames["ratio"] is None and frames["stored_bytes"] > 0
    assert members["zstd"]["ratio"] == pytest.approx(480 / members["zstd"]["stored_bytes"])

    with IndexedTarZarrStore(archive) as store:
        root = store.open_root_group()
        for name, array in root.items():
            if name == "cameras":
                continue
            assert list(array.codecs) == stored_codecs(source[name]), name
            if name == "blosc":
                assert array.compression == BloscCompression("lz4", 5, "shuffle")
            elif name == "raw":
                assert array.compression is None
            else:
                with pytest.raises(ValueError, match=r"codecs other than one Blosc compressor \(.+\); Array.codecs"):
                    array.compression  # noqa: B018 - the property raises
        assert list(root.array("cameras/front").codecs) == stored_codecs(source["cameras/front"])


def cat(capsysbinary: pytest.CaptureFixture[bytes], archive: Path, key: str) -> tuple[int, bytes, str]:
    code = main(["cat", str(archive), key])
    captured = capsysbinary.readouterr()
    return code, captured.out, captured.err.decode()


def load(data: bytes) -> np.ndarray[Any, Any]:
    return np.load(io.BytesIO(data), allow_pickle=False)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_cat_of_selections_and_variable_length_elements(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], zarr_format: int
) -> None:
    directory = tmp_path / "seq.zarr"
    root = zarr_api.open_group(zarr_api.directory_store(directory), "w", zarr_format=zarr_format)
    poses = np.arange(40 * 16, dtype=np.float64).reshape(40, 4, 4)
    points = np.random.default_rng(5).normal(size=(9, 50, 4)).astype(np.float32)
    zarr_api.create_array_with(root, "poses", shape=poses.shape, dtype="float64", chunks=(16, 4, 4))[:] = poses
    lidar = zarr_api.create_group(root, "lidar")
    zarr_api.create_array_with(lidar, "points", shape=points.shape, dtype="float32", chunks=(2, 50, 4))[:] = points
    cameras = zarr_api.create_group(root, "cameras")
    zarr_api.create_vlen_bytes_array(cameras, "front", FRAMES, chunks=(len(FRAMES),))
    archive = tmp_path / "seq.itar"
    assert main(["pack", "-q", str(directory), str(archive)]) == 0
    oracle = zarr_api.open_group(zarr_api.directory_store(directory, read_only=True), "r")

    selections = {
        "lidar/points[3]": np.s_[3],
        "poses[10:20]": np.s_[10:20],
        "poses[ -1 , :2, ::-1 ]": np.s_[-1, :2, ::-1],
        "poses[..., 0]": np.s_[..., 0],
        "poses[5, 1, 2]": np.s_[5, 1, 2],
        "poses[::7,]": np.s_[::7],
        "lidar/points[1:8:3, 10:12]": np.s_[1:8:3, 10:12],
    }
    for key, selection in selections.items():
        code, out, err = cat(capsysbinary, archive, key)
        assert code == 0, (key, err)
        path = key.partition("[")[0]
        values = load(out)
        source = poses if path == "poses" else points
        np.testing.assert_array_equal(values, source[selection], err_msg=key)  # numpy's answer
        # zarr-python's values (it takes no negative steps: selected by numpy)
        np.testing.assert_array_equal(values, np.asarray(oracle[path][...])[selection], err_msg=key)
        assert values.dtype == source.dtype and values.shape == source[selection].shape

    # One element of variable-length bytes: its bytes, as zarr-python reads them.
    for index in (0, 2, -1, 22):
        code, out, err = cat(capsysbinary, archive, f"cameras/front[{index}]")
        assert code == 0 and out == FRAMES[index] == oracle["cameras/front"][index], err
    for key, count in (("cameras/front", 23), ("cameras/front[1:3]", 2)):
        code, out, err = cat(capsysbinary, archive, key)
        assert code == 1 and out == b"" and f"variable-length elements ({count} selected)" in err
        assert "'cameras/front[0]'" in err and "--bytes-as-blobs" in err and "pickle" not in err

    # Selections are parsed, never evaluated; mistakes are named.
    for key, message in (
        ("poses[__import__('os').getpid()]", "is not understood"),
        ("poses[1;2]", "is not understood"),
        ("poses[]", "is not understood"),
        ("poses[1:2:0]", "a step of 0"),
        ("poses[40]", "out of bounds"),
        ("poses[1, 2, 3, 4]", "too many indices"),
        ("posse[1]", "no record or array 'posse' (did you mean"),
    ):
        code, out, err = cat(capsysbinary, archive, key)
        assert code == 1 and out == b"" and message in err and "Traceback" not in err, (key, err)
        assert err.startswith("ncore-like: error: ") and str(archive) in err


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_pack_bytes_as_blobs(tmp_path: Path, capsys: pytest.CaptureFixture[str], zarr_format: int) -> None:
    directory = tmp_path / "mixed.zarr"
    source = write_mixed(directory, zarr_format)
    packed = tmp_path / "blobs.itar"
    code, out, err = cli(capsys, "pack", "--bytes-as-blobs", str(directory), str(packed))
    assert code == 0 and "records copied, codecs kept, 1 bytes array(s) split into blobs" in out, err

    # The frames as Group.create_bytes_array lays out blobs (one record each), beside a
    # reference written through it.
    reference = tmp_path / "reference.itar"
    with IndexedTarZarrStore(reference, "w") as store:
        reference_root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        front = reference_root.create_group("cameras/front", attributes={"codec": "jpeg", "fps": 10})
        for index, frame in enumerate(FRAMES):
            front.create_bytes_array(f"{index:05d}", frame)
    expected = IndexedTarArchive(reference)
    with IndexedTarZarrStore(packed) as store:
        archive, root = store.archive, store.open_root_group()
        front = root.group("cameras/front")
        assert front.members() == [f"{index:05d}" for index in range(len(FRAMES))]
        assert dict(front.attributes) == {"codec": "jpeg", "fps": 10} == dict(source["cameras/front"].attrs)
        assert [blob for _, blob in front.blobs()] == FRAMES == list(source["cameras/front"][:])
        for index, frame in enumerate(FRAMES):
            assert root.array(f"cameras/front/{index:05d}").read_bytes() == frame
        for key in expected.keys():
            if key.startswith("cameras/front/"):
                assert archive[key] == expected[key], key  # metadata and the frame's one record
        chunk_records = [key for key in archive.keys() if key.startswith("cameras/front/") and "z" not in key]
        assert [archive[key] for key in chunk_records] == FRAMES  # one record per frame, in order, adjacent
        positions = [archive.keys().index(key) for key in chunk_records]
        assert positions == list(range(positions[0], positions[0] + len(FRAMES)))
        # The other arrays' records are copied byte for byte.
        for name in ("zstd", "gzip", "blosc", "raw"):
            for key in (key for key in archive.keys() if key.startswith(f"{name}/")):
                assert archive[key] == (directory / key).read_bytes(), key
        assert "cameras/front/.zarray" not in archive and root.group("cameras").attributes["rig"] == "roof"

    # Re-encoded with another compression: the same blobs.
    recompressed = tmp_path / "recompressed.itar"
    code, out, err = cli(
        capsys, "pack", "--bytes-as-blobs", "--compression", "zstd:3", str(directory), str(recompressed)
    )
    assert code == 0 and "compression zstd:3, 1 bytes array(s) split into blobs" in out, err
    with IndexedTarZarrStore(recompressed) as store:
        recompressed_root = store.open_root_group()
        assert [blob for _, blob in recompressed_root.group("cameras/front").blobs()] == FRAMES
        np.testing.assert_array_equal(recompressed_root.array("zstd").read(), np.asarray(source["zstd"][...]))

    # Into the other format (re-encoded), where the installed zarr-python writes it.
    other = 5 - zarr_format
    if other in zarr_api.WRITABLE_FORMATS:
        converted = tmp_path / "other.itar"
        options = ["--bytes-as-blobs", "--zarr-format", str(other)]
        code, out, err = cli(capsys, "pack", *options, str(directory), str(converted))
        assert code == 0 and f"re-encoded, zarr format {other}, 1 bytes array(s) split into blobs" in out, err
        with IndexedTarZarrStore(converted) as store:
            assert [blob for _, blob in store.open_root_group().group("cameras/front").blobs()] == FRAMES
        # Without the option, variable-length bytes can't be re-encoded: said, nothing written.
        refused = tmp_path / "refused.itar"
        code, _, err = cli(capsys, "pack", "--zarr-format", str(other), str(directory), str(refused))
        assert code == 1 and str(directory) in err and "'cameras/front' holds variable-length elements" in err
        assert "--bytes-as-blobs" in err and not any(tmp_path.glob("refused.itar*"))


def test_pack_bytes_as_blobs_of_empty_elements(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for zarr_format in zarr_api.WRITABLE_FORMATS:
        directory = tmp_path / f"empty{zarr_format}.zarr"
        root = zarr_api.open_group(zarr_api.directory_store(directory), "w", zarr_format=zarr_format)
        zarr_api.create_vlen_bytes_array(root, "frames", [b"abc", b"", b"de"], chunks=(2,))
        packed = tmp_path / f"empty{zarr_format}.itar"
        code, _, err = cli(capsys, "pack", "--bytes-as-blobs", str(directory), str(packed))
        if zarr_format == 2:  # a zero-length |S0 blob doesn't exist in format 2
            assert code == 1 and "element 1 is empty" in err and "--zarr-format 3" in err
            assert not any(tmp_path.glob(f"{packed.name}*"))
        else:
            assert code == 0, err
            with IndexedTarZarrStore(packed) as store:
                assert [blob for _, blob in store.open_root_group().group("frames").blobs()] == [b"abc", b"", b"de"]
