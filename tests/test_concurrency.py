"""The event-loop seam: synchronous calls refuse to wait for their own loop (instead of
hanging forever) and can be bounded in time; ordered_map keeps order and bounds."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from upath import UPath

import ncore_like
from ncore_like import EventLoopError, IndexedTarArchive, IndexedTarZarrStore
from ncore_like._concurrency import io_loop, ordered_map, sync
from tests.support.fixtures import HttpRoot


def _on_io_loop(function: object) -> object:
    """Runs ``function()`` (synchronous) inside a coroutine on fsspec's I/O loop thread."""

    async def call() -> object:
        return function()  # type: ignore[operator]

    return asyncio.run_coroutine_threadsafe(call(), io_loop()).result(timeout=30)


def test_sync_from_the_loops_own_thread_raises_instead_of_hanging() -> None:
    async def answer() -> int:
        return 42

    assert sync(answer(), io_loop()) == 42
    with pytest.raises(EventLoopError, match="event loop thread that has to run it"):
        _on_io_loop(lambda: sync(answer(), io_loop()))
    assert isinstance(EventLoopError(), RuntimeError)


def test_synchronous_remote_reads_from_the_io_loop_thread_raise(http_root: HttpRoot) -> None:
    path = http_root.directory / "seq.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({})
        root.create_array("v", np.arange(64, dtype=np.int32).reshape(8, 8), chunks=(2, 8), compression=None)
        store.consolidate()
    url = UPath(f"{http_root.base_url}/seq.itar")
    # Without a tail read, no record is served from memory: every read is a request.
    archive = IndexedTarArchive(url, index_tail_read_size=None, remote_range_reads=True)
    array = IndexedTarZarrStore(url, index_tail_read_size=None).open_root_group().array("v")
    np.testing.assert_array_equal(array.read(), np.arange(64).reshape(8, 8))  # fine from any other thread
    # A blocking record read and a blocking array read, called on the thread of the loop that
    # runs their requests: a clear error, not a hang.
    with pytest.raises(EventLoopError):
        _on_io_loop(lambda: archive.read("v/0.0"))
    with pytest.raises(EventLoopError):
        _on_io_loop(lambda: array.read())


def test_sync_timeout_cancels_and_raises() -> None:
    cancelled = threading.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    started = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish within 0.1 s"):
        sync(slow(), io_loop(), timeout=0.1)
    assert time.monotonic() - started < 5
    assert cancelled.wait(5)


def test_process_wide_sync_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ncore_like.sync_timeout() is None  # the default waits as long as the work takes
    ncore_like.set_sync_timeout(0.1)
    try:
        with pytest.raises(TimeoutError):
            sync(asyncio.sleep(10), io_loop())
    finally:
        ncore_like.set_sync_timeout(None)
    with pytest.raises(ValueError, match="positive"):
        ncore_like.set_sync_timeout(0)


def test_a_coroutine_raising_timeout_error_is_not_taken_for_a_timeout() -> None:
    async def fails() -> None:
        raise TimeoutError("the server's own timeout")

    with pytest.raises(TimeoutError, match="the server's own timeout"):
        sync(fails(), io_loop(), timeout=5)


def test_ordered_map_keeps_order_and_bounds_work_in_flight(tmp_path: Path) -> None:
    running = 0
    most = 0
    lock = threading.Lock()

    def work(item: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.002 * (item % 3))
        with lock:
            running -= 1
        return item * item

    with ThreadPoolExecutor(8) as pool:
        results = list(ordered_map(pool, work, range(40), max_items=3, max_bytes=1 << 30, size=lambda _: 1))
    assert results == [(item, item * item) for item in range(40)]
    assert most <= 3


def test_arrays_are_created_from_inside_a_running_event_loop(tmp_path: Path) -> None:
    async def nested() -> None:
        # Node metadata templates come from zarr-python on its own loop: no nesting.
        with IndexedTarZarrStore(tmp_path / "a.itar", mode="w") as store:
            store.create_root_group({}).create_array("x", np.arange(5))

    asyncio.run(nested())
    root = IndexedTarZarrStore(tmp_path / "a.itar").open_root_group(consolidated=False)
    np.testing.assert_array_equal(root.array("x").read(), range(5))


FIRST_ROW_READ_THEN_FORK = """
import os, signal, sys, threading, time
from ncore_like import IndexedTarZarrStore
rows = IndexedTarZarrStore(sys.argv[1]).open_root_group().array("x")
reader = threading.Thread(target=rows.read, args=(3,))
reader.start()  # the process's first Blosc call: it imports the codec
time.sleep(float(sys.argv[2]))
child = os.fork()
if child == 0:
    signal.alarm(10)  # a hung child dies of SIGALRM
    os._exit(0 if rows.read(4)[0] == 4 * 64 else 1)
reader.join()
sys.exit(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
"""


@pytest.mark.parametrize("delay", [0.0, 0.002, 0.005, 0.01])
def test_a_child_forked_while_a_thread_makes_the_first_blosc_call_reads(tmp_path: Path, delay: float) -> None:
    # A DataLoader starting its workers while a prefetch thread makes the first read: a child
    # forked in the middle of the codec's import must not inherit that import half done.
    import subprocess
    import sys

    from ncore_like import BloscCompression

    values = np.arange(8 * 64, dtype=np.float32).reshape(8, 64)
    with IndexedTarZarrStore(tmp_path / "r.itar", mode="w") as store:
        store.create_root_group({}).create_array("x", values, chunks=(1, 64), compression=BloscCompression())
        store.consolidate()
    script = [sys.executable, "-c", FIRST_ROW_READ_THEN_FORK, str(tmp_path / "r.itar"), str(delay)]
    result = subprocess.run(script, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, (result.returncode, result.stderr)
