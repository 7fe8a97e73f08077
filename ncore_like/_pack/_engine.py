"""Packing: a zarr hierarchy (directory, store URL or archive) into a new archive, by
copying records verbatim or re-encoding every array on worker threads; many sources at
once on a dask cluster. The command line's ``ncore-like pack`` is a face over this."""

from __future__ import annotations

import bisect
import contextlib
import errno
import math
import os
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from .. import _compat
from .._concurrency import default_workers, ordered_map
from .._signals import deferred_signals
from ..archive import IndexedTarArchive, Location, error_detail, scan_records, verify_archive
from ..archive._format import validate_key
from ..archive._writer import KEPT_FOR_RECOVERY
from ..errors import ArchiveExistsError
from ..nodes import Array, BloscCompression, EncodedArray, Group, IndexedTarZarrStore, Store, ZarrStoreAdapter
from ..store._documents import describe_codecs
from ._carry import carried_over
from ._hierarchy import (
    ROOT_METADATA_KEYS,
    has_hierarchy,
    is_blob,
    is_variable_length,
    open_root,
    root_zarr_format,
    walk,
)

__all__ = ["KEEP", "PackResult", "ProgressCallback", "destination_in", "pack", "pack_many", "parse_compression"]

ZarrFormat = Literal[2, 3]
SourceKind = Literal["archive", "directory", "store"]
#: ``progress(step, advance, total)``: ``step`` is ``"copy"`` (``total`` in bytes of an
#: archive source, in records of a zarr store) or ``"encode"`` (``total`` in nodes).
ProgressCallback = Callable[[str, int, int], None]
#: Every array keeps its codecs (records are copied as they are).
KEEP = "keep"
#: Bytes of source values and encoded chunks held at once when re-encoding (besides one
#: item larger than it).
_MAX_BYTES_IN_FLIGHT = 1 << 30


@dataclass(frozen=True)
class PackResult:
    """What :func:`pack` wrote."""

    destination: str
    """The archive written (its path or URL)."""
    records: int
    """Records in it."""
    size: int
    """Its size in bytes."""
    zarr_format: int | None
    """The zarr format of its hierarchy (None: records without a hierarchy)."""
    verbatim: bool
    """Every array's records were copied as they are (codecs and bytes kept)."""
    compression: str
    """The compression asked for (``keep``, ``none``, or Blosc ``CNAME[:LEVEL]``)."""
    changed: tuple[str, ...] = ()
    """Arrays whose codecs the typed API can't write: re-encoded with Blosc lz4."""
    split: tuple[str, ...] = ()
    """Variable-length bytes arrays stored as groups of blobs (``bytes_as_blobs``)."""


def parse_compression(text: str | BloscCompression | None) -> BloscCompression | str | None:
    """``keep`` (each array's own), ``none``/None, a :class:`BloscCompression`, or Blosc
    ``CNAME[:LEVEL]`` (e.g. ``zstd:3``).

    Raises:
        ValueError: For any other text.
    """
    if text is None or isinstance(text, BloscCompression):
        return text
    if text == KEEP:
        return KEEP
    if text == "none":
        return None
    cname, _, level = text.partition(":")
    try:
        return BloscCompression(cname, int(level) if level else BloscCompression().clevel)  # type: ignore[arg-type]
    except ValueError as error:
        raise ValueError(f"compression {text!r}: {error} (keep, none, or CNAME[:LEVEL] such as zstd:3)") from error


def _compression_text(compression: BloscCompression | str | None) -> str:
    if compression is None:
        return "none"
    if isinstance(compression, str):
        return compression
    return f"{compression.cname}:{compression.clevel}"


