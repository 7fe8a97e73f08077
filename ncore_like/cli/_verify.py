"""``ncore-like verify``: checks an archive: its index against the tar headers, every record
readable, every array of its zarr hierarchy readable."""

from __future__ import annotations

import argparse
import math
import tarfile
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from typing import IO, Any

from .._compat import chunk_key
from .._concurrency import default_workers, ordered_map
from ..archive import IndexedTarArchive, Record
from ..archive._format import BLOCK_SIZE
from ..nodes import Array
from ..nodes._encoding import chunk_regions
from ..store import IndexedTarZarrStore
from ._common import (
    EXPECTED_ERRORS,
    CommandError,
    Location,
    Progress,
    add_json_option,
    add_quiet_option,
    describe_error,
    open_store,
    print_json,
    progress,
    reporting,
)
from ._hierarchy import has_hierarchy, walk

__all__ = ["Problem", "Report", "check_arrays", "check_records", "check_tar_members", "register", "run"]

#: Arrays are read in slabs of whole chunk rows of about this size (memory stays bounded).
_SLAB_BYTES = 64 << 20
_READ_AHEAD_BYTES = 256 << 20


@dataclass(frozen=True)
class Problem:
    """Something wrong with an archive."""

    message: str
    key: str | None = None
    """The record concerned, if one is."""
    array: str | None = None
    """The path of the array concerned, if one is."""

    def text(self) -> str:
        """The problem as one line of text."""
        if self.key is not None and self.array is not None:
            return f"{self.key} (array {self.array}): {self.message}"
        if self.key is not None:
            return f"{self.key}: {self.message}"
        if self.array is not None:
            return f"array {self.array}: {self.message}"
        return self.message


@dataclass
class Report:
    """What ``verify`` found."""

    archive: str
    records: int = 0
    tar_members: int = 0
    arrays: int = 0
    bytes_read: int = 0
    problems: list[Problem] = field(default_factory=list)

    def document(self) -> dict[str, Any]:
        """The report as a JSON-ready dictionary."""
        return {
            "archive": self.archive,
            "ok": not self.problems,
            "records": self.records,
            "tar_members": self.tar_members,
            "arrays": self.arrays,
            "bytes_read": self.bytes_read,
            "problems": [
                {"key": problem.key, "array": problem.array, "message": problem.message} for problem in self.problems
            ],
        }


# -- tar headers ---------------------------------------------------------------------------


def check_tar_members(
    file: IO[bytes], records: Mapping[str, Record], bar: Progress | None = None
) -> tuple[int, list[Problem]]:
    """Compares the tar members of ``file`` (up to its first end-of-archive block) with the
    index ``records``: name, payload offset and size of each member; index entries without a
    member and members missing from the index are problems too.

    Returns:
        The number of members read, and the problems.
    """
    problems: list[Problem] = []
    seen: set[str] = set()
    count = 0
    try:
        tar = tarfile.open(fileobj=file, mode="r:")  # noqa: SIM115 - closed below, its errors are problems
    except tarfile.TarError as error:
        return 0, [Problem(f"no readable tar header at offset 0 ({error})")]
    with tar:
        while True:
            try:
                member = tar.next()
            except tarfile.TarError as error:
                problems.append(Problem(f"unreadable tar header at offset {tar.offset} ({error})"))
                break
            if member is None:
                break
            count += 1
            problems += _member_problems(member, records.get(member.name), seen)
            seen.add(member.name)
            # tarfile keeps every member it read (in its undeclared ``members`` list); iterating
            # needs none of them, and archives of millions of records would hold them all.
            vars(tar)["members"].clear()
            if bar is not None:
                bar.update(1)
        end = tar.offset
    # tarfile ends its iteration quietly at a header it can't decode, as at the end of the
    # archive: only a zero block there is the real end.
    file.seek(end)
    if file.read(BLOCK_SIZE) != bytes(BLOCK_SIZE):
        problems.append(
            Problem(f"the tar members end at offset {end} with an unreadable header, not the end-of-archive block")
        )
    for key, record in records.items():
        if key not in seen:
            where = f"offset {record.offset}, {record.size} bytes"
            problems.append(Problem(f"index entry ({where}) has no tar member", key))
    return count, problems


def _member_problems(member: tarfile.TarInfo, record: Record | None, seen: set[str]) -> list[Problem]:
    where = f"tar member at offset {member.offset_data} ({member.size} bytes)"
    if member.name in seen:
        return [Problem(f"duplicate {where}", member.name)]
    if record is None:
        return [Problem(f"{where} is not in the index", member.name)]
    if not member.isreg():
        return [Problem(f"{where} is not a regular file", member.name)]
    if (member.offset_data, member.size) != (record.offset, record.size):
        index = f"offset {record.offset}, {record.size} bytes"
        tar = f"offset {member.offset_data}, {member.size} bytes"
        return [Problem(f"the index says {index}, its tar member has {tar}", member.name)]
    return []


def _open_file(archive: IndexedTarArchive, location: Location) -> IO[bytes]:
    if location.local is not None:
        return open(location.local, "rb")
    file: IO[bytes] = archive.itar_upath.open("rb")
    return file


# -- records -------------------------------------------------------------------------------


