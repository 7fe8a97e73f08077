"""CRC32C checksums of record payloads (the one place that calls the checksum package).

CRC32C (Castagnoli) is what iSCSI, ext4, Btrfs and cloud object stores use: a hardware
instruction on x86-64 (SSE 4.2) and ARMv8, about 25 GB/s here, so writing and verifying
records costs a small fraction of the I/O. The ``crc32c`` package uses that instruction
where the CPU has it and falls back to software elsewhere.
"""

from __future__ import annotations

import crc32c as _crc32c

__all__ = ["HARDWARE", "checksum"]

#: True if the CPU's CRC32C instruction is used (else a slower software implementation).
HARDWARE: bool = bool(_crc32c.hardware_based)


def checksum(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """The CRC32C of ``data`` (an unsigned 32-bit integer); with ``value``, the CRC32C of
    earlier data followed by ``data`` (to checksum large payloads piece by piece)."""
    return _crc32c.crc32c(data, value)
