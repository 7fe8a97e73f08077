"""The one place that owns event loops and worker threads.

* Remote I/O runs on fsspec's own event loop (the ``fsspecIO`` thread): coroutines of an
  fsspec filesystem instance belong to that loop, and awaiting them on another loop hangs.
  :func:`await_on_fsspec_loop` bridges from any caller loop without blocking it, and
  :func:`run_on_fsspec_loop` from synchronous code.
* Blocking work (local ``pread``, decompression) runs on one shared, bounded thread pool,
  sized from the CPU count and configurable with :func:`set_worker_threads`.
* After ``os.fork`` the child gets a fresh pool: threads do not survive a fork, and a pool
  whose threads are gone would accept work and never run it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import fsspec.asyn

__all__ = [
    "await_on_fsspec_loop",
    "fsspec_loop",
    "run_in_worker",
    "run_on_fsspec_loop",
    "run_on_io_loop",
    "set_worker_threads",
    "worker_pool",
    "worker_threads",
]

T = TypeVar("T")

_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_size: int | None = None


def _default_worker_threads() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    # I/O waits overlap decoding, so a couple of threads beyond the cores pay off.
    return max(2, cpus + 2)


def worker_threads() -> int:
    """The number of threads of the shared worker pool."""
    return _pool_size if _pool_size is not None else _default_worker_threads()


def set_worker_threads(count: int | None) -> None:
    """Sets the size of the shared worker pool (``None``: from the CPU count).

    The current pool finishes its queued work and is replaced.
    """
    global _pool, _pool_size
    if count is not None and count < 1:
        raise ValueError(f"worker thread count must be positive, got {count}")
    with _pool_lock:
        old, _pool, _pool_size = _pool, None, count
    if old is not None:
        old.shutdown(wait=False)


def worker_pool() -> ThreadPoolExecutor:
    """The shared worker pool for blocking work (created on first use)."""
    global _pool
    pool = _pool
    if pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(worker_threads(), thread_name_prefix="ncore_like")
            pool = _pool
    return pool


async def run_in_worker(function: Callable[..., T], *args: Any) -> T:
    """Runs blocking ``function(*args)`` on the shared pool without blocking the running loop."""
    return await asyncio.get_running_loop().run_in_executor(worker_pool(), function, *args)


def fsspec_loop(filesystem: fsspec.asyn.AsyncFileSystem) -> asyncio.AbstractEventLoop:
    """The event loop that the coroutines of an async fsspec filesystem instance belong to."""
    loop: asyncio.AbstractEventLoop = filesystem.loop
    return loop


async def await_on_fsspec_loop(filesystem: fsspec.asyn.AsyncFileSystem, coroutine: Coroutine[Any, Any, T]) -> T:
    """Awaits a coroutine of ``filesystem`` on its loop from any running loop, without
    blocking the running loop."""
    loop = fsspec_loop(filesystem)
    if asyncio.get_running_loop() is loop:
        return await coroutine
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, loop))


def run_on_fsspec_loop(filesystem: fsspec.asyn.AsyncFileSystem, coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine of ``filesystem`` on its loop and waits for the result.

    Many threads may call this at once: their coroutines run concurrently on the loop.
    """
    return asyncio.run_coroutine_threadsafe(coroutine, fsspec_loop(filesystem)).result()


def run_on_io_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine on fsspec's I/O loop (where remote requests run anyway) and waits:
    the synchronous face of async read plans."""
    return asyncio.run_coroutine_threadsafe(coroutine, fsspec.asyn.get_loop()).result()


def _reset_after_fork() -> None:
    global _pool
    # The parent's threads do not exist here; drop the pool without waiting for them.
    _pool = None


os.register_at_fork(after_in_child=_reset_after_fork)
