"""Writing the large records of a durable local archive straight to the disk (``O_DIRECT``),
past the page cache, on a thread of their own.

A durable archive's bytes must reach the disk before it is published anyway. Written
through the page cache they are first copied there by the kernel (~60 ms of CPU time for
the 207 MB of records of a compressed 268 MB volume) and written back later; while both
cores compress chunks, that copy is what the writer adds to the encode. With ``O_DIRECT``
the disk reads the records from the process's memory (~5 ms of CPU for the same records;
2.2 GB/s on this project's VM, faster than two cores compress). Such a write waits for the
disk, so it runs on a writing thread, a few records behind the caller: a 2-thread encode of
the volume took 175 ms alone and 179 ms with the direct writes of its records beside it,
210 ms with writes through the page cache. The fsync at flush and close still follows:
``O_DIRECT`` doesn't empty the disk's own cache.

``O_DIRECT`` asks for aligned writes: file offsets, lengths and memory addresses multiples
of the device's logical block size (512 bytes on most disks). Tar records start at
multiples of 512 bytes in the file, so a record qualifies when its payload is memory of
:mod:`ncore_like._buffers`, which is page-aligned: the large records the library compresses
itself (a caller's bytes never qualify, even where they happen to be aligned, so that what
a failure does to the archive doesn't depend on where they lie). The header and the
payload's last partial block (with the padding) are copied into a small aligned slot, the
rest of the payload is written from where it is (and held until its write is done). Other
payloads go through the page cache as before, and so does everything after a device
refuses the alignment (the writing thread turns ``O_DIRECT`` off) and everything on a
filesystem without ``O_DIRECT`` (the open fails).

The file is opened a second time for this: reads of the writing archive's records and the
small buffered writes go through the writer's own descriptor, after :meth:`settle` (the
kernel keeps the page cache coherent with direct writes that have completed, not with ones
in flight). A write that fails (a full disk) stops the writes queued after it; the failure
is raised by the next :meth:`submit` or :meth:`settle` and every one after, with the offset
of the record that failed: the archive then takes no more writes and publishes nothing,
and its records before that one stay in the partial file for recovery.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import mmap
import os
import sys
import threading
import weakref
from collections import deque

import numpy as np

from .._buffers import in_pool
from .._concurrency import process_id
from ._format import BLOCK_SIZE

__all__ = ["DirectWriteError", "DirectWrites", "unwritten"]

_Buffer = bytes | bytearray | memoryview

#: File offsets, lengths and addresses of direct writes are multiples of this (tar's block
#: size, the smallest logical block size of disks; a device that needs more refuses the
#: first write, and the rest goes through the page cache).
_ALIGNMENT = BLOCK_SIZE
#: A slot holds a record's header (512 bytes; a PAX header for a long key takes a few blocks
#: more) and its payload's last block.
_SLOT_BYTES = 64 << 10
#: Records queued or being written at most, and their bytes. While both cores compress,
#: this VM's disk takes direct writes at ~1.3 GB/s (2.2 GB/s idle): with 4 records (32 MB)
#: queued at most, the encode waited for it (a volume's create_array 0.84 x the encode
#: limit); with 16 (64 MB) it runs on and the queue empties meanwhile (1.06 x), as the
#: write-back of the page cache would after close.
_MAX_QUEUED = 16
_MAX_QUEUED_BYTES = 64 << 20
_SLOTS = _MAX_QUEUED + 1  # one is always free for the record being queued
_MAX_PARTS = 1024  # buffers one pwritev takes at most (the kernel's IOV_MAX)


#: Writers whose thread runs: at exit, what they queued is written before the interpreter
#: stops daemon threads (an archive never closed then keeps it for recovery, as it keeps
#: its write buffer); so it is before a fork.
_running: weakref.WeakSet[DirectWrites] = weakref.WeakSet()


@atexit.register
def _write_queued() -> None:
    for writes in list(_running):
        writes.wait()


# A fork waits for the queued records too: the child's writer carries on after them, and
# only the parent's thread can write them (a parent that exits at once would lose them).
def _after_fork_in_child() -> None:
    # Another thread of the parent may have held a lock: the child's is a new one.
    for writes in list(_running):
        writes._changed = threading.Condition(threading.Lock())


os.register_at_fork(before=_write_queued, after_in_child=_after_fork_in_child)


class DirectWriteError(Exception):
    """A direct write failed: ``error`` is the OS's, ``start`` the file offset of the record
    (nothing queued after it was written)."""

    def __init__(self, error: BaseException, start: int) -> None:
        super().__init__(error, start)
        self.error = error
        self.start = start


def unwritten(parts: list[memoryview], written: int) -> list[memoryview]:
    """What of ``parts`` a ``pwritev`` that wrote ``written`` bytes of them left."""
    index = 0
    while index < len(parts) and written >= len(parts[index]):
        written -= len(parts[index])
        index += 1
    rest = parts[index:]
    if written:
        rest[0] = rest[0][written:]
    return rest


def _address(buffer: _Buffer) -> int:
    """Where ``buffer``'s bytes start in memory."""
    return int(np.frombuffer(buffer, np.uint8).ctypes.data)