def pack(
    source: str | os.PathLike[str],
    destination: str | os.PathLike[str],
    *,
    zarr_format: ZarrFormat | None = None,
    compression: str | BloscCompression | None = KEEP,
    bytes_as_blobs: bool = False,
    consolidate: bool = True,
    overwrite: bool = False,
    storage_options: Mapping[str, Any] | Sequence[tuple[str, Any]] = (),
    workers: int | None = None,
    progress: ProgressCallback | None = None,
    durable: bool = True,
) -> PackResult:
    """Packs the zarr hierarchy at ``source`` into the new archive ``destination``.

    Records are copied as they are (every array keeps its codecs and bytes; consolidated
    metadata is regenerated) unless the zarr format or the compression changes: then the
    hierarchy is re-encoded on worker threads (groups and attributes recreated, blobs stored
    as blobs, arrays with their chunk shape; arrays whose codecs the typed API can't write
    get Blosc lz4, listed in :attr:`PackResult.changed`). The archive appears at
    ``destination`` only when it is complete; on any failure nothing is left there (a file
    that was there stays as it was).

    Args:
        source: A zarr directory, a zarr store URL (any fsspec filesystem) or an archive.
        destination: The archive to write (path or URL).
        zarr_format: The zarr format of the new archive (default: that of ``source``); a
            change re-encodes every array.
        compression: ``"keep"`` (default), ``None``/``"none"``, a :class:`BloscCompression`
            or Blosc ``"CNAME[:LEVEL]"`` (e.g. ``"zstd:3"``); anything but ``keep``
            re-encodes every array.
        bytes_as_blobs: Store each element of a 1-d variable-length bytes array as a blob
            (array ``cameras/front`` becomes group ``cameras/front`` with blobs ``00000``...).
        consolidate: Write the consolidated metadata record.
        overwrite: Replace an archive at ``destination`` (it stays as it was until the new
            one is complete); default: refuse to.
        storage_options: Options of the remote filesystems (for URLs).
        workers: Threads reading and encoding (default: one per CPU).
        progress: Told of the work done as ``progress(step, advance, total)`` (see
            :data:`ProgressCallback`).
        durable: Sync the new archive to disk before it appears (see
            :class:`~ncore_like.IndexedTarArchive`); ``False`` for scratch conversions.

    Raises:
        ArchiveExistsError: ``destination`` exists and ``overwrite`` is False (also when
            it was created by another writer while this one packed).
        ValueError: A source without a zarr hierarchy, options that can't apply to it, or
            ``destination`` is the source or a zarr folder.
        OSError: The source can't be read or the archive can't be written.
    """
    asked = parse_compression(compression)
    options = tuple(storage_options.items()) if isinstance(storage_options, Mapping) else tuple(storage_options)
    src = Location.parse(os.fspath(source), options)
    dest = Location.parse(os.fspath(destination), options)
    if src.same_as(dest):
        raise ValueError(f"{dest.name}: the archive to write is the source itself")
    if dest.name.rstrip("/").endswith(".zarr") or (dest.local is not None and os.path.isdir(dest.local)):
        raise ValueError(
            f"{dest.name}: pack writes .itar archives; to get a zarr folder, extract the source "
            f"('ncore-like extract {os.fspath(source)} -C {os.fspath(destination)}')"
        )
    if not overwrite and _exists(dest):  # before reading the source
        raise _existing(dest)
    report = progress or _no_progress
    threads = workers or default_workers()
    kind = _source_kind(src)
    src_store = _source_store(src, kind)
    with src_store:
        if isinstance(src_store, IndexedTarZarrStore):
            src_format = root_zarr_format(src_store.archive)
            if src_format is None and (zarr_format is not None or asked != KEEP):
                raise ValueError(f"{src.name}: no zarr hierarchy to re-encode")
            root = open_root(src_store, src_store.archive) if src_format is not None else None
        else:
            root = _open_store_root(src, src_store)
            src_format = root.zarr_format
        new_format: ZarrFormat = zarr_format or src_format or 2
        verbatim = new_format == src_format and asked == KEEP
        split = (
            bytes_as_blobs
            and root is not None
            and any(isinstance(node, Array) and is_bytes_array(node) for node in walk(root))
        )
        if root is None or (verbatim and not split):
            # Records copied verbatim: every array keeps its codecs and bytes.
            folder = Path(src.local) if kind == "directory" and src.local is not None else None
            with _writing(dest, overwrite=overwrite, durable=durable) as new:
                _copy_records(src_store, new, consolidate=consolidate, workers=threads, progress=report, folder=folder)
            outcome = _Outcome([], [])
        else:
            plan = _Plan(verbatim, bytes_as_blobs, src_store)
            with _writing(dest, overwrite=overwrite, durable=durable) as new:
                outcome = _reencode(
                    root, new, plan, zarr_format=new_format, consolidate=consolidate, workers=threads,
                    progress=report, compression=asked,
                )  # fmt: skip
    archive = new.archive
    return PackResult(
        dest.name, len(archive.keys()), archive.file_size, src_format if root is None else new_format, verbatim,
        _compression_text(asked), tuple(outcome.changed), tuple(outcome.split),
    )  # fmt: skip


def _no_progress(step: str, advance: int, total: int) -> None:
    pass


