"""Blobs read for the page, with the frames near the one shown read ahead.

A frame of a timeline that isn't in memory yet is read together with the frames after it
(a window of up to :data:`WINDOW_FRAMES` frames and :data:`WINDOW_BYTES` bytes) as one
sequential scan of the archive (:func:`~ncore_like.archive.scan_records`): frames that
follow each other in the file come in one read, one range request of a remote archive. A
step to the next frame then costs nothing, and once the frames ahead run short (fewer than
:data:`AHEAD_FRAMES` in memory) the next window is read in the background. Records are
checked against their checksums as they are read: a damaged one is a
:class:`~ncore_like.ChecksumError`, never bytes.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing

from .._lru import LRUCache
from ..archive import scan_records
from ..errors import ChecksumError, NcoreLikeError
from ..nodes import Array
from ._catalog import Catalog, Entry, blob_size

__all__ = ["AHEAD_FRAMES", "CACHE_BYTES", "WINDOW_BYTES", "WINDOW_FRAMES", "Frames"]

#: Frames read together when one that isn't in memory is asked for (itself and those after).
WINDOW_FRAMES = 8
#: ... as long as they add up to at most this many bytes (the first one always).
WINDOW_BYTES = 8 << 20
#: Frames after the one shown that should be in memory; fewer start the next window.
AHEAD_FRAMES = 3
#: Bytes of blobs kept in memory (least recently used dropped first).
CACHE_BYTES = 256 << 20


class _NotRead:
    """What a frame's future holds when the scan that was to read it stopped before it."""


_NOT_READ = _NotRead()


class Frames:
    """Reads blobs of ``catalog``'s hierarchy by path (thread-safe)."""

    def __init__(self, catalog: Catalog, *, cache_bytes: int = CACHE_BYTES) -> None:
        self._catalog = catalog
        self._archive = catalog.source.archive
        self._cache: LRUCache[str, bytes] = LRUCache(cache_bytes, weight=len)
        self._pending: dict[str, Future[bytes | _NotRead]] = {}
        self._lock = threading.Lock()
        self._damaged: set[str] = set()  # frames whose record failed its checksum
        self._scans = ThreadPoolExecutor(2, thread_name_prefix="ncore_like-view-scan")
        self.scans = 0
        """Windows read so far (for tests and the curious)."""

    def close(self) -> None:
        self._scans.shutdown(wait=True, cancel_futures=True)

    def _record_key(self, array: Array) -> str | None:
        """The record that is the blob itself (one raw chunk of an archive), if it is one."""
        view = array.view
        if self._archive is None or view is None or view.unsupported is not None or view.blosc is not None:
            return None
        key = view.chunk_key((0,) * len(view.shape))
        record = self._archive.records.get(key)
        return key if record is not None and record.size == blob_size(array) else None

    def read(self, path: str) -> bytes:
        """The bytes of the blob at ``path`` (a :class:`~._catalog.NodeNotFound` for other
        names, ``TypeError`` for nodes that are no blobs).

        Raises:
            ChecksumError: If the blob's record is damaged.
        """
        entry = self._catalog.entry(path)
        array = entry.node
        if entry.kind != "blob" or not isinstance(array, Array):
            raise TypeError(f"{path!r} is no blob")
        key = self._record_key(array)
        if key is None or entry.frame_of is None:
            # A blob on its own, or one not stored as a record (compressed, or outside an
            # archive): read through the array, one read.
            data: bytes | None = self._cache.get_or_put(path, array.read_bytes)
            assert data is not None
            return data
        while True:
            with self._lock:
                data = self._cache.get(path)
                future = None if data is not None else self._pending.get(path)
                if data is None and future is None:
                    future = self._start_window(entry)
            if data is not None:
                self._read_ahead(entry)
                return data
            assert future is not None
            result = future.result()
            if not isinstance(result, _NotRead):
                self._read_ahead(entry)
                return result
            # The scan stopped before this frame (at a damaged one): read it in a window of its own.

    def _window(self, entry: Entry) -> list[tuple[str, str]]:
        """The frames from ``entry`` on that are neither in memory nor being read, up to the
        window's bounds: (path, record key) pairs. Called with the lock held."""
        assert entry.frame_of is not None
        group, position = entry.frame_of
        frames = self._catalog.entries[group].frames
        window: list[tuple[str, str]] = []
        size = 0
        for path in frames[position : position + WINDOW_FRAMES]:
            if path in self._pending or self._cache.get(path) is not None or (window and path in self._damaged):
                break
            array = self._catalog.entries[path].node
            assert isinstance(array, Array)
            key = self._record_key(array)
            size += blob_size(array)
            if key is None or (window and size > WINDOW_BYTES):
                break
            window.append((path, key))
            if path in self._damaged:
                break  # read again on its own (the damage may have been a fault on the way)
        return window

    def _start_window(self, entry: Entry) -> Future[bytes | _NotRead] | None:
        """Reads the window from ``entry`` on in the background; the future of its first
        frame (None if the window is empty). Called with the lock held."""
        window = self._window(entry)
        if not window:
            return None
        futures: list[Future[bytes | _NotRead]] = [Future() for _ in window]
        for (path, _), future in zip(window, futures, strict=True):
            self._pending[path] = future
        self.scans += 1
        self._scans.submit(self._scan, window, futures)
        return futures[0]

    def _scan(self, window: list[tuple[str, str]], futures: list[Future[bytes | _NotRead]]) -> None:
        assert self._archive is not None
        done = 0
        try:
            with closing(scan_records(self._archive, [key for _, key in window])) as scan:
                for (path, _), (_, data), future in zip(window, scan, futures, strict=False):
                    self._cache.put(path, data)
                    self._settle(path, future, data)
                    done += 1
        except BaseException as error:  # a damaged or unreadable record: its readers see why
            # A span is checked as a whole: the frames read with the damaged one are read
            # again, in windows that end before it.
            keys = [key for _, key in window[done:]]
            failed = done + (keys.index(error.key) if isinstance(error, NcoreLikeError) and error.key in keys else 0)
            if isinstance(error, ChecksumError):
                with self._lock:
                    self._damaged.add(window[failed][0])
            self._settle(window[failed][0], futures[failed], error)
            for (path, _), future in list(zip(window, futures, strict=True))[done:]:
                if not future.done():
                    self._settle(path, future, _NOT_READ)
            return

    def _settle(self, path: str, future: Future[bytes | _NotRead], outcome: bytes | _NotRead | BaseException) -> None:
        with self._lock:
            if self._pending.get(path) is future:
                del self._pending[path]
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    def _read_ahead(self, entry: Entry) -> None:
        """Starts reading the next window when fewer than :data:`AHEAD_FRAMES` frames after
        ``entry`` are in memory or on their way."""
        assert entry.frame_of is not None
        group, position = entry.frame_of
        frames = self._catalog.entries[group].frames
        with self._lock:
            for path in frames[position + 1 : position + 1 + AHEAD_FRAMES]:
                if path not in self._pending and self._cache.get(path) is None:
                    with contextlib.suppress(RuntimeError):  # shut down: nothing to read ahead for
                        self._start_window(self._catalog.entries[path])
                    return
