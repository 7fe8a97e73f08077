"""``ncore-like pack``: a zarr hierarchy (directory, store URL or archive) into a new
archive, by copying records verbatim or re-encoding every array on worker threads."""

from __future__ import annotations

import argparse
import bisect
import contextlib
import errno
import math
import os
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from .. import _compat
from .._concurrency import default_workers, ordered_map
from ..archive import IndexedTarArchive, error_detail, scan_records, verify_archive
from ..errors import ArchiveExistsError
from ..nodes import Array, BloscCompression, EncodedArray, Group, IndexedTarZarrStore, Store, ZarrStoreAdapter
from ..nodes._compression import describe_codecs
from ._common import (
    EXPECTED_ERRORS,
    CommandError,
    Location,
    add_quiet_option,
    describe_error,
    format_bytes,
    open_store,
    positive_int,
    progress,
    reporting,
)
from ._convert import carried_over
from ._hierarchy import (
    ROOT_METADATA_KEYS,
    has_hierarchy,
    is_blob,
    is_variable_length,
    open_root,
    root_zarr_format,
    walk,
)
from ._signals import deferred_signals

__all__ = ["register", "run"]

ZarrFormat = Literal[2, 3]
SourceKind = Literal["archive", "directory", "store"]
#: Bytes of source values and encoded chunks held at once when re-encoding (besides one
#: item larger than it).
_MAX_BYTES_IN_FLIGHT = 1 << 30


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
        default=_KEEP,
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


def _source_kind(source: Location) -> SourceKind:
    if source.local is not None:
        path = Path(source.local)
        if path.is_dir():
            if not any(path.iterdir()):
                raise CommandError(f"{source.name}: an empty folder, no zarr hierarchy to pack")
            if not any((path / name).is_file() for name in ROOT_METADATA_KEYS.values()):
                raise CommandError(
                    f"{source.name}: a folder without a zarr hierarchy at its top (no .zgroup or zarr.json); "
                    "pack the folder of the hierarchy"
                )
            return "directory"
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), source.name)
        return "archive"  # opening it says what a file that is no archive is (a plain tar, a zip...)
    if source.upath.name.endswith(".itar"):
        return "archive"
    try:
        # One request tells an archive (a file) from a store (a prefix of many keys).
        return "archive" if source.upath.is_file() else "store"
    except EXPECTED_ERRORS:
        raise
    except Exception as error:  # the filesystem of a chained URL (zip::, tar::...) failed to open its file
        raise CommandError(f"{source.name}: can't be opened ({type(error).__name__}: {error})") from error


def _open_store_root(source: Location, store: Store) -> Group:
    """The root group of a zarr store source; a CommandError saying what is there instead
    when it holds no hierarchy at its top (e.g. the root of a zip file whose hierarchy is in
    a folder)."""
    try:
        return store.open_root_group(consolidated="auto")
    except FileNotFoundError as error:
        try:
            names = sorted(path.name for path in source.upath.iterdir())
        except (FileNotFoundError, NotADirectoryError):  # universal-pathlib's answer for nothing there
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), source.name) from error
        except Exception:  # the listing is a hint; the error stands without it
            raise error from None
        if not names:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), source.name) from error
        shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        raise CommandError(
            f"{source.name}: no zarr hierarchy at its top (no .zgroup or zarr.json); it holds {shown} "
            "(name the folder of the hierarchy)"
        ) from error


def _source_store(source: Location, kind: SourceKind) -> Store:
    if kind == "archive":
        return open_store(source, range_reads=True)
    if kind == "directory":
        assert source.local is not None
        return ZarrStoreAdapter(_compat.local_store(source.local, read_only=True))
    return ZarrStoreAdapter(_compat.fsspec_store(source.upath.fs, source.upath.path, read_only=True))


def _exists(location: Location) -> bool:
    if location.local is not None:
        return os.path.lexists(location.local)
    return bool(location.upath.exists())


