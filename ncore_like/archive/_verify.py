"""Verifying an archive: its tar members against its index, and every record readable.

* :func:`scan_tar` walks the tar headers of a file forward from offset 0 with the parser of
  :mod:`._format` (no index needed, none trusted): it yields every member and then one
  :class:`TarStop` saying where and why the walk ended, at the end-of-archive block or at
  the first header it can't read.
* :func:`verify_archive` compares those members with the index (name, payload offset and
  size; members missing from the index and index entries without member), reads every
  record, and returns an :class:`ArchiveReport` of :class:`Problem` entries. A bad header
  ends the walk and is one problem, counting the index entries after it that could not be
  checked, rather than one problem per later record. Later checks (reading the arrays of
  the hierarchy) add theirs with :meth:`ArchiveReport.add`, which keeps one problem per
  damaged record.

Problems are data, not exceptions: a report lists everything found. Messages don't name the
archive (the report does, once); :func:`error_detail` takes an error apart by its
attributes to that end.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from typing import IO

from ..errors import ArchiveFormatError, ChecksumError, InvalidKeyError, NcoreLikeError
from ._archive import IndexedTarArchive, Record
from ._bulk import map_records
from ._format import (
    BLOCK_SIZE,
    INDEX_TYPE_CBOR_XZ,
    TAR_DIRECTORY_TYPE,
    TAR_GNU_LONG_LINK_TYPE,
    TAR_GNU_LONG_NAME_TYPE,
    TAR_GNU_SPARSE_TYPE,
    TAR_PAX_GLOBAL_TYPE,
    TAR_PAX_TYPES,
    TAR_REGULAR_TYPES,
    IndexHeader,
    decode_index,
    is_node_metadata_key,
    is_zero_block,
    padding,
    parse_gnu_long_name,
    parse_pax_records,
    parse_tar_header,
    tar_data_size,
    validate_key,
)
from ._table import decode_table, pointer_damaged, unpack_table_pointer

__all__ = [
    "READ_ERRORS",
    "ArchiveReport",
    "Problem",
    "TarMember",
    "TarStop",
    "VerifyProgress",
    "error_detail",
    "scan_tar",
    "verify_archive",
]

#: ``progress(step, advance, total)``: ``advance`` more units of ``step`` are done, of
#: ``total``. Steps of :func:`verify_archive`: ``"members"`` (tar members; the total is the
#: number of index entries, which a sound archive has as many members as) and
#: ``"records"`` (bytes of records read).
VerifyProgress = Callable[[str, int, int], object]

#: Errors that mean "this record (or array) can't be read", reported as problems: failed
#: I/O, damaged data (ncore_like's format errors are ValueErrors), missing records. Anything
#: else (a bug, KeyboardInterrupt, EventLoopError) propagates.
READ_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError)

#: Extended headers (pax records, GNU long names) hold names and a few numbers: larger ones
#: are damaged headers.
_MAX_EXTENSION_BYTES = 1 << 20
_EXTENSION_TYPES = frozenset({TAR_PAX_GLOBAL_TYPE, TAR_GNU_LONG_NAME_TYPE, TAR_GNU_LONG_LINK_TYPE} | TAR_PAX_TYPES)


# -- problems and reports ------------------------------------------------------------------


def error_detail(error: BaseException, archive: str | None) -> str:
    """A one-line description of ``error`` for a report about ``archive`` (as
    :class:`IndexedTarArchive` names it): errors about that archive are described without
    its name, others with whatever they name."""
    if isinstance(error, NcoreLikeError):
        return error.detail if error.archive == archive else str(error)
    if isinstance(error, KeyError) and len(error.args) == 1 and isinstance(error.args[0], str):
        return error.args[0]  # str() of a KeyError quotes its message
    if isinstance(error, OSError) and error.strerror and error.filename:
        return error.strerror if error.filename == archive else f"{error.filename}: {error.strerror}"
    if isinstance(error, FileNotFoundError):
        # fsspec filesystems raise FileNotFoundError(path) without saying what happened.
        return f"{error}: no such file or object"
    return str(error) or type(error).__name__


@dataclass(frozen=True)
class Problem:
    """Something wrong with an archive."""

    message: str
    """What is wrong (without the archive's name)."""
    key: str | None = None
    """The record concerned, if one is."""
    array: str | None = None
    """The path of the array concerned, if one is."""

    @classmethod
    def from_error(
        cls, error: BaseException, *, archive: str | None, key: str | None = None, array: str | None = None
    ) -> Problem:
        """The problem an error describes, in a report about ``archive`` (see
        :func:`error_detail`)."""
        return cls(error_detail(error, archive), key, array)

    def text(self) -> str:
        """The problem as one line of text: the record and array first, if any."""
        if self.key is not None and self.array is not None:
            return f"{self.key} (array {self.array}): {self.message}"
        if self.key is not None:
            return f"{self.key}: {self.message}"
        if self.array is not None:
            return f"array {self.array}: {self.message}"
        return self.message


@dataclass
class ArchiveReport:
    """What :func:`verify_archive` found."""

    archive: str
    """The archive's path or URL."""
    records: int = 0
    """Entries of the index."""
    tar_members: int = 0
    """Tar members read (up to the end-of-archive block or the first unreadable header)."""
    bytes_read: int = 0
    """Bytes of the records read completely."""
    problems: list[Problem] = field(default_factory=list)
    unreadable: dict[str, Problem] = field(default_factory=dict)
    """The problems of the records that can't be read completely, by key (each one is in
    :attr:`problems` too)."""

    @property
    def ok(self) -> bool:
        """True if nothing is wrong."""
        return not self.problems

    def add(self, problems: Iterable[Problem]) -> None:
        """Adds the problems of a later check, e.g. of reading arrays
        (:func:`ncore_like.nodes.verify_arrays`). One damaged record is one problem: a
        problem of an unreadable record that names its array takes the place of the
        record's own problem (it says more)."""
        for problem in problems:
            replaced = self.unreadable.pop(problem.key, None) if problem.key is not None and problem.array else None
            if replaced is not None:
                self.problems = [old for old in self.problems if old is not replaced]
            self.problems.append(problem)


# -- walking the tar headers ---------------------------------------------------------------


@dataclass(frozen=True)
class TarMember:
    """A member of a tar file, as its headers describe it."""

    name: str
    """The name, from a pax extended header or GNU long name if there is one."""
    offset: int
    """Offset of its first header block (a pax extended header or GNU long name, if any)."""
    offset_data: int
    """Offset of its data, right after its last header block."""
    size: int
    typeflag: bytes
    """The entry type (one byte, see :data:`~ncore_like.archive._format.TAR_REGULAR_TYPES`)."""

    @property
    def is_regular(self) -> bool:
        """True for regular files (what archive records are)."""
        return self.typeflag in TAR_REGULAR_TYPES

    @property
    def end(self) -> int:
        """Offset after its data and padding: where the next header is."""
        data = tar_data_size(self.typeflag, self.size)
        return self.offset_data + data + padding(data)


@dataclass(frozen=True)
class TarStop:
    """Where and why a walk through tar headers ended."""

    offset: int
    """Offset of the end-of-archive block, or of the header (or member) that can't be read."""
    error: str | None = None
    """What is wrong there; None at the end-of-archive block."""
    unreadable: bool = False
    """The header block there can't be parsed (damage: the size of what follows is unknown),
    as opposed to a member cut off by the end of the file or one that isn't supported."""


class _Reader:
    """Positional reads of a file object (shorter at the end of the file)."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file
        self.size = file.seek(0, os.SEEK_END)

    def read(self, offset: int, size: int) -> bytes:
        self._file.seek(offset)
        return self._file.read(size)


def scan_tar(file: IO[bytes], start: int = 0) -> Iterator[TarMember | TarStop]:
    """Walks the tar headers of ``file`` (binary, seekable) from offset ``start`` (0: the
    file's beginning; else a header found by the caller): yields every member, then a
    :class:`TarStop`, always the last item.

    Understands ustar, v7 and GNU headers, pax extended headers (``x``, and global ``g``
    ones) and GNU long names (``L``); the sizes of members without data (links,
    directories...) are not skipped, as tar does. The walk stops at the first block of
    zeros (the end-of-archive marker) or at the first header it can't read: a wrong
    checksum, malformed fields, a header or data cut off by the end of the file, GNU
    sparse files (unsupported). Every read seeks first: the caller may use the file between
    items (e.g. to read a member's data).
    """
    reader = _Reader(file)
    shared: dict[str, str] = {}  # the records of global pax headers, for all later members
    offset = start
    while True:
        item = _next_member(reader, offset, shared)
        yield item
        if isinstance(item, TarStop):
            return
        offset = item.end


def _next_member(reader: _Reader, start: int, shared: dict[str, str]) -> TarMember | TarStop:
    """The member whose header blocks begin at ``start`` (extension headers first)."""
    position = start
    extended: dict[str, str] = {}
    long_name: str | None = None
    while True:
        block = reader.read(position, BLOCK_SIZE)
        if len(block) < BLOCK_SIZE:
            if position == reader.size:
                return TarStop(position, f"the file ends at offset {position} without an end-of-archive block")
            if position > reader.size:  # cut in the padding of the data before
                return TarStop(
                    position, f"the file ends at offset {reader.size}, before the tar header at offset {position}"
                )
            return TarStop(position, f"truncated tar header at offset {position} (the file ends at {reader.size})")
        if is_zero_block(block):
            if position != start:
                return TarStop(position, f"end-of-archive block at offset {position} after the tar header at {start}")
            return TarStop(position)
        try:
            header = parse_tar_header(block)
        except ArchiveFormatError as error:
            return TarStop(position, f"unreadable tar header at offset {position} ({error.detail})", unreadable=True)
        data_offset = position + BLOCK_SIZE
        if header.typeflag == TAR_GNU_SPARSE_TYPE:
            return TarStop(position, f"unsupported tar member at offset {position} (a GNU sparse file)")
        if header.typeflag not in _EXTENSION_TYPES:
            break
        # An extension: its data describes the member whose header follows.
        if header.size > _MAX_EXTENSION_BYTES:  # a damaged size field mustn't make us read gigabytes
            return TarStop(
                position, f"tar header at offset {position} announces {header.size} bytes of extended header data"
            )
        if data_offset + header.size > reader.size:
            return TarStop(position, _past_the_end(f"the tar header at offset {position}", header.size, reader.size))
        data = reader.read(data_offset, header.size)
        if header.typeflag == TAR_GNU_LONG_NAME_TYPE:
            long_name = parse_gnu_long_name(data)
        elif header.typeflag != TAR_GNU_LONG_LINK_TYPE:  # the link target names no member
            try:
                records = parse_pax_records(data)
            except ArchiveFormatError as error:
                return TarStop(position, f"unreadable pax extended header at offset {position} ({error.detail})")
            if header.typeflag == TAR_PAX_GLOBAL_TYPE:
                shared.update(records)
                start = data_offset + header.size + padding(header.size)  # an entry of its own
            else:
                extended.update(records)
        position = data_offset + header.size + padding(header.size)
    records = {**shared, **extended}
    if any(keyword.startswith("GNU.sparse.") for keyword in records):
        return TarStop(start, f"unsupported tar member at offset {start} (a GNU sparse file)")
    name = header.name
    if "path" in records:
        name = records["path"].rstrip("/")
    elif long_name is not None:
        name = long_name.rstrip("/") if header.typeflag == TAR_DIRECTORY_TYPE else long_name
    size = header.size
    if "size" in records:
        text = records["size"]
        if not (text.isascii() and text.isdigit()):
            return TarStop(start, f"unreadable pax extended header at offset {start} (size {text!r})")
        size = int(text)
    member = TarMember(name, start, data_offset, size, header.typeflag)
    if data_offset + tar_data_size(member.typeflag, size) > reader.size:
        return TarStop(start, _past_the_end(f"tar member {name!r} at offset {start}", size, reader.size))
    return member


def _past_the_end(what: str, size: int, file_size: int) -> str:
    return f"{what}: its {size} bytes of data extend past the end of the file at {file_size} (truncated?)"


# -- verifying ------------------------------------------------------------------------------


def _member_problems(member: TarMember, record: Record | None, seen: set[str]) -> list[Problem]:
    where = f"tar member at offset {member.offset_data} ({member.size} bytes)"
    if record is not None and member.offset_data < record.offset and is_node_metadata_key(member.name):
        return []  # an older version of node metadata rewritten after a flush: superseded
    if member.name in seen:
        return [Problem(f"duplicate {where}", member.name)]
    if record is None:
        return [Problem(f"{where} is not in the index", member.name)]
    if not member.is_regular:
        return [Problem(f"{where} is not a regular file", member.name)]
    if (member.offset_data, member.size) != (record.offset, record.size):
        index = f"offset {record.offset}, {record.size} bytes"
        tar = f"offset {member.offset_data}, {member.size} bytes"
        return [Problem(f"the index says {index}, its tar member has {tar}", member.name)]
    return []


def _check_members(
    file: IO[bytes], records: Mapping[str, Record], progress: VerifyProgress | None
) -> tuple[int, list[Problem]]:
    """Compares the tar members of ``file`` with the index ``records``.

    Returns:
        The number of members read, and the problems.
    """
    problems: list[Problem] = []
    seen: set[str] = set()
    count = 0
    total = len(records)
    stop = TarStop(0)
    for item in scan_tar(file):
        if isinstance(item, TarStop):
            stop = item
            break
        count += 1
        record = records.get(item.name)
        found = _member_problems(item, record, seen)
        problems += found
        if found or record is None or (item.offset_data, item.size) == (record.offset, record.size):
            seen.add(item.name)
        if progress is not None:
            progress("members", 1, total)
    # Entries before where the walk stopped have no member. Those after it are hidden by
    # whatever stopped it (one bad header hides every later member): one problem, counting them.
    hidden: list[str] = []
    for key, record in records.items():
        if key in seen:
            continue
        if record.offset > stop.offset:
            hidden.append(key)
        else:
            where = f"offset {record.offset}, {record.size} bytes"
            problems.append(Problem(f"index entry ({where}) has no tar member", key))
    problem = _stop_problem(stop, hidden)
    if problem is not None:
        problems.append(problem)
    return count, problems


def _stop_problem(stop: TarStop, hidden: list[str]) -> Problem | None:
    """The problem of a walk that stopped at ``stop`` before the index entries ``hidden``
    (in archive order), if there is one."""
    if not hidden:
        return None if stop.error is None else Problem(stop.error)
    entries = f"index entry {hidden[0]!r}" if len(hidden) == 1 else f"{len(hidden)} index entries from {hidden[0]!r} on"
    if stop.error is None:
        which = "which has" if len(hidden) == 1 else "which have"
        return Problem(
            f"the tar ends at offset {stop.offset} (end-of-archive block) before {entries}, {which} no member"
        )
    return Problem(f"{stop.error}; the tar members after it can't be read: {entries} not checked")


def _check_records(
    archive: IndexedTarArchive, name: str, threads: int | None, progress: VerifyProgress | None
) -> tuple[int, list[Problem]]:
    """Reads every record.

    Returns:
        The bytes read, and the problems (records that can't be read completely).
    """
    records = archive.records
    keys = archive.keys()
    total = sum(records[key].size for key in keys)

    def check(key: str) -> Problem | None:
        # Runs on the pool's threads: the payload is dropped there, only its size counts.
        try:
            data = archive.read(key)
        except READ_ERRORS as error:
            return Problem.from_error(error, archive=name, key=key)
        expected = records[key].size
        if len(data) != expected:
            return Problem(f"read {len(data)} bytes, the index says {expected}", key)
        if not archive.verify_checksums:  # else the read checked it
            try:
                archive.check_payload(key, data)
            except ChecksumError as error:
                return Problem.from_error(error, archive=name, key=key)
        return None

    problems: list[Problem] = []
    done = 0
    with closing(map_records(archive, keys, check, threads=threads)) as results:
        for key, problem in results:
            size = records[key].size
            if problem is None:
                done += size
            else:
                problems.append(problem)
            if progress is not None:
                progress("records", size, total)
    return done, problems


def _check_index_copies(file: IO[bytes], archive: IndexedTarArchive) -> list[Problem]:
    """The xz index and the record table (archives written with checksums carry both, see
    ``_table.py``) must hold the same records: readers that know only one (nvidia-ncore the
    index, ncore_like the table) would otherwise see different archives."""
    index_record = archive.index_record
    if index_record is None:
        return []
    name = archive.location.name
    header_offset = index_record.offset + index_record.size + padding(index_record.size)
    file.seek(header_offset)
    block = file.read(BLOCK_SIZE)
    pointer = unpack_table_pointer(block, index_record.offset) if len(block) == BLOCK_SIZE else None
    if pointer is None:
        if len(block) == BLOCK_SIZE and pointer_damaged(block, index_record.offset):
            return [Problem("the record table's pointer in the index header block is damaged (the records' "
                            "checksums were taken from their tar headers)")]  # fmt: skip
        return []
    file.seek(pointer.offset)
    table_data = file.read(pointer.size)
    file.seek(index_record.offset)
    index_data = file.read(index_record.size)
    header = IndexHeader(INDEX_TYPE_CBOR_XZ, index_record.offset, index_record.size)
    try:
        table = decode_table(table_data, pointer, name)
        index = decode_index(index_data, header, name)
    except ArchiveFormatError as error:
        return [Problem(error_detail(error, name), error.key)]
    if (table.keys, table.offsets, table.sizes) != (index.keys, index.offsets, index.sizes):
        return [Problem("the record table and the xz index (what nvidia-ncore reads) list different records")]
    return []


def _check_keys(archive: IndexedTarArchive) -> list[Problem]:
    """Keys no writer makes (``../x``, ``/x``, an empty one...): readers serve them, but
    extracting such an archive with tar could write outside its folder."""
    name = archive.location.name
    problems = []
    for key in archive.keys():
        try:
            validate_key(key, name)
        except InvalidKeyError as error:
            detail = error_detail(error, name)
            problems.append(Problem(f"{detail}: no writer makes such a key (tar could extract it elsewhere)", key))
    return problems


def _open_file(archive: IndexedTarArchive) -> IO[bytes]:
    path = archive.location.local
    if path is not None:
        return open(path, "rb")
    file: IO[bytes] = archive.location.upath.open("rb")
    return file


def verify_archive(
    archive: IndexedTarArchive, *, threads: int | None = None, progress: VerifyProgress | None = None
) -> ArchiveReport:
    """Checks an archive opened for reading: every tar member against the index (name,
    payload offset and size; members missing from the index, index entries without
    member; older versions of node metadata records rewritten after a flush are no
    problem), then every record readable in full and matching its CRC32C, if the archive
    has checksums (on ``threads`` threads, default one per CPU: remote reads overlap).

    Args:
        archive: The archive (local or remote).
        threads: Threads reading records.
        progress: Told of the progress of each step (see :data:`VerifyProgress`).

    Returns:
        The report; problems don't raise.

    Raises:
        OSError: If the archive's file can't be opened for the walk through its headers.
    """
    name = archive.location.name
    records = archive.records
    report = ArchiveReport(name, records=len(records))
    with _open_file(archive) as file:
        report.tar_members, problems = _check_members(file, records, progress)
        problems += _check_index_copies(file, archive)
    report.problems += _check_keys(archive) + problems
    report.bytes_read, problems = _check_records(archive, name, threads, progress)
    report.problems += problems
    report.unreadable = {problem.key: problem for problem in problems if problem.key is not None}
    return report
