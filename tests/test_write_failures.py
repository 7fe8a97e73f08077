"""A disk that refuses writes mid-archive: the writer raises a clear ``OSError`` naming its
file, nothing appears at the archive's name, and the partial file keeps what reached the
disk for ``recover``. The failure is the kernel's own: the writer runs in a process whose
file size limit (``RLIMIT_FSIZE``) ends its file at a chosen byte (writes past it fail with
``EFBIG``), with small records in the write buffer and large ones written directly."""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ncore_like import IndexedTarArchive, recover
from tests.support.killed_writer import key, payload

REPO = Path(__file__).resolve().parent.parent

WRITER = textwrap.dedent(
    """
    import resource, signal, sys
    from ncore_like import IndexedTarArchive
    from tests.support.killed_writer import key, payload

    path, seed, count, limit, flush_every, durable = sys.argv[1], *map(int, sys.argv[2:7])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        with IndexedTarArchive(path, mode="w", durable=bool(durable)) as archive:
            for index in range(count):
                archive[key(index)] = payload(seed, index)
                if flush_every and (index + 1) % flush_every == 0:
                    archive.flush()
                    print("flushed", index + 1, flush=True)
    except OSError as error:
        print("error", error.errno, error.filename, "|", error, flush=True)
        sys.exit(3)
    print("closed", flush=True)
    """
)


