"""Appending records to a new archive file, and publishing it atomically; the writer never
reads its file back.

The writer only needs its own position: payload offsets follow from the sizes of the tar
headers it writes, so it works on any file object that can be written sequentially
(local files, S3 multipart uploads, ...).

The name of an archive changes only when a writer publishes a complete archive there: a
failure, a signal or a killed process before that leaves whatever was at the name (an
older archive, or nothing) exactly as it was.

* A local archive is written under its *partial name* (:func:`partial_path`:
  ``sequence.itar.partial`` beside ``sequence.itar``) and renamed to its final name by
  :meth:`ArchiveWriter.publish`, after its bytes are on disk (``fsync`` of the file, then of
  the folder after the rename). A partial file found when writing starts is the
  unfinished archive of an earlier writer: it is never overwritten (recover it or delete
  it). The writer holds an exclusive ``flock`` on its partial file while it writes, which
  tells a running writer's file from a dead one's (:func:`being_written`).
* Exclusive creation publishes with a hard link, which fails if the name exists, so of two
  writers of one name exactly one wins and nothing is replaced (filesystems without hard
  links: a check, then the rename, which is not race-free).
* Every record's tar header carries the CRC32C of its payload (see
  :func:`~ncore_like.archive._format.member_header`), so the records of a partial file can
  be recovered by scanning it, without its index; :meth:`ArchiveWriter.flush` makes every
  record written so far durable. The CRC32C of a payload is computed on the writing thread,
  before its header is written (the header carries it, and a stream can't be patched
  afterwards).
* On object storage (S3; GCS and Azure Blob alike, untested) an archive is an upload
  that becomes an object only when :meth:`ArchiveWriter.publish` commits it;
  :meth:`ArchiveWriter.abort` abandons it (an S3 multipart upload is aborted), and so do a
  writer dropped without closing and one left at exit; a killed process never completes
  it. Exclusive creation asks S3 to complete the upload only if no object
  has the name (``If-None-Match``), which is atomic. Other fsspec filesystems (memory,
  SFTP...) write a file under the partial name and move it to the final name when it is
  complete; there exclusive creation is a check before the move, not atomic.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import itertools
import os
import queue
import shlex
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn, Protocol, overload

from .._concurrency import process_id
from .._signals import deferred_signals
from ..errors import ArchiveExistsError, UnfinishedArchiveError
from ._checksum import checksum
from ._direct import DirectWriteError, DirectWrites, unwritten
from ._format import BLOCK_SIZE, has_node_metadata_key, member_header, member_headers, padding, tar_end
from ._libc import libc_function
from ._location import PARTIAL_SUFFIX, Location, partial_path
from ._preallocate import AHEAD, START, preallocate
from ._sources import remote_errors, remote_failure
from ._table import encode_index_tail

__all__ = [
    "KEPT_FOR_RECOVERY",
    "PARTIAL_SUFFIX",
    "ArchiveWriter",
    "ChecksummedRecords",
    "PackedRecords",
    "being_written",
    "checksummed_records",
    "exists_error",
    "link_no_clobber",
    "pack_records",
    "partial_path",
    "recover_command",
    "unfinished_error",
]

_Buffer = bytes | bytearray | memoryview
_Record = bytes | memoryview  # what encoders make
#: What an error of a failed write says of the partial file (callers that discard it say so).
KEPT_FOR_RECOVERY = "writing the archive; what was written stays for recovery"
_PADDING = bytes(BLOCK_SIZE)
#: Buffers one ``pwritev`` takes at most (the kernel's ``IOV_MAX``).
_IOV_MAX = 1024
# errno values of link() on filesystems without hard links (FAT, some FUSE and SMB mounts).
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK})


def _new_file_mode() -> int:
    """The mode ``open()`` gives a new file: 0o666 without the process's umask (read from
    /proc, as setting the umask to learn it would race with other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            umask = next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        umask = 0o022
    return 0o666 & ~umask


def write_file(target: str | os.PathLike[str], data: bytes, *, overwrite: bool = True) -> None:
    """Writes a small file whole: under a temporary name beside ``target``, then renamed into
    place (without ``overwrite``, only if the name is still free), so that ``target`` is never
    seen half written and a failure leaves what was there.

    Raises:
        FileExistsError: Without ``overwrite``, if ``target`` exists.
    """
    import tempfile  # (and random): for this path only, not every reader's start

    target = os.fspath(target)
    folder, name = os.path.split(os.path.abspath(target))
    os.makedirs(folder, exist_ok=True)
    temporary = None
    try:
        with deferred_signals():  # a temporary file created is a temporary file removed
            fd, temporary = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".ncore-like-tmp")
        os.fchmod(fd, _new_file_mode())  # as open() would create it (mkstemp's are the owner's alone)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        try:
            if overwrite:
                os.replace(temporary, target)
            else:
                link_no_clobber(temporary, target)
        except OSError as error:  # it names the temporary file: name the target
            raise type(error)(error.errno, error.strerror, target) from error
    except BaseException:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        raise