class DirectWrites:
    """The ``O_DIRECT`` descriptor of one local file (opened at the first record that
    qualifies), its writing thread, and the aligned slots for records' headers and last
    blocks. Used by one thread at a time (the archive's lock)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd: int | None = None  # opened on first use; -1: none (refused, or closed)
        self._slots = memoryview(b"")  # made with the descriptor
        self._queue: deque[tuple[list[memoryview], int, int, int]] = deque()  # parts, start, bytes, slot
        self._queued_bytes = 0
        self._queued_count = 0  # records ever queued, and written or dropped (see wait)
        self._done_count = 0
        self._failure: DirectWriteError | None = None
        self._changed = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._pid = process_id()

    def qualifies(self, header: _Buffer, payload: _Buffer, pad: int) -> bool:
        """Whether the record (``header``, ``payload``, then ``pad`` zero bytes: its tar
        blocks) can be written directly: its payload is the pool's aligned memory, and this
        filesystem takes ``O_DIRECT``."""
        head = len(header)
        return not (
            head % _ALIGNMENT
            or (len(payload) + pad) % _ALIGNMENT
            or head + _ALIGNMENT > _SLOT_BYTES
            or not in_pool(payload)
            or _address(payload) % _ALIGNMENT  # a view that starts within a buffer
            or self._open() < 0
        )

    def submit(self, header: _Buffer, payload: _Buffer, pad: int, start: int) -> None:
        """Queues a record that :meth:`qualifies` for writing at ``start`` (its payload's
        memory stays held until it is written); waits while the queue is full. Raises the
        :class:`DirectWriteError` of an earlier write, and then queues nothing.

        Nothing but the final ``append`` changes what the writing thread sees: an exception
        raised by a signal handler anywhere before it leaves no record queued and no slot
        taken (a slot is free while no queued record names it)."""
        head, size = len(header), len(payload)
        tail = size % _ALIGNMENT
        body = size - tail
        total = head + body + (_ALIGNMENT if tail else 0)
        self._start_thread()
        with self._changed:
            while self._failure is None and (
                len(self._queue) >= _MAX_QUEUED or (self._queue and self._queued_bytes + total > _MAX_QUEUED_BYTES)
            ):
                self._changed.wait()
            if self._failure is not None:
                raise self._failure
            taken = {record[3] for record in self._queue}
            index = next(index for index in range(_SLOTS) if index not in taken)
            slot = self._slots[index * _SLOT_BYTES : (index + 1) * _SLOT_BYTES]
            slot[:head] = header
            data = memoryview(payload).cast("B")
            parts = [slot[:head], data[:body]]
            if tail:  # the payload's last bytes, then the padding's zeros, in one aligned block
                slot[head : head + tail] = data[body:]
                slot[head + tail : head + _ALIGNMENT] = bytes(pad)
                parts.append(slot[head : head + _ALIGNMENT])
            self._queue.append((parts, start, total, index))
            self._queued_bytes += total
            self._queued_count += 1
            self._changed.notify_all()

    def _start_thread(self) -> None:
        # In steps that an exception between them can't undo: one thread, started once.
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="ncore_like-direct-writes", daemon=True)
            _running.add(self)
        if self._thread.ident is None:
            self._thread.start()

    def wait(self) -> None:
        """Waits until every record submitted before the call is written or dropped after a
        failure (not for those another thread submits meanwhile: a fork from one thread
        while another writes on waits for one queue's worth at most)."""
        with self._changed:
            target = self._queued_count
            while self._done_count < target and self._waitable():
                self._changed.wait(0.1)

    def settle(self) -> None:
        """Waits until every record submitted is written; raises the
        :class:`DirectWriteError` of a write that failed (again at every later call: the
        file no longer ends where its writer thinks)."""
        self.wait()
        with self._changed:
            failure = self._failure
            if failure is None and self._queue and self._queue[0][1] >= 0:
                # Records no thread of this process will write (queued by the parent of a
                # forked child, or the thread stopped): the file doesn't hold them.
                failure = self._failure = DirectWriteError(
                    OSError(errno.EIO, "records queued for writing were never written", self._path),
                    self._queue[0][1],
                )
        if failure is not None:
            raise failure

    def _waitable(self) -> bool:
        """Whether the writing thread can still finish what is queued (not in a forked
        child, not while the interpreter shuts down and stops daemon threads)."""
        thread = self._thread
        return thread is not None and thread.is_alive() and self._pid == process_id() and not sys.is_finalizing()

    def _open(self) -> int:
        if self._fd is None:
            self._fd = -1
            direct = getattr(os, "O_DIRECT", 0)  # Linux, FreeBSD
            if direct:
                with contextlib.suppress(OSError):  # EINVAL: a filesystem without O_DIRECT
                    self._fd = os.open(self._path, os.O_WRONLY | direct | os.O_CLOEXEC)
                    self._slots = memoryview(mmap.mmap(-1, _SLOTS * _SLOT_BYTES))  # anonymous: page-aligned
        return self._fd

    def _serve(self) -> None:
        changed = self._changed
        while True:
            with changed:
                while not self._queue:
                    changed.wait(0.5)  # a wake-up lost to a signal's exception is found again
                if self._queue[0][1] < 0:  # close() asks the thread to stop
                    self._queue.clear()
                    self._queued_bytes = 0
                    changed.notify_all()
                    return
                # The records queued back to back, in one write: fewer wake-ups of this
                # thread, which waits for a core while the caller's threads compress.
                parts: list[memoryview] = []
                start = end = self._queue[0][1]
                count = 0
                for record_parts, record_start, total, _ in self._queue:
                    if record_start != end or len(parts) + len(record_parts) > _MAX_PARTS:
                        break
                    parts += record_parts
                    end += total
                    count += 1
            failure = None
            progress = [start]  # where the bytes written so far end
            try:
                self._write(parts, progress)
            except BaseException as error:  # every failure goes to the caller
                failure = error
            with changed:
                for _ in range(count):  # the records written whole are done
                    _, record_start, total, _ = self._queue[0]
                    if failure is not None and record_start + total > progress[0]:
                        self._failure = DirectWriteError(failure, record_start)
                        self._done_count += len(self._queue)
                        self._queue.clear()  # nothing after a failed record is written
                        self._queued_bytes = 0
                        break
                    self._queued_bytes -= self._queue.popleft()[2]
                    self._done_count += 1
                changed.notify_all()

    def _write(self, parts: list[memoryview], progress: list[int]) -> None:
        """Writes ``parts`` at ``progress[0]``, which follows the bytes written."""
        assert self._fd is not None
        offset = progress[0]
        while parts:
            try:
                written = os.pwritev(self._fd, parts, offset)
            except OSError as error:
                if error.errno != errno.EINVAL or not fcntl.fcntl(self._fd, fcntl.F_GETFL) & os.O_DIRECT:
                    raise
                # A device with larger blocks than tar's: through the page cache from now on.
                fcntl.fcntl(self._fd, fcntl.F_SETFL, fcntl.fcntl(self._fd, fcntl.F_GETFL) & ~os.O_DIRECT)
                continue
            if not written:
                raise OSError(errno.EIO, "the disk took no bytes", self._path)
            offset += written
            progress[0] = offset
            parts = unwritten(parts, written)  # a short write (a full disk): where the next fails

    def forked(self) -> DirectWrites:
        """The direct writes of the same file for a forked child: a new descriptor and
        thread, and this one's failure (also that of records queued in the parent but never
        written), which the child's next write then raises."""
        child = DirectWrites(self._path)
        with contextlib.suppress(DirectWriteError):
            self.settle()  # a child's settle doesn't wait: it finds what wasn't written
        child._failure = self._failure
        self.close()
        return child

    def close(self) -> None:
        """Waits for the records submitted (their failure stays for :meth:`settle`), stops
        the thread and closes the descriptor (it holds no lock: the writer's own does)."""
        self.wait()
        with self._changed:
            self._queue.append(([], -1, 0, -1))  # stops the thread
            self._changed.notify_all()
        fd, self._fd = self._fd, -1
        if fd is not None and fd >= 0:
            os.close(fd)
