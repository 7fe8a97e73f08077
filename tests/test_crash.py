"""Writers killed with SIGKILL at random points: nothing half-written appears at the
archive's name, and ``recover`` gets back every record written before the last ``flush()``
returned, with no wrong byte. Writers killed or interrupted (SIGKILL, SIGINT, SIGTERM)
while replacing an archive leave it as it was, byte for byte."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from upath import UPath

from ncore_like import IndexedTarArchive, IndexedTarZarrStore, recover
from tests.support.killed_writer import key, payload, volume

REPO = Path(__file__).resolve().parent.parent


def run_and_kill(
    args: list[str],
    kill_after: int,
    delay: float,
    signal_number: int = signal.SIGKILL,
    *,
    hold: float = 0.0,
    durable: bool = True,
) -> list[str]:
    """Runs the writer, signals it (SIGKILL by default) after ``kill_after`` lines of its
    log (plus ``delay`` seconds), and returns the lines it printed. ``hold``: seconds the
    writer waits after its last record before it closes (so that the signal lands first).
    ``durable``: the writer's archive fsyncs (else ``durable=False``)."""
    environment = {**os.environ, "KILLED_WRITER_HOLD": str(hold), "KILLED_WRITER_NOT_DURABLE": str(int(not durable))}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.killed_writer", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env=environment,
    )
    assert process.stdout is not None
    lines: list[str] = []
    try:
        while len(lines) < kill_after:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line.strip())
        time.sleep(delay)
    finally:
        process.send_signal(signal_number)
        process.wait(timeout=60)
    # The rest through the same text stream: readline() may have buffered lines already,
    # which communicate() (reading the pipe itself) would lose, e.g. "closing".
    lines += [line.strip() for line in process.stdout.read().splitlines() if line.strip()]
    process.stdout.close()
    return lines


def expected(seed: int, count: int) -> dict[str, bytes]:
    return {key(index): payload(seed, index) for index in range(count)}


def flushed(lines: list[str]) -> int:
    counts = [int(line.split()[1]) for line in lines if line.startswith("flushed ")]
    return counts[-1] if counts else 0