def _existing(dest: Location) -> CommandError:
    return CommandError(
        f"{dest.name} exists; pass --overwrite to replace it (it stays as it is until the new archive is complete)"
    )


@contextlib.contextmanager
def _writing(dest: Location, *, overwrite: bool) -> Iterator[IndexedTarZarrStore]:
    """A new archive that appears at ``dest`` only when it is complete. Without
    ``overwrite`` it never replaces a file there, even one created meanwhile. On any
    failure (a bad source, Ctrl-C, SIGTERM) it is discarded: a file at ``dest`` stays as it
    was, and no partial file is left to block the next run."""
    store = None
    try:
        with deferred_signals():  # a partial file created is a partial file cleaned up
            store = IndexedTarZarrStore(dest.target, "w" if overwrite else "x")
        yield store
        store.close()
    except BaseException as error:
        if store is None:
            if isinstance(error, ArchiveExistsError):  # created since pack_one looked
                raise _existing(dest) from error
            raise
        store.abort()  # also after a failed close, which keeps the partial file
        if isinstance(error, ArchiveExistsError):
            raise CommandError(
                f"{dest.name} was created by another writer while this one packed; it was left as it is (pass "
                "--overwrite to replace it)"
            ) from error
        raise


# -- copying records -----------------------------------------------------------------------


def _copy_records(source: Store, dest: IndexedTarZarrStore, *, consolidate: bool, workers: int, quiet: bool) -> None:
    """Copies every record verbatim (each array keeps its codecs, chunks and bytes); the
    consolidated metadata is regenerated from the node metadata records, never copied."""
    if isinstance(source, IndexedTarZarrStore):
        archive = source.archive
        keys = [key for key in archive.keys() if not Store.is_consolidated_metadata_key(key)]
        total = sum(archive.records[key].size for key in keys)
        reads: Iterator[tuple[str, bytes]] = scan_records(archive, keys)  # adjacent records read together
    else:
        keys = sorted(key for key in source.record_keys() if not Store.is_consolidated_metadata_key(key))
        total = len(keys)
        reads = _store_records(source, keys, workers)
    with progress(total=total, desc="pack", quiet=quiet) as bar, closing(reads):  # type: ignore[type-var]
        for key, data in reads:
            dest.archive[key] = data
            bar.update(len(data) if isinstance(source, IndexedTarZarrStore) else 1)
    if consolidate and has_hierarchy(dest.archive):
        dest.consolidate()


def _store_records(source: Store, keys: list[str], workers: int) -> Iterator[tuple[str, bytes]]:
    """The records of a zarr-python store, read ahead on threads, in order."""

    def read(key: str) -> bytes:
        data = source.read_record(key)
        if data is None:
            raise FileNotFoundError(errno.ENOENT, "record disappeared while packing", f"{source.name}/{key}")
        return data

    with ThreadPoolExecutor(workers) as pool:
        yield from ordered_map(
            pool, read, keys, max_items=4 * workers, max_bytes=_MAX_BYTES_IN_FLIGHT, size=lambda _: 0
        )


# -- re-encoding ---------------------------------------------------------------------------


StepKind = Literal["group", "blob", "array", "copy", "split"]


@dataclass(frozen=True)
class _Step:
    """One node to recreate, in the order of the walk (parents first)."""

    node: Group | Array
    kind: StepKind
    """``copy``: the array's records verbatim; ``split``: a variable-length bytes array as a
    group of blobs, one per element."""
    nbytes: int
    """Bytes held while the step is in flight (values and encoded chunks)."""
    keys: tuple[str, ...] = ()
    """``copy``: the records of the array."""

    @property
    def parent(self) -> str:
        return self.node.path.rpartition("/")[0]


def is_bytes_array(array: Array) -> bool:
    """True for one-dimensional arrays of variable-length bytes (zarr-python's ``vlen-bytes``
    codec or filter: e.g. one chunk of many encoded frames), which ``--bytes-as-blobs``
    splits."""
    return array.ndim == 1 and any("vlen-bytes" in (codec.get("name"), codec.get("id")) for codec in array.codecs)


