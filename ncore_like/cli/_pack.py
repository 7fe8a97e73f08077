"""``ncore-like pack``: a zarr hierarchy (directory, store URL or archive) into a new
archive; the arguments and the output of :func:`ncore_like.pack` (``ncore_like/_pack``),
which does the work."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .._concurrency import default_workers
from .._pack import KEEP, PackResult, destination_in, pack, pack_many, parse_compression
from ..errors import ArchiveExistsError
from ._common import (
    CommandError,
    Location,
    UsageError,
    add_quiet_option,
    describe_error,
    format_bytes,
    positive_int,
    progress,
    reporting,
    step_progress,
)

__all__ = ["register", "run"]


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Adds the ``pack`` command."""
    parser = commands.add_parser(
        "pack",
        parents=parents,
        help="pack a zarr hierarchy into a new archive",
        description="Pack a zarr hierarchy into a new archive. SRC is a zarr directory, a zarr store URL "
        "(any fsspec filesystem) or another .itar archive. Its records are copied as they are (every array "
        "keeps its codecs; consolidated metadata is regenerated) unless the zarr format or the compression "
        "changes: then the hierarchy is re-encoded on worker threads (groups and attributes recreated, blobs "
        "stored as blobs, arrays with their chunk shape; arrays whose codecs the typed API can't write get "
        "Blosc lz4, and the summary names them).",
    )
    parser.add_argument("src", metavar="SRC", nargs="+", help="zarr directory, zarr store URL or .itar archive")
    parser.add_argument(
        "dest",
        metavar="DEST",
        help="the archive to write (path or URL; refused if it exists, unless --overwrite); with several SRC, "
        "the folder of the archives, one per source (NAME.zarr -> NAME.itar), packed on a dask cluster",
    )
    clobber = parser.add_mutually_exclusive_group()
    clobber.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing DEST (it stays as it was until the new archive is complete); with several SRC, "
        "pack every source again",
    )
    clobber.add_argument(
        "--no-clobber",
        dest="overwrite",
        action="store_false",
        help="refuse to replace an existing DEST (the default); with several SRC, skip the archives that verify",
    )
    parser.add_argument(
        "--zarr-format",
        type=int,
        choices=(2, 3),
        help="zarr format of the new archive (default: that of SRC); a change re-encodes every array",
    )
    parser.add_argument(
        "--compression",
        default=KEEP,
        metavar="C",
        help="keep (default: every array keeps its codecs, records are copied as they are), none, or Blosc "
        "CNAME[:LEVEL] such as lz4 or zstd:3 (re-encodes every array)",
    )
    parser.add_argument(
        "--bytes-as-blobs",
        action="store_true",
        help="store each element of a 1-d variable-length bytes array (e.g. one chunk of many encoded frames) as "
        "a blob, one record each: array cameras/front becomes group cameras/front with blobs 00000, 00001... "
        "(other arrays keep their records unless the format or compression changes)",
    )
    parser.add_argument("--no-consolidate", action="store_true", help="don't write the consolidated metadata record")
    parser.add_argument(
        "--no-durable",
        action="store_true",
        help="skip the fsyncs at close, for scratch conversions (a crash or power cut soon after can lose "
        "the archive; see the format page)",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help=f"threads reading and encoding arrays (default: the number of CPUs, here {default_workers()})",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="with several SRC: the dask scheduler to use (default: a local cluster of processes)",
    )
    parser.add_argument(
        "--cluster-workers", type=positive_int, metavar="N", help="with several SRC: processes of the local cluster"
    )
    add_quiet_option(parser)
    parser.set_defaults(run=run)


# -- command -------------------------------------------------------------------------------

#: The progress bars of a pack: records copied, nodes recreated.
_STEPS = {"copy": ("pack", "B"), "encode": ("pack", "node")}


