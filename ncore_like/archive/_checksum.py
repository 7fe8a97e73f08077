"""CRC32C checksums of record payloads (the one place that calls the checksum package).

CRC32C (Castagnoli) is what iSCSI, ext4, Btrfs and cloud object stores use: a hardware
instruction on x86-64 (SSE 4.2) and ARMv8, about 13 GB/s here, so writing and verifying
records costs a small fraction of the I/O. The ``crc32c`` package uses that instruction
where the CPU has it and falls back to software elsewhere. It is imported on the first
checksum (its import reads package metadata, ~30 ms): reading a local archive without
verification never needs it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

__all__ = ["checksum", "hardware_checksums"]

_Crc32c = Callable[[bytes | bytearray | memoryview, int], int]


@functools.cache
def _crc32c() -> _Crc32c:
    import crc32c

    function: _Crc32c = crc32c.crc32c
    return function


def hardware_checksums() -> bool:
    """True if the CPU's CRC32C instruction is used (else a slower software implementation)."""
    import crc32c

    return bool(crc32c.hardware_based)


def checksum(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """The CRC32C of ``data`` (an unsigned 32-bit integer); with ``value``, the CRC32C of
    earlier data followed by ``data`` (to checksum large payloads piece by piece)."""
    return _crc32c()(data, value)
