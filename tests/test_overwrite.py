"""Never lose what is already there: exclusive creation (``mode="x"``/``"w-"``), recovery
that never replaces an archive, and the commands that write (``pack``, ``extract``,
``recover``) over existing files, with failing sources, Ctrl-C, SIGTERM and SIGKILL; what
was there is compared byte for byte."""

from __future__ import annotations

import errno
import functools
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from upath import UPath

from ncore_like import (
    ArchiveExistsError,
    IndexedTarArchive,
    IndexedTarZarrStore,
    UnfinishedArchiveError,
    recover,
)
from ncore_like.archive import verify_archive
from ncore_like.archive._recover import recover_records
from ncore_like.archive._writer import link_no_clobber
from tests.support.archives import die
from tests.support.fixtures import HttpRoot
from tests.test_cli import build_archive, cli, corrupt_chunk
from tests.test_integrity import flip

REPO = Path(__file__).resolve().parent.parent
SIGNALS = pytest.mark.parametrize(
    "signal_number", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["INT", "TERM", "KILL"]
)
#: Exit codes of ``ncore-like`` stopped by a signal it handles (a killed one: -9).
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGKILL: -signal.SIGKILL}


def old_archive(path: Path, marker: str = "old") -> bytes:
    """An intact archive at ``path`` (the one nothing may destroy); returns its bytes."""
    with IndexedTarZarrStore(path, mode="w") as store:
        store.create_root_group({"marker": marker}).create_array("a", np.arange(1000.0))
        store.consolidate()
    return path.read_bytes()