def _source_kind(source: Location) -> SourceKind:
    if source.local is not None:
        path = Path(source.local)
        if path.is_dir():
            if not any(path.iterdir()):
                raise ValueError(f"{source.name}: an empty folder, no zarr hierarchy to pack")
            if not any((path / name).is_file() for name in ROOT_METADATA_KEYS.values()):
                raise ValueError(
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
    except (OSError, ValueError, KeyError):
        raise
    except Exception as error:  # the filesystem of a chained URL (zip::, tar::...) failed to open its file
        raise ValueError(f"{source.name}: can't be opened ({type(error).__name__}: {error})") from error


def _open_store_root(source: Location, store: Store) -> Group:
    """The root group of a zarr store source; a ValueError saying what is there instead
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
        raise ValueError(
            f"{source.name}: no zarr hierarchy at its top (no .zgroup or zarr.json); it holds {shown} "
            "(name the folder of the hierarchy)"
        ) from error


def _source_store(source: Location, kind: SourceKind) -> Store:
    if kind == "archive":
        # Exact range requests: several threads fetch remote records concurrently.
        return IndexedTarZarrStore(source.target, "r", remote_range_reads=source.is_remote)
    if kind == "directory":
        assert source.local is not None
        return ZarrStoreAdapter(_compat.local_store(source.local, read_only=True))
    return ZarrStoreAdapter(_compat.fsspec_store(source.upath.fs, source.upath.path, read_only=True))


def _exists(location: Location) -> bool:
    if location.local is not None:
        return os.path.lexists(location.local)
    return bool(location.upath.exists())


def _existing(dest: Location) -> ArchiveExistsError:
    return ArchiveExistsError(
        "exists; pass overwrite=True to replace it (it stays as it is until the new archive is complete)",
        archive=dest.name,
    )


@contextlib.contextmanager
def _writing(dest: Location, *, overwrite: bool, durable: bool = True) -> Iterator[IndexedTarZarrStore]:
    """A new archive that appears at ``dest`` only when it is complete. Without
    ``overwrite`` it never replaces a file there, even one created meanwhile. On any
    failure (a bad source, Ctrl-C, SIGTERM) it is discarded: a file at ``dest`` stays as it
    was, and no partial file is left to block the next run."""
    store = None
    try:
        with deferred_signals():  # a partial file created is a partial file cleaned up
            store = IndexedTarZarrStore(dest.target, "w" if overwrite else "x", durable=durable)
        yield store
        store.close()
    except BaseException as error:
        if store is None:
            if isinstance(error, ArchiveExistsError):  # created since pack looked
                raise _existing(dest) from error
            raise
        store.abort()  # also after a failed close, which keeps the partial file
        if isinstance(error, ArchiveExistsError):
            raise ArchiveExistsError(
                "was created by another writer while this one packed; it was left as it is (pass overwrite=True "
                "to replace it)",
                archive=dest.name,
            ) from error
        if isinstance(error, OSError) and error.strerror and KEPT_FOR_RECOVERY in error.strerror:
            # The writer's words; pack discarded its partial file (the source is still there).
            detail = error.strerror.replace(KEPT_FOR_RECOVERY, "writing the archive; its partial file was discarded")
            raise type(error)(error.errno, detail, error.filename) from error
        raise


# -- copying records -----------------------------------------------------------------------


def _copy_records(
    source: Store, dest: IndexedTarZarrStore, *, consolidate: bool, workers: int, progress: ProgressCallback,
    folder: Path | None = None,
) -> None:  # fmt: skip
    """Copies every record verbatim (each array keeps its codecs, chunks and bytes); the
    consolidated metadata is regenerated from the node metadata records, never copied.
    ``folder``: the source is this zarr directory, whose files are read directly. Records
    are written in batches (one :meth:`~ncore_like.IndexedTarArchive.write_many` each: a
    lock and a pass per batch, not per record)."""
    batches: Generator[list[tuple[str, bytes]], None, None]
    if isinstance(source, IndexedTarZarrStore):
        archive = source.archive
        keys = [key for key in archive.keys() if not Store.is_consolidated_metadata_key(key)]
        total = sum(archive.records[key].size for key in keys)
        # Adjacent records read together.
        batches = _grouped(scan_records(archive, keys))
    elif folder is not None:
        # Consolidated metadata keys name files at the top: the chunks below need no test.
        keys = sorted(key for key in _files(folder) if "/" in key or not Store.is_consolidated_metadata_key(key))
        total = len(keys)
        batches = _folder_batches(folder, keys, workers)
    else:
        keys = sorted(key for key in source.record_keys() if not Store.is_consolidated_metadata_key(key))
        total = len(keys)
        batches = _grouped(_store_records(source, keys, workers))
    for key in keys:  # a crafted source's ("../x"): refused naming the source, before any is written
        validate_key(key, source.name)
    in_bytes = isinstance(source, IndexedTarZarrStore)
    write_many = dest.archive.write_many
    with closing(batches):
        for batch in batches:
            write_many(batch)
            progress("copy", sum(len(data) for _, data in batch) if in_bytes else len(batch), total)
    if consolidate and has_hierarchy(dest.archive):
        dest.consolidate()


#: Files read by one worker task, at most (small chunks: a task per file costs more than
#: reading one), and their bytes; a larger file is a task of its own.
_BATCH_FILES = 128
_BATCH_BYTES = 1 << 20


def _grouped(
    records: Generator[tuple[str, bytes], None, None], max_items: int = _BATCH_FILES, max_bytes: int = _BATCH_BYTES
) -> Generator[list[tuple[str, bytes]], None, None]:
    """``records`` in consecutive lists of up to ``max_items`` records and about
    ``max_bytes`` (a record is never held back past a larger one: memory stays bounded)."""
    with closing(records):
        batch: list[tuple[str, bytes]] = []
        nbytes = 0
        for record in records:
            batch.append(record)
            nbytes += len(record[1])
            if len(batch) >= max_items or nbytes >= max_bytes:
                yield batch
                batch, nbytes = [], 0
        if batch:
            yield batch


def _files(folder: Path) -> Iterator[str]:
    """The files below ``folder``, as ``/``-separated keys (what zarr-python lists there).
    Links to folders are not followed (as :func:`os.walk`); no file is stat'ed (a system
    call costs microseconds: the sizes are taken on worker threads, see :func:`_sized`)."""
    pending = [("", os.fspath(folder))]
    while pending:
        prefix, directory = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_dir():
                    if not entry.is_symlink():
                        pending.append((f"{prefix}{entry.name}/", entry.path))
                else:
                    yield prefix + entry.name


#: Files stat'ed by one worker task while listing sizes.
_STAT_CHUNK = 1024


def _sized(root: str, keys: Sequence[str], pool: ThreadPoolExecutor) -> Generator[tuple[str, int], None, None]:
    """``(key, size)`` of the files ``root + key``, in order, stat'ed ahead on ``pool``."""

    def sizes(start: int) -> list[int]:
        return [os.stat(root + key).st_size for key in keys[start : start + _STAT_CHUNK]]

    starts = range(0, len(keys), _STAT_CHUNK)
    with closing(ordered_map(pool, sizes, starts, max_items=4, max_bytes=1, size=lambda _: 0)) as chunks:
        for start, chunk in chunks:
            yield from zip(keys[start : start + _STAT_CHUNK], chunk, strict=True)


