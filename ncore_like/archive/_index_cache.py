"""A process-wide cache of decoded indices, keyed by the compressed index itself.

Decoding the index of a 20,000-record archive (xz, then CBOR, then a key lookup table)
takes ~7 ms, most of an archive's opening. Jobs often open the same archive again and
again (a dataset that opens its store per sample, one store per group of a sequence...);
they find its decoded index here after the first time. The key is the compressed index
and the offset it was found at, so a changed archive never finds a stale entry, and there
is no file identity to get wrong (paths, remote objects, renames). Entries are read-only
and shared; the cache is bounded by the total number of records it holds.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ._format import Index

__all__ = ["DecodedIndex", "IndexCache", "index_cache"]

DecodedIndex = tuple[Index, dict[str, int]]


class IndexCache:
    """Least recently used decoded indices, at most ``max_records`` records in all."""

    def __init__(self, max_records: int) -> None:
        self._max_records = max_records
        self._entries: OrderedDict[tuple[int, bytes], DecodedIndex] = OrderedDict()
        self._records = 0
        self._lock = threading.Lock()

    def get(self, offset: int, data: bytes) -> DecodedIndex | None:
        with self._lock:
            entry = self._entries.get((offset, data))
            if entry is not None:
                self._entries.move_to_end((offset, data))
            return entry

    def put(self, offset: int, data: bytes, entry: DecodedIndex) -> None:
        size = len(entry[0].keys)
        if size > self._max_records:
            return
        with self._lock:
            if (offset, data) in self._entries:
                return
            self._entries[(offset, data)] = entry
            self._records += size
            while self._records > self._max_records:
                _, (evicted, _) = self._entries.popitem(last=False)
                self._records -= len(evicted.keys)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._records = 0


#: About 60 MB at most for typical keys.
index_cache = IndexCache(max_records=250_000)
