"""``ArchiveCollection``: many archives (local or remote; by list or glob) addressed by
number, for training jobs that sample records across thousands of sequences from
DataLoader workers.

It pickles as its list of locations (a few bytes per archive), opens an archive only when
one of its records is read, in whichever process reads it, and keeps at most ``max_open``
archives open (the least recently used is let go, and closed once nothing reads it any
more): a worker holds what it reads, not the fleet.
"""

from __future__ import annotations

import glob as globbing
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

import numpy as np

from .._defaults import TAIL_READ_SIZE
from ..archive import IndexedTarArchive, Location, ReadOptions, RetryPolicy, is_url
from ..archive._reading import DEFAULT_RETRY
from ._group import Group
from ._stores import IndexedTarZarrStore

if TYPE_CHECKING:
    from ..archive._cache import CacheOption

__all__ = ["ArchiveCollection"]

#: Archives a collection keeps open by default (each holds its index and a file descriptor
#: or a filesystem client).
DEFAULT_MAX_OPEN = 64


class ArchiveCollection(Sequence[IndexedTarZarrStore]):
    """Archives by number: ``collection[i]`` is the ``i``-th archive as a store (opened for
    reading on first use), ``collection.read(i, key)`` one of its records,
    ``collection.read_array(i, path, index)`` a selection of one of its arrays.

    Args:
        locations: Paths or URLs of the archives, or one glob pattern (``"/data/*.itar"``,
            ``"s3://fleet/2026-*/*.itar"``), expanded once, sorted.
        storage_options: Options of the URLs' filesystem (as fsspec takes them).
        max_open: Archives kept open at once per process (the least recently used let go:
            closed once nothing that reads it holds it).
        cache: A :class:`~ncore_like.RecordCache` (or the path of its folder) that the remote
            archives read through, in every process (see the remote page).
        index_tail_read_size: Bytes read from the end of each archive when it is opened
            (see :class:`~ncore_like.IndexedTarArchive`).
        remote_range_reads: Fetch each record of a remote archive with one exact range
            request, what random access from many workers wants (see
            :class:`~ncore_like.IndexedTarArchive`).
        verify_checksums: Check every record read against its CRC32C (the default) and
            raise :class:`~ncore_like.ChecksumError` for a damaged one.
        retry: The :class:`~ncore_like.RetryPolicy` of the remote archives' reads.

    The options travel with the collection into worker processes.
    """

    def __init__(
        self,
        locations: str | PurePath | Iterable[str | PurePath],
        *,
        storage_options: Mapping[str, Any] | None = None,
        max_open: int = DEFAULT_MAX_OPEN,
        cache: CacheOption = None,
        index_tail_read_size: int | None = TAIL_READ_SIZE,
        remote_range_reads: bool = False,
        verify_checksums: bool | None = True,
        retry: RetryPolicy | None = None,
    ) -> None:
        if max_open < 1:
            raise ValueError(f"max_open must be positive, got {max_open}")
        options = dict(storage_options or {})
        if isinstance(locations, str | PurePath):
            locations = _expand(str(locations), options, retry or DEFAULT_RETRY)
        self._locations: list[str] = [str(location) for location in locations]
        self._options = options
        self._max_open = max_open
        # Built once, checked here, and passed to every archive opened (in every process).
        self._read_options = ReadOptions.of(index_tail_read_size, remote_range_reads, verify_checksums, cache, retry)
        self._init_open()

    def _init_open(self) -> None:
        self._open: OrderedDict[int, IndexedTarZarrStore] = OrderedDict()
        self._lock = threading.Lock()
        self._pid = os.getpid()

    # -- pickling: the locations only; each process opens what it reads ---------------------

    def __getstate__(self) -> dict[str, Any]:
        retry = self._read_options.retry
        return {
            "locations": self._locations,
            "options": self._options,
            "max_open": self._max_open,
            # The default retry policy is the receiving process's own (a few bytes, not its fields).
            "read_options": (*self._read_options[:4], None if retry is DEFAULT_RETRY else retry),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._locations, self._options, self._max_open = state["locations"], state["options"], state["max_open"]
        self._read_options = ReadOptions.of(*state["read_options"])
        self._init_open()

    # -- the archives ---------------------------------------------------------------------

    @property
    def locations(self) -> list[str]:
        """The archives' paths and URLs, by number."""
        return list(self._locations)

    def __len__(self) -> int:
        return len(self._locations)

    def __getitem__(self, number: int) -> IndexedTarZarrStore:  # type: ignore[override]
        """The archive ``number`` as a store opened for reading (opened on first use)."""
        if not isinstance(number, int | np.integer):
            raise TypeError(f"archives are addressed by number, got {type(number).__name__}")
        index = int(number)
        if not -len(self) <= index < len(self):
            raise IndexError(f"archive {index} of a collection of {len(self)}")
        index %= len(self)
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's open archives are not ours
                self._open, self._pid = OrderedDict(), os.getpid()
            store = self._open.get(index)
            if store is not None:
                self._open.move_to_end(index)
                return store
        location = Location(self._locations[index])
        if location.local is None:
            location = Location(self._locations[index], self._options)
        # Outside the lock: opening may take a request.
        opened = IndexedTarZarrStore._reading(location, self._read_options)
        with self._lock:
            store = self._open.setdefault(index, opened)  # another thread may have been first
            self._open.move_to_end(index)
            while len(self._open) > self._max_open:
                # Dropped, not closed: another thread may be reading it, or hold one of its
                # roots or arrays (closing it under them failed their reads, or, its file
                # descriptor reused, read another file). Its file closes when the last of
                # them lets it go.
                self._open.popitem(last=False)
        if store is not opened:
            opened.close()
        return store

    @property
    def open_count(self) -> int:
        """Archives open in this process now."""
        return len(self._open)

    def archive(self, number: int) -> IndexedTarArchive:
        """The records of archive ``number``."""
        return self[number].archive

    def root(self, number: int) -> Group:
        """The root group of archive ``number`` (from its consolidated metadata)."""
        return self[number].open_root_group()

    def read(self, number: int, key: str) -> bytes:
        """Record ``key`` of archive ``number``."""
        return self[number].archive.read(key)

    def read_array(self, number: int, path: str, selection: Any = Ellipsis) -> np.ndarray[Any, Any]:
        """``selection`` of the array at ``path`` of archive ``number`` (through the fast backend)."""
        return self.root(number).array(path).read(selection)

    def close(self) -> None:
        """Closes the archives open in this process."""
        with self._lock:
            open_now, self._open = list(self._open.values()), OrderedDict()
        for store in open_now:
            store.close()

    def __repr__(self) -> str:
        return f"<ArchiveCollection of {len(self)} archives, {self.open_count} open>"


def _expand(pattern: str, options: dict[str, Any], retry: RetryPolicy) -> list[str]:
    """The archives a glob pattern names, sorted; ValueError if none. Remote ones are listed
    with the filesystem object (and so the client) their archives are then read with."""
    found: list[str]
    location = Location(pattern, options or None) if is_url(pattern) else None
    if location is None:
        found = sorted(globbing.glob(pattern))
    elif location.local is not None:
        found = sorted(globbing.glob(location.local))
    else:
        from ..archive._remote import glob_remote  # asyncio and fsspec: for remote patterns only

        found = sorted(glob_remote(location, retry))
    if not found:
        raise ValueError(f"{pattern}: no archive matches")
    return found
