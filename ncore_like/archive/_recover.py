"""Recovering the records of an archive whose writer never finished it.

A local archive is written under its partial name (``<name>.partial``) until it is closed,
and every record's tar header carries the CRC32C of its payload. :func:`recover_records`
walks the tar headers of such a file forward from offset 0 (the index, written last, is
missing), keeps every complete record whose payload matches its checksum, drops the torn
last record and whatever follows it, and returns an archive being written that holds the
kept records: closing it appends the index and publishes it at the final name, or at
another name given. Recovery never replaces a file: when one is at the name to write
(e.g. an intact older archive beside the partial file of a failed overwrite), it is
refused before anything changes, and the recovered archive is published without
replacing anything (see :mod:`ncore_like.archive._writer`). A partial file that a running
writer holds is refused too. The records are not copied: the partial file is cut after the
last record kept and finished in place, so recovery reads the file once (to check the
checksums) and writes only the index.
A record whose payload doesn't match its checksum is dropped; then the kept records are
copied to a new partial file instead, so that the recovered archive holds no damaged
member.

Node metadata records rewritten after a :meth:`~IndexedTarArchive.flush` occur more than
once in the file; the last complete one counts.

Each decision is logged on the ``ncore_like.archive.recover`` logger: what was kept and
dropped at INFO, damaged records at WARNING.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import IO, TYPE_CHECKING

from .._log import library_logger
from ..errors import ArchiveExistsError, ArchiveFormatError, NcoreLikeError, UnfinishedArchiveError
from ._archive import IndexedTarArchive
from ._checksum import checksum
from ._format import BLOCK_SIZE, Index, header_checksum, is_node_metadata_key, parse_tar_header
from ._location import PARTIAL_SUFFIX, Location, partial_path
from ._verify import TarMember, TarStop, scan_tar
from ._writer import being_written, link_no_clobber, recover_command

if TYPE_CHECKING:
    from upath import UPath

__all__ = ["RecoveryReport", "find_partial", "recover_records", "remove_copied_source"]

logger = library_logger("ncore_like.archive.recover")

#: Payload bytes read at once while checking a record (bounds memory for huge records).
_READ_PIECE = 16 << 20


@dataclass
class RecoveryReport:
    """What recovery found and kept."""

    source: str
    """The unfinished (partial) file that was scanned."""
    archive: str
    """The archive written."""
    records: int = 0
    """Records kept."""
    record_bytes: int = 0
    """Payload bytes of the records kept."""
    unverified: list[str] = field(default_factory=list)
    """Keys of records kept without a checksum to check (written without checksums)."""
    damaged: list[str] = field(default_factory=list)
    """Keys of records dropped because their payload doesn't match their checksum."""
    skipped: list[str] = field(default_factory=list)
    """Parts of the file skipped between intact records (an unreadable tar header: the
    record it began is lost), each said with its offsets."""
    superseded: int = 0
    """Older versions of node metadata records rewritten after a flush (not kept)."""
    end: int = 0
    """Offset where the last record kept ends: what follows was dropped."""
    dropped_bytes: int = 0
    """Bytes of the file after :attr:`end` (a torn record, or the unfinished tail)."""
    stop: str | None = None
    """Why the scan stopped before the end of the file (e.g. a torn record), if it did."""
    notes: list[str] = field(default_factory=list)
    """What the layers above did with the recovered records (e.g. consolidated metadata)."""


def find_partial(path: str | PurePath | UPath) -> tuple[str, str]:
    """The unfinished file of a local archive and the archive's final name, given either
    (``seq.itar`` finds ``seq.itar.partial``).

    Raises:
        FileNotFoundError: If there is no such unfinished file.
        ValueError: For remote locations (an unfinished upload leaves no object).
    """
    location = Location(path)
    local = location.local
    if local is None:
        raise ValueError(
            f"{location.name}: only local archives can be recovered (an unfinished upload to object "
            "storage leaves no object behind)"
        )
    if local.endswith(PARTIAL_SUFFIX):
        partial, final = local, local[: -len(PARTIAL_SUFFIX)]
    else:
        partial, final = partial_path(local), local
    if not os.path.isfile(partial):
        hint = f"; {final} exists (a finished archive needs no recovery)" if os.path.isfile(final) else ""
        raise FileNotFoundError(2, f"no unfinished archive {Path(partial).name} to recover{hint}", partial)
    return partial, final


def _payload_checksum(file: IO[bytes], offset: int, size: int) -> int:
    crc = 0
    file.seek(offset)
    remaining = size
    while remaining:
        piece = file.read(min(remaining, _READ_PIECE))
        if not piece:
            raise ArchiveFormatError(f"the file ends inside the payload at offset {offset}")
        crc = checksum(piece, crc)
        remaining -= len(piece)
    return crc


@dataclass(frozen=True)
class _Kept:
    key: str
    offset: int
    size: int
    crc: int


