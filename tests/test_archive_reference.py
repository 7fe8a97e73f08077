"""Interop with the reference implementation nvidia-ncore 19.8.3, run in its own venv."""

from __future__ import annotations

import base64
import hashlib
import json
import random
from pathlib import Path

import pytest

from ncore_like import IndexedTarArchive, Record
from tests.support.reference import run_reference

pytestmark = pytest.mark.reference


def records_for_interop() -> dict[str, bytes]:
    rng = random.Random(3)
    records = {f"frames/{i:04d}": rng.randbytes(rng.randrange(1, 20_000)) for i in range(30)}
    records["empty"] = b""
    records["unicode/kamera_vorn_üß/光"] = b"unicode"
    records["long/" + "k" * 140] = b"long"
    records["big"] = rng.randbytes((1 << 20) + 1234)
    records["after"] = b"after"
    return records


def test_reference_reads_our_archives_record_for_record(tmp_path: Path) -> None:
    records = records_for_interop()
    metadata = {".zgroup": b'{"zarr_format": 2}', "frames/.zattrs": b'{"fps": 10}'}
    path = tmp_path / "ours.itar"
    with IndexedTarArchive(path, mode="w") as archive:
        for key, value in {**records, **metadata}.items():
            archive[key] = value
    dump = run_reference("dump-records", str(path))
    ours = IndexedTarArchive(path)
    assert ours.has_checksums  # nvidia-ncore reads the three keys it knows and ignores the checksums
    assert dump["keys"] == ours.keys()
    for key, value in {**records, **metadata}.items():
        entry = dump["records"][key]
        assert Record(entry["offset"], entry["size"]) == ours.records[key]
        assert entry["sha256"] == hashlib.sha256(value).hexdigest()


def test_we_read_reference_archives_record_for_record(tmp_path: Path) -> None:
    records = records_for_interop()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"records": [[k, base64.b64encode(v).decode()] for k, v in records.items()]}))
    path = tmp_path / "theirs.itar"
    dump = run_reference("write-records", str(path), str(spec))
    for tail in (None, 1 << 20):
        archive = IndexedTarArchive(path, index_tail_read_size=tail)
        assert archive.keys() == dump["keys"] == list(records)
        for key, value in records.items():
            entry = dump["records"][key]
            assert archive.records[key] == Record(entry["offset"], entry["size"])
            assert archive[key] == value


def test_same_records_give_the_same_bytes_as_the_reference(tmp_path: Path) -> None:
    # Without node metadata (which we append at close) and without checksums, the two
    # writers agree byte for byte; with checksums, on every record's place in the file.
    records = records_for_interop()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"records": [[k, base64.b64encode(v).decode()] for k, v in records.items()]}))
    run_reference("write-records", str(tmp_path / "theirs.itar"), str(spec))
    for checksums in (False, True):
        with IndexedTarArchive(tmp_path / f"ours-{checksums}.itar", mode="w", checksums=checksums) as archive:
            for key, value in records.items():
                archive[key] = value
    theirs = (tmp_path / "theirs.itar").read_bytes()
    assert (tmp_path / "ours-False.itar").read_bytes() == theirs
    with_checksums = IndexedTarArchive(tmp_path / "ours-True.itar")
    assert with_checksums.has_checksums and dict(with_checksums.records) == dict(
        IndexedTarArchive(tmp_path / "theirs.itar").records
    )


def test_reference_reads_recovered_archives(tmp_path: Path) -> None:
    from ncore_like import recover

    records = records_for_interop()
    path = tmp_path / "crashed.itar"
    archive = IndexedTarArchive(path, mode="w")
    for key, value in records.items():
        archive[key] = value
    archive.flush()
    del archive  # never closed, as if its writer died
    report = recover(path)
    assert report.records == len(records)
    dump = run_reference("dump-records", str(path))
    assert dump["keys"] == list(records)
    for key, value in records.items():
        assert dump["records"][key]["sha256"] == hashlib.sha256(value).hexdigest()