def run_limited(path: Path, seed: int, count: int, limit: int, flush_every: int, durable: bool) -> list[str]:
    process = subprocess.run(
        [
            sys.executable,
            "-c",
            WRITER,
            str(path),
            str(seed),
            str(count),
            str(limit),
            str(flush_every),
            str(int(durable)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 3, (process.returncode, process.stdout, process.stderr)
    return process.stdout.splitlines()


@pytest.mark.parametrize(
    ("seed", "limit", "flush_every", "durable"),
    [
        (0, 3 << 20, 0, True),
        (1, 1 << 20, 5, True),
        (2, 6_000_123, 7, True),
        (5, 3 << 20, 0, False),
        # Without fsync, past 16 MB the file's blocks are reserved ahead (beyond the limit).
        (6, 25_000_123, 9, False),
    ],
)
def test_a_full_disk_mid_write_raises_keeps_the_partial_file_and_publishes_nothing(
    tmp_path: Path, seed: int, limit: int, flush_every: int, durable: bool
) -> None:
    path = tmp_path / "full.itar"
    count = 1_000  # ~40 MB of records of 0 B - 200 KB: well past every limit
    lines = run_limited(path, seed, count, limit, flush_every, durable)
    error = lines[-1]
    # A clear OSError: the kernel's reason, and the file it could not write.
    assert error.startswith(f"error {errno.EFBIG} {tmp_path / 'full.itar.partial'} |"), lines
    assert "File too large" in error and "what was written stays for recovery" in error, error
    assert not path.exists()  # nothing at the final name
    partial = tmp_path / "full.itar.partial"
    assert partial.exists() and partial.stat().st_size <= limit
    assert partial.stat().st_blocks * 512 <= limit + (1 << 20)  # no block reserved past its end kept
    flushed = max((int(line.split()[1]) for line in lines if line.startswith("flushed ")), default=0)
    report = recover(path)
    assert not report.damaged, report
    archive = IndexedTarArchive(path, verify_checksums=True)
    kept = {name: archive[name] for name in archive.keys()}
    # The records recovered are the first ones, byte for byte, and every flushed one.
    assert kept == {key(index): payload(seed, index) for index in range(len(kept))}
    assert len(kept) >= flushed


RETRYING_WRITER = textwrap.dedent(
    """
    import resource, signal, sys
    from ncore_like import IndexedTarArchive
    from tests.support.killed_writer import key, payload

    path, seed, count, limit = sys.argv[1], *map(int, sys.argv[2:5])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    failed = []
    with IndexedTarArchive(path, mode="w") as archive:
        for index in range(count):
            try:
                archive[key(index)] = payload(seed, index)
            except OSError:  # space freed: the same record again
                failed.append(index)
                resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
                archive[key(index)] = payload(seed, index)
    print("failed", *failed, flush=True)
    """
)


@pytest.mark.parametrize(("seed", "limit"), [(3, 2 << 20), (4, 5_000_001)])
def test_a_write_that_failed_can_be_retried_and_the_archive_is_whole(tmp_path: Path, seed: int, limit: int) -> None:
    path = tmp_path / "retried.itar"
    count = 300
    process = subprocess.run(
        [sys.executable, "-c", RETRYING_WRITER, str(path), str(seed), str(count), str(limit)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 0 and process.stdout.split()[:1] == ["failed"], (process.stdout, process.stderr)
    assert len(process.stdout.split()) == 2, process.stdout  # one write failed, then the disk had room
    archive = IndexedTarArchive(path, verify_checksums=True)
    assert archive.keys() == [key(index) for index in range(count)]
    assert all(archive[key(index)] == payload(seed, index) for index in range(count))


SKIPPING_WRITER = textwrap.dedent(
    """
    import os, resource, signal, sys
    from ncore_like import IndexedTarArchive

    path, limit = sys.argv[1], int(sys.argv[2])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    archive = IndexedTarArchive(path, mode="w")
    archive["frame0"] = bytes(range(256)) * 8192  # 2 MiB
    try:
        archive["frame1"] = bytes(range(255, -1, -1)) * 8192  # past the limit: partly written, then refused
    except OSError:
        print("failed", flush=True)
    archive["note"] = b"written after the failure"  # the program goes on without frame1
    archive.close()
    """
)


def test_records_after_a_failed_large_write_make_a_whole_archive_not_a_broken_one(tmp_path: Path) -> None:
    """A large record refused half written left its first bytes past the writer's position:
    later records and the index overwrote only their start, the published file ended in
    payload bytes (no index header), and it replaced the good archive at the name."""
    path = tmp_path / "seq.itar"
    with IndexedTarArchive(path, mode="w") as archive:
        archive["old"] = b"precious"
    process = subprocess.run(
        [sys.executable, "-c", SKIPPING_WRITER, str(path), str(3 << 20)], capture_output=True, text=True, timeout=120
    )
    assert process.returncode == 0 and process.stdout.split() == ["failed"], process.stderr
    archive = IndexedTarArchive(path, verify_checksums=True)
    assert archive.keys() == ["frame0", "note"]
    assert archive["frame0"] == bytes(range(256)) * 8192 and archive["note"] == b"written after the failure"
    listing = subprocess.run(["tar", "-tf", str(path)], check=True, capture_output=True, text=True).stdout
    assert listing.split() == ["frame0", "note"]  # tar reads it whole too


@pytest.mark.parametrize("cut_fails", [False, True], ids=["cut at once", "cut at close"])
def test_a_write_refused_half_written_leaves_no_bytes_behind_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut_fails: bool
) -> None:
    """The bytes a refused write got onto the disk are cut off at once (so a writer killed
    later leaves a partial file that ends at its last record), and, should that cut fail,
    at the next flush or close (so the archive ends in its index header block)."""
    import os

    import ncore_like.archive._writer as writer_module
    from tests.support.archives import die

    real_pwritev, real_ftruncate = os.pwritev, os.ftruncate
    state = {"fail_write": False, "fail_cut": cut_fails}

    def pwritev(fd: int, buffers: list[memoryview], offset: int) -> int:
        if state["fail_write"]:
            state["fail_write"] = False
            real_pwritev(fd, [memoryview(b"\xee" * (sum(map(len, buffers)) // 2))], offset)  # half, then full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwritev(fd, buffers, offset)

    def ftruncate(fd: int, length: int) -> None:
        if state["fail_cut"]:
            state["fail_cut"] = False
            raise OSError(errno.EIO, "Input/output error")
        real_ftruncate(fd, length)

    monkeypatch.setattr(writer_module.os, "pwritev", pwritev)
    monkeypatch.setattr(writer_module.os, "ftruncate", ftruncate)
    for name in ("closed", "killed"):
        path = tmp_path / f"{name}.itar"
        archive = IndexedTarArchive(path, mode="w")
        archive["a"] = b"1" * 1000
        archive.flush()
        state["fail_write"] = True
        with pytest.raises(OSError, match="No space left on device"):
            archive["big"] = bytes(4 << 20)  # written at once (not buffered)
        if name == "closed":
            archive["b"] = b"2"
            archive.close()
            reread = IndexedTarArchive(path, verify_checksums=True)
            assert {key: reread[key] for key in reread.keys()} == {"a": b"1" * 1000, "b": b"2"}
        elif not cut_fails:  # killed before another flush: the partial file ends with "a"
            die(archive)
            report = recover(path)
            assert report.records == 1 and report.dropped_bytes == 0 and not report.skipped, report
        state["fail_cut"] = cut_fails


def test_closing_again_after_a_failed_close_says_nothing_was_published(tmp_path: Path) -> None:
    """A second close() returned as if done: nothing was published, and the node metadata
    held in memory was gone. It raises, saying what failed and how to recover or discard."""
    script = textwrap.dedent(
        """
        import resource, signal, sys
        from ncore_like import IndexedTarArchive
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        archive = IndexedTarArchive(sys.argv[1], mode="w")
        archive["x"] = bytes(1 << 20)
        resource.setrlimit(resource.RLIMIT_FSIZE, ((1 << 20) + 1024, resource.RLIM_INFINITY))
        try:
            archive.close()  # the index doesn't fit
        except OSError:
            print("failed", flush=True)
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        try:
            archive.close()
        except Exception as error:
            print(type(error).__name__, error, flush=True)
        """
    )
    path = tmp_path / "rc.itar"
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    assert lines[0] == "failed" and lines[1].startswith(f"ArchiveClosedError {path}: closing failed earlier"), done
    assert "nothing was published" in lines[1] and f"ncore-like recover {path}" in lines[1]
    assert not path.exists()
    assert recover(path).records == 1 and IndexedTarArchive(path)["x"] == bytes(1 << 20)


def test_a_pack_that_fills_the_disk_says_its_partial_file_was_discarded(tmp_path: Path) -> None:
    """pack discards its partial file on a failure (the source is still there): the error
    must not say that what was written stays for recovery."""
    import numpy as np

    from ncore_like import IndexedTarZarrStore

    source = tmp_path / "src.itar"
    with IndexedTarZarrStore(source, mode="w") as store:
        store.create_root_group({}).create_array("x", np.arange(1 << 20), chunks=(1 << 16,), compression=None)
        store.consolidate()
    script = textwrap.dedent(
        """
        import resource, signal, sys
        from ncore_like import pack
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, resource.RLIM_INFINITY))
        try:
            pack(sys.argv[1], sys.argv[2])
        except OSError as error:
            print(error, flush=True)
        """
    )
    out = tmp_path / "out.itar"
    done = subprocess.run(
        [sys.executable, "-c", script, str(source), str(out)], capture_output=True, text=True, timeout=120
    )
    assert "File too large (writing the archive; its partial file was discarded)" in done.stdout, done
    assert "stays for recovery" not in done.stdout and not list(tmp_path.glob("out.itar*"))


@pytest.mark.parametrize("where", ["before", "sink", "table"])
def test_a_write_interrupted_between_its_steps_publishes_nothing_and_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """An exception of a signal handler (Ctrl-C's KeyboardInterrupt, an alarm's timeout)
    between two steps of a write, which the application catches and writes on: had the
    record reached the file but not the writer's count ("sink") or the table ("table"), every
    later offset or checksum of the published index was wrong (an archive that didn't open).
    The archive refuses further writes, its close publishes nothing, and recovery finds the
    records written before. An interruption before anything changed ("before") costs
    nothing: writing goes on and the archive is published."""
    import ncore_like.archive._writer as writer_module
    from ncore_like import ArchiveClosedError
    from ncore_like.archive._records import RecordTable

    path = tmp_path / "a.itar"
    archive = IndexedTarArchive(path, mode="w")
    archive["a"] = b"1" * 1000
    archive["big"] = bytes(range(256)) * 4096  # 1 MB: written at once, not buffered
    target, name = {
        "before": (writer_module, "member_header"),
        "sink": (writer_module._LocalSink, "_start_writeback"),
        "table": (RecordTable, "append"),
    }[where]
    real = getattr(target, name)
    armed = [True]

    def interrupted(*args: object) -> object:
        if armed.pop() if armed else False:
            raise KeyboardInterrupt  # where a signal handler's exception can land
        return real(*args)

    monkeypatch.setattr(target, name, interrupted)
    with pytest.raises(KeyboardInterrupt):
        archive["late"] = b"3" * (1 << 20)
    if where == "before":
        archive["after"] = b"4"
        archive.close()
        reread = IndexedTarArchive(path)
        assert {key: reread[key] for key in reread.keys()} == {
            "a": b"1" * 1000, "big": bytes(range(256)) * 4096, "after": b"4"
        }  # fmt: skip
        return
    with pytest.raises(ArchiveClosedError, match=r"interrupted \(KeyboardInterrupt.*ncore-like recover"):
        archive["after"] = b"4"
    with pytest.raises(ArchiveClosedError, match="nothing is published"):
        archive.close()
    assert not path.exists()
    report = recover(path)
    assert report.records >= 2 and not report.skipped, report
    reread = IndexedTarArchive(path, verify_checksums=True)
    assert reread["a"] == b"1" * 1000 and reread["big"] == bytes(range(256)) * 4096