def _scan(file: IO[bytes], report: RecoveryReport) -> Iterator[_Kept]:
    """The complete records of the file whose payloads match their checksums, in file order.
    An unreadable tar header with intact records after it is damage, not the torn end of
    the file: the walk goes on at the next record's header (:func:`_next_header`)."""
    size = file.seek(0, os.SEEK_END)
    start = 0
    while True:
        stop = yield from _scan_from(file, start, report)
        # Only after a header that can't be read: a member cut off by the end of the file is
        # the torn last record, and its payload (which may hold tar headers of its own, e.g. an
        # archive stored as a blob) is never searched.
        following = _next_header(file, stop.offset + BLOCK_SIZE, size) if stop.unreadable else None
        if following is None:
            if stop.offset == 0 and stop.error is not None and size >= BLOCK_SIZE:
                raise ArchiveFormatError(
                    f"not the unfinished file of an archive ({stop.error}, and no record's header after it); "
                    "left as it is",
                    archive=report.source,
                )
            report.stop = stop.error
            return
        report.skipped.append(
            f"{stop.error}: {following - stop.offset} bytes up to the next record's header at offset {following} "
            "skipped (the record there is lost)"
        )
        logger.warning("%s: %s", report.source, report.skipped[-1])
        start = following


def _scan_from(file: IO[bytes], start: int, report: RecoveryReport) -> Generator[_Kept, None, TarStop]:
    """:func:`_scan` of the members from ``start`` on, returning where and why the walk
    stopped. After a skip (``start`` > 0), a record whose key may be cut short (its pax
    header may be the one skipped) is dropped as damaged rather than kept under another key."""
    for item in scan_tar(file, start):
        if isinstance(item, TarStop):
            return item
        member: TarMember = item
        if start and member.offset == start and not _whole_key(member):
            report.skipped.append(f"record at offset {member.offset} whose key {member.name!r} may be cut short")
            continue
        if not member.is_regular:
            return TarStop(
                member.offset, f"tar member {member.name!r} at offset {member.offset} is no record (not a regular file)"
            )
        file.seek(member.offset_data - BLOCK_SIZE)
        stored = header_checksum(file.read(BLOCK_SIZE))
        actual = _payload_checksum(file, member.offset_data, member.size)
        if stored is None:
            report.unverified.append(member.name)
        elif stored != actual:
            report.damaged.append(member.name)
            logger.warning(
                "%s: record %r at offset %d doesn't match the CRC32C of its tar header: dropped",
                report.source, member.name, member.offset_data,
            )  # fmt: skip
            continue
        report.end = member.end
        yield _Kept(member.name, member.offset_data, member.size, actual)
    raise AssertionError("scan_tar ends with a TarStop")  # never reached


def _whole_key(member: TarMember) -> bool:
    """True unless ``member``'s name may be the ustar field's cut-down copy of a longer or
    non-ASCII key (whose pax header came before it)."""
    if member.offset_data - member.offset > BLOCK_SIZE:  # its own pax header was read
        return True
    return len(member.name) < 100 and member.name.isascii() and "?" not in member.name


def _next_header(file: IO[bytes], start: int, size: int) -> int | None:
    """The offset of the first readable tar header at or after ``start`` (on a block
    boundary) that carries a payload checksum, as the headers of records do: where intact
    records go on after damage. None if there is none (the damage is the file's torn end)."""
    start += -start % BLOCK_SIZE
    magic = b"ustar"
    for offset in range(start, size, _READ_PIECE):
        file.seek(offset)
        piece = file.read(_READ_PIECE + BLOCK_SIZE)  # a header across the pieces' border too
        found = piece.find(magic)
        while 0 <= found < _READ_PIECE:
            block_start = found - _MAGIC_AT
            if block_start >= 0 and block_start % BLOCK_SIZE == 0:
                block = piece[block_start : block_start + BLOCK_SIZE]
                if len(block) == BLOCK_SIZE and _is_record_header(block):
                    return offset + block_start
            found = piece.find(magic, found + 1)
    return None


#: Where the ustar magic lies in a header block.
_MAGIC_AT = 257


def _is_record_header(block: bytes) -> bool:
    try:
        parse_tar_header(block)
    except ArchiveFormatError:
        return False
    return header_checksum(block) is not None or block[156:157] in (b"x", b"L")


