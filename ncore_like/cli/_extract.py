"""``ncore-like extract``: records as files under a folder, refusing keys that would land
outside it.

Files already in the folder are never lost by accident: extracting over them is refused
(before anything is written) unless ``--overwrite`` is given, and every file is written
under a temporary name beside it and renamed into place only when complete, so a failed or
interrupted extraction leaves each file either as it was or completely extracted, never
half-written.
"""

from __future__ import annotations

import argparse
import os
from contextlib import closing
from pathlib import Path
from typing import Any

from ..archive import IndexedTarArchive, scan_records
from ..archive._format import validate_key
from ..archive._writer import write_file
from ..errors import InvalidKeyError
from ..store import is_consolidated_metadata_key
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
        "names. Keys that would land outside the folder (absolute, '..') are refused before anything is written, "
        "and so are files that exist already, unless --overwrite is given. Each file appears only when complete "
        "(written under a temporary name and renamed): an interrupted extraction leaves every file as it was or "
        "complete.",
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
    clobber = parser.add_mutually_exclusive_group()
    clobber.add_argument(
        "--overwrite", action="store_true", help="replace files that exist already (each only by its complete new self)"
    )
    clobber.add_argument(
        "--no-clobber",
        dest="overwrite",
        action="store_false",
        help="refuse to extract if any file exists already (the default)",
    )
    add_quiet_option(parser)
    parser.set_defaults(run=run)


def _shown(paths: list[str]) -> str:
    return ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")


def _refuse_existing(archive_name: str, files: dict[str, Path], *, overwrite: bool) -> None:
    """Refuses, before anything is written, files that exist (unless ``overwrite``),
    folders where files go (a file never replaces a folder), and records that would be both
    a file and a folder (``a`` and ``a/b``: the archive holds both, a file system can't)."""
    keys = set(files)
    both = sorted(
        key for key in keys if any("/".join(key.split("/")[:end]) in keys for end in range(1, key.count("/") + 1))
    )
    if both:
        raise CommandError(
            f"{archive_name}: {len(both)} record(s) lie below another record, which can't be a file and a folder "
            f"at once ({_shown(both)}); nothing was written: extract them apart (KEY patterns)"
        )
    folders = [str(path) for path in files.values() if os.path.isdir(path) and not os.path.islink(path)]
    if folders:
        raise CommandError(
            f"{archive_name}: {len(folders)} record(s) would replace folders ({_shown(folders)}); nothing was written"
        )
    existing = [] if overwrite else [str(path) for path in files.values() if os.path.lexists(path)]
    if existing:
        raise CommandError(
            f"{archive_name}: {len(existing)} file(s) to extract exist already ({_shown(existing)}); nothing was "
            "written: pass --overwrite to replace them, or extract into another folder (-C DIR)"
        )


def run(args: argparse.Namespace) -> int:
    """Writes the files."""
    location = Location.parse(args.archive, args.storage_options)
    with reporting(location.name), IndexedTarArchive(location.target, remote_range_reads=location.is_remote) as archive:
        keys = select_keys(archive.keys(), args.keys, location.name) if args.keys else archive.keys()
        # A whole hierarchy gets zarr-python's own consolidated metadata (the archive's
        # compressed record means nothing to zarr-python in a folder, which would warn); it
        # takes the place of the root's own zarr.json record.
        consolidated = {} if args.keys else _standard_consolidated_records(archive)
        if consolidated:
            keys = [key for key in keys if not is_consolidated_metadata_key(key) and key not in consolidated]
        files = targets(location.name, [*keys, *consolidated], args.directory)
        _refuse_existing(location.name, files, overwrite=args.overwrite)
        records = archive.records
        total = sum(records[key].size for key in keys)
        # Records are read as a scan (adjacent ones together), ahead of the one being written.
        with (
            progress(total=total, desc="extract", quiet=args.quiet) as bar,
            closing(scan_records(archive, keys)) as reads,
        ):
            for key, data in reads:
                write_file(files[key], data, overwrite=args.overwrite)
                bar.update(len(data))
        for key, data in consolidated.items():
            write_file(files[key], data, overwrite=args.overwrite)
    return 0


def _standard_consolidated_records(archive: IndexedTarArchive) -> dict[str, bytes]:
    """The consolidated records in zarr-python's own form (``.zmetadata``...), as written
    into a folder (zarr-python's store of the archive makes them: imported here only)."""
    from ..store._zarr_store import ItarZarrStore

    return ItarZarrStore(archive, read_only=True).standard_consolidated_records()