def run(args: argparse.Namespace) -> int:
    """Writes the new archive(s)."""
    sources: list[str] = args.src
    if len(sources) == 1:
        for line in _pack_one(sources[0], args.dest, args):
            print(line)
        return 0
    return _pack_many(sources, args)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """:func:`ncore_like.pack`'s options from the command line."""
    return {
        "zarr_format": args.zarr_format,
        "compression": args.compression,
        "bytes_as_blobs": args.bytes_as_blobs,
        "consolidate": not args.no_consolidate,
        "durable": not args.no_durable,
        "overwrite": args.overwrite,
        "storage_options": tuple(args.storage_options),
        "workers": args.workers or default_workers(),
    }


def _in_our_words(error: BaseException) -> str:
    """The library's advice (``overwrite=True``) as the command's option; an archive that
    exists reads ``NAME exists; ...``."""
    text = describe_error(error)
    if isinstance(error, ArchiveExistsError) and error.archive is not None:
        text = f"{error.archive} {error.detail}"
    return text.replace("overwrite=True", "--overwrite")


def _pack_one(src: str, dest: str, args: argparse.Namespace) -> list[str]:
    """Packs ``src`` into ``dest``; returns what to print, nothing if ``--quiet``."""
    try:
        parse_compression(args.compression)
    except ValueError as error:
        raise UsageError(f"--{error}") from error
    name = Location.parse(dest, args.storage_options).name
    with reporting(Location.parse(src, args.storage_options).name, name):
        try:
            with step_progress(_STEPS, quiet=args.quiet) as progress:
                result = pack(src, dest, progress=progress, **_options(args))
        except ArchiveExistsError as error:
            raise CommandError(_in_our_words(error)) from error
    return [] if args.quiet else _summary(result)


def _summary(result: PackResult) -> list[str]:
    """The summary line, and the arrays whose codecs changed."""
    if result.verbatim and not result.split:
        how = "records copied, codecs kept"
    else:
        how = "records copied, codecs kept" if result.verbatim else f"re-encoded, zarr format {result.zarr_format}"
        if result.compression != KEEP:
            how += f", compression {result.compression}"
        if result.split:
            how += f", {len(result.split)} bytes array(s) split into blobs"
    lines = [f"{result.destination}: {result.records} records, {format_bytes(result.size)} ({how})"]
    changed = result.changed
    if changed:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        note = f"{len(changed)} array(s) had codecs the typed API can't write and now use Blosc lz4"
        lines.append(f"note: {note}: {shown}")
    return lines


# -- many sources, on a cluster ----------------------------------------------------------------


def _pack_many(sources: list[str], args: argparse.Namespace) -> int:
    folder = args.dest
    failures: list[str] = []
    with progress(total=len(sources), desc="pack", unit="archive", quiet=args.quiet) as bar:

        def done(number: int, outcome: object) -> None:
            if isinstance(outcome, BaseException):
                failures.append(f"{sources[number]}: {_in_our_words(outcome)}")
            bar.update(1)

        try:
            outcomes = pack_many(
                sources, folder, scheduler=args.scheduler, cluster_workers=args.cluster_workers, done=done,
                **_options(args),
            )  # fmt: skip
        except ValueError as error:
            raise CommandError(str(error)) from error
    destinations = [destination_in(folder, source) for source in sources]
    if not args.quiet:
        for outcome, destination in zip(outcomes, destinations, strict=True):
            if isinstance(outcome, PackResult):
                print(_summary(outcome)[0])
            elif outcome is None:
                print(f"{destination}: skipped, verified (packed before)")
    packed = sum(1 for outcome in outcomes if isinstance(outcome, PackResult))
    skipped = sum(1 for outcome in outcomes if outcome is None)
    print(f"{packed} packed, {skipped} skipped (verified), {len(failures)} failed", file=sys.stderr)
    for failure in failures:
        print(f"ncore-like: error: {failure}", file=sys.stderr)
    return 1 if failures else 0