def link_no_clobber(source: str, target: str) -> None:
    """Renames the file ``source`` to ``target`` unless ``target`` exists: a hard link, which
    fails if the name is taken (so of two callers exactly one wins), then the old name goes.
    Filesystems without hard links get a check, then a rename (not race-free there).

    Raises:
        FileExistsError: If ``target`` exists (``source`` is left as it was).
    """
    try:
        os.link(source, target)
    except OSError as error:
        if isinstance(error, FileExistsError) or error.errno not in _NO_HARD_LINKS:
            raise
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), target) from None
        os.rename(source, target)
        return
    os.unlink(source)


def _lock(fd: int, operation: int) -> bool:
    """Takes a non-blocking ``flock``; False if another open file holds a conflicting one
    (True where the filesystem has no locks: nothing can be told then)."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # ENOLCK, EOPNOTSUPP...: a filesystem without flock
        return True
    return True


def being_written(partial: str) -> bool:
    """True if a running writer holds the partial file ``partial`` (its ``flock``)."""
    try:
        fd = os.open(partial, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return not _lock(fd, fcntl.LOCK_SH)
    finally:
        os.close(fd)  # releases the lock taken, if any


def _free_name(final: str) -> str:
    """A name beside ``final`` for a recovered archive that names no file yet."""
    stem = final.removesuffix(".itar")
    candidates = (f"{stem}.recovered{'' if n == 1 else f'-{n}'}.itar" for n in range(1, 1000))
    return next(
        (name for name in candidates if not os.path.lexists(name) and not os.path.lexists(partial_path(name))),
        f"{stem}.recovered.itar",
    )


def recover_command(partial: str, final: str) -> str:
    """The ``ncore-like recover`` command line that recovers ``partial`` without replacing
    anything: in place when nothing is at ``final``, else beside it (``--output``); safe to
    run as printed (recovery never replaces a file)."""
    if os.path.lexists(final):
        return f"ncore-like recover {shlex.quote(partial)} --output {shlex.quote(_free_name(final))}"
    return f"ncore-like recover {shlex.quote(final)}"


def unfinished_error(path: str) -> UnfinishedArchiveError:
    """The error of a writer of ``path`` that found its partial file."""
    partial = partial_path(path)
    if being_written(partial):
        return UnfinishedArchiveError(
            f"{partial} is being written by another writer, which is running now: let it close the archive, or "
            "write to another name",
            archive=path,
        )
    return UnfinishedArchiveError(
        f"{partial} exists: the unfinished archive of an earlier writer (killed, or failed before closing); "
        f"recover its records with `{recover_command(partial, path)}` (ncore_like.recover), or delete it",
        archive=path,
    )


def exists_error(name: str, *, late: bool = False, kept: str | None = None) -> ArchiveExistsError:
    """The error of exclusive creation finding ``name`` taken: when starting, or when
    publishing (``late``), with the finished archive ``kept`` under its partial name (local
    files) or discarded (remote ones)."""
    refusal = "exclusive creation (mode 'x' or 'w-') never replaces it"
    if not late:
        return ArchiveExistsError(f"exists already, and {refusal}; open it with mode 'w' to replace it", archive=name)
    fate = (
        f"the new archive is kept as {kept}: `{recover_command(kept, name)}` gives it a name"
        if kept is not None
        else "the new archive was discarded"
    )
    return ArchiveExistsError(
        f"was created by another writer while this archive was written, and {refusal}; {fate}", archive=name
    )


class _Sink(Protocol):
    def write(self, buffers: Sequence[_Buffer], total: int) -> None: ...
    @property
    def end(self) -> int | None: ...
    def read_back(self, offset: int, size: int) -> bytes: ...
    def flush(self) -> None: ...
    def publish(self) -> None: ...
    def release(self) -> None: ...
    def abort(self) -> None: ...
    def reopen(self, position: int) -> None: ...


#: Records smaller than this are copied into the write buffer; larger ones go to the file
#: at once (with what is buffered before them), without a copy.
_BUFFERED_RECORD = 256 << 10
#: The write buffer reaches the file when it holds this much (or at flush and close).
_BUFFER_SIZE = 4 << 20
#: A durable local writer asks the kernel to start writing its pages to disk after every
#: this many bytes (see :func:`_writeback`), so that the fsync at close waits only for the
#: last of them.
_WRITEBACK_BYTES = 8 << 20
_SYNC_FILE_RANGE_WRITE = 2  # <fcntl.h>: start write-out of the range's dirty pages, don't wait


def _find_writeback() -> Callable[[int, int, int], object] | None:
    """Linux's ``sync_file_range`` with ``SYNC_FILE_RANGE_WRITE`` (not in :mod:`os`), None
    elsewhere."""
    import ctypes  # writers only, once

    function = libc_function("sync_file_range", (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint))
    if function is None:
        return None
    return lambda fd, offset, count: function(fd, offset, count, _SYNC_FILE_RANGE_WRITE)


_writeback_function: tuple[Callable[[int, int, int], object] | None] | None = None
#: Write-back requests waiting at most (more are dropped: the fsync at close covers them).
_WRITEBACK_QUEUE = 4
_writeback_lock = threading.Lock()
_writeback_requests: queue.SimpleQueue[tuple[int, int, int]] | None = None
_writeback_pid = 0


def _writeback(fd: int, offset: int, count: int) -> None:
    """Starts writing the file's dirty pages in the range to disk without waiting for them:
    the disk then works while the writer goes on, where an fsync at the end would write
    everything at once (a durable close of 350 MB of frames: ~155 ms of fsync). Errors
    don't surface here: the kernel keeps them for the fsync at flush or close.

    The call runs on a thread of its own, on a duplicate of ``fd``: ``sync_file_range``
    blocks while the device's queue is full, which on the writing thread stalls whatever
    feeds it (a volume's encode pipeline lost ~80 ms of a ~200 ms ``create_array``)."""
    global _writeback_function, _writeback_requests, _writeback_pid
    if _writeback_function is None:
        _writeback_function = (_find_writeback(),)
    function = _writeback_function[0]
    if function is None:
        return
    with _writeback_lock:
        if _writeback_requests is None or _writeback_pid != process_id():  # a forked child has no thread
            _writeback_requests, _writeback_pid = queue.SimpleQueue(), process_id()
            threading.Thread(
                target=_serve_writebacks, args=(_writeback_requests, function), name="ncore_like-writeback", daemon=True
            ).start()
        if _writeback_requests.qsize() < _WRITEBACK_QUEUE:
            _writeback_requests.put((os.dup(fd), offset, count))


def _serve_writebacks(
    requests: queue.SimpleQueue[tuple[int, int, int]], function: Callable[[int, int, int], object]
) -> None:
    while True:
        fd, offset, count = requests.get()
        try:
            function(fd, offset, count)
        finally:
            os.close(fd)


class _LocalSink:
    """A local file under its partial name, locked while it is written. Small records are
    gathered in a write buffer that reaches the file in large writes (a ``write`` per 1-4 KB
    record costs ~30 us); large ones are written with ``os.writev`` (header, payload and
    padding in one call, without copying the payload). Buffered bytes are read back from
    memory. ``durable``: :meth:`flush` and :meth:`publish` fsync the file (and the folder
    after the rename), and the write-back of what is written starts every few megabytes
    (:func:`_writeback`); without it they only write. A durable sink also writes large
    records in aligned memory past the page cache, behind the caller (:mod:`._direct`): it
    waits for those writes before any other access to the file's bytes."""

    def __init__(
        self, path: str, *, exclusive: bool = False, resume_at: int | None = None, durable: bool = True
    ) -> None:
        self._path = path
        self._partial = partial_path(path)
        self._exclusive = exclusive
        self._durable = durable
        self._buffer = bytearray()
        self._end = 0  # the file offset of the buffer's first byte
        self._written_back = 0  # where the write-back started so far ends (durable only)
        # Not durable: the file's blocks are reserved ahead of its writes up to here (see
        # _preallocate; a durable sink writes its large records past the page cache).
        self._reserved = 0
        self._reserving = not durable
        # Durable writers put large records on the disk directly (see _direct).
        self._direct_writes = DirectWrites(self._partial) if durable else None
        if os.path.isdir(path):
            raise IsADirectoryError(errno.EISDIR, "is a directory, not an archive", path)
        if exclusive and os.path.lexists(path):  # refused before anything is written
            raise exists_error(path)
        # Only a partial file this writer created is ever deleted (a resumed one holds the
        # records of an earlier writer).
        self._created = resume_at is None
        if resume_at is not None:
            # Finishing a recovered partial file: everything after its last good record goes.
            self._fd = os.open(self._partial, os.O_RDWR | os.O_CLOEXEC)
            if not _lock(self._fd, fcntl.LOCK_EX):
                self.release()
                raise unfinished_error(path)
            os.ftruncate(self._fd, resume_at)
            self._end = self._written_back = resume_at
        else:
            try:
                self._fd = os.open(self._partial, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            except FileExistsError as error:
                raise unfinished_error(path) from error
            _lock(self._fd, fcntl.LOCK_EX)  # a new file: no one else holds it
        status = os.fstat(self._fd)
        self._identity = (status.st_dev, status.st_ino)

    def write(self, buffers: Sequence[_Buffer], total: int) -> None:
        if total < _BUFFERED_RECORD:
            buffer = self._buffer
            # Drained before, not after: a write that fails never leaves its record behind
            # in the buffer (the writer doesn't count it).
            if len(buffer) + total > _BUFFER_SIZE:
                self._drain()
                buffer = self._buffer
            for part in buffers:
                buffer += part
            return
        direct = self._direct_writes
        if (
            direct is not None
            and len(buffers) == 3  # one record: header, payload, padding
            and direct.qualifies(buffers[0], buffers[1], len(buffers[2]))
        ):
            self._drain()
            try:
                direct.submit(buffers[0], buffers[1], len(buffers[2]), self._end)
            except DirectWriteError as failure:
                self._direct_failed(failure)
            self._end += total
            self._written_back = self._end  # nothing of it waits in the page cache
            return
        if self._buffer:
            self._write_at(self._end, [self._buffer, *buffers])
            self._end += len(self._buffer) + total
            self._buffer = bytearray()
        else:
            self._write_at(self._end, buffers)
            self._end += total
        self._start_writeback()

    def _drain(self) -> None:
        """Writes the buffer to the file. On a failure (a full disk) the buffer is kept and
        the file may hold part of it: the next drain writes it whole again at its place."""
        if self._buffer:
            self._write_at(self._end, [self._buffer])
            self._end += len(self._buffer)
            self._buffer = bytearray()
            self._start_writeback()

    def _start_writeback(self) -> None:
        if self._durable and self._end - self._written_back >= _WRITEBACK_BYTES:
            _writeback(self._fd, self._written_back, self._end - self._written_back)
            self._written_back = self._end

    def _settle(self) -> None:
        """Waits for the direct writes in flight (see :mod:`._direct`): before any other
        access to the bytes of the file."""
        if self._direct_writes is not None:
            try:
                self._direct_writes.settle()
            except DirectWriteError as failure:
                self._direct_failed(failure)

    def _direct_failed(self, failure: DirectWriteError) -> NoReturn:
        """A direct write failed: the file ends before its record (records buffered since
        come after it and go too), and its error is raised as the writer's."""
        self._buffer = bytearray()
        self._end = min(self._end, failure.start)
        error = failure.error
        if not isinstance(error, OSError):
            raise error
        self._failed(error, failure.start)

    def _write_at(self, offset: int, buffers: Sequence[_Buffer]) -> None:
        self._settle()
        # pwritev: the offset is explicit, so a forked child that re-opens the file writes
        # where this writer's next byte belongs, whatever a shared file position says.
        parts = [memoryview(buffer).cast("B") for buffer in buffers if len(buffer)]
        if self._reserving:
            self._reserve(offset, offset + sum(map(len, parts)))
        start = offset
        while parts:
            try:
                written = os.pwritev(self._fd, parts[:_IOV_MAX], offset)
            except OSError as error:
                self._failed(error, start)
            offset += written
            # Partial writes are rare (signals, full disks): continue after what was written.
            parts = unwritten(parts, written)

    def _reserve(self, offset: int, end: int) -> None:
        """Reserves the file's blocks for a write of ``[offset, end)`` and as much again
        ahead (at most :data:`AHEAD`), once the file is long enough to gain from it."""
        if end <= self._reserved or end < START:
            return
        start = max(offset, self._reserved)
        self._reserved = end + min(end, AHEAD)
        # A reservation that fails leaves the writes to report a full disk themselves.
        self._reserving = preallocate(self._fd, start, self._reserved - start)

    def _give_back(self) -> None:
        """Frees the blocks reserved past the end of the file (a truncate to its own size)."""
        if self._reserved > self._end:
            with contextlib.suppress(OSError):  # the archive is whole all the same
                os.ftruncate(self._fd, self._end)
            self._reserved = self._end

    def _failed(self, error: OSError, start: int) -> NoReturn:
        """Cuts the file at ``start`` and raises ``error`` as a write of this file that
        failed (a full disk, an I/O error): what this call wrote is no record, and later
        records (and the index) written at ``start`` could leave it behind them (see
        flush())."""
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, start)  # also frees the blocks reserved past it
        self._reserved = min(self._reserved, start)
        detail = f"{error.strerror} ({KEPT_FOR_RECOVERY})"
        raise OSError(error.errno, detail, self._partial) from error

    @property
    def end(self) -> int:
        """Where the next byte written goes: after the file's bytes and the buffer's."""
        return self._end + len(self._buffer)

    def read_back(self, offset: int, size: int) -> bytes:
        if offset >= self._end:  # still in the buffer
            start = offset - self._end
            return bytes(self._buffer[start : start + size])
        self._settle()
        return os.pread(self._fd, size, offset)

    def flush(self) -> None:
        self._drain()
        self._settle()
        # Nothing may follow the last byte written: a failed write's bytes past it would end
        # the published file instead of the index header block (if cutting them off failed).
        if os.fstat(self._fd).st_size > self._end:
            os.ftruncate(self._fd, self._end)
        if self._durable:
            os.fsync(self._fd)

    def publish(self) -> None:
        self.flush()
        if self._exclusive:  # publishes without replacing anything
            self._link()
        else:
            os.replace(self._partial, self._path)
        self.release()
        if not self._durable:
            return
        # The rename itself is durable once the folder is.
        folder = os.open(os.path.dirname(self._path) or ".", os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)

    def _link(self) -> None:
        try:
            link_no_clobber(self._partial, self._path)
        except FileExistsError as error:
            raise exists_error(self._path, late=True, kept=self._partial) from error

    def release(self) -> None:
        if self._fd >= 0:
            # What is buffered goes to the partial file for recovery, if the disk takes it.
            with contextlib.suppress(OSError):
                self._drain()
            with contextlib.suppress(OSError):
                self._settle()  # nothing buffered was written after a failed direct write
            # Published (after the rename: a truncate to its own size changes no byte) or
            # kept for recovery, the file keeps no block reserved past its end.
            self._give_back()
        self._buffer = bytearray()
        if self._direct_writes is not None:
            self._direct_writes.close()
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)  # also releases the lock

    def __del__(self) -> None:
        # A writer dropped without closing is as good as dead: its descriptor (and lock) go,
        # its partial file stays for recovery.
        if getattr(self, "_fd", -1) >= 0:
            self.release()

    def abort(self) -> None:
        self._buffer = bytearray()  # discarded: never written
        self.release()
        if not self._created:
            return
        # After a release (a failed close) the name may have become another writer's file.
        with contextlib.suppress(FileNotFoundError):
            status = os.stat(self._partial)
            if (status.st_dev, status.st_ino) == self._identity:
                os.unlink(self._partial)

    def reopen(self, position: int) -> None:
        fd = os.open(self._partial, os.O_RDWR | os.O_CLOEXEC)
        # In a forked child the parent's descriptor may still hold the lock: the file is
        # locked either way.
        _lock(fd, fcntl.LOCK_EX)
        old, self._fd = self._fd, fd
        os.close(old)
        if self._direct_writes is not None:  # the inherited descriptor goes too
            self._direct_writes = self._direct_writes.forked()


