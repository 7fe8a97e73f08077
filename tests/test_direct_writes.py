"""A durable local archive writes the large records it compressed into its own memory
straight to the disk (``O_DIRECT``, on a thread behind the caller: ``archive/_direct.py``).
The file holds the bytes the page-cache path writes; the records really go past the page
cache; a device that refuses the alignment and a filesystem without ``O_DIRECT`` fall back
to the page cache; records read back while the archive is written are whole; and a disk
that fills up during a direct write stops the archive with a clear error, publishes
nothing and leaves the records before the failure for ``recover``."""

from __future__ import annotations

import errno
import fcntl
import itertools
import mmap
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ncore_like.archive._direct as direct_module
from ncore_like import BloscCompression, IndexedTarArchive, IndexedTarZarrStore, recover
from ncore_like._buffers import new_result
from ncore_like.errors import ArchiveClosedError
from tests.test_chunk_buffers import CASES, values_of

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="no O_DIRECT on this platform")

#: A name long enough that its chunk keys need PAX headers (more than one header block).
LONG_NAME = "camera_front_wide_" + "x" * 90


def write(path: Path, values: np.ndarray[Any, Any], chunks: tuple[int, ...], compression: BloscCompression,
          *, durable: bool = True, name: str = "x") -> None:  # fmt: skip
    with IndexedTarZarrStore(path, mode="w", durable=durable) as store:
        store.create_root_group({}).create_array(name, values, chunks=chunks, compression=compression)


def run_script(script: str, *args: object) -> subprocess.CompletedProcess[str]:
    """``script`` in a new interpreter at the repository's root, with ``args``."""
    command = [sys.executable, "-c", script, *map(str, args)]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)


def direct_flag(fd: int) -> bool:
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)


@pytest.mark.parametrize(("dtype", "shape", "chunks", "compression"), CASES)
@pytest.mark.parametrize("name", ["x", LONG_NAME])
def test_direct_writes_make_the_file_the_page_cache_path_makes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    dtype: str,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    compression: BloscCompression,
    name: str,
) -> None:
    values = values_of(dtype, shape)
    written: list[tuple[bool, int]] = []
    pwritev = os.pwritev

    def recorded(fd: int, buffers: Any, offset: int) -> int:
        count = pwritev(fd, buffers, offset)
        written.append((direct_flag(fd), count))
        return count

    monkeypatch.setattr(direct_module.os, "pwritev", recorded)
    write(tmp_path / "direct.itar", values, chunks, compression, name=name)
    # The same archive through the page cache (durable=False never writes directly).
    write(tmp_path / "cached.itar", values, chunks, compression, durable=False, name=name)
    assert (tmp_path / "direct.itar").read_bytes() == (tmp_path / "cached.itar").read_bytes()
    size = (tmp_path / "direct.itar").stat().st_size
    direct_bytes = sum(count for is_direct, count in written if is_direct)
    if CASES.index((dtype, shape, chunks, compression)) == 1:
        assert direct_bytes == 0  # records of ~75 KB: gathered in the write buffer
    else:  # the chunk records went to the disk directly: all but the metadata and the index
        assert direct_bytes > 0.8 * size, (direct_bytes, size)
    with IndexedTarZarrStore(tmp_path / "direct.itar") as store:
        np.testing.assert_array_equal(store.open_root_group(consolidated=False).array(name)[...], values)


