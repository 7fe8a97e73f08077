"""The one owner of event loops, worker threads and process-wide execution settings.

* Remote I/O runs on fsspec's own event loop (the ``fsspecIO`` thread): coroutines of an
  fsspec filesystem instance belong to that loop, and awaiting them on another loop hangs.
  :func:`await_on_loop` bridges from any running loop without blocking it, and
  :func:`sync` from synchronous code. zarr-python's coroutines run on zarr's loop through
  the same :func:`sync` (the compat module names that loop).
* :func:`sync` refuses to wait for a loop from that loop's own thread (:class:`EventLoopError`
  instead of a hang forever) and can be bounded in time (:func:`set_sync_timeout`).
* Blocking work (local ``pread``, decompression) runs on one shared, bounded thread pool,
  sized from the CPU count and configurable with :func:`set_worker_threads`.
* After ``os.fork`` the child gets a fresh pool: threads do not survive a fork, and a pool
  whose threads are gone would accept work and never run it. (fsspec and zarr-python reset
  their own loops after a fork.)
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable, Coroutine, Generator, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import EventLoopError

if TYPE_CHECKING:
    import asyncio
    from concurrent.futures import Executor, Future, ThreadPoolExecutor

    import fsspec.asyn

__all__ = [
    "await_on_loop",
    "default_workers",
    "encode_pool",
    "encode_threads",
    "fsspec_loop",
    "in_worker_thread",
    "io_loop",
    "on_own_thread",
    "ordered_map",
    "process_id",
    "run_in_worker",
    "running_loop",
    "set_sync_timeout",
    "set_worker_threads",
    "sync",
    "sync_timeout",
    "worker_pool",
    "worker_threads",
]

T = TypeVar("T")
R = TypeVar("R")

_pool_lock = threading.Lock()
# The shared pools by name ("worker", "encode"), created on first use.
_pools: dict[str, ThreadPoolExecutor] = {}
_pool_size: int | None = None
_sync_timeout: float | None = None


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _default_worker_threads() -> int:
    # I/O waits overlap decoding, so a couple of threads beyond the cores pay off.
    return max(2, _cpus() + 2)


def worker_threads() -> int:
    """The number of threads of the shared worker pool."""
    return _pool_size if _pool_size is not None else _default_worker_threads()


def encode_threads() -> int:
    """The number of threads of the encode pool: one per core, at most :func:`worker_threads`.
    Compressing is CPU-bound, and two encodes taking turns on a core evict each other's
    chunk and record from its cache (a 268 MB volume's ``create_array`` on 2 cores: 141 ms
    with 4 threads, 124 ms with 2)."""
    return min(_cpus(), worker_threads())


def set_worker_threads(count: int | None) -> None:
    """Sets the size of the shared worker pool (``None``: from the CPU count), which also
    bounds the encode pool's.

    The current pools finish their queued work and are replaced.
    """
    global _pool_size
    if count is not None and count < 1:
        raise ValueError(f"worker thread count must be positive, got {count}")
    with _pool_lock:
        old = list(_pools.values())
        _pools.clear()
        _pool_size = count
    for pool in old:
        pool.shutdown(wait=False)


def _shared_pool(name: str, threads: Callable[[], int], prefix: str) -> ThreadPoolExecutor:
    pool = _pools.get(name)
    if pool is None:
        with _pool_lock:
            pool = _pools.get(name)
            if pool is None:
                # Imported here: it brings logging (~8 ms), which a process reading local
                # records on its own thread never needs.
                from concurrent.futures import ThreadPoolExecutor

                pool = _pools[name] = ThreadPoolExecutor(
                    threads(), thread_name_prefix=prefix, initializer=_mark_worker_thread
                )
    return pool


def worker_pool() -> ThreadPoolExecutor:
    """The shared worker pool for blocking work (created on first use)."""
    return _shared_pool("worker", worker_threads, "ncore_like")


def encode_pool() -> ThreadPoolExecutor:
    """The pool that compresses chunks for writers (:func:`encode_threads` threads, created
    on first use): CPU-bound work, kept apart from the worker pool's blocking reads."""
    return _shared_pool("encode", encode_threads, "ncore_like-encode")