def _batches(files: Iterator[tuple[str, int]]) -> Iterator[tuple[list[tuple[str, int]], int]]:
    """``files`` in order, in consecutive batches of up to :data:`_BATCH_FILES` files and
    :data:`_BATCH_BYTES` bytes (a larger file alone), with their bytes."""
    batch: list[tuple[str, int]] = []
    nbytes = 0
    for key, size in files:
        if batch and (len(batch) >= _BATCH_FILES or nbytes + size > _BATCH_BYTES):
            yield batch, nbytes
            batch, nbytes = [], 0
        batch.append((key, size))
        nbytes += size
    if batch:
        yield batch, nbytes


def _read_file(path: str, size: int) -> bytes:
    """The bytes of the file ``path``, listed with ``size`` bytes (read to its end all the
    same). A plain ``os.read``: through zarr-python's store, a file costs several times its
    read, and ``open()`` adds a file object and system calls. Errors name ``path``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            # A byte more than listed: the usual answer, exactly the size listed, is the whole
            # file. Otherwise (it changed since, or a short read) read on to its end.
            parts = [os.read(fd, size + 1)]
            if len(parts[0]) != size:
                while parts[-1]:
                    parts.append(os.read(fd, max(size, 1 << 20)))
        finally:
            os.close(fd)
    except OSError as error:
        if error.filename is not None:
            raise
        # e.g. a folder where the listing saw a file: the read's error has no name.
        raise OSError(error.errno, error.strerror, path) from error
    return parts[0] if len(parts) <= 2 else b"".join(parts)


def _folder_batches(folder: Path, keys: Sequence[str], workers: int) -> Generator[list[tuple[str, bytes]], None, None]:
    """The files of a zarr directory, in order, in batches read ahead on threads (a task per
    batch; read-ahead bounded in bytes by the sizes stat'ed, also on the threads)."""
    root = os.path.join(folder, "")

    def read(batch: tuple[list[tuple[str, int]], int]) -> list[tuple[str, bytes]]:
        return [(key, _read_file(root + key, size)) for key, size in batch[0]]

    # Tasks never wait for each other: stat'ing and reading share the threads.
    with (
        ThreadPoolExecutor(workers) as pool,
        closing(_sized(root, keys, pool)) as sized,
        closing(
            ordered_map(
                pool, read, _batches(sized), max_items=4 * workers, max_bytes=_MAX_BYTES_IN_FLIGHT,
                size=lambda batch: batch[1],
            )
        ) as batches,
    ):  # fmt: skip
        for _, records in batches:
            yield records


def _store_records(source: Store, keys: list[str], workers: int) -> Generator[tuple[str, bytes], None, None]:
    """The records of a zarr-python store, read ahead on threads, in order."""
    with ThreadPoolExecutor(workers) as pool:
        yield from ordered_map(
            pool,
            lambda key: _read_record(source, key),
            keys,
            max_items=4 * workers,
            max_bytes=_MAX_BYTES_IN_FLIGHT,
            size=lambda _: 0,
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
    codec or filter: e.g. one chunk of many encoded frames), which ``bytes_as_blobs``
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
    """Variable-length bytes arrays become groups of blobs (``bytes_as_blobs``)."""
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
                "be re-encoded; keep its zarr format and codecs (no change of zarr format or compression: records "
                "are copied)"
                + (", or split bytes into blobs (bytes_as_blobs=True, --bytes-as-blobs)" if node.ndim == 1 else "")
            )
        else:
            # The values read and their encoded chunks (at most about as large) coexist.
            steps.append(_Step(node, "array", 2 * node.dtype.itemsize * math.prod(node.shape)))
    return steps


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
    progress: ProgressCallback, compression: BloscCompression | str | None,
) -> _Outcome:  # fmt: skip
    """Recreates the hierarchy in ``dest``."""
    outcome = _Outcome([], [])
    groups = {"": dest.create_root_group(dict(root.attributes), zarr_format=zarr_format)}
    steps = _steps(root, plan)
    with (
        ThreadPoolExecutor(workers) as pool,
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
                dest.archive.write_many(payload.records)
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
            progress("encode", 1, len(steps))
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
                "pack with zarr_format=3 (--zarr-format 3)"
            )
        group.create_bytes_array(_element_name(index, len(elements)), element)


