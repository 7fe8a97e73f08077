"""Exact byte ranges of archives known in advance, read without opening them.

A training index (:mod:`ncore_like.dataset`) knows where every record it needs lies: the
archive's location, its size, the object version its index is of, and each record's offset,
size and CRC32C. Reading those records needs no tail read, in any process: a worker holding
the index reads ranges straight away. :class:`KnownArchive` is what such an index keeps of an
archive (:func:`describe` takes it from an open one), :class:`ArchiveRanges` reads ranges of
many of them: local files with ``os.pread`` (a bounded set of descriptors), remote ones with
exact async range requests (retried as every remote read is), through a
:class:`~ncore_like.RecordCache` if given.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .._concurrency import io_loop, sync
from ..errors import ArchiveFormatError
from ._archive import IndexedTarArchive
from ._cache import CachedSource, RecordCache, cached_source
from ._checksum import checksum
from ._location import Location
from ._reading import DEFAULT_RETRY
from ._retry import RetryPolicy

if TYPE_CHECKING:
    from ._remote import FsspecSource

__all__ = ["ArchiveRanges", "KnownArchive", "checksum", "describe", "record_checksums"]

#: Local archives kept open at once per :class:`ArchiveRanges` (each holds a descriptor).
MAX_OPEN_FILES = 128


class KnownArchive(NamedTuple):
    """What reading ranges of an archive needs, known without opening it."""

    location: str
    """A local path or a URL (without storage options)."""
    file_size: int
    version: str | None
    """The object version the records' offsets are of (a remote archive's ETag...), under
    which a :class:`~ncore_like.RecordCache` keeps its ranges; None: not cached."""


def describe(archive: IndexedTarArchive) -> KnownArchive:
    """What :class:`ArchiveRanges` needs of an archive opened for reading."""
    state = archive.__getstate__()  # the archive's own account of what identifies it
    return KnownArchive(archive.location.name, archive.file_size, state.get("cache_version"))


def record_checksums(archive: IndexedTarArchive, keys: Sequence[str]) -> list[int] | None:
    """The stored CRC32C of each record (``KeyError`` for keys that are none), None if the
    archive has no checksums."""
    table = archive._impl.table  # the record table of the archive's implementation
    crcs = table.crcs
    if crcs is None:
        return None
    positions = table.positions
    return [crcs[positions[key]] for key in keys]


class _LocalFiles:
    """Descriptors of local archives, at most ``limit`` open unless all are in use."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._open: OrderedDict[str, list[int]] = OrderedDict()  # path -> [fd, users]
        self._lock = threading.Lock()

    def pread(self, path: str, offset: int, size: int, file_size: int) -> bytes:
        with self._lock:
            entry = self._open.get(path)
            if entry is None:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                found = os.fstat(fd).st_size
                if found != file_size:
                    os.close(fd)
                    raise ArchiveFormatError(
                        f"the file has {found} bytes, the index {file_size} (has the archive changed since the "
                        "index was built?)",
                        archive=path,
                    )
                entry = self._open[path] = [fd, 0]
                self._evict()
            self._open.move_to_end(path)
            entry[1] += 1
        try:
            data = os.pread(entry[0], size, offset)
            while len(data) < size:  # short reads: only at the end of a file (a truncated one)
                more = os.pread(entry[0], size - len(data), offset + len(data))
                if not more:
                    raise ArchiveFormatError(
                        f"truncated archive, {size} bytes at offset {offset} requested but {len(data)} read",
                        archive=path,
                    )
                data += more
            return data
        finally:
            with self._lock:
                entry[1] -= 1
                self._evict()

    def _evict(self) -> None:
        for path in list(self._open):
            if len(self._open) <= self._limit:
                return
            fd, users = self._open[path]
            if users == 0:
                del self._open[path]
                os.close(fd)

    def close(self) -> None:
        with self._lock:
            for fd, _ in self._open.values():
                os.close(fd)
            self._open.clear()


