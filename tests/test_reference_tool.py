"""Checks the bridge to the reference implementation (nvidia-ncore 19.8.3).

These tests run the reference for real, in its own virtual environment
(``tests/support/reference.py``), against the golden archives it wrote. They make sure
the tool reports exactly what the manifest says, so that interop tests built on it can
be trusted. The first run creates the reference venv and takes a while.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

from tests.support.reference import ReferenceToolError, reference_venv, run_reference

pytestmark = pytest.mark.reference

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ncore-19.8.3"
MANIFEST: dict[str, Any] = json.loads((FIXTURES / "manifest.json").read_text(encoding="utf-8"))
ARCHIVES: dict[str, Any] = MANIFEST["archives"]
SEQUENCE = "sequence-v2-consolidated.itar"
BLOCK = 512


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module", autouse=True)
def _reference_env() -> Path:
    """Creates (or reuses) the reference venv once, so its failure reads clearly."""
    return reference_venv()


# --------------------------------------------------------------------------- records


@pytest.mark.parametrize("name", sorted(ARCHIVES))
def test_dump_records_matches_manifest(name: str) -> None:
    expected = ARCHIVES[name]["records"]
    dump = run_reference("dump-records", str(FIXTURES / name))

    assert dump["records"] == expected
    assert sorted(dump["keys"]) == sorted(expected)
    # The reference iterates its index in payload-offset order.
    offsets = [dump["records"][key]["offset"] for key in dump["keys"]]
    assert offsets == sorted(offsets)


@pytest.mark.parametrize("name", sorted(ARCHIVES))
def test_manifest_offsets_agree_with_archive_bytes(name: str) -> None:
    """Sanity check of the fixtures themselves, independent of the reference."""
    data = (FIXTURES / name).read_bytes()
    for key, record in ARCHIVES[name]["records"].items():
        payload = data[record["offset"] : record["offset"] + record["size"]]
        assert len(payload) == record["size"], key
        assert _sha256(payload) == record["sha256"], key
        assert record["offset"] % BLOCK == 0, key


# --------------------------------------------------------------------------- zarr


def _assert_matches_manifest_arrays(dump: dict[str, Any]) -> None:
    expected = ARCHIVES[SEQUENCE]["arrays"]
    assert sorted(dump["arrays"]) == sorted(expected)
    for path, want in expected.items():
        got = dump["arrays"][path]
        assert got["kind"] == want["kind"], path
        assert got["sha256"] == want["sha256"], path
        if want["kind"] == "bytes":
            assert got["size"] == want["size"], path
            assert got["shape"] == [], path
            assert got["dtype"] == f"|S{want['size']}", path
        else:
            assert got["dtype"] == want["dtype"], path
            assert got["shape"] == want["shape"], path


@pytest.mark.parametrize("consolidated", [True, False], ids=["consolidated", "plain"])
def test_dump_zarr_matches_manifest(consolidated: bool) -> None:
    args = [str(FIXTURES / SEQUENCE)] + (["--consolidated"] if consolidated else [])
    dump = run_reference("dump-zarr", *args)

    _assert_matches_manifest_arrays(dump)
    assert dump["groups"][""] == ARCHIVES[SEQUENCE]["attributes"]
    sparse = dump["arrays"]["labels/sparse"]
    assert sparse["fill_value"] == -1
    assert sparse["chunks"] == [10]


def test_dump_zarr_consolidated_and_plain_agree() -> None:
    archive = str(FIXTURES / SEQUENCE)
    assert run_reference("dump-zarr", archive, "--consolidated") == run_reference("dump-zarr", archive)


def test_write_zarr_round_trips(tmp_path: Path) -> None:
    archive = tmp_path / "written.itar"
    written = run_reference("write-zarr", str(archive))

    assert run_reference("dump-zarr", str(archive)) == written
    assert run_reference("dump-zarr", str(archive), "--consolidated") == written

    arrays = written["arrays"]
    assert {"", "sensors", "sensors/lidar", "cameras", "cameras/front"} <= set(written["groups"])
    assert written["groups"][""]["version"] == 4
    points = arrays["sensors/lidar/points"]
    assert points["compressor"]["id"] == "blosc"
    assert points["dtype"] == "<f4"
    assert any(s % c for s, c in zip(points["shape"], points["chunks"], strict=True))
    assert arrays["sensors/lidar/ids"]["compressor"] is None
    assert arrays["sensors/lidar/valid"]["dtype"] == "|b1"
    blob = arrays["cameras/front/frame_0000"]
    assert blob["kind"] == "bytes"
    assert blob["dtype"] == f"|S{blob['size']}"
    assert arrays["sparse"]["fill_value"] == "NaN"

    records = run_reference("dump-records", str(archive))
    assert records["keys"][-1] == ".zmetadata.cbor.xz"
    assert ".zgroup" in records["records"]
    # 37x5 in 16x2 chunks: 3x3 chunk keys, the last row and column partial.
    assert {f"sensors/lidar/points/{i}.{j}" for i in range(3) for j in range(3)} <= set(records["records"])
    # Only chunk 2 of the NaN-filled array was written.
    assert [key for key in records["keys"] if key.startswith("sparse/")] == [
        "sparse/.zarray",
        "sparse/2",
    ]


# --------------------------------------------------------------------------- writing


def _write_records_cases() -> list[tuple[str, bytes]]:
    rng = random.Random(1234)
    return [
        ("empty", b""),
        ("one", b"\x00"),
        ("block/511", rng.randbytes(511)),
        ("block/512", rng.randbytes(512)),
        ("block/513", rng.randbytes(513)),
        ("unicode/kamera_vorn_üß/光", "grüße, 世界".encode()),
        ("long/" + "k" * 120 + "/tail", rng.randbytes(17)),
        ("big", rng.randbytes((1 << 20) + 12345)),
        ("last", b"end!"),
    ]


def _check_written(archive: Path, records: list[tuple[str, bytes]], dump: dict[str, Any]) -> None:
    assert dump["keys"] == [key for key, _ in records]
    assert dump["records"] == {
        key: {
            "offset": dump["records"][key]["offset"],
            "size": len(payload),
            "sha256": _sha256(payload),
        }
        for key, payload in records
    }
    # Offsets: block-aligned, increasing, each payload after the previous one's end
    # (with at least one header block in between), and really where the bytes are.
    data = archive.read_bytes()
    previous_end = 0
    for key, payload in records:
        offset = dump["records"][key]["offset"]
        assert offset % BLOCK == 0, key
        assert offset >= previous_end + BLOCK, key
        assert data[offset : offset + len(payload)] == payload, key
        previous_end = offset + len(payload)
    assert len(data) % BLOCK == 0
    assert run_reference("dump-records", str(archive)) == dump


def test_write_records_round_trips(tmp_path: Path) -> None:
    records = _write_records_cases()
    assert any(len(key) > 100 for key, _ in records)
    assert any(not key.isascii() for key, _ in records)
    assert any(len(payload) > 1 << 20 for _, payload in records)

    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps({"records": [[key, base64.b64encode(payload).decode("ascii")] for key, payload in records]}),
        encoding="utf-8",
    )
    archive = tmp_path / "records.itar"
    dump = run_reference("write-records", str(archive), str(spec))
    _check_written(archive, records, dump)


def test_write_records_spec_from_stdin(tmp_path: Path) -> None:
    records = [("a", b"alpha"), ("b/" + "x" * 200, b""), ("c", b"\xff" * 1000)]
    spec = {"records": [[key, base64.b64encode(payload).decode("ascii")] for key, payload in records]}
    archive = tmp_path / "stdin.itar"
    dump = run_reference("write-records", str(archive), "-", stdin=json.dumps(spec).encode())
    _check_written(archive, records, dump)


def test_write_records_nothing_gives_empty_archive(tmp_path: Path) -> None:
    archive = tmp_path / "empty.itar"
    dump = run_reference("write-records", str(archive), "-", stdin=b'{"records": []}')
    assert dump == {"keys": [], "records": {}}
    # The reference writes deterministically: same bytes as its golden empty archive.
    assert archive.read_bytes() == (FIXTURES / "empty.itar").read_bytes()


def test_write_records_reproduces_golden_raw_archive(tmp_path: Path) -> None:
    """Rewriting the golden raw records in order gives the golden archive byte for byte."""
    golden = (FIXTURES / "raw-records.itar").read_bytes()
    manifest = ARCHIVES["raw-records.itar"]["records"]
    ordered = sorted(manifest.items(), key=lambda item: item[1]["offset"])
    records = [(key, golden[rec["offset"] : rec["offset"] + rec["size"]]) for key, rec in ordered]
    spec = {"records": [[key, base64.b64encode(payload).decode("ascii")] for key, payload in records]}
    archive = tmp_path / "raw-records.itar"
    dump = run_reference("write-records", str(archive), "-", stdin=json.dumps(spec).encode())
    assert dump["records"] == manifest
    assert archive.read_bytes() == golden


def test_tool_failure_reports_stderr(tmp_path: Path) -> None:
    with pytest.raises(ReferenceToolError, match=r"No such file or directory"):
        run_reference("dump-records", str(tmp_path / "missing.itar"))
    not_itar = tmp_path / "plain.itar"
    not_itar.write_bytes(bytes(2048))
    with pytest.raises(ReferenceToolError, match="invalid index header"):
        run_reference("dump-records", str(not_itar))
