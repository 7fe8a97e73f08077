"""``ncore-like ls``: the records of an archive, in archive order."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..archive import IndexedTarArchive
from ._common import Location, add_json_option, print_json, reporting

__all__ = ["register", "run"]


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Adds the ``ls`` command."""
    parser = commands.add_parser(
        "ls",
        parents=parents,
        help="list the records of an archive",
        description="List the record keys of an archive in archive order (the order of their payloads in the "
        "file), from the index alone.",
    )
    parser.add_argument("archive", metavar="ARCHIVE", help="the .itar archive (path or URL)")
    parser.add_argument("-l", "--long", action="store_true", help="also show the offset and size of each payload")
    add_json_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Prints the keys (``--long``: with offsets and sizes; ``--json``: a list of
    ``{"key", "offset", "size"}``)."""
    location = Location.parse(args.archive, args.storage_options)
    listing_only = not (args.json or args.long)
    with reporting(location.name), IndexedTarArchive(location.target) as archive:
        keys = archive.keys() if listing_only else []
        entries = [] if listing_only else list(archive.records.items())
    if listing_only:
        if keys:  # one write: a print per key took a tenth of the command's time
            sys.stdout.write("\n".join(keys) + "\n")
    elif args.json:
        print_json([{"key": key, "offset": record.offset, "size": record.size} for key, record in entries])
    else:
        offset_width = max((len(str(record.offset)) for _, record in entries), default=1)
        size_width = max((len(str(record.size)) for _, record in entries), default=1)
        for key, record in entries:
            print(f"{record.offset:>{offset_width}} {record.size:>{size_width}}  {key}")
    return 0