#: fsspec protocols of object stores, whose uploads become objects only when they complete.
_UPLOAD_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az"})
# Uploads not completed yet, abandoned when the interpreter exits (e.g. after Ctrl-C in a
# writer without a with block), while fsspec's I/O thread still runs.
_uploads: weakref.WeakSet[_FileSink] = weakref.WeakSet()


@atexit.register
def _abandon_uploads() -> None:
    for sink in list(_uploads):
        with contextlib.suppress(Exception):
            sink.abort()


class _FileSink:
    """A file object of an fsspec filesystem opened for writing.

    On object stores the file is an upload of the final name that becomes an object only
    when :meth:`publish` commits it (an S3 multipart upload, completed only if no object
    has the name when ``exclusive``): it is opened without fsspec's autocommit, so closing
    it — also from its finaliser, when a writer that failed is garbage-collected — never
    completes it, and a writer dropped or left at exit abandons it. Elsewhere it is a file
    under the partial name, moved to the final name when complete (files there are written
    in place: the final name would show a torn archive)."""

    def __init__(self, location: Location, *, exclusive: bool = False) -> None:
        upath = location.upath
        self._name = location.name
        self._exclusive = exclusive
        self._fs: Any = upath.fs
        self._path: str = upath.path
        protocols = self._fs.protocol
        self._direct = bool(_UPLOAD_PROTOCOLS.intersection((protocols,) if isinstance(protocols, str) else protocols))
        self._partial = self._path if self._direct else partial_path(self._path)
        self._file: Any = None
        try:
            if exclusive and self._fs.exists(self._path):  # refused before anything is written
                raise exists_error(self._name)
            # "xb": s3fs completes the upload only if no object has the name; elsewhere it
            # refuses an existing partial file (another writer's).
            try:
                self._file = self._open("xb" if exclusive or not self._direct else "wb")
            except ValueError:  # a filesystem without mode "xb": checks instead
                if not self._direct and self._fs.exists(self._partial):
                    raise FileExistsError(errno.EEXIST, "exists", self._partial) from None
                self._file = self._open("wb")
        except FileExistsError as error:
            if isinstance(error, ArchiveExistsError):
                raise
            raise UnfinishedArchiveError(
                f"{self._partial} exists: the unfinished archive of another writer, running or killed (it can't be "
                "recovered remotely); delete it if no writer is running",
                archive=self._name,
            ) from error
        except Exception as error:  # no credentials, no endpoint, s3fs missing...
            failure = remote_failure(error, self._name)
            if failure is error:
                raise
            raise failure from error
        if self._direct:
            _uploads.add(self)

    def _open(self, mode: str) -> Any:
        if not self._direct:
            return self._fs.open(self._partial, mode)
        # _open: fs.open() would also enlist the file in the filesystem's transaction, which
        # keeps it forever and commits it when any later transaction of that filesystem ends.
        return self._fs._open(self._partial, mode, autocommit=False)

    def write(self, buffers: Sequence[_Buffer], total: int) -> None:
        with remote_errors(self._name):  # an upload's part may fail (no such bucket...)
            for buffer in buffers:
                if len(buffer):
                    self._file.write(buffer)

    @property
    def end(self) -> None:
        """Unknown: what a file object took of a write that failed can't be told."""
        return None

    def read_back(self, offset: int, size: int) -> bytes:
        raise ValueError(f"{self._name}: records of a remote archive being written can't be read before it is closed")

    def flush(self) -> None:
        # Uploads what is buffered (e.g. a multipart part); the object still appears only
        # when the upload completes.
        with remote_errors(self._name):
            self._file.flush()

    def publish(self) -> None:
        with remote_errors(self._name):  # our own errors pass as they are
            if self._exclusive:
                # A look first (stores that ignore conditional writes); atomic only where
                # the upload's completion is conditional (S3).
                self._fs.invalidate_cache(self._path)
                if self._fs.exists(self._path):
                    raise exists_error(self._name, late=True)
            if self._direct:
                self._file.close()  # uploads the last part; completes nothing
                try:
                    self._file.commit()
                except FileExistsError as error:  # the conditional completion failed
                    raise exists_error(self._name, late=True) from error
                self._file = None
                _uploads.discard(self)
                return
            self._file.close()
            self._fs.mv(self._partial, self._path)

    def release(self) -> None:
        self.abort()  # an unfinished remote archive can't be recovered: nothing to keep

    def abort(self) -> None:
        file, self._file = self._file, None
        if file is None:
            return
        if self._direct:
            _uploads.discard(self)
            file.discard()  # e.g. aborts an S3 multipart upload (also after close)
            file.closed = True  # nothing left to upload from the finaliser
            return
        if not file.closed:
            file.close()
        with contextlib.suppress(FileNotFoundError):
            self._fs.rm(self._partial)

    def __del__(self) -> None:
        # A writer dropped without closing (e.g. it failed outside a with block): the
        # upload is abandoned, never completed.
        with contextlib.suppress(Exception):
            self.abort()

    def reopen(self, position: int) -> None:
        raise ValueError(
            f"{self._name}: a remote archive being written can't be re-opened (its upload "
            "can't be continued from another file object)"
        )


