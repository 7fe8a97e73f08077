"""``ncore-like extract``: records as files under a folder, refusing keys that would land
outside it."""

from __future__ import annotations

import argparse
from contextlib import closing
from pathlib import Path
from typing import Any

from ..archive import IndexedTarArchive, scan_records
from ..archive._format import validate_key
from ..errors import InvalidKeyError
from ..store import ItarZarrStore, is_consolidated_metadata_key
from ._common import CommandError, Location, add_quiet_option, progress, reporting, select_keys

__all__ = ["register", "run", "targets"]


def targets(archive_name: str, keys: list[str], directory: Path) -> dict[str, Path]:
    """The file of each record under ``directory`` (resolved).

    Archives written by other tools are not validated when they are read, so every key is
    checked here: absolute keys, ``..`` components and paths through symbolic links that
    leave ``directory`` are refused, all of them before anything is written.

    Raises:
        CommandError: Naming the refused keys.
    """
    root = directory.resolve()
    files: dict[str, Path] = {}
    refused: list[str] = []
    for key in keys:
        try:
            validate_key(key, archive_name)
        except InvalidKeyError as error:
            refused.append(error.detail)  # the message names the archive once
            continue
        target = root.joinpath(*key.split("/"))
        # A symbolic link already in the folder could redirect the file elsewhere.
        if not target.resolve().is_relative_to(root):
            refused.append(f"record key {key!r} leads outside {root} through a symbolic link")
            continue
        files[key] = target
    if refused:
        shown = "; ".join(refused[:10]) + (f"; and {len(refused) - 10} more" if len(refused) > 10 else "")
        raise CommandError(f"{archive_name}: refusing to extract records outside {root}: {shown}")
    return files


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Adds the ``extract`` command."""
    parser = commands.add_parser(
        "extract",
        parents=parents,
        help="extract records as files",
        description="Extract all records (or the given ones) as files under a folder, each at the path its key "
        "names. Keys that would land outside the folder (absolute, '..') are refused before anything is written.",
    )
    parser.add_argument("archive", metavar="ARCHIVE", help="the .itar archive (path or URL)")
    parser.add_argument(
        "keys",
        metavar="KEY",
        nargs="*",
        help="records to extract: keys, prefixes (cameras/front: every record below it) or globs "
        "('cameras/*/00*', quoted) (default: all)",
    )
    parser.add_argument(
        "-C",
        "--directory",
        metavar="DIR",
        default=".",
        type=Path,
        help="folder to extract into, created if missing (default: the current folder)",
    )
    add_quiet_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Writes the files."""
    location = Location.parse(args.archive, args.storage_options)
    with reporting(location.name), IndexedTarArchive(location.target, remote_range_reads=location.is_remote) as archive:
        keys = select_keys(archive.keys(), args.keys, location.name) if args.keys else archive.keys()
        # A whole hierarchy gets zarr-python's own consolidated metadata (the archive's
        # compressed record means nothing to zarr-python in a folder, which would warn).
        consolidated = {} if args.keys else ItarZarrStore(archive, read_only=True).standard_consolidated_records()
        if consolidated:
            keys = [key for key in keys if not is_consolidated_metadata_key(key)]
        files = targets(location.name, keys, args.directory)
        records = archive.records
        total = sum(records[key].size for key in keys)
        # Records are read as a scan (adjacent ones together), ahead of the one being written.
        with (
            progress(total=total, desc="extract", quiet=args.quiet) as bar,
            closing(scan_records(archive, keys)) as reads,
        ):
            for key, data in reads:
                target = files[key]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                bar.update(len(data))
        for key, data in consolidated.items():  # after the records: it replaces the root zarr.json
            target = args.directory.resolve() / key
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    return 0
