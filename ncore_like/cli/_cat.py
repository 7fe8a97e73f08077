"""``ncore-like cat``: the payload of one record, to standard output."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..archive import IndexedTarArchive
from ._common import CommandError, Location, reporting

__all__ = ["register", "run"]


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Adds the ``cat`` command."""
    parser = commands.add_parser(
        "cat",
        parents=parents,
        help="write the payload of a record to standard output",
        description="Write the payload of one record, as stored (binary), to standard output.",
    )
    parser.add_argument("archive", metavar="ARCHIVE", help="the .itar archive (path or URL)")
    parser.add_argument("key", metavar="KEY", help="key of the record (see 'ncore-like ls')")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Writes the payload of the record."""
    location = Location.parse(args.archive, args.storage_options)
    with reporting(location.name), IndexedTarArchive(location.target) as archive:
        if args.key not in archive:
            raise CommandError(f"{location.name}: no record {args.key!r} in the archive")
        data = archive[args.key]
    out = sys.stdout.buffer
    out.write(data)
    out.flush()
    return 0
