"""One bounded, thread-safe, least-recently-used cache type, and the process-wide caches.

Process-wide caches (decoded indices, decoded consolidated metadata) are created with
:func:`process_cache`, which registers them for :func:`clear_caches`. Their keys are the
compressed bytes themselves, so they never serve a stale entry and correctness never needs
clearing them; :func:`clear_caches` is there to measure first opens.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["LRUCache", "clear_caches", "process_cache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """A thread-safe mapping that keeps entries of at most ``max_weight`` in total, dropping
    the least recently used ones beyond.

    Args:
        max_weight: The bound (entries, unless ``weight`` says otherwise).
        weight: The weight of a value (default: 1, i.e. the bound counts entries). A value
            heavier than the bound is not kept.
    """

    def __init__(self, max_weight: int, weight: Callable[[V], int] | None = None) -> None:
        if max_weight < 1:
            raise ValueError(f"cache bound must be positive, got {max_weight}")
        self._max_weight = max_weight
        self._weight = weight
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    @property
    def max_weight(self) -> int:
        """The bound on the total weight of the entries."""
        return self._max_weight

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        """The value of ``key`` (now the most recently used), None if absent."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: K, value: V) -> None:
        """Keeps ``value`` under ``key`` (replacing an entry of that key)."""
        weight = 1 if self._weight is None else self._weight(value)
        if weight > self._max_weight:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._total -= old[1]
            self._entries[key] = (value, weight)
            self._total += weight
            while self._total > self._max_weight:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._total -= dropped

    def get_or_put(self, key: K, make: Callable[[], V | None]) -> V | None:
        """The value of ``key``, made by ``make()`` and kept on a miss (None is not kept).

        ``make`` runs outside the lock: it may do I/O, and two threads making the same value
        at once only do redundant work.
        """
        value = self.get(key)
        if value is None:
            value = make()
            if value is not None:
                self.put(key, value)
        return value

    def clear(self) -> None:
        """Drops every entry."""
        with self._lock:
            self._entries.clear()
            self._total = 0


_process_caches: list[LRUCache[object, object]] = []


def process_cache(max_weight: int, weight: Callable[[V], int] | None = None) -> LRUCache[K, V]:
    """A new process-wide cache, cleared by :func:`clear_caches`."""
    cache: LRUCache[K, V] = LRUCache(max_weight, weight)
    _process_caches.append(cache)  # type: ignore[arg-type]
    return cache


def clear_caches() -> None:
    """Forgets the decoded indices and consolidated metadata this process keeps (e.g. to
    measure first opens; the caches never serve stale entries, so correctness never needs it)."""
    for cache in _process_caches:
        cache.clear()