def _element_name(index: int, count: int) -> str:
    """The blob name of element ``index`` of ``count``: zero-padded to five digits or more,
    as frames are named (``cameras/front/00042``), so names sort in element order."""
    return f"{index:0{max(5, len(str(count - 1)))}d}"


@dataclass(frozen=True)
class _Plan:
    """How the nodes are recreated."""

    verbatim: bool
    """Arrays keep their records byte for byte (same zarr format, codecs kept)."""
    split: bool
    """Variable-length bytes arrays become groups of blobs (``--bytes-as-blobs``)."""
    source: Store


def _record_keys(plan: _Plan) -> list[str]:
    """The source's record keys, sorted, consolidated metadata left out (regenerated)."""
    source = plan.source
    keys = source.archive.keys() if isinstance(source, IndexedTarZarrStore) else source.record_keys()
    return sorted(key for key in keys if not Store.is_consolidated_metadata_key(key))


def _keys_below(keys: list[str], path: str) -> tuple[str, ...]:
    """The keys (sorted) under ``path/``: an array's records (arrays have no members)."""
    prefix = f"{path}/"
    start = bisect.bisect_left(keys, prefix)
    stop = bisect.bisect_left(keys, prefix[:-1] + chr(ord("/") + 1), start)
    return tuple(keys[start:stop])


def _steps(root: Group, plan: _Plan) -> list[_Step]:
    keys = _record_keys(plan) if plan.verbatim else []
    sizes = plan.source.archive.records if isinstance(plan.source, IndexedTarZarrStore) else None
    steps = []
    for node in walk(root):
        if isinstance(node, Group):
            steps.append(_Step(node, "group", 0))
        elif plan.split and is_bytes_array(node):
            steps.append(_Step(node, "split", 0))
        elif plan.verbatim:
            records = _keys_below(keys, node.path)
            nbytes = sum(sizes[key].size for key in records) if sizes is not None else 0
            steps.append(_Step(node, "copy", nbytes, records))
        elif is_blob(node):
            steps.append(_Step(node, "blob", node.dtype.itemsize * math.prod(node.shape)))
        elif is_variable_length(node):
            raise ValueError(
                f"array {node.path!r} holds variable-length elements ({describe_codecs(node.codecs)}), which can't "
                "be re-encoded; keep its zarr format and codecs (no --zarr-format or --compression: records are "
                "copied)" + (", or split bytes into blobs with --bytes-as-blobs" if node.ndim == 1 else "")
            )
        else:
            # The values read and their encoded chunks (at most about as large) coexist.
            steps.append(_Step(node, "array", 2 * node.dtype.itemsize * math.prod(node.shape)))
    return steps


_KEEP = "keep"


def _compression(array: Array, asked: BloscCompression | str | None, changed: list[str]) -> BloscCompression | None:
    """The compression an array is re-encoded with: the one asked for, else its own; arrays
    whose codecs the typed API can't write (other compressors, filters) get the default
    Blosc compression, and are listed in ``changed``."""
    if not isinstance(asked, str):
        return asked
    try:
        return array.compression
    except ValueError:
        changed.append(array.path)
        return BloscCompression()


@dataclass(frozen=True)
class _Records:
    """An array's records, read to be copied verbatim."""

    records: list[tuple[str, bytes]]


@dataclass(frozen=True)
class _Elements:
    """The elements of a variable-length bytes array, to be stored as blobs."""

    elements: list[bytes]


Payload = bytes | EncodedArray | _Records | _Elements | None


def _prepare(
    step: _Step, plan: _Plan, zarr_format: ZarrFormat, asked: BloscCompression | str | None, changed: list[str]
) -> Payload:
    """Reads (and encodes) a node's data: runs on worker threads."""
    node = step.node
    if step.kind == "group":
        return None
    assert isinstance(node, Array)
    if step.kind == "copy":
        return _Records([(key, _read_record(plan.source, key)) for key in step.keys])
    if step.kind == "split":
        return _Elements(_elements(node))
    if step.kind == "blob":
        return node.read_bytes()
    compression = _compression(node, asked, changed)
    return EncodedArray.encode(node.read(), chunks=node.chunks, compression=compression, zarr_format=zarr_format)