class ArchiveRanges:
    """Reads exact byte ranges of known archives (numbered as in ``archives``).

    Args:
        archives: The archives, each as :func:`describe` gave it.
        storage_options: Options of the remote archives' filesystem (as fsspec takes them).
        cache: A :class:`~ncore_like.RecordCache` the remote ranges are read through (each
            range under the archive's object version; none for archives without one).
        retry: The :class:`~ncore_like.RetryPolicy` of the remote reads (default: the
            archives' default).

    Pickles as its arguments: a process opens what it reads, when it reads it (after a
    fork, remote filesystem objects are made anew, local descriptors reopened).
    """

    def __init__(
        self,
        archives: Sequence[KnownArchive],
        *,
        storage_options: Mapping[str, Any] | None = None,
        cache: RecordCache | None = None,
        verify_cache_hits: bool = True,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._archives = list(archives)
        self._options = dict(storage_options or {})
        self._cache = cache
        self._verify_hits = verify_cache_hits
        self._retry = retry or DEFAULT_RETRY
        self._init_sources()

    def _init_sources(self) -> None:
        self._sources: dict[int, FsspecSource | CachedSource] = {}
        self._local: dict[int, str | None] = {}
        self._files = _LocalFiles(MAX_OPEN_FILES)
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "archives": self._archives,
            "options": self._options,
            "cache": self._cache,
            "verify_hits": self._verify_hits,
            "retry": self._retry,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._archives, self._options = state["archives"], state["options"]
        self._cache, self._verify_hits = state["cache"], state["verify_hits"]
        self._retry = state.get("retry", DEFAULT_RETRY)
        self._init_sources()

    def __len__(self) -> int:
        return len(self._archives)

    def name(self, number: int) -> str:
        """The archive's path or URL."""
        return self._archives[number].location

    def _check_process(self) -> None:
        if self._pid != os.getpid():  # forked: descriptors are shared with the parent, sources stale
            with self._lock:
                if self._pid != os.getpid():
                    self._init_sources()

    def local_path(self, number: int) -> str | None:
        """The archive's local path, None if it is remote."""
        self._check_process()
        try:
            return self._local[number]
        except KeyError:
            local = self._local[number] = Location(self._archives[number].location).local
            return local

    def is_remote(self, number: int) -> bool:
        return self.local_path(number) is None

    def _source(self, number: int) -> FsspecSource | CachedSource:
        source = self._sources.get(number)
        if source is not None:
            return source
        known = self._archives[number]
        with self._lock:
            source = self._sources.get(number)
            if source is None:
                from ._remote import FsspecSource  # fsspec and asyncio come with the first URL

                location = Location(known.location, self._options or None)
                inner = FsspecSource(location, range_reads=True, retry=self._retry)
                inner.set_file_size(known.file_size)
                if self._cache is not None and known.version is not None:
                    cached = cached_source(inner, self._cache, known.version)
                    cached.verify_hits = self._verify_hits
                    source = cached
                else:
                    source = inner
                self._sources[number] = source
        return source

    def _check_range(self, number: int, offset: int, size: int) -> None:
        known = self._archives[number]
        if offset < 0 or size < 0 or offset + size > known.file_size:
            raise ArchiveFormatError(
                f"range [{offset}, {offset + size}) lies outside the file of {known.file_size} bytes "
                "(has the archive changed since the index was built?)",
                archive=known.location,
            )

    def read(self, number: int, offset: int, size: int) -> bytes:
        """Bytes ``[offset, offset + size)`` of archive ``number``: one ``pread`` of a local
        file, one exact range request of a remote one."""
        self._check_range(number, offset, size)
        path = self.local_path(number)
        if path is not None:
            return self._files.pread(path, offset, size, self._archives[number].file_size)
        return sync(self._source(number).read_async(offset, size), io_loop())

    async def read_async(self, number: int, offset: int, size: int) -> bytes:
        """:meth:`read` of a remote archive without blocking the running loop (local ones:
        use :meth:`read` on a worker thread)."""
        self._check_range(number, offset, size)
        self._check_process()
        return await self._source(number).read_async(offset, size)

    def discard(self, number: int, offset: int, size: int) -> bool:
        """Drops the cached copy of a range (that failed its checksum); True if there was one."""
        if self.local_path(number) is not None:
            return False
        source = self._source(number)
        return isinstance(source, CachedSource) and source.discard(offset, size)

    def read_uncached(self, number: int, offset: int, size: int) -> bytes:
        """:meth:`read` from the storage itself, past the cache (after a damaged cache hit)."""
        path = self.local_path(number)
        if path is not None:
            return self._files.pread(path, offset, size, self._archives[number].file_size)
        source = self._source(number)
        inner = source.inner if isinstance(source, CachedSource) else source
        return sync(inner.read_async(offset, size), io_loop())

    def close(self) -> None:
        """Closes the descriptors of local archives (reads reopen them)."""
        self._files.close()