def partial(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def suggested_command(message: str) -> list[str]:
    """The ``ncore-like`` command an error message suggests, as arguments."""
    found = re.search(r"`ncore-like ([^`]+)`", message)
    assert found is not None, message
    return shlex.split(found.group(1))


# -- exclusive creation ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["x", "w-"])
@pytest.mark.parametrize("opener", [IndexedTarArchive, IndexedTarZarrStore])
def test_exclusive_modes_refuse_an_existing_archive(tmp_path: Path, mode: str, opener: type) -> None:
    path = tmp_path / "a.itar"
    before = old_archive(path)
    with pytest.raises(ArchiveExistsError) as refused:
        opener(path, mode=mode)
    assert isinstance(refused.value, FileExistsError) and refused.value.archive == str(path)
    assert str(path) in str(refused.value) and "mode 'w'" in str(refused.value)
    assert path.read_bytes() == before and not partial(path).exists()
    fresh = tmp_path / "b.itar"
    with opener(fresh, mode=mode) as writer:
        archive = writer if isinstance(writer, IndexedTarArchive) else writer.archive
        archive["k"] = b"new"
        assert archive.mode == "w"
    assert IndexedTarArchive(fresh)["k"] == b"new"


def test_mode_w_keeps_replacing_and_other_modes_are_named(tmp_path: Path) -> None:
    path = tmp_path / "a.itar"
    old_archive(path)
    with IndexedTarArchive(path, mode="w") as archive:
        archive["k"] = b"new"
    assert IndexedTarArchive(path).keys() == ["k"]
    with pytest.raises(ValueError, match=r"invalid mode 'a' \(expected 'r', 'w', 'w-' or 'x'\)"):
        IndexedTarArchive(path, mode="a")  # type: ignore[arg-type]


def test_exclusive_creation_never_replaces_a_file_created_while_it_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "a.itar"
    writer = IndexedTarArchive(path, mode="x")
    writer["k"] = b"mine"
    path.write_bytes(b"someone else's file")  # created meanwhile, e.g. by another program
    with pytest.raises(ArchiveExistsError, match="created by another writer") as refused:
        writer.close()
    assert path.read_bytes() == b"someone else's file"
    # The finished archive is kept under its partial name; the command given recovers it
    # under a free name, safely as printed.
    assert partial(path).exists() and str(partial(path)) in str(refused.value)
    code, _, err = cli(capsys, *suggested_command(str(refused.value)))
    assert code == 0, err
    assert IndexedTarArchive(tmp_path / "a.recovered.itar")["k"] == b"mine"
    assert path.read_bytes() == b"someone else's file" and not partial(path).exists()


def test_of_many_exclusive_publishers_of_one_name_exactly_one_wins(tmp_path: Path) -> None:
    # What publishing an archive in mode "x" does with its finished partial file, from 16
    # threads at the same moment.
    target = tmp_path / "a.itar"
    sources = []
    for number in range(16):
        source = tmp_path / f"{number}.itar.partial"
        source.write_bytes(str(number).encode())
        sources.append(source)
    barrier = threading.Barrier(len(sources))
    outcomes = [""] * len(sources)

    def publish(number: int) -> None:
        barrier.wait()
        try:
            link_no_clobber(str(sources[number]), str(target))
            outcomes[number] = "won"
        except FileExistsError:
            outcomes[number] = "refused"

    threads = [threading.Thread(target=publish, args=(number,)) for number in range(len(sources))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["refused"] * 15 + ["won"], outcomes
    winner = outcomes.index("won")
    assert target.read_bytes() == str(winner).encode() and not sources[winner].exists()
    assert all(source.exists() for number, source in enumerate(sources) if number != winner)  # left as they were


def test_exclusive_creation_without_hard_links_still_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(source: str, target: str) -> None:
        raise OSError(errno.EPERM, "Operation not permitted", source)

    monkeypatch.setattr(os, "link", no_links)  # a filesystem without hard links (e.g. FAT)
    path = tmp_path / "a.itar"
    with IndexedTarArchive(path, mode="x") as archive:
        archive["k"] = b"1"
    assert IndexedTarArchive(path)["k"] == b"1" and not partial(path).exists()
    before = path.read_bytes()
    with pytest.raises(ArchiveExistsError):
        IndexedTarArchive(path, mode="x")
    other = tmp_path / "b.itar"
    writer = IndexedTarArchive(other, mode="x")
    other.write_bytes(b"meanwhile")
    with pytest.raises(ArchiveExistsError):
        writer.close()
    assert other.read_bytes() == b"meanwhile" and path.read_bytes() == before


def test_exclusive_creation_on_a_filesystem_that_writes_in_place(tmp_path: Path) -> None:
    # memory:// (like SFTP) writes files in place: the archive is written under its partial
    # name and moved at close, so the old one stays intact meanwhile and after a failure.
    target = UPath(f"memory://overwrite-{tmp_path.name}/a.itar")
    with IndexedTarArchive(target, mode="w") as archive:
        archive["k"] = b"old"
    before = target.read_bytes()
    with pytest.raises(RuntimeError), IndexedTarArchive(target, mode="w") as archive:
        archive["k"] = b"new"
        assert target.read_bytes() == before
        raise RuntimeError("source failed")
    assert target.read_bytes() == before and not target.with_name("a.itar.partial").exists()
    with pytest.raises(ArchiveExistsError):
        IndexedTarArchive(target, mode="x")
    writer = IndexedTarArchive(target.with_name("b.itar"), mode="x")
    target.with_name("b.itar").write_bytes(b"meanwhile")
    with pytest.raises(ArchiveExistsError, match="discarded"):
        writer.close()
    assert target.with_name("b.itar").read_bytes() == b"meanwhile"
    assert not target.with_name("b.itar.partial").exists()


@pytest.mark.s3
def test_exclusive_creation_on_s3_is_a_conditional_upload(s3_bucket: UPath, monkeypatch: pytest.MonkeyPatch) -> None:
    target = s3_bucket / "a.itar"
    with IndexedTarArchive(target, mode="x") as archive:
        archive["k"] = b"first"
    with pytest.raises(ArchiveExistsError):
        IndexedTarArchive(target, mode="x")
    # Another writer completes its upload between this one's last look and its own
    # completion: the server refuses the second (If-None-Match), nothing is replaced.
    other = s3_bucket / "b.itar"
    writer = IndexedTarArchive(other, mode="x")
    writer["k"] = os.urandom(6 << 20)  # a multipart upload
    with IndexedTarArchive(other, mode="w") as first:
        first["k"] = b"the other writer's"
    before = other.read_bytes()
    fs = other.fs
    monkeypatch.setattr(fs, "exists", lambda path, **kwargs: False)  # the look comes too early
    with pytest.raises(ArchiveExistsError, match="discarded"):
        writer.close()
    monkeypatch.undo()
    fs.invalidate_cache()
    assert other.read_bytes() == before
    assert not fs.call_s3("list_multipart_uploads", Bucket=s3_bucket.path.strip("/")).get("Uploads")


@pytest.mark.s3
def test_a_failed_s3_writer_dropped_without_closing_replaces_nothing(s3_bucket: UPath) -> None:
    import gc

    target = s3_bucket / "a.itar"
    with IndexedTarArchive(target, mode="w") as archive:
        archive["k"] = b"old"
    before = target.read_bytes()

    def job() -> None:
        writer = IndexedTarArchive(target, mode="w")  # no with block
        writer["k"] = os.urandom(1000)
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError):
        job()
    gc.collect()  # the file object's finaliser closes it: that must complete nothing
    target.fs.invalidate_cache()
    assert target.read_bytes() == before
    assert not target.fs.call_s3("list_multipart_uploads", Bucket=s3_bucket.path.strip("/")).get("Uploads")


# -- partial files: running writers, recovery ----------------------------------------------


def test_a_second_writer_is_told_whether_the_first_still_runs(tmp_path: Path) -> None:
    path = tmp_path / "a.itar"
    first = IndexedTarArchive(path, mode="w")
    first["k"] = b"1"
    first.flush()
    with pytest.raises(UnfinishedArchiveError, match="being written by another writer, which is running"):
        IndexedTarArchive(path, mode="w")
    die(first)
    with pytest.raises(UnfinishedArchiveError, match="earlier writer") as dead:
        IndexedTarArchive(path, mode="w")
    # Nothing at the name: recovering in place is what it suggests.
    assert suggested_command(str(dead.value)) == ["recover", str(path)]
    old_archive(tmp_path / "b.itar")
    partial(tmp_path / "a.itar").rename(partial(tmp_path / "b.itar"))
    with pytest.raises(UnfinishedArchiveError) as beside:
        IndexedTarArchive(tmp_path / "b.itar", mode="w")
    assert suggested_command(str(beside.value)) == [
        "recover",
        str(partial(tmp_path / "b.itar")),
        "--output",
        str(tmp_path / "b.recovered.itar"),
    ]


def test_recovery_refuses_a_partial_file_a_running_writer_holds(tmp_path: Path) -> None:
    path = tmp_path / "a.itar"
    writer = IndexedTarArchive(path, mode="w")
    writer["k"] = b"1"
    writer.flush()
    before = partial(path).read_bytes()
    with pytest.raises(UnfinishedArchiveError, match="running now"):
        recover(path)
    with pytest.raises(UnfinishedArchiveError, match="running now"):
        recover(path, output=tmp_path / "copy.itar")  # a copy of a moving target
    assert partial(path).read_bytes() == before and not (tmp_path / "copy.itar").exists()
    writer.close()  # the writer never noticed
    assert IndexedTarArchive(path)["k"] == b"1"


def test_recovery_refuses_to_replace_an_archive_and_writes_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "a.itar"
    before = old_archive(path)
    with pytest.raises(RuntimeError), IndexedTarArchive(path, mode="w") as archive:
        archive["new"] = b"new"
        raise RuntimeError("failed overwrite")
    with pytest.raises(ArchiveExistsError) as refused:
        recover(path)
    message = str(refused.value)
    assert str(path) in message and str(partial(path)) in message and "--output" in message
    assert path.read_bytes() == before and partial(path).exists()
    occupied = tmp_path / "occupied.itar"
    occupied.write_bytes(b"x")
    with pytest.raises(ArchiveExistsError):
        recover(path, output=occupied)
    assert occupied.read_bytes() == b"x" and path.read_bytes() == before
    report = recover(path, output=tmp_path / "beside.itar")
    assert IndexedTarArchive(tmp_path / "beside.itar")["new"] == b"new" and report.records == 1
    assert path.read_bytes() == before
    assert not partial(path).exists() and any("removed" in note for note in report.notes)


def test_recovery_in_place_never_replaces_an_archive_created_meanwhile(tmp_path: Path) -> None:
    path = tmp_path / "a.itar"
    writer = IndexedTarArchive(path, mode="w")
    writer["k"] = b"recorded"
    writer.flush()
    die(writer)
    recovered, _ = recover_records(path)
    path.write_bytes(b"someone else's")
    with pytest.raises(ArchiveExistsError):
        recovered.close()
    assert path.read_bytes() == b"someone else's"
    report = recover(partial(path), output=tmp_path / "b.itar")  # it is all still there
    assert report.records == 1 and IndexedTarArchive(tmp_path / "b.itar")["k"] == b"recorded"


def test_aborting_a_recovery_in_place_keeps_the_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "a.itar"
    writer = IndexedTarArchive(path, mode="w")
    writer["k"] = b"recorded"
    writer.flush()
    die(writer)
    recovered, _ = recover_records(path)
    recovered.abort()  # e.g. what a failure while consolidating does
    assert partial(path).exists()
    recover(path)
    assert IndexedTarArchive(path)["k"] == b"recorded"


def test_abort_after_a_failure_discards_only_its_own_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "a.itar"
    with pytest.raises(RuntimeError), IndexedTarArchive(path, mode="w") as failed:
        failed["k"] = b"1"
        raise RuntimeError("failed")
    failed.abort()  # discards what the failed block kept
    assert not partial(path).exists()
    with pytest.raises(RuntimeError), IndexedTarArchive(path, mode="w") as failed:
        failed["k"] = b"1"
        raise RuntimeError("failed")
    recover(path)  # its partial file became the archive, and the name another writer's file
    newer = IndexedTarArchive(path, mode="w")
    newer["k"] = b"2"
    failed.abort()
    assert partial(path).exists()
    newer.close()
    assert IndexedTarArchive(path)["k"] == b"2"


def test_damaged_files_kept_by_earlier_recoveries_are_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "a.itar"
    kept = []
    for attempt in range(2):
        writer = IndexedTarArchive(path, mode="w")
        writer["good"] = b"fine"
        writer["bad"] = f"damaged {attempt}".encode() * 100
        writer.flush()
        die(writer)
        flip(partial(path), writer.records["bad"].offset + 3)
        report = recover(path)
        assert report.damaged == ["bad"]
        kept.append((Path(report.source), Path(report.source).read_bytes()))
        path.unlink()
    assert [source.name for source, _ in kept] == ["a.itar.partial.damaged", "a.itar.partial.damaged-2"]
    assert all(source.read_bytes() == data for source, data in kept)


# -- the command line ------------------------------------------------------------------------


def test_the_story_of_issue_19_recover_never_replaces_the_intact_archive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A failed Python overwrite of an intact archive left a small partial file; pack then
    # suggested a command, which must not replace the intact archive.
    path = tmp_path / "seq15.itar"
    with IndexedTarArchive(path, mode="w") as archive:
        for index in range(50):
            archive[f"frames/{index:03d}"] = os.urandom(100_000)
    before = path.read_bytes()
    with pytest.raises(RuntimeError), IndexedTarZarrStore(path, mode="w") as store:
        store.create_root_group({})
        raise RuntimeError("camera died")
    source = tmp_path / "src.itar"
    build_archive(source)
    code, _, err = cli(capsys, "pack", "--overwrite", str(source), str(path))
    assert code == 1 and str(partial(path)) in err
    code, _, refused = cli(capsys, "recover", str(path))
    assert code == 1 and str(path) in refused and str(partial(path)) in refused and "--output" in refused
    assert path.read_bytes() == before
    for message in (err, refused):  # both suggest the same safe command
        assert suggested_command(message) == [
            "recover",
            str(partial(path)),
            "--output",
            str(tmp_path / "seq15.recovered.itar"),
        ]
    code, out, err = cli(capsys, *suggested_command(refused))
    assert code == 0, err
    assert path.read_bytes() == before
    assert "seq15.recovered.itar" in out and not partial(path).exists()
    assert verify_archive(IndexedTarArchive(tmp_path / "seq15.recovered.itar")).problems == []
    code, _, err = cli(capsys, "recover", str(path), str(tmp_path / "y.itar"), "--output", str(tmp_path / "x.itar"))
    assert code == 2 and "once" in err  # wrong usage


def test_pack_refuses_an_existing_destination_unless_told_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, dest = tmp_path / "src.itar", tmp_path / "dest.itar"
    build_archive(source)
    before = old_archive(dest)
    for flags in ([], ["--no-clobber"]):
        code, _, err = cli(capsys, "pack", *flags, str(source), str(dest))
        assert code == 1 and f"{dest} exists; pass --overwrite" in err, err
        assert dest.read_bytes() == before and not partial(dest).exists()
    # Refused before the source is even looked at.
    code, _, err = cli(capsys, "pack", str(tmp_path / "missing.zarr"), str(dest))
    assert code == 1 and f"{dest} exists; pass --overwrite" in err, err
    code, _, err = cli(capsys, "pack", "--overwrite", "--no-clobber", str(source), str(dest))
    assert code == 2 and "not allowed with" in err
    code, _, err = cli(capsys, "pack", "--overwrite", str(source), str(dest))
    assert code == 0, err
    assert IndexedTarArchive(dest).keys() == IndexedTarArchive(source).keys()


def damaged_frames(path: Path, seed: int, damaged: str, count: int = 20, size: int = 1000) -> dict[str, bytes]:
    """:func:`frames_archive` with one byte of record ``damaged`` flipped."""
    records = frames_archive(path, seed, count, size)
    flip(path, IndexedTarArchive(path).records[damaged].offset + 7)
    return records


@pytest.mark.http
@pytest.mark.parametrize("failure", ["corrupt chunk while re-encoding", "damaged record while copying"])
def test_a_failing_source_leaves_the_destination_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], http_root: HttpRoot, failure: str
) -> None:
    dest = tmp_path / "keep.itar"
    before = old_archive(dest)
    if failure.startswith("corrupt"):
        good = tmp_path / "good.itar"
        build_archive(good)
        broken = tmp_path / "broken.itar"
        corrupt_chunk(good, broken)
        source, extra = str(broken), ["--compression", "zstd:3"]
    else:  # read from HTTP, which checks checksums: it fails at the 13th record of 20
        damaged_frames(http_root.directory / "damaged.itar", 1, "frames/012")
        source, extra = f"{http_root.base_url}/damaged.itar", []
    code, _, err = cli(capsys, "pack", "--overwrite", *extra, source, str(dest))
    assert code == 1 and "Traceback" not in err
    assert ("frames/012" if extra == [] else "lidar/points/1.0") in err
    assert dest.read_bytes() == before
    assert not partial(dest).exists()  # nothing left behind to block the next run


