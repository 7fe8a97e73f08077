"""``ncore-like verify``: checks an archive (:func:`ncore_like.archive.verify_archive`: its
index against the tar headers, every record readable and matching its checksum) and every
array of its zarr hierarchy (:func:`ncore_like.nodes.verify_arrays`), and prints what is
wrong."""

from __future__ import annotations

import argparse
from typing import Any

from ..archive import ArchiveReport, Problem, error_detail, verify_archive
from ..errors import ArchiveFormatError
from ..nodes import Array, IndexedTarZarrStore, verify_arrays
from ._common import (
    EXPECTED_ERRORS,
    CommandError,
    Location,
    add_json_option,
    add_quiet_option,
    open_store,
    print_json,
    reporting,
    step_progress,
)
from ._hierarchy import has_hierarchy, walk

__all__ = ["register", "run", "verify"]

#: The progress bar of each step: description and unit.
_STEPS = {"members": ("tar headers", "member"), "records": ("records", "B"), "arrays": ("arrays", "B")}


def verify(store: IndexedTarZarrStore, *, quiet: bool) -> tuple[ArchiveReport, int]:
    """Runs every check on the archive of ``store``.

    Returns:
        The report (with the problems of the arrays too), and the number of arrays read.
    """
    archive = store.archive
    with step_progress(_STEPS, quiet=quiet) as bars:
        report = verify_archive(archive, progress=bars)
        if not has_hierarchy(archive):
            return report, 0
        arrays: list[Array] = []
        try:
            root = store.open_root_group(consolidated="auto")
            arrays = [node for node in walk(root) if isinstance(node, Array)]
        except EXPECTED_ERRORS as error:
            detail = error_detail(error, report.archive)
            report.add([Problem(f"zarr hierarchy can't be opened: {detail}")])
        report.add(verify_arrays(arrays, archive=report.archive, progress=bars))
    return report, len(arrays)


def _document(report: ArchiveReport, arrays: int) -> dict[str, Any]:
    return {
        "archive": report.archive,
        "ok": report.ok,
        "records": report.records,
        "tar_members": report.tar_members,
        "arrays": arrays,
        "bytes_read": report.bytes_read,
        "problems": [
            {"key": problem.key, "array": problem.array, "message": problem.message} for problem in report.problems
        ],
    }


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Adds the ``verify`` command."""
    parser = commands.add_parser(
        "verify",
        parents=parents,
        help="check an archive",
        description="Check an archive: every tar member against the index (name, payload offset and size; "
        "index entries without member and members missing from the index), every record readable and matching "
        "its CRC32C checksum, and every array of its zarr hierarchy readable completely. Exits with 1 if anything "
        "is wrong.",
    )
    parser.add_argument("archive", metavar="ARCHIVE", help="the .itar archive (path or URL)")
    add_json_option(parser)
    add_quiet_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Prints the report; fails if it has problems."""
    location = Location.parse(args.archive, args.storage_options)
    with reporting(location.name):
        try:
            store = open_store(location, range_reads=True)
        except ArchiveFormatError as error:
            if error.key is None:
                raise
            # An index entry that can't be a payload: the archive doesn't open, and that entry
            # is what is wrong with it.
            report = ArchiveReport(location.name, problems=[Problem(error.detail, error.key)])
            arrays = 0
        else:
            with store:
                report, arrays = verify(store, quiet=args.quiet)
    if args.json:
        print_json(_document(report, arrays))
    else:
        for problem in report.problems:
            print(problem.text())
        if report.ok:
            matched = f"{report.records} records match {report.tar_members} tar members"
            print(f"{report.archive}: OK ({matched}, {arrays} arrays read)")
    if not report.ok:
        count = len(report.problems)
        raise CommandError(f"{report.archive}: {count} problem{'s' if count != 1 else ''} found")
    return 0