@pytest.mark.parametrize("seed", range(10))
def test_killed_raw_writers_lose_nothing_flushed(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    count, flush_every = 40, rng.choice((3, 7, 10))
    path = tmp_path / "k.itar"
    # Kill while writing records, right after a flush, or during close (the last lines).
    kill_after = rng.randrange(1, count + count // flush_every + 2)
    lines = run_and_kill([str(path), str(seed), str(count), str(flush_every), "records"], kill_after, rng.random() / 50)
    data = expected(seed, count)
    if path.exists():  # closed before the kill: complete and valid
        assert "closing" in lines, lines
        archive = IndexedTarArchive(path, verify_checksums=True)
        assert {name: archive[name] for name in archive.keys()} == data
        return
    assert "closed" not in lines
    before_flush = flushed(lines)
    if not (tmp_path / "k.itar.partial").exists():
        assert before_flush == 0, lines
        return
    report = recover(path)
    archive = IndexedTarArchive(path, verify_checksums=True)
    kept = {name: archive[name] for name in archive.keys()}
    context = f"writer log {lines}, recovery {report}"
    assert all(kept[name] == data[name] for name in kept), context  # no wrong byte
    assert not report.damaged, context
    assert {key(index) for index in range(before_flush)} <= kept.keys(), context


@pytest.mark.parametrize("seed", range(4))
def test_killed_hierarchy_writers_recover_a_consolidated_hierarchy(tmp_path: Path, seed: int) -> None:
    rng = random.Random(100 + seed)
    count, flush_every = 16, 4
    path = tmp_path / "h.itar"
    kill_after = rng.randrange(flush_every + 1, count)
    lines = run_and_kill([str(path), str(seed), str(count), str(flush_every), "hierarchy"], kill_after, 0.0)
    before_flush = flushed(lines)
    assert before_flush >= flush_every and not path.exists()
    report = recover(path)
    assert any("consolidated metadata regenerated" in note for note in report.notes), report.notes
    frames = IndexedTarZarrStore(path, verify_checksums=True).open_root_group().group("frames")
    data = expected(seed, count)
    for index in range(before_flush):
        name = key(index).rpartition("/")[2]
        np.testing.assert_array_equal(frames.array(name).read(), np.frombuffer(data[key(index)], np.uint8))
    with warnings.catch_warnings():
        # Chunks of arrays written after the last flush are records outside the hierarchy,
        # which the consolidated group doesn't list (zarr-python would warn about them).
        warnings.simplefilter("error")
        names = frames.members()
    for name in names:
        np.testing.assert_array_equal(frames.array(name).read(), np.frombuffer(data[f"frames/{name}"], np.uint8))


@pytest.mark.parametrize("seed", range(4))
def test_killed_writers_of_compressed_volumes_lose_nothing_flushed(tmp_path: Path, seed: int) -> None:
    """Their chunks go to the disk directly, on a thread behind the writer: a kill with
    writes queued or in flight loses those (not flushed), and every chunk that recovery
    keeps is the chunk written."""
    rng = random.Random(200 + seed)
    count, flush_every = 12, 3
    path = tmp_path / "v.itar"
    kill_after = rng.randrange(flush_every + 1, count + 2)
    lines = run_and_kill([str(path), str(seed), str(count), str(flush_every), "volumes"], kill_after, rng.random() / 50)
    if path.exists():  # closed before the kill
        assert "closing" in lines, lines
        before_flush = count
    else:
        before_flush = flushed(lines)
        report = recover(path)
        assert not report.damaged, report
    frames = IndexedTarZarrStore(path, verify_checksums=True).open_root_group(consolidated=False).group("frames")
    names = frames.members()
    assert {key(index).rpartition("/")[2] for index in range(before_flush)} <= set(names), (names, lines)
    for name in names:
        array = frames.array(name)
        values = volume(seed, int(name))
        for chunk in range(values.shape[0]):
            read = array[chunk]
            if int(name) < before_flush:
                np.testing.assert_array_equal(read, values[chunk])
            else:  # written after the last flush: a chunk lost reads as the fill value
                assert np.array_equal(read, values[chunk]) or not read.any(), (name, chunk)


@pytest.mark.parametrize("mode", ["records", "hierarchy"])
@pytest.mark.parametrize("signal_number", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM], ids=["KILL", "INT", "TERM"])
def test_writers_stopped_by_a_signal_leave_the_archive_they_replace_as_it_was(
    tmp_path: Path, mode: str, signal_number: int
) -> None:
    rng = random.Random(f"{mode}{signal_number}")
    count, flush_every = 24, 5
    for attempt in range(3):
        path = tmp_path / f"{attempt}" / "old.itar"
        path.parent.mkdir()
        with IndexedTarZarrStore(path, mode="w") as store:  # the intact archive at the name
            store.create_root_group({"old": True}).create_array("a", np.arange(1000.0))
            store.consolidate()
        before = path.read_bytes()
        # Stopped while writing records, after a flush, or while closing (the last lines).
        kill_after = rng.randrange(1, count + count // flush_every + 2)
        lines = run_and_kill(
            [str(path), str(attempt), str(count), str(flush_every), mode], kill_after, rng.random() / 50, signal_number
        )
        if "closing" in lines and path.read_bytes() != before:
            # Closed before the signal (perhaps before it could log "closed"): the new
            # archive, complete.
            data = expected(attempt, count)
            if mode == "records":
                archive = IndexedTarArchive(path, verify_checksums=True)
                assert all(archive[key(index)] == data[key(index)] for index in range(count))
            else:
                frames = IndexedTarZarrStore(path, verify_checksums=True).open_root_group().group("frames")
                for index in range(count):
                    written = frames.array(key(index).rpartition("/")[2]).read()
                    np.testing.assert_array_equal(written, np.frombuffer(data[key(index)], np.uint8))
            continue
        assert path.read_bytes() == before, lines
        # What it wrote is in its partial file, which recovery never writes over the archive.
        if (tmp_path / f"{attempt}" / "old.itar.partial").exists():
            with pytest.raises(FileExistsError):
                recover(path)
            assert path.read_bytes() == before


def test_a_hierarchy_killed_before_its_first_flush_is_recovered_without_consolidation(tmp_path: Path) -> None:
    path = tmp_path / "e.itar"
    # Far more arrays than it writes before the signal lands, on a busy machine too (with 30
    # it sometimes reached its close, which writes the node metadata).
    lines = run_and_kill([str(path), "1", "2000", "0", "hierarchy"], 10, 0.0)
    assert "closing" not in lines, lines
    report = recover(path)
    assert any("no zarr root group" in note for note in report.notes), report.notes
    # Records not flushed may have been in the write buffer (lost); those on disk verify.
    archive = IndexedTarArchive(path, verify_checksums=True)
    assert all(isinstance(archive[name], bytes) for name in archive.keys())


@pytest.mark.parametrize("seed", range(3))
def test_a_writer_killed_with_a_full_write_buffer_loses_only_unwritten_records(tmp_path: Path, seed: int) -> None:
    # ~8 MB of small records and no flush: the write buffer filled and reached the file
    # more than once before the kill. Recovery gets back the records in order up to some
    # point (those the buffer wrote), every byte right; only the buffer's last fill is lost.
    # The writer has far more to write than it gets to, so the kill lands while it writes
    # however late it arrives on a busy machine.
    count = 20_000  # ~780 MB if it ever got that far
    path = tmp_path / "b.itar"
    lines = run_and_kill(
        [str(path), str(seed), str(count), "0", "records"], random.Random(seed).randrange(150, 190), 0.0
    )
    assert "closing" not in lines
    report = recover(path)
    assert not report.damaged, report
    archive = IndexedTarArchive(path, verify_checksums=True)
    kept = {name: archive[name] for name in archive.keys()}
    written = sum(len(payload(seed, index)) for index in range(len(lines)))
    assert written > 4 << 20 and kept, (written, report)  # the buffer was drained at least once
    assert kept == {key(index): payload(seed, index) for index in range(len(kept))}


@pytest.mark.parametrize("seed", range(2))
def test_a_writer_without_fsync_killed_past_its_reserved_blocks_loses_nothing_flushed(
    tmp_path: Path, seed: int
) -> None:
    # durable=False: the records reach the page cache only (which outlives the process),
    # and past 16 MB the file's blocks are reserved ahead of the writes (archive/
    # _preallocate.py). Killed there, recovery finds every flushed record and no wrong
    # byte: the reserved blocks lie past the file's end, where no record is looked for.
    count, flush_every = 5_000, 50  # ~200 MB if it ever got that far
    path = tmp_path / "n.itar"
    kill_after = random.Random(seed).randrange(700, 900)  # ~30 MB of records written
    lines = run_and_kill([str(path), str(seed), str(count), str(flush_every), "records"], kill_after, 0.0,
                         durable=False)  # fmt: skip
    assert "closing" not in lines
    written = sum(len(payload(seed, index)) for index in range(flushed(lines)))
    assert written > 20 << 20, written  # past where reserving starts
    report = recover(path)
    assert not report.damaged, report
    archive = IndexedTarArchive(path, verify_checksums=True)
    kept = {name: archive[name] for name in archive.keys()}
    assert len(kept) >= flushed(lines), (len(kept), lines[-3:])
    assert kept == expected(seed, len(kept))


# -- object storage --------------------------------------------------------------------------


def _exists(bucket: UPath, name: str) -> bool:
    path = bucket / name
    fs: Any = path.fs
    fs.invalidate_cache()
    return bool(path.exists())


@pytest.mark.s3
def test_a_failed_with_block_leaves_no_object(s3_bucket: UPath) -> None:
    with pytest.raises(RuntimeError), IndexedTarArchive(s3_bucket / "f.itar", mode="w") as archive:
        archive["a"] = os.urandom(1000)
        raise RuntimeError("source failed")
    assert not _exists(s3_bucket, "f.itar")
    with IndexedTarArchive(s3_bucket / "f.itar", mode="w") as archive:
        archive["a"] = b"1"
    assert _exists(s3_bucket, "f.itar") and IndexedTarArchive(s3_bucket / "f.itar")["a"] == b"1"


@pytest.mark.s3
def test_a_failed_overwrite_leaves_the_object_as_it_was(s3_bucket: UPath) -> None:
    target = s3_bucket / "o.itar"
    with IndexedTarArchive(target, mode="w") as archive:
        archive["a"] = b"old"
    before = target.read_bytes()
    with pytest.raises(RuntimeError), IndexedTarArchive(target, mode="w") as archive:
        archive["a"] = os.urandom(12 << 20)  # several multipart parts on their way
        archive.flush()
        raise RuntimeError("source failed")
    assert target.read_bytes() == before


@pytest.mark.s3
@pytest.mark.parametrize("signal_number", [signal.SIGKILL, signal.SIGINT], ids=["KILL", "INT"])
def test_a_writer_stopped_mid_upload_leaves_the_object_it_replaces(
    s3_bucket: UPath, s3_storage_options: dict[str, Any], signal_number: int
) -> None:
    target = s3_bucket / "k.itar"
    with IndexedTarArchive(target, mode="w") as archive:
        archive["old"] = b"the archive that was there"
    before = target.read_bytes()
    options = {**s3_storage_options, "default_block_size": 5 << 20}
    args = [str(target), "3", "60", "0", "records", json.dumps(options)]
    lines = run_and_kill(args, 50, 0.0, signal_number, hold=30)
    assert "closed" not in lines
    target.fs.invalidate_cache()
    assert target.read_bytes() == before
    if signal_number == signal.SIGINT:  # the interrupted writer abandoned its upload as it exited
        uploads = target.fs.call_s3("list_multipart_uploads", Bucket=s3_bucket.path.strip("/"))
        assert not uploads.get("Uploads"), uploads


@pytest.mark.s3
def test_a_writer_killed_mid_upload_leaves_no_object(s3_bucket: UPath, s3_storage_options: dict[str, Any]) -> None:
    # 60 records of up to 200 kB: several multipart parts are on their way when it dies.
    options = {**s3_storage_options, "default_block_size": 5 << 20}
    lines = run_and_kill([f"{s3_bucket}/k.itar", "3", "60", "0", "records", json.dumps(options)], 50, 0.0, hold=30)
    assert "closed" not in lines
    assert not _exists(s3_bucket, "k.itar")
