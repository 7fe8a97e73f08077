"""Record sources: how the bytes of an archive opened for reading are fetched.

One small protocol, :class:`RecordSource`, with two implementations:

* :class:`LocalSource` reads local files with ``os.pread``: no lock and no shared file
  position, so reads of many threads run in parallel. Blocking and async reads are both
  direct (a hand-off to an event loop would cost more than a read of the page cache).
* :class:`~ncore_like.archive._remote.FsspecSource` (imported with the first URL) reads any
  fsspec filesystem: each remote read exists once, as a coroutine retried by the archive's
  :class:`~ncore_like.archive.RetryPolicy`, and blocking reads run that coroutine.

Both fetch the tail of the file with one request, which holds the index header and usually
the whole index.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import stat
import weakref
from collections.abc import Iterator
from typing import Protocol

from .._concurrency import run_in_worker
from .._defaults import INLINE_READ_BYTES
from ..errors import ArchiveFormatError, MissingDependencyError, NcoreLikeError, RemoteStorageError
from ._location import partial_path

__all__ = [
    "LocalSource",
    "RecordSource",
    "remote_errors",
    "remote_failure",
    "truncated",
]


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

    def read_span(self, offset: int, size: int) -> bytes:
        """:meth:`read` as one exact range (a remote one's buffered path and its cache are
        bypassed): for scans of many records."""
        ...

    def discard(self, offset: int, size: int) -> bool:
        """Drops a copy of the range kept by the source (that failed its checksum), so that
        the next read fetches it; True if there was one."""
        ...

    def reopen(self) -> None:
        """Re-opens the file resources (e.g. in a forked child)."""
        ...

    def close(self) -> None:
        """Releases the file resources (idempotent)."""
        ...


def truncated(name: str, offset: int, size: int, got: int) -> ArchiveFormatError:
    return ArchiveFormatError(
        f"truncated archive, {size} bytes at offset {offset} requested but {got} read", archive=name
    )


class LocalSource:
    """A local archive file read with ``os.pread``."""

    is_remote = False

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd = self._open()
        # A source dropped without close() (an archive opened in an expression and never
        # closed) gives its descriptor back when it is collected, not at the process's end.
        self._closer = weakref.finalize(self, os.close, self._fd)

    def _open(self) -> int:
        # Not blocking: opening a FIFO for reading would wait for a writer, forever.
        try:
            fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            partial = partial_path(self._path)
            if not os.path.isfile(partial):
                raise
            raise FileNotFoundError(
                errno.ENOENT,
                f"no such file, but {os.path.basename(partial)} is beside it: the unfinished archive of a writer "
                f"that is still running or died (if it died: `ncore-like recover {shlex.quote(self._path)}`)",
                self._path,
            ) from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(21, "is a directory, not an indexed tar archive", self._path)
            raise OSError(
                errno.EINVAL, f"is {_file_kind(mode)}, not an indexed tar archive (a regular file)", self._path
            )
        os.set_blocking(fd, True)
        return fd

    @property
    def fd(self) -> int | None:
        """The file's descriptor (None once closed), for callers that ``pread`` it directly."""
        return self._fd if self._fd >= 0 else None

    def read_tail(self, size: int) -> tuple[bytes, int | None]:
        file_size = os.fstat(self._fd).st_size
        size = min(size, file_size)
        return self.read(file_size - size, size), file_size

    def identity(self) -> tuple[int, int, int, int, int]:
        """The file's device, inode, size, and modification and change times (ns): any
        write or replacement of the file changes one of them (the change time can't be set)."""
        info = os.fstat(self._fd)
        return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

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
            raise truncated(self._path, offset, size, len(data) + len(rest))
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
                raise truncated(self._path, offset, size, done)
            done += count

    read_span = read

    def discard(self, offset: int, size: int) -> bool:
        return False

    def reopen(self) -> None:
        fd = self._open()
        self._closer.detach()
        old, self._fd = self._fd, fd
        self._closer = weakref.finalize(self, os.close, fd)
        if old >= 0:
            os.close(old)

    def close(self) -> None:
        self._closer.detach()
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def _file_kind(mode: int) -> str:
    """What a file that isn't a regular one is, in words."""
    kinds = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))  # fmt: skip
    return next((kind for test, kind in kinds if test(mode)), "no regular file")


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
    if "ProfileNotFound" in kinds:
        return RemoteStorageError(
            f"{text}: name a profile of the AWS config files (storage option profile)", archive=name
        )
    if "BotoCoreError" in kinds:  # anything else botocore refused before a request (a bad config...)
        return RemoteStorageError(f"the S3 client failed: {text}", archive=name)
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