def recover_records(
    path: str | PurePath | UPath, output: str | PurePath | None = None
) -> tuple[IndexedTarArchive, RecoveryReport]:
    """Recovers the records of an unfinished local archive.

    Args:
        path: The archive's name (its partial file is found beside it) or the partial file.
        output: Where to write the recovered archive (default: the archive's own name, by
            finishing the partial file in place). Nothing may exist there.

    Returns:
        An archive being written that holds the records kept (add records, e.g. metadata,
        then :meth:`~IndexedTarArchive.close` it to publish it; :meth:`~IndexedTarArchive.abort`
        to give up), and the report.

    Raises:
        ArchiveExistsError: If a file is at the name to write (nothing is changed).
        UnfinishedArchiveError: If a running writer holds the partial file.
    """
    partial, final = find_partial(path)
    target = final if output is None else Location(output).local
    if target is None:
        raise ValueError(f"{output}: recovered archives are written to local files")
    if os.path.realpath(target) == os.path.realpath(partial):
        raise ValueError(f"{output}: the recovered archive can't be written over the file it is recovered from")
    if os.path.lexists(target):
        raise ArchiveExistsError(
            f"exists already, and recovery never replaces a file; recover {partial} beside it: "
            f"`{recover_command(partial, target)}` (ncore_like.recover(..., output=...))",
            archive=target,
        )
    if being_written(partial):
        raise UnfinishedArchiveError(
            f"{partial} is being written by a writer that is running now: recover it only after that writer "
            "has died (it may still close it)",
            archive=final,
        )
    report = RecoveryReport(source=partial, archive=target)
    with open(partial, "rb") as file:
        size = file.seek(0, os.SEEK_END)
        latest: dict[str, _Kept] = {}
        for kept in _scan(file, report):
            if kept.key in latest:
                if not is_node_metadata_key(kept.key):
                    # Only node metadata is written again (after a flush); any other record is
                    # written once: a second one is no writer's, the first stays.
                    report.skipped.append(f"a second record {kept.key!r} at offset {kept.offset} (the first is kept)")
                    continue
                report.superseded += 1
                del latest[kept.key]  # the newer version takes the older one's place in key order
            latest[kept.key] = kept
    report.dropped_bytes = max(0, size - report.end)  # a file cut in the last record's padding: nothing
    records = sorted(latest.values(), key=lambda kept: kept.offset)
    report.records = len(records)
    report.record_bytes = sum(kept.size for kept in records)
    index = Index(
        [kept.key for kept in records],
        [kept.offset for kept in records],
        [kept.size for kept in records],
        [kept.crc for kept in records],
    )
    _log_scan(report)
    in_place = os.path.realpath(target) == os.path.realpath(final)
    if in_place and not (report.damaged or report.skipped):
        logger.info("%s: finished in place (the records are not copied), published as %s", partial, final)
        return IndexedTarArchive._resume(final, report.end, index), report
    source = partial
    if in_place:
        # The kept records are copied to a new partial file of the same name: the damaged
        # one moves aside (kept, never deleted by recovery).
        source = _move_aside(partial)
        report.source = source
        report.notes.append(f"the unfinished file with damaged parts was kept as {source}")
    logger.info("%s: the records kept are copied to %s", source, target)
    return _copy(source, target, records), report


def _log_scan(report: RecoveryReport) -> None:
    logger.info(
        "%s: %d records kept (%d bytes), %d damaged, %d superseded versions of node metadata; "
        "%d bytes after offset %d dropped%s",
        report.source, report.records, report.record_bytes, len(report.damaged), report.superseded,
        report.dropped_bytes, report.end, f" ({report.stop})" if report.stop else "",
    )  # fmt: skip
    if report.unverified:
        logger.info("%s: %d records kept without a checksum to check", report.source, len(report.unverified))


def _move_aside(partial: str) -> str:
    """Renames ``partial`` to a free ``<partial>.damaged[-N]`` name (never replacing the
    file of an earlier recovery)."""
    for number in range(1, 1000):
        name = f"{partial}.damaged" + ("" if number == 1 else f"-{number}")
        try:
            link_no_clobber(partial, name)
        except FileExistsError:
            continue
        return name
    raise FileExistsError(errno.EEXIST, "no free name to keep the damaged unfinished file under", partial)


def remove_copied_source(report: RecoveryReport) -> None:
    """After the archive recovered by copying records was published: removes the unfinished
    file they were copied from, which holds nothing more (a file with damaged records is
    kept; in-place recovery consumed its file already)."""
    in_place = os.path.realpath(report.source) == os.path.realpath(partial_path(report.archive))
    if in_place or report.damaged or report.skipped or not report.source.endswith(PARTIAL_SUFFIX):
        return
    try:
        os.unlink(report.source)
    except FileNotFoundError:
        return
    except OSError as error:  # e.g. a read-only folder: the archive is published all the same
        report.notes.append(
            f"{report.source} was not removed ({error.strerror}); its records are all in {report.archive}"
        )
        return
    report.notes.append(f"removed {report.source}: its records are all in {report.archive}")
    logger.info("%s removed: its records are all in %s", report.source, report.archive)


def _copy(partial: str, target: str, records: list[_Kept]) -> IndexedTarArchive:
    """A new archive at ``target`` holding copies of ``records`` of the partial file."""
    archive = IndexedTarArchive(target, mode="x")
    try:
        with open(partial, "rb") as file:
            for kept in records:
                file.seek(kept.offset)
                payload = file.read(kept.size)
                if checksum(payload) != kept.crc:  # changed since the scan
                    raise ArchiveFormatError(
                        f"record {kept.key!r} changed while it was recovered", archive=partial, key=kept.key
                    )
                archive.write(kept.key, payload)
    except BaseException:
        with contextlib.suppress(NcoreLikeError, OSError):
            archive.abort()
        raise
    return archive