# -- many sources, on a cluster ----------------------------------------------------------------


def destination_in(folder: str, source: str) -> str:
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


def _pack_task(source: str, destination: str, options: dict[str, Any]) -> PackResult | None:
    """One source of a cluster run (in a worker process): None when skipped.

    Without ``overwrite`` an archive already at ``destination`` that verifies was packed by
    an earlier run, and is skipped (a run that failed halfway resumes); any other file there
    is refused, never replaced. With ``overwrite`` every source is packed again."""
    location = Location.parse(destination, options["storage_options"])
    if not options["overwrite"] and _exists(location):
        problem = _problem(location)
        if problem is None:
            return None
        raise ArchiveExistsError(
            f"exists and is not an archive that verifies ({problem}); pass overwrite=True to replace it",
            archive=location.name,
        )
    return pack(source, destination, **options)


def pack_many(
    sources: Sequence[str],
    folder: str,
    *,
    scheduler: str | None = None,
    cluster_workers: int | None = None,
    done: Callable[[int, PackResult | BaseException | None], None] | None = None,
    **options: Any,
) -> list[PackResult | BaseException | None]:
    """Packs each source into ``folder`` (``NAME.zarr`` -> ``NAME.itar``) on a dask cluster
    (see :func:`ncore_like.cluster.run_tasks`): per source, its :class:`PackResult`, None if
    skipped (without ``overwrite``, an archive there that verifies was packed before), or
    the exception that failed it. ``options`` are :func:`pack`'s (not ``progress``).

    Raises:
        ValueError: Sources with the same name (they would go to the same archive).
    """
    from ..cluster import run_tasks

    storage_options = options.get("storage_options", ())
    if isinstance(storage_options, Mapping):
        storage_options = tuple(storage_options.items())
    options = {**options, "storage_options": tuple(storage_options), "overwrite": options.get("overwrite", False)}
    place = Location.parse(folder, options["storage_options"])
    destinations = [destination_in(folder, source) for source in sources]
    if len(set(destinations)) != len(destinations):
        raise ValueError(f"{folder}: sources with the same name would go to the same archive")
    if place.local is not None:
        os.makedirs(place.local, exist_ok=True)
    calls = [(source, destination, options) for source, destination in zip(sources, destinations, strict=True)]
    return run_tasks(_pack_task, calls, scheduler=scheduler, workers=cluster_workers, done=done)
