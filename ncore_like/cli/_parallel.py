"""Running work on a thread pool while consuming the results in order, with a bounded
amount of work in flight (so that memory stays bounded however long the input is)."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import Executor, Future
from typing import TypeVar

__all__ = ["default_workers", "ordered_map"]

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    """Worker threads by default: one per CPU this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


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