def _read_record(source: Store, key: str) -> bytes:
    data = source.read_record(key)
    if data is None:
        raise FileNotFoundError(errno.ENOENT, "record disappeared while packing", f"{source.name}/{key}")
    return data


def _elements(array: Array) -> list[bytes]:
    """The elements of a variable-length bytes array, read a chunk of elements at a time."""
    elements: list[bytes] = []
    step = max(1, array.chunks[0])
    for start in range(0, array.shape[0], step):
        for index, element in enumerate(array.read(slice(start, start + step)), start):
            if not isinstance(element, bytes):
                raise ValueError(f"array {array.path!r}: element {index} is {type(element).__name__}, not bytes")
            elements.append(element)
    return elements


@dataclass
class _Outcome:
    changed: list[str]
    """Arrays whose codecs changed (to Blosc)."""
    split: list[str]
    """Variable-length bytes arrays split into blobs."""


def _reencode(
    root: Group, dest: IndexedTarZarrStore, plan: _Plan, *, zarr_format: ZarrFormat, consolidate: bool, workers: int,
    quiet: bool, compression: BloscCompression | str | None,
) -> _Outcome:  # fmt: skip
    """Recreates the hierarchy in ``dest``."""
    outcome = _Outcome([], [])
    groups = {"": dest.create_root_group(dict(root.attributes), zarr_format=zarr_format)}
    steps = _steps(root, plan)
    with (
        ThreadPoolExecutor(workers) as pool,
        progress(total=len(steps), desc="pack", unit="node", quiet=quiet) as bar,
        closing(
            ordered_map(
                pool,
                lambda step: _prepare(step, plan, zarr_format, compression, outcome.changed),
                steps,
                max_items=2 * workers,
                max_bytes=_MAX_BYTES_IN_FLIGHT,
                size=lambda step: step.nbytes,
            )
        ) as prepared,
    ):
        # Stored in the order of the walk, so the archive's layout doesn't depend on timing.
        for step, payload in prepared:
            parent, node = groups[step.parent], step.node
            attributes = dict(node.attributes)
            if isinstance(payload, _Records):
                for key, data in payload.records:
                    dest.archive[key] = data
            elif isinstance(payload, _Elements):
                group = groups[node.path] = parent.create_group(node.name, attributes=attributes)
                _store_blobs(group, node.path, payload.elements)
                outcome.split.append(node.path)
            elif isinstance(payload, EncodedArray):
                assert isinstance(node, Array)
                kept = carried_over(node, root.zarr_format, zarr_format)
                if kept.fill_value is not None or zarr_format == 2:
                    payload = replace(payload, fill_value=kept.fill_value)
                parent.create_encoded_array(
                    node.name, payload, attributes=kept.attributes, dimension_names=kept.dimension_names
                )
            elif isinstance(payload, bytes):
                parent.create_bytes_array(node.name, payload, attributes=attributes)
            else:
                groups[node.path] = parent.create_group(node.name, attributes=attributes)
            bar.update(1)
    if consolidate:
        dest.consolidate()
    outcome.changed.sort()
    return outcome


def _store_blobs(group: Group, path: str, elements: list[bytes]) -> None:
    """The elements of a bytes array as blobs of ``group``, one record each, in order."""
    for index, element in enumerate(elements):
        if not element and group.zarr_format == 2:
            raise ValueError(
                f"array {path!r}: element {index} is empty, and zarr format 2 can't store an empty blob; "
                "pack with --zarr-format 3"
            )
        group.create_bytes_array(_element_name(index, len(elements)), element)


# -- command -------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    """Writes the new archive(s)."""
    sources: list[str] = args.src
    if len(sources) == 1:
        for line in pack_one(sources[0], args.dest, _Options.of(args)):
            print(line)
        return 0
    return _pack_many(sources, args)