def test_a_device_refusing_the_alignment_gets_the_records_through_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk with 4 KB logical blocks refuses direct writes at tar's 512-byte offsets with
    EINVAL: the writing thread turns O_DIRECT off and writes the same bytes."""
    dtype, shape, chunks, compression = CASES[0]
    values = values_of(dtype, shape, seed=1)
    refused: list[int] = []
    pwritev = os.pwritev

    def refusing(fd: int, buffers: Any, offset: int) -> int:
        if direct_flag(fd):
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        return pwritev(fd, buffers, offset)

    monkeypatch.setattr(direct_module.os, "pwritev", refusing)
    write(tmp_path / "refused.itar", values, chunks, compression)
    write(tmp_path / "cached.itar", values, chunks, compression, durable=False)
    assert len(refused) == 1  # once: later records are not offered to the device again
    assert (tmp_path / "refused.itar").read_bytes() == (tmp_path / "cached.itar").read_bytes()


def test_a_filesystem_without_o_direct_gets_the_records_through_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dtype, shape, chunks, compression = CASES[2]
    values = values_of(dtype, shape, seed=2)
    tried: list[str] = []
    open_file = os.open

    def without_direct(path: str, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_DIRECT:
            tried.append(path)
            raise OSError(errno.EINVAL, "Invalid argument", path)
        return open_file(path, flags, *args, **kwargs)

    monkeypatch.setattr(direct_module.os, "open", without_direct)
    write(tmp_path / "plain.itar", values, chunks, compression)
    write(tmp_path / "cached.itar", values, chunks, compression, durable=False)
    assert tried == [str(tmp_path / "plain.itar.partial")]  # asked once
    assert (tmp_path / "plain.itar").read_bytes() == (tmp_path / "cached.itar").read_bytes()


def test_records_read_while_the_archive_is_written_are_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read of a record whose direct write may still be in flight waits for it (the page
    cache is coherent with completed direct writes only)."""
    dtype, shape, chunks, compression = CASES[3]
    values = values_of(dtype, shape, seed=3)
    pwritev = os.pwritev

    def slow(fd: int, buffers: Any, offset: int) -> int:
        if direct_flag(fd):
            time.sleep(0.02)  # a slow disk: the reads come while the writes are in flight
        return pwritev(fd, buffers, offset)

    monkeypatch.setattr(direct_module.os, "pwritev", slow)
    with IndexedTarZarrStore(tmp_path / "open.itar", mode="w") as store:
        array = store.create_root_group({}).create_array("x", values, chunks=chunks, compression=compression)
        np.testing.assert_array_equal(array[...], values)


FILLING_WRITER = textwrap.dedent(
    """
    import resource, signal, sys
    import numpy as np
    from ncore_like import BloscCompression, IndexedTarZarrStore
    from tests.test_chunk_buffers import values_of

    path, limit = sys.argv[1], int(sys.argv[2])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    values = values_of("<f4", (24, 512, 512), seed=7)
    try:
        with IndexedTarZarrStore(path, mode="w") as store:
            root = store.create_root_group({})
            root.create_array("x", values, chunks=(1, 512, 512), compression=BloscCompression())
    except OSError as error:
        print("error", error.errno, error.filename, "|", error, flush=True)
        sys.exit(3)
    print("closed", flush=True)
    """
)


