"""Archives written without fsync reserve their file's blocks ahead of the writes once the
file is long enough (``archive/_preallocate.py``), and give back what they didn't use: a
published archive, and a partial file kept for recovery, hold no blocks past their end."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ncore_like import IndexedTarArchive, recover
from ncore_like.archive._preallocate import START

RECORD = 2 << 20
COUNT = 20  # 40 MB: reserving starts at 16 MB
SLACK = 1 << 20  # the file system's own blocks (extent tree) besides the data's


def allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def records() -> dict[str, bytes]:
    return {f"r/{index:03d}": os.urandom(RECORD) for index in range(COUNT)}


@pytest.fixture(autouse=True)
def _blocks_are_reported(tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    probe.write_bytes(b"x" * 65536)
    if allocated(probe) == 0:
        pytest.skip("this file system reports no allocated blocks")
    probe.unlink()


def test_a_large_archive_without_fsync_reserves_ahead_and_publishes_no_reserved_block(tmp_path: Path) -> None:
    path, data = tmp_path / "big.itar", records()
    with IndexedTarArchive(path, mode="w", durable=False) as archive:
        for key, value in data.items():
            archive[key] = value
        partial = tmp_path / "big.itar.partial"
        size = partial.stat().st_size
        assert size > START
        # Blocks reserved past the end of the partial file: the writes went into them.
        assert allocated(partial) > size + SLACK, (allocated(partial), size)
    size = path.stat().st_size
    assert allocated(path) <= size + SLACK, (allocated(path), size)
    archive = IndexedTarArchive(path, verify_checksums=True)
    assert {key: archive[key] for key in archive.keys()} == data


def test_a_partial_file_kept_for_recovery_holds_no_reserved_block(tmp_path: Path) -> None:
    path, data = tmp_path / "failed.itar", records()
    with (
        pytest.raises(RuntimeError, match="source failed"),
        IndexedTarArchive(path, mode="w", durable=False) as archive,
    ):
        for key, value in data.items():
            archive[key] = value
        raise RuntimeError("source failed")
    partial = tmp_path / "failed.itar.partial"
    assert not path.exists() and partial.exists()
    assert allocated(partial) <= partial.stat().st_size + SLACK, (allocated(partial), partial.stat().st_size)
    report = recover(path)
    assert not report.damaged, report
    archive = IndexedTarArchive(path, verify_checksums=True)
    assert {key: archive[key] for key in archive.keys()} == data
