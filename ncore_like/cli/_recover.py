"""``ncore-like recover``: finishes the archive of a writer that died (see
:func:`ncore_like.recover`) and says what was kept and dropped."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from ..store import RecoveryReport, recover
from ._common import Location, UsageError, add_json_option, format_bytes, print_json, reporting

__all__ = ["register", "run", "summary"]


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Adds the ``recover`` command."""
    parser = commands.add_parser(
        "recover",
        parents=parents,
        help="finish the archive of a writer that died",
        description="Recover the archive of a writer that died (killed, out of memory, power cut) before it "
        "closed it: find its unfinished file (ARCHIVE.partial), keep every complete record whose CRC32C "
        "checksum matches, drop a torn last record, regenerate the consolidated metadata when the zarr "
        "hierarchy is complete, and write a valid archive at ARCHIVE (finishing the unfinished file in place) "
        "or at --output PATH. Never replaces a file: if ARCHIVE exists (e.g. the intact archive a failed "
        "overwrite left), recover the partial file beside it with --output. Local archives only.",
    )
    parser.add_argument("archive", metavar="ARCHIVE", help="the archive's name, or its unfinished .partial file")
    parser.add_argument(
        "--output",
        metavar="PATH",
        help="write the recovered archive at PATH (which must not exist) instead of ARCHIVE",
    )
    parser.add_argument("dest", metavar="DEST", nargs="?", help=argparse.SUPPRESS)  # the older spelling of --output
    add_json_option(parser)
    parser.set_defaults(run=run)


def summary(report: RecoveryReport) -> list[str]:
    """What the report says, as lines of text."""
    lines = [
        f"{report.archive}: {report.records} records ({format_bytes(report.record_bytes)}) recovered "
        f"from {report.source}"
    ]
    if report.dropped_bytes:
        # No stop: the walk ended at tar's end-of-archive blocks (a finished archive's index
        # and tail, or whatever a tar has after its end), not at a torn record.
        what = f"an unfinished record: {report.stop}" if report.stop else "what follows the tar end-of-archive blocks"
        lines.append(f"dropped the last {format_bytes(report.dropped_bytes)} ({what})")
    lines += [f"skipped damage: {what}" for what in report.skipped]
    if report.damaged:
        shown = ", ".join(report.damaged[:5]) + (
            f" and {len(report.damaged) - 5} more" if len(report.damaged) > 5 else ""
        )
        lines.append(f"dropped {len(report.damaged)} damaged records (checksum mismatch): {shown}")
    if report.unverified:
        lines.append(f"{len(report.unverified)} records had no checksum to check (kept)")
    if report.superseded:
        lines.append(f"{report.superseded} older versions of node metadata records were superseded")
    lines += report.notes
    return lines


def run(args: argparse.Namespace) -> int:
    """Recovers the archive and prints what happened."""
    if args.dest is not None and args.output is not None:
        raise UsageError("give the recovered archive's name once: --output PATH (DEST is its older spelling)")
    location = Location.parse(args.archive, args.storage_options)
    with reporting(location.name):
        report = recover(location.target, args.output if args.output is not None else args.dest)
    if args.json:
        print_json(asdict(report))
    else:
        print("\n".join(summary(report)))
    return 1 if report.damaged or report.skipped else 0  # published, but records were lost to damage