@dataclass(frozen=True)
class _Options:
    """How to pack (picklable: sent to cluster workers)."""

    storage_options: tuple[tuple[str, Any], ...]
    zarr_format: ZarrFormat | None
    compression: str
    consolidate: bool
    workers: int
    quiet: bool
    bytes_as_blobs: bool = False
    overwrite: bool = False

    @classmethod
    def of(cls, args: argparse.Namespace, *, quiet: bool | None = None) -> _Options:
        return cls(
            tuple(args.storage_options), args.zarr_format, args.compression, not args.no_consolidate,
            args.workers or default_workers(), args.quiet if quiet is None else quiet, args.bytes_as_blobs,
            args.overwrite,
        )  # fmt: skip


def pack_one(src: str, dest_text: str, options: _Options) -> list[str]:
    """Packs the hierarchy at ``src`` into the new archive ``dest_text``; returns what to
    print (the summary, and which arrays changed codecs), nothing if ``quiet``."""
    source = Location.parse(src, options.storage_options)
    dest = Location.parse(dest_text, options.storage_options)
    if source.same_as(dest):
        raise CommandError(f"{dest.name}: the archive to write is SRC itself")
    if dest.name.rstrip("/").endswith(".zarr") or (dest.local is not None and os.path.isdir(dest.local)):
        raise CommandError(
            f"{dest.name}: pack writes .itar archives; to get a zarr folder, run "
            f"'ncore-like extract {src} -C {dest_text}'"
        )
    workers, consolidate, quiet = options.workers, options.consolidate, options.quiet
    compression = _parse_compression(options.compression)
    lines = []
    with reporting(source.name, dest.name):
        if not options.overwrite and _exists(dest):  # before reading the source
            raise _existing(dest)
        kind = _source_kind(source)
        src_store = _source_store(source, kind)
        with src_store:
            if isinstance(src_store, IndexedTarZarrStore):
                src_format = root_zarr_format(src_store.archive)
                if src_format is None and (options.zarr_format is not None or compression != _KEEP):
                    raise CommandError(f"{source.name}: no zarr hierarchy to re-encode")
                root = open_root(src_store, src_store.archive) if src_format is not None else None
            else:
                root = _open_store_root(source, src_store)
                src_format = root.zarr_format
            zarr_format: ZarrFormat = options.zarr_format or src_format or 2
            verbatim = zarr_format == src_format and compression == _KEEP
            split = (
                options.bytes_as_blobs
                and root is not None
                and any(isinstance(node, Array) and is_bytes_array(node) for node in walk(root))
            )
            if root is None or (verbatim and not split):
                # Records copied verbatim: every array keeps its codecs and bytes.
                with _writing(dest, overwrite=options.overwrite) as new:
                    _copy_records(src_store, new, consolidate=consolidate, workers=workers, quiet=quiet)
                archive = new.archive
                lines.append(_summary(dest, archive.keys(), archive.file_size, "records copied, codecs kept"))
            else:
                plan = _Plan(verbatim, options.bytes_as_blobs, src_store)
                with _writing(dest, overwrite=options.overwrite) as new:
                    outcome = _reencode(
                        root, new, plan, zarr_format=zarr_format, consolidate=consolidate, workers=workers,
                        quiet=quiet, compression=compression,
                    )  # fmt: skip
                archive = new.archive
                how = "records copied, codecs kept" if verbatim else f"re-encoded, zarr format {zarr_format}"
                if compression != _KEEP:
                    how += f", compression {options.compression}"
                if outcome.split:
                    how += f", {len(outcome.split)} bytes array(s) split into blobs"
                lines.append(_summary(dest, archive.keys(), archive.file_size, how))
                changed = outcome.changed
                if changed:
                    shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
                    note = f"{len(changed)} array(s) had codecs the typed API can't write and now use Blosc lz4"
                    lines.append(f"note: {note}: {shown}")
    return [] if quiet else lines


# -- many sources, on a cluster ----------------------------------------------------------------


