"""Work spread over a ``dask.distributed`` cluster (the one module that imports
``distributed``): a local cluster of worker processes by default, or the scheduler at an
address. The command line packs many sources with it (``ncore-like pack SRC... DIR``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

__all__ = ["run_tasks"]

T = TypeVar("T")

# dask's nannies start workers with MALLOC_TRIM_THRESHOLD_=65536, which also fixes glibc's
# mmap threshold: every record over 128 KB is then mapped and unmapped anew, which doubled
# the CPU time of packing (20 sequences: 1.45 s -> 2.6 s) and left a 2-worker cluster slower
# than packing one after another (0.6-0.9x; with glibc's defaults 1.3-1.5x,
# scripts/bench_remote.py --only pack). The nanny also sets it in this process's environment.
_MALLOC_TRIM = "MALLOC_TRIM_THRESHOLD_"


@contextlib.contextmanager
def _glibc_malloc_defaults() -> Iterator[None]:
    """Local workers keep glibc's malloc settings; this process's environment is restored."""
    import dask

    before = os.environ.get(_MALLOC_TRIM)
    try:
        with dask.config.set({f"distributed.nanny.pre-spawn-environ.{_MALLOC_TRIM}": None}):
            yield
    finally:
        if before is None:
            os.environ.pop(_MALLOC_TRIM, None)
        else:
            os.environ[_MALLOC_TRIM] = before


def run_tasks(
    function: Callable[..., T],
    arguments: Sequence[tuple[Any, ...]],
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    done: Callable[[int, T | BaseException], None] | None = None,
) -> list[T | BaseException]:
    """``function(*arguments[i])`` for every ``i`` on a cluster, the result or the exception
    of each, in the order of ``arguments``.

    Args:
        function: A module-level function (it is pickled to the workers).
        arguments: The arguments of each call.
        scheduler: Address of a running scheduler (``tcp://host:8786``); default: a local
            cluster of ``workers`` processes, one thread each, stopped at the end.
        workers: Processes of the local cluster (default: one per CPU).
        done: Told of each call as it finishes (its number and its result or exception),
            e.g. to show progress.
    """
    from distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler is None:
        with _glibc_malloc_defaults():
            cluster = LocalCluster(  # type: ignore[no-untyped-call]
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
            )
    try:
        with Client(scheduler if scheduler is not None else cluster) as client:  # type: ignore[no-untyped-call]
            futures = [client.submit(function, *call, pure=False) for call in arguments]
            number = {future.key: position for position, future in enumerate(futures)}
            results: list[T | BaseException | None] = [None] * len(futures)
            for future in as_completed(futures):  # type: ignore[no-untyped-call]
                error = future.exception()
                outcome: T | BaseException = error if error is not None else future.result()
                results[number[future.key]] = outcome
                if done is not None:
                    done(number[future.key], outcome)
    finally:
        if cluster is not None:
            cluster.close()
    return results  # type: ignore[return-value]  # every position was filled
