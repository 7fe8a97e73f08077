"""Memory for the results of large reads and the records of large compressed chunks being
written, used again once nothing refers to it any more.

glibc hands freed blocks of more than a few hundred KB back to the system (its trim and
mmap thresholds follow the largest block freed), so a loop that keeps each frame in a
variable while it reads the next (``frame = array.read()``), or holds a batch of frames,
gets new pages for every result when the frames differ in size: a page fault per 4 KB,
~2.5-4 us each on this project's VM. Each thread therefore keeps the buffers of its recent
large results (at most 16 and 64 MB: what it keeps stays allocated while the thread lives)
and reads into one of them again once nothing but this pool refers to it (its reference
count says so): a result the caller still holds, a view of it, an array made from its
buffer, all keep theirs from being written. Results are numpy arrays viewing a buffer, as
any numpy view of another array's memory. Writers compress large chunks into such memory
too (``nodes._encoding``): a record is let go of once it is written.
"""

from __future__ import annotations

import math
import sys
import threading
import weakref
from typing import Any

import numpy as np

__all__ = ["POOLED_BYTES", "in_pool", "new_result"]

#: Results of at least this many bytes come from the pool; smaller blocks stay in malloc's
#: own free lists.
POOLED_BYTES = 256 << 10
#: Larger results get memory of their own (numpy asks for huge pages from 4 MiB on).
_MAX_POOLED_BYTES = 32 << 20
#: Buffers a thread keeps at most (held ones included), and their bytes together: what a
#: loop holding a batch of frames needs, not more.
_MAX_BUFFERS = 16
_MAX_KEPT_BYTES = 64 << 20
#: Buffer sizes are multiples of this: results of similar sizes share buffers.
_GRANULE = 64 << 10
_PAGE = 4096

_local = threading.local()
#: Every page-aligned buffer of every thread's pool, by id (:func:`in_pool`).
_aligned: weakref.WeakValueDictionary[int, np.ndarray[Any, Any]] = weakref.WeakValueDictionary()


def _references_when_free() -> int:
    """The count :func:`_count_references` gives for a buffer only the pool refers to (the
    interpreter's own references to an argument differ between versions)."""
    return _count_references([np.empty(0, np.uint8)], 0)


def _count_references(buffers: list[np.ndarray[Any, Any]], index: int) -> int:
    return sys.getrefcount(buffers[index])


_FREE = _references_when_free()


def new_result(shape: tuple[int, ...], dtype: np.dtype[Any], *, aligned: bool = False) -> np.ndarray[Any, Any]:
    """A new, writeable, C-contiguous array of ``shape`` and ``dtype`` (its values
    undefined, as :func:`numpy.empty`'s), in memory a dropped large result had when there is
    one. ``aligned``: pooled memory that starts at a page boundary (see :func:`in_pool`)."""
    nbytes = math.prod(shape) * dtype.itemsize
    if not POOLED_BYTES <= nbytes <= _MAX_POOLED_BYTES or dtype.hasobject:
        return np.empty(shape, dtype)
    buffers: list[np.ndarray[Any, Any]] | None = getattr(_local, "buffers", None)
    if buffers is None:
        buffers = _local.buffers = []
    # The free buffer used last that fits, whatever its size (its memory is the likeliest to
    # be in the CPU's caches, as malloc's last freed block would be); it moves to the end, so
    # the oldest go first when the pool is full.
    for index in range(len(buffers) - 1, -1, -1):
        if (
            nbytes <= len(buffers[index])
            and _count_references(buffers, index) <= _FREE
            and (not aligned or _aligned.get(id(buffers[index])) is buffers[index])
        ):
            buffer = buffers.pop(index)
            buffers.append(buffer)
            break
    else:
        size = -(-nbytes // _GRANULE) * _GRANULE
        # Reads get numpy's own memory: the frames of bench_ops' lookup read 5-7 % slower
        # into page-aligned buffers (measured, cause not found).
        buffer = _page_aligned(size) if aligned else np.empty(size, np.uint8)
        _keep(buffers, buffer)
    return buffer[:nbytes].view(dtype).reshape(shape)


def _page_aligned(nbytes: int) -> np.ndarray[Any, Any]:
    """``nbytes`` of new memory starting at a page boundary: a durable archive writes records
    compressed there straight to the disk (``archive._direct``), which needs aligned memory."""
    owner = np.empty(nbytes + _PAGE, np.uint8)
    start = -owner.ctypes.data % _PAGE
    # An array over a memoryview of ``owner``: numpy's views of it then refer to it, not to
    # ``owner`` (whose reference count would not tell the pool whether they are held).
    buffer = np.frombuffer(owner.data[start : start + nbytes], np.uint8)
    _aligned[id(buffer)] = buffer
    return buffer


def in_pool(value: object) -> bool:
    """Whether ``value`` (an array from :func:`new_result`, or a memoryview of one) is
    memory of this pool that starts at a page boundary (``aligned``)."""
    exporter = value.obj if isinstance(value, memoryview) else value
    base = getattr(exporter, "base", None)
    return base is not None and _aligned.get(id(base)) is base


def _keep(buffers: list[np.ndarray[Any, Any]], buffer: np.ndarray[Any, Any]) -> None:
    """Adds ``buffer`` to the pool, first dropping the oldest free buffers beyond the
    bounds; if the held ones alone fill them, the pool does without it."""
    kept = sum(map(len, buffers)) + len(buffer)
    index = 0
    while (len(buffers) >= _MAX_BUFFERS or kept > _MAX_KEPT_BYTES) and index < len(buffers):
        if _count_references(buffers, index) <= _FREE:
            kept -= len(buffers.pop(index))
        else:
            index += 1
    if len(buffers) < _MAX_BUFFERS and kept <= _MAX_KEPT_BYTES:
        buffers.append(buffer)
