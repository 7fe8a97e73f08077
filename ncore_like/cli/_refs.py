"""``ncore-like refs``: the archive as a kerchunk-style reference set (JSON), which fsspec's
``reference://`` filesystem serves to zarr-python and xarray without ncore_like."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ._common import CommandError, archive_store, reporting

__all__ = ["register", "run"]


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Adds the ``refs`` command."""
    parser = commands.add_parser(
        "refs",
        parents=parents,
        help="describe the archive as a reference set (JSON) for fsspec's reference:// filesystem",
        description="Print the archive as a kerchunk-style reference set: node metadata inline, every chunk as "
        "[url, offset, size] of the archive, so that zarr-python and xarray read it through fsspec's "
        "reference:// filesystem without ncore_like (e.g. zarr.open_consolidated(FsspecStore(fsspec.filesystem("
        "'reference', fo='refs.json'), read_only=True), mode='r')).",
    )
    parser.add_argument("archive", metavar="ARCHIVE", help="the .itar archive (path or URL)")
    parser.add_argument(
        "--url", help="where readers find the archive (default: ARCHIVE as given, made absolute if a local path)"
    )
    parser.add_argument(
        "--output", type=Path, metavar="FILE", help="write to FILE (which must not exist) instead of standard output"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace FILE if it exists")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Prints (or writes) the reference set."""
    with archive_store(args) as store:
        references = store.to_references(args.url)
    text = json.dumps(references, indent=1) + "\n"
    if args.output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        from ..archive._writer import write_file  # whole or not at all, never into a symlink's target

        with reporting(str(args.output)):
            try:
                write_file(args.output, text.encode(), overwrite=args.overwrite)
            except FileExistsError:
                raise CommandError(f"{args.output}: exists already (pass --overwrite to replace it)") from None
    return 0