def _destination(folder: str, source: str) -> str:
    """The archive a source goes to in ``folder``: its name, with ``.itar``."""
    name = source.rstrip("/").rpartition("/")[2]
    stem = name[: -len(".zarr")] if name.endswith(".zarr") else name.removesuffix(".itar")
    return f"{folder.rstrip('/')}/{stem}.itar"


def _problem(location: Location) -> str | None:
    """What is wrong with the archive at ``location`` (None if it verifies cleanly)."""
    try:
        with IndexedTarArchive(location.target) as archive:
            problems = verify_archive(archive).problems
    except (OSError, ValueError, KeyError) as error:
        return error_detail(error, location.name)
    return f"{len(problems)} problem(s), e.g. {problems[0].message}" if problems else None


def _pack_task(src: str, dest: str, options: _Options) -> str:
    """One source of a cluster run (in a worker process): ``skipped`` or the summary.

    Without ``overwrite`` an archive already at ``dest`` that verifies was packed by an
    earlier run, and is skipped (a run that failed halfway resumes); any other file there
    is refused, never replaced. With ``overwrite`` every source is packed again."""
    location = Location.parse(dest, options.storage_options)
    if not options.overwrite and _exists(location):
        problem = _problem(location)
        if problem is None:
            return f"{dest}: skipped, verified (packed before)"
        raise CommandError(
            f"{location.name} exists and is not an archive that verifies ({problem}); pass --overwrite to replace it"
        )
    lines = pack_one(src, dest, options)
    return lines[0] if lines else dest


def _pack_many(sources: list[str], args: argparse.Namespace) -> int:
    from ..cluster import run_tasks

    folder = args.dest
    dest_folder = Location.parse(folder, args.storage_options)
    if dest_folder.local is not None:
        os.makedirs(dest_folder.local, exist_ok=True)
    destinations = [_destination(folder, source) for source in sources]
    if len(set(destinations)) != len(destinations):
        raise CommandError(f"{folder}: sources with the same name would go to the same archive")
    options = _Options.of(args, quiet=True)  # workers print nothing; the summary is ours
    failures: list[str] = []
    with progress(total=len(sources), desc="pack", unit="archive", quiet=args.quiet) as bar:

        def done(number: int, outcome: object) -> None:
            if isinstance(outcome, BaseException):
                failures.append(f"{sources[number]}: {describe_error(outcome)}")
            bar.update(1)

        outcomes = run_tasks(
            _pack_task, [(source, dest, options) for source, dest in zip(sources, destinations, strict=True)],
            scheduler=args.scheduler, workers=args.cluster_workers, done=done,
        )  # fmt: skip
    if not args.quiet:
        for outcome in outcomes:
            if isinstance(outcome, str):
                print(outcome)
    packed = sum(1 for outcome in outcomes if isinstance(outcome, str) and "skipped" not in outcome)
    skipped = sum(1 for outcome in outcomes if isinstance(outcome, str) and "skipped" in outcome)
    print(f"{packed} packed, {skipped} skipped (verified), {len(failures)} failed", file=sys.stderr)
    for failure in failures:
        print(f"ncore-like: error: {failure}", file=sys.stderr)
    return 1 if failures else 0


def _parse_compression(text: str) -> BloscCompression | str | None:
    """``keep`` (each array's own), ``none``, or Blosc ``CNAME[:LEVEL]`` (e.g. ``zstd:3``)."""
    if text == _KEEP:
        return _KEEP
    if text == "none":
        return None
    cname, _, level = text.partition(":")
    try:
        return BloscCompression(cname, int(level) if level else BloscCompression().clevel)  # type: ignore[arg-type]
    except ValueError as error:
        raise CommandError(f"--compression {text!r}: {error} (keep, none, or CNAME[:LEVEL] such as zstd:3)") from error


def _summary(dest: Location, keys: list[str], size: int, how: str) -> str:
    return f"{dest.name}: {len(keys)} records, {format_bytes(size)} ({how})"