@pytest.mark.parametrize("limit", [3 << 20, 9_000_123])
def test_a_full_disk_during_direct_writes_raises_publishes_nothing_and_recovers(tmp_path: Path, limit: int) -> None:
    path = tmp_path / "full.itar"
    process = run_script(FILLING_WRITER, path, limit)
    assert process.returncode == 3, (process.returncode, process.stdout, process.stderr)
    error = process.stdout.splitlines()[-1]
    partial = tmp_path / "full.itar.partial"
    # A clear OSError: the kernel's reason, and the file it could not write.
    assert error.startswith(f"error {errno.EFBIG} {partial} |"), error
    assert "File too large" in error and "what was written stays for recovery" in error, error
    assert not path.exists()  # nothing at the final name
    assert partial.stat().st_size <= limit
    report = recover(path)
    assert not report.damaged, report
    values = values_of("<f4", (24, 512, 512), seed=7)
    reference = tmp_path / "reference.itar"  # the same chunks written whole
    write(reference, values, (1, 512, 512), BloscCompression(), durable=False)
    with IndexedTarArchive(reference) as whole, IndexedTarArchive(path, verify_checksums=True) as recovered:
        chunk_keys = [key for key in whole.keys() if key.startswith("x/") and "zarr" not in key and ".z" not in key]
        kept = [key for key in recovered.keys() if key in chunk_keys]
        # The records before the failure, the first chunks in order, byte for byte: as many
        # as the limit holds whole (the record the limit cut and all after it are gone).
        assert kept == chunk_keys[: len(kept)]
        ends = itertools.accumulate(512 + -(-whole.records[key].size // 512) * 512 for key in chunk_keys)
        fit = sum(1 for end in ends if end <= limit)  # the chunks come first in the file
        assert len(kept) == fit, (len(kept), fit, limit)
        for key in kept:
            assert recovered[key] == whole[key]


def test_a_failed_direct_write_seen_by_a_read_stops_the_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failure of a write behind the caller may first show in a read of the writing
    archive; every later write and the close fail too, and nothing is published (the file
    no longer ends where the index would say)."""
    dtype, shape, chunks, compression = CASES[3]
    values = values_of(dtype, shape, seed=4)
    pwritev = os.pwritev
    armed: list[bool] = []

    def failing(fd: int, buffers: Any, offset: int) -> int:
        if direct_flag(fd) and armed:
            time.sleep(0.1)  # a slow disk: the caller has moved on when the failure comes
            raise OSError(errno.ENOSPC, "No space left on device")
        return pwritev(fd, buffers, offset)

    monkeypatch.setattr(direct_module.os, "pwritev", failing)
    path = tmp_path / "seq.itar"
    store = IndexedTarZarrStore(path, mode="w")
    root = store.create_root_group({})
    root.create_array("x", values[:2], chunks=chunks, compression=compression)
    store.archive.flush()  # x's records are on disk
    armed.append(True)
    root.create_array("y", values[1:], chunks=chunks, compression=compression)  # its writes fail, later
    with pytest.raises(OSError, match="No space left on device") as failed:
        root.array("y")[...]
    assert failed.value.filename == str(tmp_path / "seq.itar.partial")
    with pytest.raises((OSError, ArchiveClosedError)):
        root.create_array("z", values[2:], chunks=chunks, compression=compression)
    with pytest.raises((OSError, ArchiveClosedError), match="nothing is published|No space left"):
        store.close()
    assert not path.exists()  # nothing published
    report = recover(path)  # the records written before the failure are kept
    assert not report.damaged
    with IndexedTarZarrStore(path) as recovered:
        keys = [key for key in recovered.archive.keys() if key.startswith(("x/", "y/"))]
    assert {"x/0.0.0", "x/1.0.0"} <= set(keys) and not any(key.startswith("y/") for key in keys), keys


def test_flush_returns_once_the_direct_writes_are_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record handed over in aligned memory is written directly, behind the caller; a
    flush with nothing else to write still waits for it before it syncs the file."""
    payload = new_result((3 << 20,), np.dtype(np.uint8), aligned=True)  # as compressed chunks are
    payload[:] = np.random.default_rng(5).integers(0, 256, payload.size, dtype=np.uint8)
    pwritev = os.pwritev
    slow_writes: list[int] = []

    def slow(fd: int, buffers: Any, offset: int) -> int:
        if direct_flag(fd):
            slow_writes.append(offset)
            time.sleep(0.2)  # a slow disk
        return pwritev(fd, buffers, offset)

    monkeypatch.setattr(direct_module.os, "pwritev", slow)
    path = tmp_path / "raw.itar"
    with IndexedTarArchive(path, mode="w") as archive:
        archive["frame"] = memoryview(payload)
        archive.flush()
        assert slow_writes, "the record was not written directly"
        record = archive.records["frame"]
        with open(tmp_path / "raw.itar.partial", "rb") as partial:
            partial.seek(record.offset)
            assert partial.read(record.size) == payload.tobytes()


def test_a_callers_aligned_bytes_go_through_the_page_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the library's own memory is written directly, never a caller's bytes even where
    they happen to be aligned: what a full disk does to the archive (a failed write of a
    caller's record leaves it writable) must not depend on where the bytes lie."""
    aligned = memoryview(mmap.mmap(-1, 3 << 20))  # page-aligned, as 1 in 32 large allocations are
    aligned[:] = np.random.default_rng(6).integers(0, 256, len(aligned), dtype=np.uint8).tobytes()
    direct: list[int] = []
    pwritev = os.pwritev

    def recorded(fd: int, buffers: Any, offset: int) -> int:
        if direct_flag(fd):
            direct.append(offset)
        return pwritev(fd, buffers, offset)

    monkeypatch.setattr(direct_module.os, "pwritev", recorded)
    with IndexedTarArchive(tmp_path / "raw.itar", mode="w") as archive:
        archive["frame"] = aligned
    assert direct == []
    assert IndexedTarArchive(tmp_path / "raw.itar")["frame"] == bytes(aligned)


UNCLOSED_WRITER = textwrap.dedent(
    """
    import sys
    from ncore_like import BloscCompression, IndexedTarZarrStore
    from tests.test_chunk_buffers import values_of

    store = IndexedTarZarrStore(sys.argv[1], mode="w")
    store.create_root_group({}).create_array(
        "x", values_of("<f4", (12, 512, 512), seed=8), chunks=(1, 512, 512), compression=BloscCompression()
    )
    print("written", flush=True)
    # The program ends without closing the store.
    """
)


def test_a_program_that_ends_without_closing_keeps_every_chunk_for_recovery(tmp_path: Path) -> None:
    """Records still queued for the writing thread when the program ends are written before
    the interpreter stops its threads, as the write buffer is: recovery gets them all."""
    path = tmp_path / "unclosed.itar"
    process = run_script(UNCLOSED_WRITER, path)
    assert process.returncode == 0 and process.stdout.split() == ["written"], process.stderr
    assert not path.exists()
    report = recover(path)
    assert not report.damaged, report
    reference = tmp_path / "reference.itar"
    write(reference, values_of("<f4", (12, 512, 512), seed=8), (1, 512, 512), BloscCompression(), durable=False)
    with IndexedTarArchive(reference) as whole, IndexedTarArchive(path, verify_checksums=True) as recovered:
        chunk_keys = [key for key in whole.keys() if key.startswith("x/") and ".z" not in key]
        assert len(chunk_keys) == 12
        assert all(recovered[key] == whole[key] for key in chunk_keys)


class _Alarm(Exception):
    """What the test's signal handler raises (as Ctrl-C's KeyboardInterrupt would)."""


def _raise_alarm(*_: object) -> None:
    raise _Alarm


def test_an_exception_from_a_signal_while_the_queue_is_full_damages_no_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal handler's exception that lands while the caller waits for room in the queue
    of direct writes: the record isn't queued and takes no slot (it took the slot of a
    queued record, whose header and last block the next record then overwrote), so the
    archive the caller goes on to close reads back whole."""
    pwritev = os.pwritev

    def slow(fd: int, buffers: Any, offset: int) -> int:
        if direct_flag(fd):  # a slow disk (10 MB/s): the queue stays full, the caller waits in it
            time.sleep(sum(map(len, buffers)) / 10e6)
        return pwritev(fd, buffers, offset)

    monkeypatch.setattr(direct_module.os, "pwritev", slow)
    rng = np.random.default_rng(9)
    written: dict[str, bytes] = {}
    interrupted: list[str] = []
    path = tmp_path / "seq.itar"
    previous = signal.signal(signal.SIGALRM, _raise_alarm)
    try:
        archive = IndexedTarArchive(path, mode="w")
        signal.setitimer(signal.ITIMER_REAL, 0.35)
        for index in range(40):
            payload = new_result((300_000 + 777 * index,), np.dtype(np.uint8), aligned=True)
            payload[:] = rng.integers(0, 256, payload.size, dtype=np.uint8)
            key = f"r{index:03d}"
            try:
                archive[key] = memoryview(payload)
            except _Alarm:
                interrupted.append(key)
                continue
            written[key] = payload.tobytes()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert interrupted, "the alarm came after the last write"
    archive.close()  # an interrupt inside the queue's wait leaves the archive writable
    with IndexedTarArchive(path, verify_checksums=True) as published:
        assert set(published.keys()) == set(written)
        for key, payload_bytes in written.items():
            assert published[key] == payload_bytes, key


HANDING_OVER_WRITER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    import ncore_like.archive._direct as direct_module
    from ncore_like import BloscCompression, IndexedTarZarrStore
    from tests.test_chunk_buffers import values_of

    pwritev = os.pwritev

    def slow(fd, buffers, offset):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            time.sleep(sum(map(len, buffers)) / 50e6)  # a slow disk: records are queued at the fork
        return pwritev(fd, buffers, offset)

    direct_module.os.pwritev = slow
    path, done = sys.argv[1], sys.argv[2]
    store = IndexedTarZarrStore(path, mode="w")
    root = store.create_root_group({})
    root.create_array("x", values_of("<f4", (24, 512, 512), seed=10), chunks=(1, 512, 512),
                      compression=BloscCompression())
    if os.fork():
        os._exit(0)  # the parent hands the archive over and leaves at once (a launcher)
    store.reload_resources()
    back = root.array("x")[...]
    root.create_array("y", values_of("<f4", (2, 512, 512), seed=11), chunks=(1, 512, 512),
                      compression=BloscCompression())
    store.close()
    with open(done, "w") as marker:
        marker.write("closed")
    os._exit(0)
    """
)


def test_a_forked_child_that_takes_the_archive_over_finds_every_record_of_the_parent(tmp_path: Path) -> None:
    """A fork waits for the direct writes queued: only the parent's thread could write
    them, and a parent that leaves at once took them along."""
    path, done = tmp_path / "handed.itar", tmp_path / "done"
    process = run_script(HANDING_OVER_WRITER, path, done)
    assert process.returncode == 0, process.stderr
    deadline = time.monotonic() + 60
    while not done.exists() and time.monotonic() < deadline:  # the child runs on, orphaned
        time.sleep(0.05)
    assert done.exists(), "the child didn't close the archive"
    with IndexedTarZarrStore(path, verify_checksums=True) as store:
        root = store.open_root_group(consolidated=False)
        np.testing.assert_array_equal(root.array("x")[...], values_of("<f4", (24, 512, 512), seed=10))
        np.testing.assert_array_equal(root.array("y")[...], values_of("<f4", (2, 512, 512), seed=11))
