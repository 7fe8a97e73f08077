"""Appending records to a new archive file, and publishing it atomically; the writer never
reads its file back.

The writer only needs its own position: payload offsets follow from the sizes of the tar
headers it writes, so it works on any file object that can be written sequentially
(local files, S3 multipart uploads, ...).

Crash safety:

* A local archive is written under its *partial name* (:func:`partial_path`:
  ``sequence.itar.partial`` beside ``sequence.itar``) and renamed to its final name by
  :meth:`ArchiveWriter.publish`, after its bytes are on disk (``fsync`` of the file, then of
  the folder after the rename). Until then nothing exists at the final name, and an
  archive already there stays untouched. A partial file found when writing starts is the
  unfinished archive of an earlier writer: it is never overwritten (recover it or delete
  it).
* Every record's tar header carries the CRC32C of its payload (see
  :func:`~ncore_like.archive._format.member_header`), so the records of a partial file can
  be recovered by scanning it, without its index; :meth:`ArchiveWriter.flush` makes every
  record written so far durable.

The CRC32C of a payload is computed on the writing thread, before its header is written
(the header carries it, and a stream can't be patched afterwards).
* A remote archive is an upload that becomes an object only when it completes
  (:meth:`ArchiveWriter.publish`); :meth:`ArchiveWriter.abort` abandons it (an S3 multipart
  upload is aborted), and so does a killed process, which never completes it.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Sequence
from typing import Any, Protocol

from ..errors import UnfinishedArchiveError
from ._checksum import checksum
from ._format import (
    BLOCK_SIZE,
    encode_index,
    member_header,
    pack_index_header,
    padding,
    tar_end,
)
from ._location import Location
from ._sources import remote_errors

__all__ = ["PARTIAL_SUFFIX", "ArchiveWriter", "partial_path"]

_Buffer = bytes | memoryview
_PADDING = bytes(BLOCK_SIZE)
#: What the partial name of a local archive being written appends to its final name.
PARTIAL_SUFFIX = ".partial"


def partial_path(path: str) -> str:
    """The name a local archive has while it is written (``<final name>.partial``, in the
    same folder, so that the rename at the end is atomic)."""
    return path + PARTIAL_SUFFIX


class _Sink(Protocol):
    def write(self, buffers: Sequence[_Buffer], total: int) -> None: ...
    def read_back(self, offset: int, size: int) -> bytes: ...
    def flush(self) -> None: ...
    def publish(self) -> None: ...
    def release(self) -> None: ...
    def abort(self) -> None: ...
    def reopen(self, position: int) -> None: ...


class _LocalSink:
    """A local file written with ``os.writev`` (header, payload and padding in one call,
    without copying the payload) under its partial name."""

    def __init__(self, path: str, *, resume_at: int | None = None) -> None:
        self._path = path
        self._partial = partial_path(path)
        if os.path.isdir(path):
            raise IsADirectoryError(errno.EISDIR, "is a directory, not an archive", path)
        if resume_at is not None:
            # Finishing a recovered partial file: everything after its last good record goes.
            self._fd = os.open(self._partial, os.O_RDWR | os.O_CLOEXEC)
            os.ftruncate(self._fd, resume_at)
            os.lseek(self._fd, resume_at, os.SEEK_SET)
            return
        try:
            self._fd = os.open(self._partial, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError as error:
            raise UnfinishedArchiveError(
                f"{self._partial} exists: the unfinished archive of an earlier writer (killed, or failed "
                f"before closing); recover its records with `ncore-like recover {path}` "
                "(ncore_like.recover), or delete it",
                archive=path,
            ) from error

    def write(self, buffers: Sequence[_Buffer], total: int) -> None:
        written = os.writev(self._fd, buffers)
        if written < total:  # partial writes are rare (signals, full disks): finish piecewise
            rest = memoryview(b"".join(buffers))[written:]
            while rest:
                rest = rest[os.write(self._fd, rest) :]

    def read_back(self, offset: int, size: int) -> bytes:
        return os.pread(self._fd, size, offset)

    def flush(self) -> None:
        os.fsync(self._fd)

    def publish(self) -> None:
        os.fsync(self._fd)
        self.release()
        os.replace(self._partial, self._path)
        # The rename itself is durable once the folder is.
        folder = os.open(os.path.dirname(self._path) or ".", os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)

    def release(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def abort(self) -> None:
        self.release()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._partial)

    def reopen(self, position: int) -> None:
        fd = os.open(self._partial, os.O_RDWR | os.O_CLOEXEC)
        os.lseek(fd, position, os.SEEK_SET)
        old, self._fd = self._fd, fd
        os.close(old)


class _FileSink:
    """A file object of an fsspec filesystem opened for writing (e.g. an S3 upload, which
    becomes an object when the file is closed)."""

    def __init__(self, location: Location) -> None:
        upath = location.upath
        self._name = location.name
        with remote_errors(self._name):  # no credentials, no endpoint, s3fs missing...
            self._file: Any = upath.fs.open(upath.path, "wb")

    def write(self, buffers: Sequence[_Buffer], total: int) -> None:
        with remote_errors(self._name):  # an upload's part may fail (no such bucket...)
            for buffer in buffers:
                if len(buffer):
                    self._file.write(buffer)

    def read_back(self, offset: int, size: int) -> bytes:
        raise ValueError(f"{self._name}: records of a remote archive being written can't be read before it is closed")

    def flush(self) -> None:
        # Uploads what is buffered (e.g. a multipart part); the object still appears only
        # when the upload completes.
        with remote_errors(self._name):
            self._file.flush()

    def publish(self) -> None:
        with remote_errors(self._name):
            self._file.close()

    def release(self) -> None:
        self.abort()  # an unfinished upload can't be resumed: nothing to keep

    def abort(self) -> None:
        file, self._file = self._file, None
        if file is None or file.closed:
            return
        discard = getattr(file, "discard", None)
        if discard is not None:
            discard()  # e.g. aborts an S3 multipart upload
            # Closing (also from the file's finaliser) would complete the upload.
            file.closed = True
        else:
            file.close()

    def reopen(self, position: int) -> None:
        raise ValueError(
            f"{self._name}: a remote archive being written can't be re-opened (its upload "
            "can't be continued from another file object)"
        )


class ArchiveWriter:
    """Writes records, then the tar end, the index and the index header block, and
    publishes the archive at its final name.

    Not thread-safe by itself: the archive serialises calls under its lock.

    Args:
        location: The archive's final location.
        checksums: Store the CRC32C of every payload (in its tar header and the index).
    """

    def __init__(self, location: Location, *, checksums: bool = True) -> None:
        path = location.local
        self._sink: _Sink = _LocalSink(path) if path is not None else _FileSink(location)
        self.position = 0
        self.crcs: list[int] | None = [] if checksums else None
        """The CRC32C of every record appended, in order (None without checksums)."""

    @classmethod
    def resume(cls, path: str, position: int, *, checksums: bool) -> ArchiveWriter:
        """Continues the partial file of the local archive ``path`` at ``position`` (the end
        of its last record to keep; what follows is cut off)."""
        writer = cls.__new__(cls)
        writer._sink = _LocalSink(path, resume_at=position)
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
        pad = padding(size)
        self._sink.write((header, payload, _PADDING[:pad]), len(header) + size + pad)
        offset = self.position + len(header)
        self.position = offset + size + pad
        if crcs is not None:
            assert crc is not None
            crcs.append(crc)
        return offset

    def read_back(self, offset: int, size: int) -> bytes:
        """Reads a record written already (local files only)."""
        return self._sink.read_back(offset, size)

    def flush(self) -> None:
        """Makes every record written so far durable (local files: on disk)."""
        self._sink.flush()

    def finish(
        self, keys: Sequence[str], offsets: Sequence[int], sizes: Sequence[int], checksums: Sequence[int] | None
    ) -> None:
        """Ends the tar archive and appends the index of the given records."""
        end = tar_end(self.position)
        index_offset = self.position + len(end)
        index = encode_index(keys, offsets, sizes, checksums)
        parts = (end, index, _PADDING[: padding(len(index))], pack_index_header(index_offset, len(index)))
        self._sink.write(parts, sum(len(part) for part in parts))
        self.position = index_offset + len(index) + padding(len(index)) + BLOCK_SIZE

    def publish(self) -> None:
        """Makes the finished archive appear at its final name (durably, for local files)."""
        self._sink.publish()

    def release(self) -> None:
        """Stops writing without publishing: a local partial file stays for recovery, a
        remote upload is abandoned."""
        self._sink.release()

    def abort(self) -> None:
        """Stops writing and discards everything written (the partial file, the upload)."""
        self._sink.abort()

    def reopen(self) -> None:
        """Continues on a re-opened file (e.g. in a forked child)."""
        self._sink.reopen(self.position)