@pytest.mark.s3
def test_a_failing_source_leaves_the_object_at_the_destination_as_it_was(
    tmp_path: Path, s3_bucket: UPath, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_cli import option_args

    dest = s3_bucket / "keep.itar"
    build_archive(dest)
    before = dest.read_bytes()
    good, broken = tmp_path / "good.itar", tmp_path / "broken.itar"
    build_archive(good)
    corrupt_chunk(good, broken)
    options = option_args(dict(s3_bucket.storage_options))
    code, _, err = cli(capsys, "pack", *options, str(broken), str(dest))
    assert code == 1 and "exists; pass --overwrite" in err
    code, _, err = cli(capsys, "pack", *options, "--overwrite", "--compression", "zstd:3", str(broken), str(dest))
    assert code == 1 and "Traceback" not in err
    dest.fs.invalidate_cache()
    assert dest.read_bytes() == before


def test_after_a_killed_pack_the_next_run_names_the_partial_file_and_a_safe_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, dest = tmp_path / "src.itar", tmp_path / "dest.itar"
    build_archive(source)
    before = old_archive(dest)
    killed = IndexedTarArchive(dest, mode="w")  # what a pack killed with SIGKILL leaves
    killed["lidar/points/0.0"] = b"half a run"
    killed.flush()
    die(killed)
    code, _, err = cli(capsys, "pack", "--overwrite", str(source), str(dest))
    assert code == 1 and str(partial(dest)) in err and "delete it" in err
    assert dest.read_bytes() == before
    code, _, err = cli(capsys, *suggested_command(err))
    assert code == 0, err
    assert dest.read_bytes() == before and not partial(dest).exists()
    code, _, err = cli(capsys, "pack", "--overwrite", str(source), str(dest))
    assert code == 0, err


# -- signals: the commands in their own processes ----------------------------------------------


def finished_codes(signal_number: int) -> tuple[int, ...]:
    """Exit codes of ``ncore-like`` that finished its work before ``signal_number`` came: 0,
    its own code (the signal came while it was cleaning up after success), or death by the
    signal (it came after the command restored the default handlers). A stopped command
    exits with its own code only (130, 143; SIGKILL: death)."""
    return (0, EXIT_CODES[signal_number], -signal_number)


def run_and_signal(
    args: list[str], started: Callable[[], bool], signal_number: int, delay: float
) -> tuple[int, str, bool]:
    """Runs ``ncore-like ARGS``, sends it ``signal_number`` ``delay`` seconds after
    ``started()`` (it wrote something) says so, unless it finished first; returns its exit
    code, its standard error, and whether the signal found it running."""
    process = subprocess.Popen(
        [sys.executable, "-m", "ncore_like", *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not started() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    time.sleep(delay)
    running = process.poll() is None
    if running:
        process.send_signal(signal_number)
    _, err = process.communicate(timeout=120)
    return process.returncode, err, running


@pytest.fixture(scope="module")
def big_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An archive that takes a while to re-encode (zstd at a high level, one thread)."""
    path = tmp_path_factory.mktemp("big") / "big.itar"
    rng = np.random.default_rng(3)
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({"big": True})
        for index in range(12):
            walk = np.cumsum(rng.normal(size=(1 << 20)), dtype=np.float32).reshape(256, 4096)
            root.create_array(f"a{index:02d}", walk, chunks=(32, 4096), compression=None)
        store.consolidate()
    return path


@SIGNALS
def test_a_pack_stopped_by_a_signal_leaves_the_destination_as_it_was(
    tmp_path: Path, big_source: Path, signal_number: int
) -> None:
    dest = tmp_path / "big.itar"
    stopped = 0
    for attempt, delay in enumerate((0.0, 0.1, 0.4)):
        before = old_archive(dest, f"old {attempt}")
        args = ["pack", "-q", "--overwrite", "--compression", "zstd:9", "--workers", "1", str(big_source), str(dest)]
        code, err, running = run_and_signal(args, partial(dest).exists, signal_number, delay)
        if dest.read_bytes() != before:
            # Finished before the signal, or the signal came after the command's work: the
            # new archive, complete.
            assert code in finished_codes(signal_number), err
            assert not verify_archive(IndexedTarArchive(dest)).problems
            continue
        stopped += 1  # and the destination is as it was
        assert code == EXIT_CODES[signal_number] and running, (code, err)
        if signal_number == signal.SIGKILL:
            partial(dest).unlink()  # a killed pack can't clean up (see the test above)
        else:
            assert not partial(dest).exists(), err
    assert stopped, "every pack finished before its signal: nothing was tested"


def test_concurrent_packs_to_one_destination_never_both_win(tmp_path: Path, big_source: Path) -> None:
    dest = tmp_path / "one.itar"
    sources = [tmp_path / f"src{number}.itar" for number in range(3)]
    for number, source in enumerate(sources):
        old_archive(source, f"source {number}")
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "ncore_like", "pack", "-q", str(source), str(dest)],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for source in sources
    ]
    results = [(process.wait(timeout=120), process.stderr.read() if process.stderr else "") for process in processes]
    winners = [number for number, (code, _) in enumerate(results) if code == 0]
    assert len(winners) == 1, results
    for code, err in results:
        assert code == 0 or "exists" in err or "being written" in err, err
    marker = IndexedTarZarrStore(dest).open_root_group().attributes["marker"]
    assert marker == f"source {winners[0]}"


def test_a_destination_created_while_packing_is_left_as_it_is(tmp_path: Path, big_source: Path) -> None:
    for delay in (0.0, 0.2):
        dest = tmp_path / f"{delay}.itar"
        process = subprocess.Popen(
            [sys.executable, "-m", "ncore_like", "pack", "-q", "--compression", "zstd:9", "--workers", "1",
             str(big_source), str(dest)],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        while not partial(dest).exists() and process.poll() is None:
            time.sleep(0.002)
        time.sleep(delay)
        if process.poll() is not None:
            continue  # it finished first
        dest.write_bytes(b"created meanwhile")
        _, err = process.communicate(timeout=120)
        assert process.returncode == 1 and "created by another writer while this one packed" in err, err
        assert dest.read_bytes() == b"created meanwhile" and not partial(dest).exists()
        return
    pytest.fail("every pack finished before the destination was created: nothing was tested")


# -- extract ----------------------------------------------------------------------------------


def frames_archive(path: Path, seed: int, count: int = 40, size: int = 1 << 20) -> dict[str, bytes]:
    """An archive of ``count`` frames of ``size`` bytes; returns the records."""
    rng = np.random.default_rng(seed)
    records = {f"frames/{index:03d}": rng.bytes(size) for index in range(count)}
    with IndexedTarArchive(path, mode="w") as archive:
        for key, value in records.items():
            archive[key] = value
    return records


def folder(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` by relative path (hidden ones too)."""
    return {str(path.relative_to(directory)): path.read_bytes() for path in directory.rglob("*") if path.is_file()}


def test_extract_refuses_files_that_exist_unless_told_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive, out = tmp_path / "a.itar", tmp_path / "out"
    new = frames_archive(archive, 1, count=4, size=100)
    out.mkdir()
    (out / "frames").mkdir()
    (out / "frames" / "002").write_bytes(b"mine")
    (out / "notes.txt").write_bytes(b"not in the archive")
    before = folder(out)
    code, _, err = cli(capsys, "extract", str(archive), "-C", str(out))
    assert code == 1 and "1 file(s) to extract exist already" in err and "frames/002" in err and "--overwrite" in err
    assert folder(out) == before  # nothing written
    code, _, err = cli(capsys, "extract", "--overwrite", str(archive), "-C", str(out))
    assert code == 0, err
    assert folder(out) == {**new, "notes.txt": b"not in the archive"}


def test_extract_never_replaces_a_folder_with_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive, out = tmp_path / "a.itar", tmp_path / "out"
    frames_archive(archive, 1, count=4, size=100)
    (out / "frames" / "002").mkdir(parents=True)
    (out / "frames" / "002" / "mine").write_bytes(b"mine")
    before = folder(out)
    code, _, err = cli(capsys, "extract", "--overwrite", str(archive), "-C", str(out))
    assert code == 1 and "would replace folders" in err and "frames/002" in err
    assert folder(out) == before


@pytest.mark.http
def test_a_failed_extract_leaves_every_file_as_it_was_or_complete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], http_root: HttpRoot
) -> None:
    old, out = tmp_path / "old.itar", tmp_path / "out"
    old_records = frames_archive(old, 1, count=20, size=1000)
    new_records = damaged_frames(http_root.directory / "new.itar", 2, "frames/012")
    assert cli(capsys, "extract", str(old), "-C", str(out))[0] == 0
    # Read from HTTP, which checks checksums: it fails at the 13th record of 20.
    code, _, err = cli(capsys, "extract", "--overwrite", f"{http_root.base_url}/new.itar", "-C", str(out))
    assert code == 1 and "frames/012" in err
    files = folder(out)
    assert set(files) == set(old_records)  # no temporary file left
    for key, data in files.items():
        assert data in (old_records[key], new_records[key]), key
    assert files["frames/000"] == new_records["frames/000"] and files["frames/019"] == old_records["frames/019"]


@SIGNALS
def test_an_extract_stopped_by_a_signal_leaves_every_file_as_it_was_or_complete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], signal_number: int
) -> None:
    old, new_path = tmp_path / "old.itar", tmp_path / "new.itar"
    old_records = frames_archive(old, 1)
    new_records = frames_archive(new_path, 2)
    stopped = 0
    for attempt, delay in enumerate((0.0, 0.01, 0.03)):
        out = tmp_path / f"out{attempt}"
        assert cli(capsys, "extract", str(old), "-C", str(out))[0] == 0
        args = ["extract", "-q", "--overwrite", str(new_path), "-C", str(out)]
        first = out / "frames" / "000"
        started = functools.partial(lambda path, inode: path.stat().st_ino != inode, first, first.stat().st_ino)
        code, err, running = run_and_signal(args, started, signal_number, delay)
        files = folder(out)
        if files == new_records:
            # Finished before the signal, or the signal came after the command's work.
            assert code in finished_codes(signal_number), err
            continue
        stopped += 1
        assert code == EXIT_CODES[signal_number] and running, (code, err)
        temporary = [name for name in files if name.endswith(".ncore-like-tmp")]
        if signal_number != signal.SIGKILL:
            assert not temporary, temporary
        for name in temporary:
            assert Path(name).name.startswith("."), name  # hidden, beside the file it was for
            del files[name]
        assert set(files) == set(old_records)
        for key, data in files.items():
            assert data in (old_records[key], new_records[key]), key
    assert stopped, "every extraction finished before its signal: nothing was tested"