#: NUL padding after a payload, by its length (0 to 511 bytes).
_PADDINGS = tuple(bytes(size) for size in range(BLOCK_SIZE))


class PackedRecords(Sequence[tuple[str, memoryview]]):
    """A batch of records laid out as the tar members a writer appends for them (header,
    payload, padding each) in one byte string, made by :func:`pack_records` on any thread
    (e.g. the worker that encoded them): an archive's ``write_many`` then only writes
    :attr:`data` and counts the records, a few calls for the whole batch. Also a sequence
    of ``(key, payload)`` pairs, so anything that writes batches of records writes it."""

    __slots__ = ("crcs", "data", "has_node_metadata", "keys", "offsets", "sizes")

    def __init__(
        self, keys: list[str], data: bytes, offsets: list[int], sizes: list[int], crcs: list[int] | None
    ) -> None:
        self.keys = keys
        self.data = data
        """The tar members of the records, one after the other."""
        self.offsets = offsets
        """Where each payload starts in :attr:`data`."""
        self.sizes = sizes
        self.crcs = crcs
        """The payloads' CRC32C (in their headers), None if packed without checksums."""
        self.has_node_metadata = has_node_metadata_key(keys)
        """True if a key is node metadata's (which archives hold until they close)."""

    @property
    def checksums(self) -> bool:
        """True if packed with checksums."""
        return self.crcs is not None

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, index: int) -> tuple[str, memoryview]: ...
    @overload
    def __getitem__(self, index: slice) -> list[tuple[str, memoryview]]: ...
    def __getitem__(self, index: int | slice) -> tuple[str, memoryview] | list[tuple[str, memoryview]]:
        if isinstance(index, slice):
            return [self[position] for position in range(*index.indices(len(self)))]
        start = self.offsets[index]
        return self.keys[index], memoryview(self.data)[start : start + self.sizes[index]]


