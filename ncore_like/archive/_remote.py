"""Reading archives on fsspec filesystems (S3, HTTP, GCS, memory...): :class:`FsspecSource`.

Each remote read (a range, the tail, the object's details) exists once, as a coroutine that
the archive's :class:`~ncore_like.archive.RetryPolicy` retries; blocking reads run that
coroutine on the filesystem's event loop. The buffered path (one file object, for nearby
records) keeps fsspec's block cache, whose fetches are those same range reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import gc
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from .._concurrency import await_on_loop, fsspec_loop, io_loop, sync
from ..errors import ArchiveFormatError
from ._location import Location
from ._retry import S3_PROTOCOLS, RetryPolicy, ShortBody
from ._sources import remote_errors, remote_failure, truncated

__all__ = ["BUFFERED_BLOCK_SIZE", "FsspecSource", "glob_remote", "read_object", "reading_filesystem"]

T = TypeVar("T")

#: Block size of the buffered file object of remote archives, unless the storage options
#: choose one: a random 1 MB record then moves ~1.1 MB in one request, while nearby small
#: records share requests. (s3fs's default read-ahead of 5 MiB blocks moves ~47x the bytes
#: of a random 800 KB read.)
BUFFERED_BLOCK_SIZE = 128 * 1024
_USER_BUFFER_OPTIONS = ("default_block_size", "default_cache_type", "block_size", "cache_type")
#: The filesystem object archives read with (the retry policy's options), by that of the
#: user's options; the same policy options for every policy, so one entry each.
_reading_filesystems: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
#: Set to ``s3fs`` to read S3 archives through s3fs even where the plain-HTTP reader could.
S3_CLIENT_VARIABLE = "NCORE_LIKE_S3_CLIENT"
_plain_filesystems: dict[tuple[int, str, str], Any] = {}
#: Async filesystem objects whose client :func:`_connect` set up, by their ``id`` (not by
#: fsspec's equality: a forked child's new object equals its parent's).
_connected: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def _is_async(fs: Any) -> bool:
    """True for async filesystems (S3, HTTP, GCS...), whose coroutines run on fsspec's loop.
    fsspec is imported here, once an fsspec URL is opened: local archives never need it."""
    import fsspec.asyn

    return isinstance(fs, fsspec.asyn.AsyncFileSystem)


def reading_filesystem(upath: Any, retry: RetryPolicy, *, listing: bool = False) -> Any:
    """The filesystem object archives at ``upath`` are read (and, with ``listing``, listed)
    with. On S3, where the storage options allow it, the plain-HTTP reader of
    :mod:`._s3` (no botocore). Otherwise made with the retry policy's options, and found
    again by the filesystem object of the user's options, which the ``UPath`` keeps (a lookup
    in fsspec's instance cache tokenizes the options, tens of microseconds of every opening).
    One object per options means one client: on S3 its setup costs ~0.1 s."""
    if not listing and upath.protocol in S3_PROTOCOLS and os.environ.get(S3_CLIENT_VARIABLE, "") != "s3fs":
        plain = _plain_filesystem(upath.protocol, upath.storage_options)
        if plain is not None:
            return plain
    theirs = upath.fs
    try:
        ours = _reading_filesystems.get(theirs)
    except TypeError:  # unhashable, or without weak references: made each time
        ours = None
    if ours is None:
        protocol, given = upath.protocol, dict(upath.storage_options)
        options = retry.storage_options(protocol, given)
        if options == given:
            ours = theirs
        else:
            import fsspec

            ours = fsspec.filesystem(protocol, **options)
        retry.configure(ours)
        with contextlib.suppress(TypeError):
            _reading_filesystems[theirs] = ours
    return ours


def _plain_filesystem(protocol: str, options: Mapping[str, Any]) -> Any:
    """The plain-HTTP S3 reader for ``options`` (None if s3fs must read), one per options
    and process: a forked child's must not use its parent's event loop or connections."""
    key = (os.getpid(), protocol, repr(sorted(options.items())))
    if key not in _plain_filesystems:
        from ._s3 import range_filesystem

        _plain_filesystems[key] = range_filesystem(protocol, options)
    return _plain_filesystems[key]


def _request(fs: Any, coroutine: Coroutine[Any, Any, T]) -> Awaitable[T]:
    """``coroutine``, a request of the async filesystem ``fs``, run on its event loop; its
    client set up first by :func:`_connect` if it has none yet."""
    return await_on_loop(_connected_then(fs, coroutine), fsspec_loop(fs))


async def _connected_then(fs: Any, coroutine: Coroutine[Any, Any, T]) -> T:
    try:
        if _connected.get(id(fs)) is not fs:
            await _connect(fs)
    except BaseException:
        coroutine.close()  # never started: no "never awaited" warning
        raise
    return await coroutine


async def _connect(fs: Any) -> None:
    """Sets up the client of an async filesystem object (s3fs' ``set_session``) with the
    cyclic garbage collector paused; its first request would set it up anyway.

    Why: botocore builds an S3 client from JSON models, ~10^5 new objects that make the
    collector run full passes; in a process that imported torch (every training process,
    every DataLoader worker) those passes walk its millions of objects, and the setup took
    0.19-0.30 s instead of 0.07-0.10 s. The new objects hold no reference cycles, so pausing
    the collector frees nothing later. A failure is left to the request itself, which sets
    the client up again and reports it naming the archive."""
    set_session = getattr(fs, "set_session", None)
    if set_session is not None and asyncio.iscoroutinefunction(set_session):
        paused = gc.isenabled()
        gc.disable()
        try:
            await set_session()
        except Exception:  # reported by the request (see above)
            pass
        finally:
            if paused:
                gc.enable()
    _connected[id(fs)] = fs


def glob_remote(location: Location, retry: RetryPolicy) -> list[str]:
    """The URLs of the objects that the remote glob pattern ``location`` names (unsorted),
    listed under ``retry`` by the filesystem object the archives are then read with.

    A pattern whose wildcards are all in its last part (``s3://fleet/2026-05/*.itar``) costs
    one listing of its folder; fsspec's general glob asks more (on S3 it also checks the
    bucket and lists again: three round trips where one does).
    """
    upath = location.upath
    fs = reading_filesystem(upath, retry, listing=True)
    pattern: str = upath.path
    folder, _, last = pattern.rpartition("/")
    if folder and not _has_wildcard(folder) and _has_wildcard(last) and "**" not in last:
        entries = _listing(fs, retry, location.name, "ls", folder, detail=True)
        paths = [
            str(entry["name"])
            for entry in entries
            if entry.get("type") == "file" and fnmatch.fnmatchcase(str(entry["name"]).rpartition("/")[2], last)
        ]
    else:
        paths = list(_listing(fs, retry, location.name, "glob", pattern))
    return [f"{upath.protocol}://{path}" for path in paths]


def _has_wildcard(text: str) -> bool:
    return any(mark in text for mark in "*?[")


def read_object(location: Location, retry: RetryPolicy) -> bytes:
    """The whole object at the remote ``location`` (e.g. a saved sample index), read under
    ``retry`` by the filesystem object its archives are read with (one client for both).
    FileNotFoundError naming it if there is none."""
    fs = reading_filesystem(location.upath, retry)
    return bytes(_call(fs, retry, location.name, "the object", "cat_file", location.upath.path))


def _listing(fs: Any, retry: RetryPolicy, name: str, method: str, *args: Any, **kwargs: Any) -> Any:
    """``fs.<method>(*args, **kwargs)`` under the retry policy; a missing folder lists nothing."""
    return _call(fs, retry, name, "the listing", method, *args, missing=[], **kwargs)


_RAISE = object()


def _call(
    fs: Any, retry: RetryPolicy, name: str, what: str, method: str, *args: Any, missing: Any = _RAISE, **kwargs: Any
) -> Any:
    """``fs.<method>(*args, **kwargs)`` under the retry policy, its failures said as
    :func:`~._sources.remote_failure` says them; ``missing`` (if given) instead of a
    FileNotFoundError."""

    async def once() -> Any:
        try:
            if _is_async(fs):
                return await _request(fs, getattr(fs, f"_{method}")(*args, **kwargs))
            return await asyncio.to_thread(getattr(fs, method), *args, **kwargs)
        except FileNotFoundError:
            if missing is _RAISE:
                raise
            return missing

    async def retried() -> Any:
        with remote_errors(name):
            return await retry.run(once, name, what)

    return sync(retried(), fsspec_loop(fs) if _is_async(fs) else io_loop())


class FsspecSource:
    """An archive file on any fsspec filesystem (S3, HTTP, memory, ...), read under a
    :class:`~ncore_like.archive.RetryPolicy`.

    The filesystem object is made with the policy's storage options (the filesystem's own
    retries off) and re-created in a forked child before its first use: fsspec's objects of
    the parent are bound to an event-loop thread that the child does not have.
    """

    def __init__(self, location: Location, *, range_reads: bool, retry: RetryPolicy) -> None:
        self._location = location
        self._name = location.name
        self._range_reads = range_reads
        self._retry = retry
        # Guards the buffered file object (it has a position); reentrant, as its fetches may
        # re-create the filesystem object of a forked child.
        self._lock = threading.RLock()
        self._file: Any = None
        self._fetches_through_us = False  # the file object's block cache fetches with _fetch
        self._file_size: int | None = None
        self._pid = os.getpid()
        try:
            self._upath, self._fs = self._open_filesystem(location.upath)
        except ImportError as error:  # e.g. s3:// without s3fs
            raise remote_failure(error, self._name) from error
        self._path: str = self._upath.path
        self._remote = _is_async(self._fs)

    def _open_filesystem(self, upath: Any) -> tuple[Any, Any]:
        """The ``UPath`` to read and its filesystem object (see :func:`reading_filesystem`)."""
        return upath, reading_filesystem(upath, self._retry)

    @property
    def is_remote(self) -> bool:
        return self._remote

    @property
    def name(self) -> str:
        """The archive's URL."""
        return self._name

    @property
    def storage_options(self) -> Mapping[str, Any]:
        """The options of the archive's filesystem (as the user gave them)."""
        options: Mapping[str, Any] = self._upath.storage_options
        return options

    def _filesystem(self) -> Any:
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._upath, self._fs = self._open_filesystem(self._location.fresh_upath())
                    self._file, self._pid = None, os.getpid()
        return self._fs

    def _blocking(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Runs one of the source's coroutines from synchronous code: on the filesystem's
        loop (where its requests run anyway), or fsspec's I/O loop for others."""
        fs = self._filesystem()  # first: a forked child's loop is not its parent's
        return sync(coroutine, fsspec_loop(fs) if self._remote else io_loop())

    # -- the remote reads, each once -------------------------------------------------------

    async def _retried(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        """``await call()`` under the retry policy; a failure that is not retried (a missing
        object, denied access...) is said as :func:`~._sources.remote_failure` says it."""
        with remote_errors(self._name):
            return await self._retry.run(call, self._name, what)

    async def _fetch(self, offset: int, size: int) -> bytes:
        """Exactly ``size`` bytes at ``offset`` as one range request, retried."""
        fs = self._filesystem()

        async def once() -> bytes:
            end = offset + size
            if self._remote:
                data = await _request(fs, fs._cat_file(self._path, start=offset, end=end))
            else:
                data = await asyncio.to_thread(fs.cat_file, self._path, start=offset, end=end)
            return self._checked(bytes(data), offset, size)

        return await self._retried(once, f"bytes [{offset}, {offset + size})")

    async def read_tail_async(self, size: int) -> tuple[bytes, int | None]:
        fs = self._filesystem()

        async def once() -> tuple[bytes, int | None]:
            if self._remote:
                # A suffix request needs no HEAD (the size is unknown until the header is decoded).
                data = bytes(await _request(fs, fs._cat_file(self._path, start=-size)))
                return data, (len(data) if len(data) < size else None)
            return await asyncio.to_thread(self._tail_of_file, fs, size)

        try:
            return await self._retried(once, "the tail")
        except Exception as error:
            failure = await self._explained(error, fs)
            if failure is error:
                raise
            raise failure from error

    def _tail_of_file(self, fs: Any, size: int) -> tuple[bytes, int]:
        # Filesystems without requests (memory, zip members, chained caches such as
        # simplecache::, whose files can't seek from the end) are asked for the size first.
        file_size = int(fs.size(self._path))
        return bytes(fs.cat_file(self._path, start=max(0, file_size - size), end=file_size)), file_size

    async def _explained(self, error: Exception, fs: Any) -> BaseException:
        """The error to raise for a failed tail read: a clearer one for a folder (checked
        only on failure) or a known failure of remote storage, else ``error``."""
        try:
            if self._remote:
                is_dir = bool(await _request(fs, fs._isdir(self._path)))
            else:
                is_dir = bool(await asyncio.to_thread(fs.isdir, self._path))
        except Exception:  # the original error says more than a failed check
            is_dir = False
        if is_dir:
            return IsADirectoryError(21, "is a directory, not an indexed tar archive", self._name)
        return remote_failure(error, self._name)

    async def info_async(self) -> dict[str, Any] | None:
        """The object's details as the filesystem reports them (one small request, e.g. a
        HEAD: size, ETag...), None if they can't be had; for telling whether it changed."""
        fs = self._filesystem()
        with contextlib.suppress(Exception):  # s3fs answers from its listings cache otherwise
            fs.invalidate_cache(self._path)

        async def once() -> dict[str, Any]:
            if self._remote:
                return dict(await _request(fs, fs._info(self._path)))
            return dict(await asyncio.to_thread(fs.info, self._path))

        try:
            return await self._retried(once, "the object's details")
        except Exception:  # the reads that follow report what is wrong
            return None

    def _checked(self, data: bytes, offset: int, size: int) -> bytes:
        # Servers that ignore Range answer with the whole file (fsspec's HTTP filesystem
        # does not check for 206), so the length is always verified.
        if len(data) != size:
            if len(data) > size:
                raise ArchiveFormatError(
                    f"{len(data)} bytes returned for a range of {size} bytes at offset "
                    f"{offset} (does the server honour Range requests?)",
                    archive=self._name,
                )
            if self._file_size is not None and offset + size <= self._file_size:
                # The file holds these bytes: the body was cut short on the way (retried).
                raise ShortBody(f"{len(data)} of {size} bytes at offset {offset} arrived")
            raise truncated(self._name, offset, size, len(data))
        return data

    # -- the protocol: blocking reads run the coroutines above --------------------------------

    def read_tail(self, size: int) -> tuple[bytes, int | None]:
        return self._blocking(self.read_tail_async(size))

    def set_file_size(self, size: int) -> None:
        self._file_size = size

    async def read_async(self, offset: int, size: int) -> bytes:
        return await self._fetch(offset, size)

    def read(self, offset: int, size: int) -> bytes:
        if self._range_reads:
            return self.read_span(offset, size)
        if self._buffer_fetches():
            return self._read_buffered(offset, size)
        # A file object without fsspec's block cache (e.g. of a memory or SFTP filesystem):
        # its reads are the requests, retried as a whole.
        what = f"bytes [{offset}, {offset + size})"
        return self._blocking(self._retried(lambda: asyncio.to_thread(self._read_buffered, offset, size), what))

    def _read_buffered(self, offset: int, size: int) -> bytes:
        with self._lock:
            file = self._buffered_file()
            file.seek(offset)
            data = file.read(size)
        return self._checked(bytes(data), offset, size)

    def read_span(self, offset: int, size: int) -> bytes:
        return self._blocking(self._fetch(offset, size))

    def read_into(self, offset: int, buffer: memoryview) -> None:
        buffer[:] = self.read(offset, len(buffer))

    def discard(self, offset: int, size: int) -> bool:
        return False

    def _buffer_fetches(self) -> bool:
        """True if the buffered file object fetches through :meth:`_fetch` (opens it)."""
        with self._lock:
            self._buffered_file()
            return self._fetches_through_us

    def _buffered_file(self) -> Any:
        """The file object of the buffered path (opened on first use, under the lock). An
        fsspec block cache fetches through :meth:`_fetch`, so that its fetches are retried
        and checked like every other read."""
        fs = self._filesystem()
        if self._file is None:
            options: dict[str, Any] = {"mode": "rb"}
            if not any(option in self._upath.storage_options for option in _USER_BUFFER_OPTIONS):
                options.update(block_size=BUFFERED_BLOCK_SIZE, cache_type="bytes")
            if self._file_size is not None:
                options["size"] = self._file_size  # saves a HEAD request
            try:
                file = fs.open(self._path, **options)
            except TypeError:  # a filesystem whose open() takes no size
                options.pop("size", None)
                file = fs.open(self._path, **options)
            cache: Any = getattr(file, "cache", None)
            self._fetches_through_us = callable(getattr(cache, "fetcher", None))
            if self._fetches_through_us:
                cache.fetcher = self._fetch_range
            self._file = file
        return self._file

    def _fetch_range(self, start: int, end: int) -> bytes:
        return self._blocking(self._fetch(start, end - start))

    def reopen(self) -> None:
        with self._lock:
            if self._file is not None:
                self._close_file_quietly(self._file)
            self._upath, self._fs = self._open_filesystem(self._location.fresh_upath())
            self._file, self._pid = None, os.getpid()

    def close(self) -> None:
        with self._lock:
            file, self._file = self._file, None
        if file is not None:
            self._close_file_quietly(file)

    @staticmethod
    def _close_file_quietly(file: Any) -> None:
        # Closing a read-only file object loses nothing, and after a fork it may fail.
        with contextlib.suppress(Exception):
            file.close()
