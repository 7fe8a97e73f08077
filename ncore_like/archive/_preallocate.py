"""Reserving a growing file's blocks ahead of its writes (Linux ``fallocate`` with
``FALLOC_FL_KEEP_SIZE``), for archives written through the page cache.

On ext4 a write past the blocks a file has reserves space for each new page as it copies
it (delayed allocation): for 300 camera frames of 200 KB - 2 MB (344 MB) that made the
writes ~6 % slower than writes into blocks allocated beforehand (78 against 73 ms). The
file's size doesn't change (``KEEP_SIZE``): readers, recovery and the checks on the end of
the file see only what was written. The reserved blocks past the end are given back when
the file is cut to its end (a truncate to its own size does that), which the writer does
when it lets go of the file: after publishing the archive (the truncate changes no byte),
or keeping it for recovery. A failed write cuts the file where the write began, which
gives them back too.

Reserving costs ~0.12 ms a file (the call and giving the rest back): worth it from a few
megabytes written on, so a writer reserves only once its file has grown past
:data:`START`. File systems without the call (or out of space for the reservation) write
as before: a reservation that fails is never an error, the writes report their own.
"""

from __future__ import annotations

from ._libc import libc_function

__all__ = ["AHEAD", "START", "preallocate"]

#: Files shorter than this get no reservation (its cost outweighs the saving below).
START = 16 << 20
#: The most reserved ahead of the end at a time (at most this is left allocated past the
#: end of a partial file by a writer that was killed).
AHEAD = 64 << 20

_KEEP_SIZE = 0x01  # FALLOC_FL_KEEP_SIZE (linux/falloc.h)


def preallocate(fd: int, offset: int, length: int) -> bool:
    """Allocates the blocks of ``fd``'s bytes ``[offset, offset + length)`` without changing
    its size. False if that can't be done (no such call, a file system without it, no
    space): the caller then stops asking."""
    import ctypes  # writers of large files only

    function = libc_function("fallocate", (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64))
    return function is not None and function(fd, _KEEP_SIZE, offset, length) == 0
