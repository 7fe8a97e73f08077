"""Record sources: how the bytes of an archive opened for reading are fetched.

One small protocol, :class:`RecordSource`, with two implementations:

* :class:`LocalSource` reads local files with ``os.pread``: no lock and no shared file
  position, so reads of many threads run in parallel.
* :class:`FsspecSource` reads any fsspec filesystem: through a buffered file object (one
  request at a time, for nearby records), or through exact byte-range requests (many at a
  time from many threads, and always for ``read_async``).

Both fetch the tail of the file with one request, which holds the index header and usually
the whole index.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import stat
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Protocol, TypeVar

from .._concurrency import await_on_loop, fsspec_loop, run_in_worker, sync
from .._defaults import RETRY_ATTEMPTS, RETRY_BASE_DELAY, RETRY_DEADLINE, RETRY_MAX_DELAY
from ..errors import ArchiveFormatError, MissingDependencyError, NcoreLikeError, RemoteStorageError
from ._location import Location

__all__ = [
    "BUFFERED_BLOCK_SIZE",
    "FsspecSource",
    "LocalSource",
    "RecordSource",
    "is_transient",
    "remote_errors",
    "remote_failure",
]

T = TypeVar("T")

#: Block size of the buffered file object of remote archives, unless the storage options
#: choose one: a random 1 MB record then moves ~1.1 MB in one request, while nearby small
#: records share requests. (s3fs's default read-ahead of 5 MiB blocks moves ~47x the bytes
#: of a random 800 KB read.)
BUFFERED_BLOCK_SIZE = 128 * 1024
#: Local reads up to this size run on the event loop's thread in ``read_async``: a
#: positional read of a few pages takes microseconds, a hand-off to a worker much longer.
INLINE_READ_BYTES = 64 * 1024
_USER_BUFFER_OPTIONS = ("default_block_size", "default_cache_type", "block_size", "cache_type")


class RecordSource(Protocol):
    """Fetches byte ranges of one archive file opened for reading."""

    @property
    def is_remote(self) -> bool:
        """True if :meth:`read_async` issues async requests (rather than using a worker thread)."""
        ...

    def read_tail(self, size: int) -> tuple[bytes, int | None]:
        """The last ``size`` bytes (all of a smaller file), and the file size if known."""
        ...

    async def read_tail_async(self, size: int) -> tuple[bytes, int | None]:
        """:meth:`read_tail`, without blocking the running loop."""
        ...

    def set_file_size(self, size: int) -> None:
        """Tells the source the file size (derived from the index header)."""
        ...

    def read(self, offset: int, size: int) -> bytes:
        """Exactly ``size`` bytes at ``offset``."""
        ...

    async def read_async(self, offset: int, size: int) -> bytes:
        """:meth:`read`, without blocking the running loop."""
        ...

    def read_into(self, offset: int, buffer: memoryview) -> None:
        """Fills ``buffer`` (writable, of bytes) with the bytes at ``offset``."""
        ...

    def reopen(self) -> None:
        """Re-opens the file resources (e.g. in a forked child)."""
        ...

    def close(self) -> None:
        """Releases the file resources (idempotent)."""
        ...


def _truncated(name: str, offset: int, size: int, got: int) -> ArchiveFormatError:
    return ArchiveFormatError(
        f"truncated archive, {size} bytes at offset {offset} requested but {got} read", archive=name
    )


def _is_async(fs: Any) -> bool:
    """True for async filesystems (S3, HTTP, GCS...), whose coroutines run on fsspec's loop.
    fsspec is imported here, once an fsspec URL is opened: local archives never need it."""
    import fsspec.asyn

    return isinstance(fs, fsspec.asyn.AsyncFileSystem)


def _is_buffered_file(file: Any) -> bool:
    import fsspec.spec

    return isinstance(file, fsspec.spec.AbstractBufferedFile)


class LocalSource:
    """A local archive file read with ``os.pread``."""

    is_remote = False

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd = self._open()

    def _open(self) -> int:
        fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.close(fd)
            raise IsADirectoryError(21, "is a directory, not an indexed tar archive", self._path)
        return fd

    def read_tail(self, size: int) -> tuple[bytes, int | None]:
        file_size = os.fstat(self._fd).st_size
        size = min(size, file_size)
        return self.read(file_size - size, size), file_size

    async def read_tail_async(self, size: int) -> tuple[bytes, int | None]:
        return await run_in_worker(self.read_tail, size)

    def set_file_size(self, size: int) -> None:
        pass

    def read(self, offset: int, size: int) -> bytes:
        data = os.pread(self._fd, size, offset)
        if len(data) == size:
            return data
        # Short reads happen only at the end of the file (or on exotic filesystems): retry
        # the rest once before calling the file truncated.
        rest = os.pread(self._fd, size - len(data), offset + len(data)) if data else b""
        if len(data) + len(rest) != size:
            raise _truncated(self._path, offset, size, len(data) + len(rest))
        return data + rest

    async def read_async(self, offset: int, size: int) -> bytes:
        if size <= INLINE_READ_BYTES:
            return self.read(offset, size)  # microseconds: cheaper than a worker hand-off
        return await run_in_worker(self.read, offset, size)

    def read_into(self, offset: int, buffer: memoryview) -> None:
        # Straight into the caller's buffer (e.g. a region of an output array): no copy.
        done, size = 0, len(buffer)
        while done < size:
            count = os.preadv(self._fd, [buffer[done:]], offset + done)
            if count == 0:
                raise _truncated(self._path, offset, size, done)
            done += count

    def reopen(self) -> None:
        old, self._fd = self._fd, self._open()
        if old >= 0:
            os.close(old)

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


class FsspecSource:
    """An archive file on any fsspec filesystem (S3, HTTP, memory, ...).

    The filesystem object is re-created in a forked child before its first use: fsspec's
    objects of the parent are bound to an event-loop thread that the child does not have.
    """

    def __init__(self, location: Location, *, range_reads: bool) -> None:
        upath = location.upath
        self._location = location
        self._upath = upath
        self._name = location.name
        self._range_reads = range_reads
        self._lock = threading.Lock()  # guards the buffered file object (it has a position)
        self._file: Any = None
        self._file_size: int | None = None
        self._pid = os.getpid()
        try:
            self._fs: Any = upath.fs
        except ImportError as error:  # e.g. s3:// without s3fs
            raise remote_failure(error, self._name) from error
        self._path: str = upath.path
        self._remote = _is_async(self._fs)

    @property
    def is_remote(self) -> bool:
        return self._remote

    @property
    def name(self) -> str:
        """The archive's URL."""
        return self._name

    @property
    def storage_options(self) -> Mapping[str, Any]:
        """The options of the archive's filesystem."""
        return self._upath.storage_options

    def _filesystem(self) -> Any:
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._upath = self._location.fresh_upath()
                    self._fs, self._file, self._pid = self._upath.fs, None, os.getpid()
        return self._fs

    def _not_a_file(self, error: Exception) -> Exception:
        """A clearer error for a failed tail read of a folder (checked only on failure)."""
        try:
            is_dir = bool(self._fs.isdir(self._path))
        except Exception:  # the original error says more than a failed check
            is_dir = False
        if is_dir:
            return IsADirectoryError(21, "is a directory, not an indexed tar archive", self._name)
        return error

    def read_tail(self, size: int) -> tuple[bytes, int | None]:
        fs = self._filesystem()
        try:
            data = _retrying(lambda: self._tail_once(fs, size), self._name, "the tail")
        except Exception as error:
            failure: BaseException = self._not_a_file(error)
            if failure is error:
                failure = remote_failure(error, self._name)
            if failure is error:
                raise
            raise failure from error
        return data, (len(data) if len(data) < size else None)

    def _tail_once(self, fs: Any, size: int) -> bytes:
        if self.is_remote:
            # A suffix request needs no HEAD (the size is unknown until the header is decoded).
            return bytes(fs.cat_file(self._path, start=-size))
        # Filesystems without requests (memory, zip members, chained caches such as
        # simplecache::, whose files can't seek from the end) are asked for the size first.
        file_size = int(fs.size(self._path))
        return bytes(fs.cat_file(self._path, start=max(0, file_size - size), end=file_size))

    async def read_tail_async(self, size: int) -> tuple[bytes, int | None]:
        fs = self._filesystem()
        if not self.is_remote:
            return await run_in_worker(self.read_tail, size)

        async def once() -> bytes:
            return bytes(await await_on_loop(fs._cat_file(self._path, start=-size), fsspec_loop(fs)))

        try:
            data = await _retrying_async(once, self._name, "the tail")
        except Exception as error:
            failure: BaseException = await run_in_worker(self._not_a_file, error)
            if failure is error:
                failure = remote_failure(error, self._name)
            if failure is error:
                raise
            raise failure from error
        return data, (len(data) if len(data) < size else None)

    def set_file_size(self, size: int) -> None:
        self._file_size = size

    def info(self) -> dict[str, Any] | None:
        """The object's details as the filesystem reports them (one small request, e.g. a
        HEAD: size, ETag...), None if they can't be had; for telling whether it changed."""
        fs = self._filesystem()
        with contextlib.suppress(Exception):  # s3fs answers from its listings cache otherwise
            fs.invalidate_cache(self._path)
        try:
            return dict(_retrying(lambda: fs.info(self._path), self._name, "the object's details"))
        except Exception:  # the reads that follow report what is wrong
            return None

    async def info_async(self) -> dict[str, Any] | None:
        """:meth:`info`, without blocking the running loop."""
        fs = self._filesystem()
        if not self.is_remote:
            return await run_in_worker(self.info)
        with contextlib.suppress(Exception):
            fs.invalidate_cache(self._path)

        async def once() -> dict[str, Any]:
            return dict(await await_on_loop(fs._info(self._path), fsspec_loop(fs)))

        try:
            return await _retrying_async(once, self._name, "the object's details")
        except Exception:
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
                raise _ShortBody(f"{len(data)} of {size} bytes at offset {offset} arrived")
            raise _truncated(self._name, offset, size, len(data))
        return data

    def _open_file(self, fs: Any) -> Any:
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
        if self._file_size is not None and _is_buffered_file(file):
            # s3fs looks up the file's details (a HEAD request) on its first fetch unless
            # they are known; the index header told the size already.
            file.details = {"name": self._path, "size": self._file_size, "type": "file"}
        return file

    def read(self, offset: int, size: int) -> bytes:
        return _retrying(lambda: self._read_once(offset, size), self._name, f"bytes [{offset}, {offset + size})")

    def _read_once(self, offset: int, size: int) -> bytes:
        fs = self._filesystem()
        if self._range_reads:
            if self.is_remote:
                data = sync(fs._cat_file(self._path, start=offset, end=offset + size), fsspec_loop(fs))
            else:
                data = fs.cat_file(self._path, start=offset, end=offset + size)
            return self._checked(bytes(data), offset, size)
        with self._lock:
            if self._file is None:
                self._file = self._open_file(fs)
            self._file.seek(offset)
            data = self._file.read(size)
        return self._checked(bytes(data), offset, size)

    async def read_async(self, offset: int, size: int) -> bytes:
        fs = self._filesystem()
        if not self.is_remote:
            return await run_in_worker(self.read, offset, size)

        async def once() -> bytes:
            data = await await_on_loop(fs._cat_file(self._path, start=offset, end=offset + size), fsspec_loop(fs))
            return self._checked(bytes(data), offset, size)

        return await _retrying_async(once, self._name, f"bytes [{offset}, {offset + size})")

    def read_into(self, offset: int, buffer: memoryview) -> None:
        buffer[:] = self.read(offset, len(buffer))

    def reopen(self) -> None:
        with self._lock:
            if self._file is not None:
                self._close_file_quietly(self._file)
            self._upath = self._location.fresh_upath()
            self._fs, self._file, self._pid = self._upath.fs, None, os.getpid()

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


