"""An opt-in local disk cache of remote archives: :class:`RecordCache`, and the record source
that reads through it.

A remote read costs a round trip (20-100 ms); a training job that samples the same frames
epoch after epoch, and reopens the same archives in every worker, pays it again and again.
The cache keeps the bytes of remote reads on local disk, so that reading them again is a
local file read.

* One file per cached range, named by a hash of (archive URL, object version, offset,
  size). A rewritten object has a new version (its ETag, generation, or size and
  modification time where there is neither), so its old entries are never looked up again;
  they age out.
* A file holds a small header (magic, CRC32C, size) and the bytes. It is written under a
  temporary name in its folder and renamed into place (``os.replace`` is atomic), so readers
  in any process see a whole entry or none, and take no lock.
* The tail read of an opening (the index, the node metadata) is an entry too, and so is the
  object's version with the time it was last checked: a reopen within the time-to-live makes
  no request, after it one small request (a HEAD) to compare the version.
* Beyond the size bound the least recently used entries go (a hit refreshes an entry's
  modification time). Every process evicts, so eviction takes files vanishing under it in
  its stride.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import struct
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from .._concurrency import run_in_worker
from .._defaults import CACHE_MAX_BYTES, CACHE_TTL, INLINE_READ_BYTES
from .._log import library_logger
from ._checksum import checksum

if TYPE_CHECKING:
    from ._remote import FsspecSource

logger = library_logger("ncore_like.archive.cache")

__all__ = ["CacheOption", "CachedSource", "RecordCache", "as_cache", "cached_source", "object_version"]

_HEADER = struct.Struct("<4sIQ")  # magic, CRC32C of the bytes, their size
_MAGIC = b"ncc1"
#: A hit refreshes the entry's modification time (its age for the LRU order) only if it is
#: older than this: hot entries would otherwise rewrite their inode on every read.
_TOUCH_AFTER = 10.0
#: A process rescans the folder after writing this share of the bound, so that the bytes
#: other processes wrote meanwhile count too.
_RESCAN_SHARE = 16
#: Eviction goes this far below the bound, so that the next write doesn't evict again.
_LOW_WATER = 0.9
#: Temporary files older than this were left by a process that died while writing one.
_STALE_TEMPORARY = 3600.0


class RecordCache:
    """A local disk cache of the bytes read from remote archives, for ``cache=`` of
    :class:`~ncore_like.IndexedTarArchive`, :class:`~ncore_like.IndexedTarZarrStore` and
    :class:`~ncore_like.ArchiveCollection`.

    Any number of threads and processes may share one folder: entries appear atomically,
    reads take no lock. A cached range is used only for the object version it was read
    from. Damaged entries (cut short, or failing a checksum) are read from the storage
    again, never served: records are checked as reads of the archive check them (with
    ``verify_checksums``, against the archive's checksums, or the cache's own CRC32C where
    the archive has none), the tail always.

    Args:
        path: The cache's folder (created if missing); an error names it if it is no folder
            or can't be written.
        max_bytes: Bound on the bytes of all entries; the least recently used go beyond it.
            Processes sharing the folder count each other's entries when they rescan it, so
            between rescans they may pass it by a sixteenth of it each.
        ttl: Seconds during which the version of an object checked before is trusted: a
            reopened archive whose tail is cached makes no request within ``ttl`` of the last
            check, and one small request (a HEAD) after it. ``0`` checks on every opening;
            within ``ttl`` a rewritten object goes unnoticed (records read from it then fail
            their checksums rather than come out wrong, see the remote page).

    A cache pickles as its folder and settings, so archives handed to worker processes keep
    using it.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, max_bytes: int = CACHE_MAX_BYTES, ttl: float = CACHE_TTL
    ) -> None:
        if not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"record cache: max_bytes must be a positive number of bytes, got {max_bytes!r}")
        if not ttl >= 0:  # also refuses NaN
            raise ValueError(f"record cache: ttl must be seconds >= 0, got {ttl!r}")
        self._path = os.path.abspath(os.fspath(path))
        self._max_bytes = max_bytes
        self._ttl = float(ttl)
        _prepare_folder(self._path)
        self._init_counters()

    def _init_counters(self) -> None:
        self._lock = threading.Lock()
        self._scan_lock = threading.Lock()
        self._pid = os.getpid()
        self._known_total: int | None = None  # bytes of entries at the last scan (None: not scanned)
        self._written = 0  # bytes this process wrote since

    @property
    def path(self) -> str:
        """The cache's folder."""
        return self._path

    @property
    def max_bytes(self) -> int:
        """Bound on the bytes of all entries."""
        return self._max_bytes

    @property
    def ttl(self) -> float:
        """Seconds during which a checked object version is trusted without a request."""
        return self._ttl

    # -- entries --------------------------------------------------------------------------

    def _entry(self, key: str) -> str:
        digest = hashlib.blake2b(key.encode(), digest_size=20).hexdigest()
        return f"{self._path}/{digest[:2]}/{digest[2:]}"

    def _checked_header(self, fd: int, size: int | None) -> tuple[int, int] | None:
        """The size and CRC32C of an open entry's bytes, None if its header or its length is
        wrong (a file cut short by a crash, not ours, or not of ``size`` bytes when that is
        given); refreshes its LRU age."""
        stat = os.fstat(fd)
        header = os.pread(fd, _HEADER.size, 0)
        if len(header) != _HEADER.size:
            return None
        magic, crc, length = _HEADER.unpack(header)
        if magic != _MAGIC or stat.st_size != _HEADER.size + length or size not in (None, length):
            return None
        if time.time() - stat.st_mtime > _TOUCH_AFTER:
            with contextlib.suppress(OSError):  # a read-only cache still serves
                os.utime(fd)
        return length, crc

    def get(self, key: str, size: int | None = None, *, verify: bool = True) -> bytes | None:
        """The bytes cached under ``key`` (``size`` of them, if given), None if there are none
        or they are damaged (with ``verify``, checked against their CRC32C; the caller checks
        them otherwise). A damaged entry is removed."""
        path = self._entry(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            header = self._checked_header(fd, size)
            data = None if header is None else os.pread(fd, header[0], _HEADER.size)
        except OSError:
            return None
        finally:
            os.close(fd)
        if header is None or data is None or len(data) != header[0] or (verify and checksum(data) != header[1]):
            self._drop_damaged(path)
            return None
        return data

    def get_into(self, key: str, buffer: memoryview, *, verify: bool = True) -> bool:
        """Fills ``buffer`` with the bytes cached under ``key`` if they are there, as many as
        it holds and (with ``verify``) undamaged; returns whether it did. A damaged entry is
        removed."""
        path = self._entry(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            header = self._checked_header(fd, len(buffer))
            good, done = header is not None, 0
            while good and done < len(buffer):
                count = os.preadv(fd, [buffer[done:]], _HEADER.size + done)
                good, done = count > 0, done + count
        except OSError:
            return False
        finally:
            os.close(fd)
        if header is None or not good or (verify and checksum(buffer) != header[1]):
            self._drop_damaged(path)
            return False
        return True

    def put(self, key: str, data: bytes | memoryview) -> None:
        """Caches ``data`` under ``key`` (replacing an entry there). Best effort: a cache that
        can't write (a full disk...) leaves reads to the storage."""
        size = _HEADER.size + len(data)
        if size > self._max_bytes:
            return
        path = self._entry(key)
        folder, name = path.rsplit("/", 1)
        temporary = f"{folder}/.{name}.{os.getpid()}.{os.urandom(6).hex()}"
        try:
            try:
                fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:  # the first entry of its folder (or the cache was removed)
                os.makedirs(folder, exist_ok=True)
                fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                # No fsync: after a crash a damaged entry fails its checks and is read again.
                _write_all(fd, _HEADER.pack(_MAGIC, checksum(data), len(data)))
                _write_all(fd, data)
            finally:
                os.close(fd)
            os.replace(temporary, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            return
        if self._count_written(size):
            self.evict()

    def discard(self, key: str) -> bool:
        """Removes the entry of ``key``; True if there was one."""
        return self._drop(self._entry(key))

    def _drop_damaged(self, path: str) -> None:
        if self._drop(path):
            logger.warning("record cache %s: damaged entry %s dropped (cut short or failing its checksum)",
                           self._path, os.path.relpath(path, self._path))  # fmt: skip

    @staticmethod
    def _drop(path: str) -> bool:
        try:
            os.unlink(path)
        except OSError:
            return False
        return True

    # -- object versions --------------------------------------------------------------------

    def checked_version(self, identity: str) -> tuple[str, float] | None:
        """The version of the object ``identity`` as last checked, and when (``time.time()``)."""
        data = self.get(f"version\n{identity}")
        if data is None:
            return None
        checked, _, rest = data.decode(errors="replace").partition("\n")
        name, _, version = rest.partition("\n")
        try:
            return (version, float(checked)) if name == identity and version else None
        except ValueError:
            return None

    def set_checked_version(self, identity: str, version: str) -> None:
        """Notes that the object ``identity`` has version ``version`` now."""
        self.put(f"version\n{identity}", f"{time.time()!r}\n{identity}\n{version}".encode())

    # -- the size bound ---------------------------------------------------------------------

    def _count_written(self, size: int) -> bool:
        """Counts bytes written; True if the folder should be scanned (and evicted) now."""
        if self._pid != os.getpid():  # forked: a lock a parent's thread held would never be released
            self._init_counters()
        with self._lock:
            self._written += size
            known, written, bound = self._known_total, self._written, self._max_bytes
        return known is None or known + written > bound or written > bound // _RESCAN_SHARE

    def _scan(self) -> tuple[int, list[tuple[float, int, str]]]:
        """Bytes of all entries, and each entry's (modification time, size, path); removes
        temporary files that a dead process left."""
        entries: list[tuple[float, int, str]] = []
        total, now = 0, time.time()
        with contextlib.suppress(OSError):
            with os.scandir(self._path) as folders:
                for folder in folders:
                    if len(folder.name) != 2 or not folder.is_dir(follow_symlinks=False):
                        continue
                    with contextlib.suppress(OSError), os.scandir(folder.path) as files:
                        for file in files:
                            try:
                                stat = file.stat(follow_symlinks=False)
                            except OSError:  # evicted by another process meanwhile
                                continue
                            if file.name.startswith("."):
                                if now - stat.st_mtime > _STALE_TEMPORARY and self._drop(file.path):
                                    logger.info("record cache %s: temporary file %s of a dead writer removed",
                                                self._path, file.path)  # fmt: skip
                                continue
                            entries.append((stat.st_mtime, stat.st_size, file.path))
                            total += stat.st_size
        return total, entries

    def evict(self) -> None:
        """Removes the least recently used entries while the cache holds more than its bound
        (down to 90 % of it). Runs by itself as entries are written."""
        if not self._scan_lock.acquire(blocking=False):
            return  # another thread of this process is at it
        try:
            with self._lock:
                written_before = self._written
            total, entries = self._scan()
            if total > self._max_bytes:
                entries.sort()
                goal, before, dropped = int(self._max_bytes * _LOW_WATER), total, 0
                for _, size, path in entries:
                    if total <= goal:
                        break
                    self._drop(path)  # gone already if another process evicted it first
                    total -= size
                    dropped += 1
                logger.info("record cache %s: %d least recently used entries evicted (%d of %d bytes)",
                            self._path, dropped, before - total, before)  # fmt: skip
            with self._lock:
                self._known_total = total
                self._written -= written_before
        finally:
            self._scan_lock.release()

    def total_bytes(self) -> int:
        """Bytes of all entries in the folder now (of every process)."""
        return self._scan()[0]

    def clear(self) -> None:
        """Removes every entry."""
        for _, _, path in self._scan()[1]:
            self._drop(path)
        with self._lock:
            self._known_total, self._written = 0, 0

    # -- pickling: the folder and the settings ----------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self._path, "max_bytes": self._max_bytes, "ttl": self._ttl}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._path, self._max_bytes, self._ttl = state["path"], state["max_bytes"], state["ttl"]
        self._init_counters()

    def __repr__(self) -> str:
        return f"RecordCache({self._path!r}, max_bytes={self._max_bytes}, ttl={self._ttl:g})"


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _prepare_folder(path: str) -> None:
    """Creates the cache folder if needed and checks that entries can be written there, with
    an error naming the path if not."""
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError as error:  # a file of that name
        raise NotADirectoryError(errno.ENOTDIR, "record cache: not a directory", path) from error
    except OSError as error:
        raise type(error)(error.errno, f"record cache: can't create the directory ({error.strerror})", path) from error
    probe = os.path.join(path, f".probe.{os.getpid()}.{os.urandom(6).hex()}")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    except OSError as error:
        why = f"record cache: can't write in the directory ({error.strerror})"
        raise type(error)(error.errno, why, path) from error
    os.unlink(probe)


CacheOption = RecordCache | str | os.PathLike[str] | None
"""What ``cache=`` takes: a :class:`RecordCache`, the folder of one (default settings), or None."""


def as_cache(cache: CacheOption) -> RecordCache | None:
    """The :class:`RecordCache` that ``cache=`` names."""
    if cache is None or isinstance(cache, RecordCache):
        return cache
    if isinstance(cache, str | os.PathLike):
        return RecordCache(cache)
    raise TypeError(f"cache must be a RecordCache or the path of its folder, got {type(cache).__name__}")


def object_version(info: Mapping[str, Any]) -> tuple[str, int] | None:
    """What identifies the content of an object by its details (``fs.info()``), and its size:
    the ETag (S3, HTTP, Azure) or generation (GCS), else the modification time; None if the
    details tell neither, so that nothing of the object is cached. The size is part of the
    version too."""
    size = info.get("size")
    if not isinstance(size, int):
        return None
    etag = info.get("ETag") or info.get("etag")
    if etag and not str(etag).startswith("W/"):  # a weak ETag promises equivalence, not equal bytes
        return f"etag {etag} {size}", size
    for name in ("generation", "VersionId", "LastModified", "last_modified", "Last-Modified", "mtime", "created"):
        value = info.get(name)
        if value:
            return f"{name} {value} {size}", size
    return None


def cache_identity(source: FsspecSource) -> str:
    """The name of a remote object in the cache: its URL, with the endpoint of storage that
    has one (the same bucket and key elsewhere are another object)."""
    options = source.storage_options
    endpoint = options.get("endpoint_url") or (options.get("client_kwargs") or {}).get("endpoint_url") or ""
    return f"{source.name} {endpoint}".rstrip()


class _Tail(NamedTuple):
    """The tail cached for an object, and its version as last checked."""

    version: str
    fresh: bool
    """True if that check is within the time-to-live."""
    data: bytes


class CachedSource:
    """A remote archive's :class:`~ncore_like.archive._remote.FsspecSource` read through a
    :class:`RecordCache`.

    Ranges are cached under the object version that the index of the archive belongs to
    (:attr:`version`, found when the tail is read, or handed over by a pickled archive);
    without one nothing is cached. Every hit is checked for its length; the cache checks its
    own CRC32C of a hit only if :attr:`verify_hits` (set by the archive: where it verifies
    records against its checksums, it checks them, one checksum per read rather than two,
    and on a mismatch :meth:`discard` s the copy and reads the record again).

    Hits are local file reads, made directly (blocking reads) or on the loop's thread for
    small ones (async reads); what misses is read by the inner source, whose remote reads
    exist once (see :mod:`._remote`).
    """

    def __init__(self, inner: FsspecSource, cache: RecordCache, identity: str, version: str | None) -> None:
        self.inner = inner
        self.cache = cache
        self.version = version
        self.verify_hits = True
        self._identity = identity
        # The tail just read, its version and object size, and the size requested: cached once
        # set_file_size confirms that the tail is of that object (it may change in between).
        self._pending: tuple[bytes, str, int, int] | None = None

    @property
    def is_remote(self) -> bool:
        return self.inner.is_remote

    def _key(self, version: str, offset: int, size: int) -> str:
        return f"{self._identity}\n{version}\n{offset}\n{size}"

    # -- the tail --------------------------------------------------------------------------

    def _cached_tail(self, size: int) -> _Tail | None:
        """The tail cached for the version last checked (None if either is missing)."""
        state = self.cache.checked_version(self._identity)
        if state is None:
            return None
        version, checked = state
        data = self.cache.get(self._key(version, -size, size))  # the whole file if it is smaller
        if data is None:
            return None
        return _Tail(version, 0 <= time.time() - checked < self.cache.ttl, data)

    async def _fetch_tail(
        self, size: int, cached: _Tail | None
    ) -> tuple[dict[str, Any] | None, tuple[bytes, int | None] | None]:
        """The remote part of reading the tail: the object's details, and its tail unless the
        cached one is still of its version (then None)."""
        import asyncio

        if cached is None:  # the version and the tail in one round trip
            info, tail = await asyncio.gather(self.inner.info_async(), self.inner.read_tail_async(size))
            return info, tail
        info = await self.inner.info_async()  # the one small request of a reopening after the time-to-live
        if _version(info) == cached.version:
            return info, None
        return info, await self.inner.read_tail_async(size)

    def _settle_tail(
        self,
        size: int,
        cached: _Tail | None,
        info: dict[str, Any] | None,
        fetched: tuple[bytes, int | None] | None,
    ) -> tuple[bytes, int | None]:
        """The tail to use after :meth:`_fetch_tail` (or ``cached``, still fresh); notes the
        check, or holds a new tail until :meth:`set_file_size` confirms it."""
        if fetched is None:
            assert cached is not None
            if not cached.fresh:
                self.cache.set_checked_version(self._identity, cached.version)
            self.version = cached.version
            return cached.data, (len(cached.data) if len(cached.data) < size else None)
        data, file_size = fetched
        found = None if info is None else object_version(info)
        self.version = None  # until set_file_size confirms the tail's version
        self._pending = None if found is None else (data, found[0], found[1], size)
        return data, file_size

    def read_tail(self, size: int) -> tuple[bytes, int | None]:
        cached = self._cached_tail(size)
        if cached is not None and cached.fresh:
            return self._settle_tail(size, cached, None, None)
        info, fetched = self.inner._blocking(self._fetch_tail(size, cached))
        return self._settle_tail(size, cached, info, fetched)

    async def read_tail_async(self, size: int) -> tuple[bytes, int | None]:
        cached = await run_in_worker(self._cached_tail, size)
        if cached is not None and cached.fresh:
            return self._settle_tail(size, cached, None, None)
        info, fetched = await self._fetch_tail(size, cached)
        return await run_in_worker(self._settle_tail, size, cached, info, fetched)

    def set_file_size(self, size: int) -> None:
        self.inner.set_file_size(size)
        pending, self._pending = self._pending, None
        if pending is None:
            return
        data, version, object_size, requested = pending
        if object_size != size:
            return  # the object changed between its details and its tail: cache nothing of it
        self.cache.put(self._key(version, -requested, requested), data)
        self.cache.set_checked_version(self._identity, version)
        self.version = version

    # -- ranges ----------------------------------------------------------------------------

    def read(self, offset: int, size: int) -> bytes:
        version = self.version
        if version is None or size == 0:
            return self.inner.read(offset, size)
        key = self._key(version, offset, size)
        data = self.cache.get(key, size, verify=self.verify_hits)
        if data is None:
            data = self.inner.read(offset, size)
            self.cache.put(key, data)
        return data

    async def read_async(self, offset: int, size: int) -> bytes:
        version = self.version
        if version is None or size == 0:
            return await self.inner.read_async(offset, size)
        key = self._key(version, offset, size)
        # Small hits are read on the loop's thread: a hand-off to a worker costs more.
        if size <= INLINE_READ_BYTES:
            data = self.cache.get(key, size, verify=self.verify_hits)
        else:
            data = await run_in_worker(functools.partial(self.cache.get, key, size, verify=self.verify_hits))
        if data is None:
            data = await self.inner.read_async(offset, size)
            await run_in_worker(self.cache.put, key, data)
        return data

    def read_into(self, offset: int, buffer: memoryview) -> None:
        version = self.version
        if version is None or not len(buffer):
            self.inner.read_into(offset, buffer)
            return
        key = self._key(version, offset, len(buffer))
        if not self.cache.get_into(key, buffer, verify=self.verify_hits):
            data = self.inner.read(offset, len(buffer))
            buffer[:] = data
            self.cache.put(key, data)

    def read_span(self, offset: int, size: int) -> bytes:
        # Scans stream past the cache: a pass over whole sequences would evict what random
        # access reads again.
        return self.inner.read_span(offset, size)

    def discard(self, offset: int, size: int) -> bool:
        version = self.version
        if version is None or not self.cache.discard(self._key(version, offset, size)):
            return False
        logger.warning("%s: the cached copy of bytes [%d, %d) failed its checksum: dropped, read again",
                       self.inner.name, offset, offset + size)  # fmt: skip
        return True

    def reopen(self) -> None:
        self.inner.reopen()

    def close(self) -> None:
        self.inner.close()


def _version(info: Mapping[str, Any] | None) -> str | None:
    found = None if info is None else object_version(info)
    return None if found is None else found[0]


def cached_source(source: FsspecSource, cache: RecordCache, version: str | None) -> CachedSource:
    """``source`` read through ``cache``; ``version``: the object version its index is of, if
    known (an unpickled archive)."""
    return CachedSource(source, cache, cache_identity(source), version)