_local = threading.local()


def _mark_worker_thread() -> None:
    _local.worker = True


def in_worker_thread() -> bool:
    """True on a thread of the shared pool: work submitted to the pool from there and waited
    for could wait forever (every worker waiting), so callers do it inline instead."""
    return bool(getattr(_local, "worker", False))


async def run_in_worker(function: Callable[..., T], *args: Any) -> T:
    """Runs blocking ``function(*args)`` on the shared pool without blocking the running loop."""
    import asyncio  # in each function that needs it: local archives are read without asyncio (~30 ms to import)

    return await asyncio.get_running_loop().run_in_executor(worker_pool(), function, *args)


# -- event loops ---------------------------------------------------------------------------


def io_loop() -> asyncio.AbstractEventLoop:
    """fsspec's I/O loop, where remote requests run (and async read plans are driven)."""
    import fsspec.asyn  # on first use: local archives never need fsspec

    loop: asyncio.AbstractEventLoop = fsspec.asyn.get_loop()
    return loop


def fsspec_loop(filesystem: fsspec.asyn.AsyncFileSystem) -> asyncio.AbstractEventLoop:
    """The event loop that the coroutines of an async fsspec filesystem instance belong to."""
    loop: asyncio.AbstractEventLoop = filesystem.loop
    return loop


def sync_timeout() -> float | None:
    """Seconds a synchronous call waits for its coroutine (None: no limit), see
    :func:`set_sync_timeout`."""
    return _sync_timeout