def pack_records(keys: list[str], payloads: Sequence[_Buffer], *, checksums: bool) -> PackedRecords:
    """The records ``zip(keys, payloads)`` as the tar members :meth:`ArchiveWriter.append`
    writes one by one, with their payloads' CRC32C when ``checksums`` (the archive's
    setting: a batch packed otherwise is written record by record). Keys are checked when
    the batch is written."""
    if len(keys) != len(payloads):
        raise ValueError(f"{len(keys)} keys for {len(payloads)} payloads")
    sizes = list(map(len, payloads))
    crcs = list(map(checksum, payloads)) if checksums else None
    parts: list[_Buffer] = [b""] * (3 * len(keys))
    parts[0::3] = member_headers(keys, sizes, crcs)
    parts[1::3] = payloads
    parts[2::3] = map(_PADDINGS.__getitem__, map(BLOCK_SIZE.__rmod__, map(int.__neg__, sizes)))
    # A payload starts where its header ends: at every third of the parts' running ends.
    ends = list(itertools.accumulate(map(len, parts)))
    return PackedRecords(keys, b"".join(parts), ends[0::3], sizes, crcs)


class ChecksummedRecords(Sequence[tuple[str, _Record]]):
    """Records with their payloads' CRC32C, computed by :func:`checksummed_records` on the
    thread that made the payloads (e.g. the worker that compressed them, whose cache still
    holds them: ~7 x faster than on the writing thread, which reads them from another
    core's). An archive's ``write_many`` takes the checksums as they are, so the payloads
    must not change until it returns. Also a sequence of ``(key, payload)`` pairs, so
    anything that writes batches of records writes it."""

    __slots__ = ("crcs", "has_node_metadata", "keys", "payloads")

    def __init__(self, keys: list[str], payloads: list[_Record], crcs: list[int]) -> None:
        self.keys = keys
        self.payloads = payloads
        self.crcs = crcs
        self.has_node_metadata = has_node_metadata_key(keys)
        """True if a key is node metadata's (which archives hold until they close)."""

    @classmethod
    def joined(cls, batches: Sequence[ChecksummedRecords]) -> ChecksummedRecords:
        """The records of ``batches`` in order, as one batch."""
        return cls(
            [key for batch in batches for key in batch.keys],
            [payload for batch in batches for payload in batch.payloads],
            [crc for batch in batches for crc in batch.crcs],
        )

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator[tuple[str, _Record]]:
        return zip(self.keys, self.payloads, strict=True)

    @overload
    def __getitem__(self, index: int) -> tuple[str, _Record]: ...
    @overload
    def __getitem__(self, index: slice) -> list[tuple[str, _Record]]: ...
    def __getitem__(self, index: int | slice) -> tuple[str, _Record] | list[tuple[str, _Record]]:
        if isinstance(index, slice):
            return list(zip(self.keys[index], self.payloads[index], strict=True))
        return self.keys[index], self.payloads[index]