# -- failures of remote storage --------------------------------------------------------------

# fsspec's filesystems raise their own libraries' errors; they are recognised by class name
# (any class of the error's hierarchy), so that no library is imported to name them.
_NO_CREDENTIALS = frozenset({"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"})
_UNREACHABLE = frozenset(
    {"EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError", "ServerTimeoutError",
     "ConnectionError", "TimeoutError"}
)  # fmt: skip
_DENIED = frozenset({"PermissionError", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"})
# The package each protocol needs, and how to install it.
_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs"}
_INSTALL = {"s3fs": "pip install 'ncore-like[s3]'"}


#: What a missing object (or a folder where an object should be) is, said the way Python
#: says it of files: fsspec's filesystems raise these with the path alone, or with the
#: service's message and no name at all.
_NAMED_OS_ERRORS: dict[type[OSError], tuple[int, str]] = {
    FileNotFoundError: (errno.ENOENT, "no such file or object"),
    IsADirectoryError: (errno.EISDIR, "is a directory, not an indexed tar archive"),
    NotADirectoryError: (errno.ENOTDIR, "a path component is no folder"),
}


def _named(error: OSError, name: str) -> OSError:
    """``error`` (a missing object...) with the URL ``name`` as its ``filename``, which puts
    it in the message too; what the service said stays in the message."""
    if error.filename == name:
        return error
    kind = next(kind for kind in _NAMED_OS_ERRORS if isinstance(error, kind))
    number, what = _NAMED_OS_ERRORS[kind]
    said = error.strerror or (str(error) if error.args and str(error) not in (name, error.filename) else "")
    detail = what if not said or said.lower().rstrip(".") == what else f"{what} ({said.rstrip('.')})"
    return kind(error.errno or number, detail, name)


def remote_failure(error: BaseException, name: str) -> BaseException:
    """The error to raise for ``error`` of the remote location ``name``: a
    :class:`~ncore_like.errors.RemoteStorageError` or
    :class:`~ncore_like.errors.MissingDependencyError` that says what to do; a missing
    object's ``FileNotFoundError`` (``IsADirectoryError``...) with the URL as its
    ``filename`` and in its message; or ``error`` itself when it is none of the known
    failures."""
    if isinstance(error, NcoreLikeError):
        return error
    if isinstance(error, tuple(_NAMED_OS_ERRORS)):
        assert isinstance(error, OSError)
        return _named(error, name)
    protocol = name.partition("://")[0] if "://" in name else ""
    if isinstance(error, ImportError):
        package = _PACKAGES.get(protocol)
        if package is None:
            return MissingDependencyError(
                f"the fsspec implementation of {protocol}:// is missing ({error})", archive=name
            )
        install = _INSTALL.get(package, f"pip install {package}")
        return MissingDependencyError(f"{protocol}:// needs {package}, which isn't installed: {install}", archive=name)
    kinds = {cls.__name__ for cls in type(error).__mro__}
    text = str(error).split("\n", 1)[0]
    if isinstance(error, TypeError) and "unexpected keyword argument" in text:
        return RemoteStorageError(f"a storage option the filesystem doesn't take ({text})", archive=name)
    if kinds & _NO_CREDENTIALS:
        return RemoteStorageError(
            "no credentials found: set them in the environment or a profile, pass them as storage options "
            "(-o key=... -o secret=...), or use -o anon=true for a public bucket",
            archive=name,
        )
    if kinds & _DENIED:
        return RemoteStorageError(
            f"access denied ({text}): check the credentials and the bucket's policy", archive=name
        )
    if kinds & _UNREACHABLE:
        return RemoteStorageError(
            f"can't reach the storage ({text}): check the endpoint (storage option endpoint_url or "
            "client_kwargs) and the network",
            archive=name,
        )
    return error


@contextlib.contextmanager
def remote_errors(name: str) -> Iterator[None]:
    """Raises the failures of the remote location ``name`` within the block as
    :func:`remote_failure` says them (e.g. an upload's failures)."""
    try:
        yield
    except Exception as error:
        failure = remote_failure(error, name)
        if failure is error:
            raise
        raise failure from error


# -- retries ------------------------------------------------------------------------------------


class _ShortBody(OSError):
    """A response body shorter than the bytes asked for, of a range the file holds."""


# Failures worth another attempt, by class name anywhere in the error's hierarchy (HTTP
# libraries' own classes are not imported to name them): dropped or reset connections,
# bodies cut short, timeouts.
_TRANSIENT = frozenset(
    {"_ShortBody", "ClientPayloadError", "ServerDisconnectedError", "ClientOSError", "ConnectionResetError",
     "ConnectionAbortedError", "BrokenPipeError", "IncompleteRead", "ReadTimeoutError", "ServerTimeoutError",
     "TimeoutError", "ResponseStreamingError"}
)  # fmt: skip
_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


def _http_status(error: BaseException) -> int | None:
    """The HTTP status a failure answered with, if it says: aiohttp's ``status``, or the
    response of a botocore error, also behind the errors s3fs translates them into (a
    ``503 SlowDown`` becomes an ``OSError`` whose cause is botocore's)."""
    seen: BaseException | None = error
    for _ in range(4):  # the error and the few causes behind it
        if seen is None:
            return None
        status = getattr(seen, "status", None)
        if isinstance(status, int):
            return status
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            code = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(code, int):
                return code
        seen = seen.__cause__
    return None


def is_transient(error: BaseException) -> bool:
    """True for failures of remote storage that another attempt may not meet: a dropped or
    reset connection, a body cut short, a timeout, HTTP 429 or 5xx. Missing objects (404),
    denied access (403) and bad requests are permanent."""
    if isinstance(error, FileNotFoundError | PermissionError | NcoreLikeError):
        return False
    status = _http_status(error)
    if status is not None:
        return status in _TRANSIENT_STATUS
    return bool({cls.__name__ for cls in type(error).__mro__} & _TRANSIENT)


def _next_delay(error: Exception, attempt: int, deadline: float, name: str, what: str) -> float:
    """Seconds to wait before attempt ``attempt + 1`` after ``error``: exponential backoff
    with jitter (so that many clients failing together don't retry together), none before
    the first retry of a failed connection. Raises
    ``error`` itself if it is permanent, and a :class:`~ncore_like.errors.RemoteStorageError`
    naming the attempts when they or the time are used up."""
    if not is_transient(error):
        failure = remote_failure(error, name)  # a missing object, denied access... named
        if failure is error:
            raise error
        raise failure from error
    if attempt == 1 and _http_status(error) is None:
        delay = 0.0  # a connection failure, not an answer saying the service is overloaded
    else:
        delay = float(min(RETRY_MAX_DELAY, RETRY_BASE_DELAY * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5))
    if attempt >= RETRY_ATTEMPTS or time.monotonic() + delay > deadline:
        detail = str(error).split("\n", 1)[0] or type(error).__name__
        raise RemoteStorageError(
            f"reading {what} failed {attempt} times, the last with: {detail}", archive=name
        ) from error
    return delay


def _retrying(call: Callable[[], T], name: str, what: str) -> T:
    """``call()``, again after transient failures (:func:`is_transient`): at most
    :data:`RETRY_ATTEMPTS` attempts within :data:`RETRY_DEADLINE` seconds, then a
    :class:`~ncore_like.errors.RemoteStorageError` naming the attempts. Other failures raise
    at once."""
    deadline = time.monotonic() + RETRY_DEADLINE
    attempt = 1
    while True:
        try:
            return call()
        except Exception as error:
            delay = _next_delay(error, attempt, deadline, name, what)
        time.sleep(delay)
        attempt += 1


async def _retrying_async(call: Callable[[], Awaitable[T]], name: str, what: str) -> T:
    """:func:`_retrying` of a coroutine function, sleeping without blocking the loop."""
    import asyncio

    deadline = time.monotonic() + RETRY_DEADLINE
    attempt = 1
    while True:
        try:
            return await call()
        except Exception as error:
            delay = _next_delay(error, attempt, deadline, name, what)
        await asyncio.sleep(delay)
        attempt += 1
