"""Appending records to a new archive file; the writer never reads its file back.

The writer only needs its own position: payload offsets follow from the sizes of the tar
headers it writes, so it works on any file object that can be written sequentially
(local files, S3 multipart uploads, ...).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol

from upath import UPath

from ._format import (
    BLOCK_SIZE,
    encode_index,
    member_header,
    pack_index_header,
    padding,
    tar_end,
)
from ._location import display_name, local_path

__all__ = ["ArchiveWriter"]

_Buffer = bytes | memoryview
_PADDING = bytes(BLOCK_SIZE)


class _Sink(Protocol):
    def write(self, buffers: Sequence[_Buffer], total: int) -> None: ...
    def read_back(self, offset: int, size: int) -> bytes: ...
    def reopen(self, position: int) -> None: ...
    def close(self) -> None: ...


class _LocalSink:
    """A local file written with ``os.writev``: header, payload and padding in one call,
    without copying the payload."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)

    def write(self, buffers: Sequence[_Buffer], total: int) -> None:
        written = os.writev(self._fd, buffers)
        if written < total:  # partial writes are rare (signals, full disks): finish piecewise
            rest = memoryview(b"".join(buffers))[written:]
            while rest:
                rest = rest[os.write(self._fd, rest) :]

    def read_back(self, offset: int, size: int) -> bytes:
        return os.pread(self._fd, size, offset)

    def reopen(self, position: int) -> None:
        fd = os.open(self._path, os.O_RDWR | os.O_CLOEXEC)
        os.lseek(fd, position, os.SEEK_SET)
        old, self._fd = self._fd, fd
        os.close(old)

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


class _FileSink:
    """A file object of an fsspec filesystem opened for writing (e.g. an S3 upload)."""

    def __init__(self, upath: UPath) -> None:
        self._name = display_name(upath)
        self._file: Any = upath.fs.open(upath.path, "wb")

    def write(self, buffers: Sequence[_Buffer], total: int) -> None:
        for buffer in buffers:
            if len(buffer):
                self._file.write(buffer)

    def read_back(self, offset: int, size: int) -> bytes:
        raise ValueError(f"{self._name}: records of a remote archive being written can't be read before it is closed")

    def reopen(self, position: int) -> None:
        raise ValueError(
            f"{self._name}: a remote archive being written can't be re-opened (its upload "
            "can't be continued from another file object)"
        )

    def close(self) -> None:
        self._file.close()


class ArchiveWriter:
    """Writes records, then the tar end, the index and the index header block.

    Not thread-safe by itself: the archive serialises calls under its lock.
    """

    def __init__(self, upath: UPath) -> None:
        path = local_path(upath)
        self._sink: _Sink = _LocalSink(path) if path is not None else _FileSink(upath)
        self.position = 0

    def append(self, key: str, payload: _Buffer) -> int:
        """Writes one record, returning the file offset of its payload."""
        size = len(payload)
        header = member_header(key, size)
        pad = padding(size)
        self._sink.write((header, payload, _PADDING[:pad]), len(header) + size + pad)
        offset = self.position + len(header)
        self.position = offset + size + pad
        return offset

    def read_back(self, offset: int, size: int) -> bytes:
        """Reads a record written already (local files only)."""
        return self._sink.read_back(offset, size)

    def finish(self, keys: Sequence[str], offsets: Sequence[int], sizes: Sequence[int]) -> None:
        """Ends the tar archive and appends the index of the given records."""
        end = tar_end(self.position)
        index_offset = self.position + len(end)
        index = encode_index(keys, offsets, sizes)
        parts = (end, index, _PADDING[: padding(len(index))], pack_index_header(index_offset, len(index)))
        self._sink.write(parts, sum(len(part) for part in parts))
        self.position = index_offset + len(index) + padding(len(index)) + BLOCK_SIZE

    def reopen(self) -> None:
        """Continues on a re-opened file (e.g. in a forked child)."""
        self._sink.reopen(self.position)

    def close(self) -> None:
        self._sink.close()