def set_sync_timeout(seconds: float | None) -> None:
    """Bounds how long every synchronous call that runs a coroutine on an event loop waits
    (e.g. a blocking read of a remote archive), in seconds; ``None`` (the default) waits as
    long as the work takes. A call that runs out of time cancels its coroutine and raises
    ``TimeoutError``. The duration of a read grows with its size, so per-request timeouts of
    the filesystem (e.g. s3fs's ``read_timeout``) are the finer tool; this bound is the
    backstop for a job that must never wait forever."""
    global _sync_timeout
    if seconds is not None and not seconds > 0:
        raise ValueError(f"sync timeout must be positive seconds or None, got {seconds!r}")
    _sync_timeout = seconds


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running on the calling thread, None if none is."""
    import asyncio

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def sync(coroutine: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop, *, timeout: float | None = None) -> T:
    """Runs ``coroutine`` on ``loop`` (running in another thread) and waits for its result.

    Many threads may call this at once: their coroutines run concurrently on the loop.

    Args:
        coroutine: The coroutine to run.
        loop: The loop it belongs to (e.g. :func:`io_loop`, :func:`fsspec_loop`).
        timeout: Seconds to wait at most (default: :func:`sync_timeout`).

    Raises:
        EventLoopError: When called on the thread that runs ``loop``: waiting there would
            block the very loop that has to finish the work, forever.
        TimeoutError: When the coroutine did not finish in time (it is cancelled).
    """
    import asyncio

    if running_loop() is loop:
        coroutine.close()
        raise EventLoopError(
            "a blocking call was made from the event loop thread that has to run it (it would wait for "
            "itself forever); await the *_async method instead"
        )
    future = asyncio.run_coroutine_threadsafe(coroutine, loop)
    limit = _sync_timeout if timeout is None else timeout
    try:
        return future.result(limit)
    except TimeoutError as error:  # concurrent.futures' TimeoutError is the builtin
        if future.done():  # the coroutine itself raised TimeoutError
            raise
        future.cancel()
        raise TimeoutError(f"a blocking call did not finish within {limit} s (cancelled)") from error


async def await_on_loop(coroutine: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop) -> T:
    """Awaits a coroutine that belongs to ``loop`` from any running loop, without blocking
    the running loop."""
    import asyncio

    if asyncio.get_running_loop() is loop:
        return await coroutine
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, loop))


# -- bounded, ordered parallel work --------------------------------------------------------


def default_workers() -> int:
    """Threads for bulk work by default (reading or encoding many items): one per CPU this
    process may run on."""
    return _cpus()


def on_own_thread(function: Callable[[], T], name: str) -> Future[T]:
    """``function()`` started on a new thread of its own, its result (or exception) in the
    future returned: work that releases the GIL, overlapped with the caller's, that mustn't
    wait in a shared pool's queue (its caller may be a thread of that pool)."""
    from concurrent.futures import Future  # here, as the pools import theirs: when first needed

    future: Future[T] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(function())
        except BaseException as error:  # handed to the waiter
            future.set_exception(error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def ordered_map(
    pool: Executor,
    function: Callable[[T], R],
    items: Iterable[T],
    *,
    max_items: int,
    max_bytes: int,
    size: Callable[[T], int],
) -> Generator[tuple[T, R], None, None]:
    """Yields ``(item, function(item))`` in the order of ``items``, computed on ``pool``.

    At most ``max_items`` items, and items of at most ``max_bytes`` in total (by ``size``),
    are submitted and not yet consumed; an item larger than ``max_bytes`` runs alone. An
    exception of ``function`` is raised when its item's turn comes; work not started yet is
    cancelled when the generator is closed (use ``contextlib.closing`` so that an error in the
    consumer doesn't leave the pool's shutdown waiting for all submitted work).
    """
    pending: deque[tuple[T, int, Future[R]]] = deque()
    in_flight = 0
    try:
        for item in items:
            weight = max(0, size(item))
            # Consume the oldest results until the new item fits the bounds.
            while pending and (len(pending) >= max_items or in_flight + weight > max_bytes):
                done, done_weight, future = pending.popleft()
                in_flight -= done_weight
                yield done, future.result()
            pending.append((item, weight, pool.submit(function, item)))
            in_flight += weight
        while pending:
            done, done_weight, future = pending.popleft()
            in_flight -= done_weight
            yield done, future.result()
    finally:
        for _, _, future in pending:
            future.cancel()


def _keep_inherited_sessions() -> None:
    """Keeps, in a forked child, the parent's remote filesystem objects alive and their
    finalizers from running. fsspec's filesystem objects (s3fs, gcsfs, HTTP) hold client
    sessions bound to the parent's event loop, over sockets shared with the parent. fsspec
    drops them from its instance cache on the child's first use, and their finalizers then ran
    in the child at the next garbage collection, on whatever thread: on a running loop (a
    DataLoader worker's first remote read) they closed the parent's session there, with
    tracebacks of futures "attached to a different loop". The sessions are the parent's to
    close; in the child they are only kept (a few objects per filesystem the parent made)."""
    asyn = sys.modules.get("fsspec.asyn")
    registry = getattr(weakref.finalize, "_registry", None)
    if asyn is None or not isinstance(registry, dict):
        return  # no remote filesystem was ever made
    for finalizer, info in list(registry.items()):
        owner = info.weakref()
        if isinstance(owner, asyn.AsyncFileSystem):
            _inherited.append(owner)  # never collected here, so its finalizer never runs
            finalizer.atexit = False  # nor at the child's exit


#: The parent's filesystem objects a forked child keeps (see _keep_inherited_sessions).
_inherited: list[object] = []


_pid = os.getpid()


def process_id() -> int:
    """``os.getpid()``, remembered (a system call costs ~0.3 us, a noticeable share of
    appending one small record) and renewed in a forked child."""
    return _pid


def _reset_after_fork() -> None:
    global _pid
    _pid = os.getpid()
    # The parent's threads do not exist here; drop the pools without waiting for them.
    _pools.clear()
    _keep_inherited_sessions()


os.register_at_fork(after_in_child=_reset_after_fork)