def check_records(
    archive: IndexedTarArchive, name: str, *, workers: int, bar: Progress | None = None
) -> tuple[int, list[Problem]]:
    """Reads every record (on ``workers`` threads: remote reads overlap); ``name`` is how
    messages name the archive.

    Returns:
        The bytes read, and the problems (records that can't be read completely).
    """
    records = archive.records

    def read(key: str) -> BaseException | None:
        try:
            size = len(archive.read(key))
        except EXPECTED_ERRORS as error:
            return error
        if size != records[key].size:
            return ValueError(f"read {size} bytes, the index says {records[key].size}")
        return None

    problems: list[Problem] = []
    total = 0
    with (
        ThreadPoolExecutor(workers) as pool,
        closing(
            ordered_map(
                pool,
                read,
                archive.keys(),
                max_items=4 * workers,
                max_bytes=_READ_AHEAD_BYTES,
                size=lambda key: records[key].size,
            )
        ) as results,
    ):
        for key, error in results:
            size = records[key].size
            if error is None:
                total += size
            else:
                problems.append(Problem(_strip(describe_error(error), name), key))
            if bar is not None:
                bar.update(size)
    return total, problems


# -- arrays --------------------------------------------------------------------------------


def _slabs(array: Array) -> Iterator[tuple[slice, ...]]:
    """Selections of whole chunk rows (along the first axis) of about ``_SLAB_BYTES``."""
    shape, chunks = array.shape, array.chunks
    if not shape:
        yield ()
        return
    row_bytes = chunks[0] * math.prod(shape[1:]) * array.dtype.itemsize
    step = max(1, _SLAB_BYTES // max(1, row_bytes)) * chunks[0]
    for start in range(0, shape[0], step):
        yield (slice(start, min(start + step, shape[0])),)


def _chunk_problems(array: Array, slab: tuple[slice, ...], name: str) -> list[Problem]:
    """The chunks of a slab that fail to read, one by one (to name their records)."""
    problems = []
    for coords, region in chunk_regions(array.shape, array.chunks):
        if slab and not slab[0].start <= region[0].start < slab[0].stop:
            continue
        try:
            array.read(region)
        except EXPECTED_ERRORS as error:
            message = _strip(describe_error(error), name)
            problems.append(Problem(message, chunk_key(array.zarr, coords), array.path))
    return problems


def check_arrays(arrays: list[Array], name: str, bar: Progress | None = None) -> list[Problem]:
    """Reads every array completely (slab by slab); a slab that fails is read again chunk by
    chunk to name the failing chunk records."""
    problems: list[Problem] = []
    for array in arrays:
        row_nbytes = array.dtype.itemsize * math.prod(array.shape[1:])
        for slab in _slabs(array):
            try:
                array.read(slab)
            except EXPECTED_ERRORS as error:
                found = _chunk_problems(array, slab, name)
                problems += found or [Problem(_strip(describe_error(error), name), None, array.path)]
            if bar is not None:
                bar.update(row_nbytes * (slab[0].stop - slab[0].start) if slab else array.dtype.itemsize)
    return problems


def _strip(message: str, name: str) -> str:
    # The report names the archive once; library messages name it again.
    return message.removeprefix(f"{name}: ")


# -- command -------------------------------------------------------------------------------


def verify(store: IndexedTarZarrStore, location: Location, *, workers: int, quiet: bool) -> Report:
    """Runs every check on the archive of ``store``."""
    archive = store.archive
    records = archive.records
    report = Report(location.name, records=len(records))
    with (
        _open_file(archive, location) as file,
        progress(total=len(records), desc="tar headers", unit="member", quiet=quiet) as bar,
    ):
        report.tar_members, problems = check_tar_members(file, records, bar)
    report.problems += problems
    total = sum(record.size for record in records.values())
    with progress(total=total, desc="records", quiet=quiet) as bar:
        report.bytes_read, problems = check_records(archive, location.name, workers=workers, bar=bar)
    report.problems += problems
    if has_hierarchy(archive):
        try:
            root = store.open_root_group(consolidated="auto")
            arrays = [node for node in walk(root) if isinstance(node, Array)]
        except EXPECTED_ERRORS as error:
            message = _strip(describe_error(error), location.name)
            report.problems.append(Problem(f"zarr hierarchy can't be opened: {message}"))
            arrays = []
        report.arrays = len(arrays)
        nbytes = sum(array.dtype.itemsize * math.prod(array.shape) for array in arrays)
        with progress(total=nbytes, desc="arrays", quiet=quiet) as bar:
            report.problems += check_arrays(arrays, location.name, bar)
    return report


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Adds the ``verify`` command."""
    parser = commands.add_parser(
        "verify",
        parents=parents,
        help="check an archive",
        description="Check an archive: every tar member against the index (name, payload offset and size; "
        "index entries without member and members missing from the index), every record readable, and every "
        "array of its zarr hierarchy readable completely. Exits with 1 if anything is wrong.",
    )
    parser.add_argument("archive", metavar="ARCHIVE", help="the .itar archive (path or URL)")
    add_json_option(parser)
    add_quiet_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Prints the report; fails if it has problems."""
    location = Location.parse(args.archive, args.storage_options)
    with reporting(location.name):
        store = open_store(location, range_reads=True)
        with store:
            report = verify(store, location, workers=default_workers(), quiet=args.quiet)
    if args.json:
        print_json(report.document())
    else:
        for problem in report.problems:
            print(problem.text())
        if not report.problems:
            print(
                f"{report.archive}: OK ({report.records} records match {report.tar_members} tar members, "
                f"{report.arrays} arrays read)"
            )
    if report.problems:
        count = len(report.problems)
        raise CommandError(f"{report.archive}: {count} problem{'s' if count != 1 else ''} found")
    return 0
