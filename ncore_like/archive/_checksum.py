"""CRC32C checksums of record payloads (the one place that calls a checksum package).

CRC32C (Castagnoli) is what iSCSI, ext4, Btrfs and cloud object stores use. Reads check
every record against it by default, so its speed is part of every read's cost. Two
packages compute it in hardware, and the faster one that works is used:

* ``crc32c-rs`` folds the data with the CPU's carry-less multiplication (VPCLMULQDQ on
  AVX-512 x86-64, PMULL on ARMv8), chosen at run time: ~60 GB/s on 1 MiB here, 2.3 x the
  CRC32C instruction, which a 1 MB page-cache read (~17 GB/s) needs to stay within 0.8 x
  of a bare ``pread`` (``scripts/bench_integrity.py``); imported in ~1 ms.
* ``crc32c``: the CRC32C instruction itself (SSE 4.2, ARMv8), ~26 GB/s here, in software
  elsewhere; its import reads package metadata (~30 ms).

Both release the GIL on large buffers. The implementation is chosen when this module is
imported (with the archive: reads need it) and has to reproduce known checksums first, so
a broken build of the faster package falls back to the other rather than writing wrong
checksums.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["checksum", "hardware_checksums", "implementation"]


class _Crc32c(Protocol):
    def __call__(self, data: bytes | bytearray | memoryview, value: int = 0, /) -> int: ...


# Known answers: RFC 3720's 32 zero bytes, and 8,453 bytes that take the folding loops of
# the vectorised implementations, whole and continued from a first piece.
_SAMPLE = bytes(range(256)) * 33 + b"ncore"
_KNOWN = ((bytes(32), 0, 0x8A9136AA), (_SAMPLE, 0, 0x8843CA17), (_SAMPLE[100:], 0xC1CAEBE5, 0x8843CA17))


def _works(function: _Crc32c) -> bool:
    try:
        return all(function(data, value) == expected for data, value, expected in _KNOWN)
    except Exception:  # e.g. a CPU feature the build expected and this CPU lacks
        return False


def _pick() -> tuple[str, _Crc32c]:
    """The first package that imports and computes the known answers (the name, the function)."""
    try:
        import crc32c_rs
    except ImportError:
        pass
    else:
        if _works(crc32c_rs.crc32c):
            return "crc32c-rs", crc32c_rs.crc32c
    import crc32c

    return "crc32c", crc32c.crc32c


_implementation, _function = _pick()

#: ``checksum(data, value=0)``: the CRC32C of ``data`` (an unsigned 32-bit integer); with
#: ``value``, the CRC32C of earlier data followed by ``data`` (to checksum large payloads
#: piece by piece). The package's own function: every read calls it, and a wrapper would
#: cost a noticeable share of a small record's read.
checksum: _Crc32c = _function


def implementation() -> str:
    """The name of the package computing checksums (``"crc32c-rs"`` or ``"crc32c"``)."""
    return _implementation


def hardware_checksums() -> bool:
    """True if checksums run on CRC hardware of the CPU (else a slower software version)."""
    if _implementation == "crc32c":
        import crc32c

        return bool(crc32c.hardware_based)
    import crc32c_rs

    # Its versions for x86-64 (SSE 4.2) and ARMv8 (CRC and AES instructions) refuse to run
    # on CPUs without those instructions, where the dispatch falls back to software.
    for name in ("crc32c_sse42", "crc32c_aes_crc_v12e_v1"):
        function = getattr(crc32c_rs, name, None)
        if function is not None:
            try:
                function(b"", 0)
            except crc32c_rs.UnsupportedCPUFeatureError:
                return False
            return True
    return False
