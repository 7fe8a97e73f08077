"""Writing large records of a durable local archive straight to the disk (``O_DIRECT``),
past the page cache.

A durable archive's bytes must reach the disk before it is published anyway. Written
through the page cache they are first copied there by the kernel (~60 ms of CPU time for
the 207 MB of records of a compressed 268 MB volume, on the writing thread) and then
written back; with ``O_DIRECT`` the disk reads them from the process's memory (the same
records: ~5 ms of CPU, and the write itself ran at 2.2 GB/s on this project's VM, faster
than two cores compress). While both cores encode chunks, that copy is what a writer adds
to the encode. The fsync at flush and close still follows: ``O_DIRECT`` alone doesn't
empty the disk's own cache.

``O_DIRECT`` asks for aligned writes: file offsets, lengths and memory addresses multiples
of the device's logical block size (512 bytes on most disks). Tar records start at
multiples of 512 bytes in the file, so a record qualifies when its payload starts at an
aligned address, as the memory of the library's own large records does
(:mod:`ncore_like._buffers` is page-aligned): the header and the payload's last partial
block (with the padding) are copied into a small aligned scratch buffer, the rest of the
payload is written from where it is. Other payloads (a caller's bytes) and devices that
refuse the alignment go through the page cache as before; so does a filesystem without
``O_DIRECT`` (the open fails).

The file is opened a second time for this: reads (of a writing archive's records) and the
small buffered writes go through the first descriptor, and the kernel keeps the page
cache coherent with what the direct writes put on disk.
"""

from __future__ import annotations

import contextlib
import mmap
import os

import numpy as np

from ._format import BLOCK_SIZE

__all__ = ["DirectWrites"]

#: File offsets, lengths and addresses of direct writes are multiples of this (tar's block
#: size, the smallest logical block size of disks; a device that needs more refuses the
#: first write, and its archive goes through the page cache).
_ALIGNMENT = BLOCK_SIZE
#: The scratch buffer: a record header (512 bytes; a PAX header for long keys takes a few
#: blocks more) and a payload's last block.
_SCRATCH_BYTES = 64 << 10


def _address(buffer: bytes | bytearray | memoryview) -> int | None:
    """Where ``buffer``'s bytes start in memory (None if it has no flat layout)."""
    try:
        return int(np.frombuffer(buffer, np.uint8).ctypes.data)
    except (ValueError, TypeError):
        return None


class DirectWrites:
    """The ``O_DIRECT`` descriptor of one local file, opened at the first record that
    qualifies, and the aligned memory that carries a record's header and last block."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd: int | None = None  # opened on first use; -1: the filesystem refused it
        self._scratch = memoryview(b"")  # made with the descriptor

    def segments(
        self, header: bytes | bytearray | memoryview, payload: bytes | bytearray | memoryview, pad: int
    ) -> list[memoryview] | None:
        """The aligned buffers that write the record (``header``, ``payload``, then ``pad``
        zero bytes: its tar blocks) with one ``pwritev`` on :attr:`fd`, or None if the
        record can't be written directly (its payload's memory isn't aligned, no
        ``O_DIRECT`` here). The buffers stay valid until the next call."""
        size = len(payload)
        head = len(header)
        address = _address(payload)
        tail = size % _ALIGNMENT
        body = size - tail
        if (
            head % _ALIGNMENT
            or (tail + pad) % _ALIGNMENT
            or head + _ALIGNMENT > _SCRATCH_BYTES
            or address is None
            or address % _ALIGNMENT
            or self.fd < 0
        ):
            return None
        view = self._scratch
        view[:head] = header
        parts = [view[:head], memoryview(payload).cast("B")[:body]]
        if tail:  # the payload's last bytes, then the padding's zeros, in one aligned block
            view[head : head + tail] = memoryview(payload).cast("B")[body:]
            view[head + tail : head + _ALIGNMENT] = bytes(pad)
            parts.append(view[head : head + _ALIGNMENT])
        return parts

    @property
    def fd(self) -> int:
        """The ``O_DIRECT`` descriptor (-1 where the filesystem doesn't support it)."""
        if self._fd is None:
            self._fd = -1
            direct = getattr(os, "O_DIRECT", 0)  # Linux, FreeBSD
            if direct:
                with contextlib.suppress(OSError):  # EINVAL: a filesystem without O_DIRECT
                    self._fd = os.open(self._path, os.O_WRONLY | direct | os.O_CLOEXEC)
                    self._scratch = memoryview(mmap.mmap(-1, _SCRATCH_BYTES))  # anonymous: page-aligned
        return self._fd

    def close(self) -> None:
        """Closes the descriptor (it holds no lock: the writer's own descriptor does)."""
        fd, self._fd = self._fd, -1
        if fd is not None and fd >= 0:
            os.close(fd)