def checksummed_records(keys: list[str], payloads: list[_Record]) -> ChecksummedRecords:
    """The records ``zip(keys, payloads)`` with their payloads' CRC32C, computed here (see
    :class:`ChecksummedRecords`)."""
    if len(keys) != len(payloads):
        raise ValueError(f"{len(keys)} keys for {len(payloads)} payloads")
    return ChecksummedRecords(keys, payloads, list(map(checksum, payloads)))


class ArchiveWriter:
    """Writes records, then the tar end, the index and the index header block, and
    publishes the archive at its final name.

    Not thread-safe by itself: the archive serialises calls under its lock.

    Args:
        location: The archive's final location.
        checksums: Store the CRC32C of every payload (in its tar header and the index).
        exclusive: Refuse to replace a file or object at the final name (when starting,
            and when publishing: see the module's notes on what is atomic where).
        durable: Local files: :meth:`flush` and :meth:`publish` sync the file (and the
            folder after the rename) to disk; without it they only write.
    """

    def __init__(
        self, location: Location, *, checksums: bool = True, exclusive: bool = False, durable: bool = True
    ) -> None:
        path = location.local
        self._sink: _Sink = (
            _LocalSink(path, exclusive=exclusive, durable=durable)
            if path is not None
            else _FileSink(location, exclusive=exclusive)
        )
        self.position = 0
        self.crcs: list[int] | None = [] if checksums else None
        """The CRC32C of every record appended, in order (None without checksums)."""

    @classmethod
    def resume(cls, path: str, position: int, *, checksums: bool) -> ArchiveWriter:
        """Continues the partial file of the local archive ``path`` at ``position`` (the end
        of its last record to keep; what follows is cut off); publishing never replaces a
        file at ``path``."""
        writer = cls.__new__(cls)
        writer._sink = _LocalSink(path, exclusive=True, resume_at=position)
        writer.position = position
        writer.crcs = [] if checksums else None
        return writer

    def append(self, key: str, payload: _Buffer) -> int:
        """Writes one record, returning the file offset of its payload (its CRC32C goes to
        :attr:`crcs`)."""
        size = len(payload)
        crcs = self.crcs
        crc = None if crcs is None else checksum(payload)
        header = member_header(key, size, crc)
        pad = -size % BLOCK_SIZE  # padding(size), inline: this runs once per record
        total = len(header) + size + pad
        self._sink.write((header, payload, _PADDING[:pad]), total)
        offset = self.position + len(header)
        self.position += total
        if crc is not None:
            crcs.append(crc)  # type: ignore[union-attr]
        return offset

    def append_many(
        self,
        keys: Sequence[str],
        payloads: Sequence[_Buffer],
        offsets: list[int],
        checksums: Sequence[int] | None = None,
    ) -> None:
        """Writes records in order, the same bytes as :meth:`append` one by one, appending
        each one's payload offset to ``offsets`` once it is written (on a failure, ``offsets``
        tells the records written before it). Small records go to the sink in groups (one
        call for up to :data:`_BUFFERED_RECORD` bytes: buffered all the same).
        ``checksums``: the payloads' CRC32C, computed already (see
        :class:`ChecksummedRecords`)."""
        crcs = self.crcs
        given = iter(checksums) if checksums is not None and crcs is not None else None
        group: list[_Buffer] = []
        group_offsets: list[int] = []
        group_crcs: list[int] = []
        group_start = position = self.position
        for key, payload in zip(keys, payloads, strict=True):
            size = len(payload)
            crc = None if crcs is None else checksum(payload) if given is None else next(given)
            header = member_header(key, size, crc)
            pad = padding(size)
            total = len(header) + size + pad
            if group and position + total - group_start >= _BUFFERED_RECORD:
                self._write_group(group, position - group_start, group_offsets, group_crcs, offsets)
                group_start = position
            group += (header, payload, _PADDING[:pad])
            group_offsets.append(position + len(header))
            if crc is not None:
                group_crcs.append(crc)
            position += total
        if group:
            self._write_group(group, position - group_start, group_offsets, group_crcs, offsets)

    def append_packed(self, packed: PackedRecords) -> int:
        """Writes packed records (the bytes :meth:`append` writes for them one by one), all or
        none of them, returning the file offset of :attr:`PackedRecords.data` (a payload's
        offset is it plus the payload's offset there)."""
        if packed.checksums != (self.crcs is not None):
            raise ValueError("records packed with checksums for an archive without them, or the other way round")
        start = self.position
        data = packed.data
        self._sink.write((data,), len(data))
        self.position = start + len(data)
        if self.crcs is not None:
            assert packed.crcs is not None
            self.crcs += packed.crcs
        return start

    def _write_group(
        self, group: list[_Buffer], total: int, group_offsets: list[int], group_crcs: list[int], offsets: list[int]
    ) -> None:
        """Writes the buffers of consecutive records, then counts them (and empties the lists)."""
        self._sink.write(group, total)
        self.position += total
        if self.crcs is not None:
            self.crcs += group_crcs
        offsets += group_offsets
        group.clear()
        group_offsets.clear()
        group_crcs.clear()

    def read_back(self, offset: int, size: int) -> bytes:
        """Reads a record written already (local files only)."""
        return self._sink.read_back(offset, size)

    def in_step(self) -> bool:
        """Whether :attr:`position` is where the sink's next byte goes (False where that
        can't be told: a remote upload), as after every write that completed or cleaned up
        after itself."""
        return self._sink.end == self.position

    def flush(self) -> None:
        """Writes every record appended so far (local files: the write buffer) and makes it
        durable (local files: on disk, unless not ``durable``)."""
        self._sink.flush()

    def finish(
        self, keys: Sequence[str], offsets: Sequence[int], sizes: Sequence[int], checksums: Sequence[int] | None
    ) -> None:
        """Ends the tar archive and appends the index of the given records."""
        end = tar_end(self.position)
        # The records are flushed (and synced, if durable) while a large index compresses:
        # the publish's sync then waits only for the tail.
        tail = encode_index_tail(self.position + len(end), keys, offsets, sizes, checksums, meanwhile=self._sink.flush)
        self._sink.write((end, tail), len(end) + len(tail))
        self.position += len(end) + len(tail)

    def publish(self) -> None:
        """Makes the finished archive appear at its final name (durably, for local files)."""
        self._sink.publish()

    def release(self) -> None:
        """Stops writing without publishing: a local partial file stays for recovery, a
        remote upload is abandoned."""
        self._sink.release()

    def abort(self) -> None:
        """Stops writing and discards everything written (the partial file this writer
        created, the upload); a resumed partial file is kept."""
        self._sink.abort()

    def reopen(self) -> None:
        """Continues on a re-opened file (e.g. in a forked child)."""
        self._sink.reopen(self.position)
