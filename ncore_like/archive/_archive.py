"""``IndexedTarArchive``: the records of an indexed tar archive, for reading or writing."""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, get_args

from .._concurrency import io_loop, run_in_worker, sync
from .._defaults import DECODED_INDEX_RECORDS, TAIL_READ_SIZE
from .._lru import LRUCache, process_cache
from ..errors import (
    ArchiveClosedError,
    ArchiveFormatError,
    ChecksumError,
    ReadOnlyError,
    RecordExistsError,
    RemoteStorageError,
)
from ._cache import CachedSource, CacheOption, RecordCache, as_cache, cached_source
from ._checksum import checksum
from ._format import (
    BLOCK_SIZE,
    Index,
    IndexHeader,
    decode_index,
    foreign_file,
    has_index_magic,
    is_node_metadata_key,
    unpack_index_header,
    validate_key,
)
from ._location import Location
from ._sources import FsspecSource, LocalSource, RecordSource
from ._writer import ArchiveWriter

if TYPE_CHECKING:
    from upath import UPath

__all__ = ["IndexTailRetention", "IndexedTarArchive", "Record"]

IndexTailRetention = Literal["release_if_consolidated", "release_after_opening", "keep_complete_archives", "keep"]
#: ``"r"`` reads; ``"w"`` creates or replaces; ``"w-"`` and ``"x"`` create, never replacing.
OpenMode = Literal["r", "w", "w-", "x"]
_MODES = frozenset(get_args(OpenMode))
_RETENTIONS = frozenset(get_args(IndexTailRetention))
DecodedIndex = tuple[Index, dict[str, int]]
# Decoding the index of a 20,000-record archive (xz, then CBOR, then the key lookup table)
# takes ~7 ms, most of an archive's opening, and jobs often open the same archive again and
# again (a dataset that opens its store per sample...). The key is the compressed index and
# the offset it was found at, so a changed archive never finds a stale entry, and there is
# no file identity to get wrong (paths, remote objects, renames). Entries are read-only and
# shared; the bound counts records.
_decoded_indices: LRUCache[tuple[int, bytes], DecodedIndex] = process_cache(
    DECODED_INDEX_RECORDS, weight=lambda entry: len(entry[0].keys)
)


class Record(NamedTuple):
    """Where the payload of a record lies in the archive file."""

    offset: int
    """File offset of the first payload byte."""
    size: int
    """Payload size in bytes."""


class _RecordsView(Mapping[str, Record]):
    """A read-only, live view of the index (no object per record until one is asked for)."""

    def __init__(self, archive: IndexedTarArchive) -> None:
        self._archive = archive

    def __getitem__(self, key: str) -> Record:
        archive = self._archive
        position = archive._positions[key]
        return Record(archive._offsets[position], archive._sizes[position])

    def get(self, key: str, default: Any = None) -> Any:
        # Without Mapping.get's exception for missing keys: planning reads looks records up.
        archive = self._archive
        position = archive._positions.get(key)
        if position is None:
            return default
        return Record(archive._offsets[position], archive._sizes[position])

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._archive._positions))

    def __len__(self) -> int:
        return len(self._archive._positions)

    def __contains__(self, key: object) -> bool:
        return key in self._archive._positions


def _clipped(start: int, stop: int, size: int) -> tuple[int, int]:
    """``[start, stop)`` clipped to a payload of ``size`` bytes (negative bounds count as 0,
    not from the end: byte ranges, not Python slices)."""
    return max(0, min(start, size)), max(0, min(stop, size))


def _naming(error: RemoteStorageError, key: str) -> RemoteStorageError:
    """``error`` of a remote read, naming the record read."""
    return RemoteStorageError(f"record {key!r}: {error.detail}", archive=error.archive, key=key)


def _open_source(
    location: Location, range_reads: bool, cache: RecordCache | None = None, version: str | None = None
) -> RecordSource:
    if location.local is not None:
        return LocalSource(location.local)  # a local read is one pread already: no cache
    source = FsspecSource(location, range_reads=range_reads)
    return source if cache is None else cached_source(source, cache, version)


class IndexedTarArchive:
    """The records of an indexed tar archive, opened for reading or (truncating) writing.

    Records are bytes stored under ``/``-separated keys, accessed like a mapping:
    ``archive[key]``, ``archive[key] = payload``, ``key in archive``, ``keys()``,
    ``len(archive)``. Each record is one tar member, so any record is one positional
    read of a local file (``os.pread``, no lock) or one exact byte-range request of a
    remote one.

    Args:
        itar_path: Location of the archive: a local path, or a URL / ``UPath`` of any
            fsspec filesystem (storage options of a ``UPath`` are used).
        storage_options: Options of the URL's filesystem (as fsspec takes them, e.g.
            ``{"endpoint_url": ..., "anon": True}``); a ValueError for local paths.
        mode: ``"r"`` reads an existing archive, ``"w"`` creates (truncates) and writes one;
            ``"w-"`` (zarr-python's spelling) or ``"x"`` creates one and refuses to replace
            an existing file (:class:`~ncore_like.ArchiveExistsError`, a
            ``FileExistsError``), when opening and again, race-free for local files, when
            publishing it at close. Whatever the mode, an archive at the name is replaced
            only by a successful close.
        index_tail_read_size: Bytes read from the end of the file in one I/O call when
            opening: the index header and, usually, the compressed index and the node
            metadata records. ``None`` or values below 512 read the header block and the
            index separately (two calls, robust for very large indices).
        remote_range_reads: Read records of remote archives synchronously with exact
            byte-range requests (as :meth:`read_async` does) instead of the buffered file
            object; then many threads fetch records concurrently, which suits random access
            to high-latency storage. The buffered file object suits sequential reads of
            nearby records.
        verify_checksums: Check every record read, local or remote, against the CRC32C
            stored for it (archives written without checksums, e.g. by nvidia-ncore, have
            none to check) and raise :class:`~ncore_like.ChecksumError`, naming the archive
            and the record, instead of handing out damaged bytes. On by default (``None``
            means the default too); ``False`` saves the checksum's share of a page-cache
            read (see the performance page).
        checksums: When writing, store the CRC32C of every record (in its tar header, which
            lets :func:`~ncore_like.recover` check records of an unfinished archive, and in
            the index). ``False`` writes archives byte-identical to nvidia-ncore's.
        cache: A :class:`~ncore_like.RecordCache` (or the path of its folder) keeping the
            tail and the records read from a remote archive on local disk, for reading them
            again without a request (see the remote page). Local archives, and archives
            opened for writing, don't use it.

    Writing: records are write-once (a second write of a key raises
    :class:`~ncore_like.RecordExistsError`), except *node metadata records* (``.zgroup``,
    ``.zarray``, ``.zattrs``, ``.zmetadata``, ``zarr.json`` and the compressed consolidated
    metadata records), which may be rewritten until the archive is closed: they are held in
    memory and appended at :meth:`close` (or :meth:`flush`), followed by the index. An
    archive opened for writing must be closed (or used as a context manager) to be
    readable. A local archive is written under a partial name (``<name>.partial``) and
    appears at its name only when :meth:`close` has put it on disk completely; a remote one
    when its upload completes. Until then an archive already at the name stays as it was,
    whatever happens to the writer. If the ``with`` block of a writer raises, nothing is
    published: the partial file of a local archive stays, with every record written so far
    on disk, for :func:`~ncore_like.recover` (:meth:`abort` discards it instead).

    Reading: records within the tail read of the opening are served from memory. A closed
    archive still serves records held in memory; others raise
    :class:`~ncore_like.ArchiveClosedError` (a ``ValueError``).

    All methods are thread-safe. Archives opened for reading pickle by location and
    options (and their index, so unpickling does no I/O); in a forked child they re-create
    remote filesystem objects before their first use (local file descriptors stay valid).
    """

    _source: RecordSource | None
    _writer: ArchiveWriter | None
    _crcs: list[int] | None
    _cache: RecordCache | None

    def __init__(
        self,
        itar_path: str | PurePath | UPath | Location,
        mode: OpenMode = "r",
        index_tail_read_size: int | None = TAIL_READ_SIZE,
        remote_range_reads: bool = False,
        *,
        verify_checksums: bool | None = True,
        checksums: bool = True,
        storage_options: Mapping[str, Any] | None = None,
        cache: CacheOption = None,
    ) -> None:
        location = Location(itar_path, storage_options)
        self._init_state(location, mode, index_tail_read_size, remote_range_reads, verify_checksums, as_cache(cache))
        if mode != "r":
            self._writer = ArchiveWriter(self._location, checksums=checksums, exclusive=mode in ("w-", "x"))
            self._crcs = self._writer.crcs
            return
        source = _open_source(self._location, self._remote_range_reads, self._cache)
        self._source = source
        self._is_remote = source.is_remote
        try:
            tail, file_size = source.read_tail(self._tail_request_size())
            try:
                header, index_data = self._accept_tail(tail, file_size)
            except ArchiveFormatError as error:
                head = tail if self._holds_head(tail, file_size) else self._head_or_none(source.read)
                raise self._foreign(head, tail, file_size) or error from None
            if index_data is None:
                index_data = source.read(header.offset, header.size)
            self._load_index(index_data, header)
        except BaseException:
            source.close()
            raise
        self._check_cached_records(source)

    def _init_state(
        self,
        location: Location,
        mode: str,
        index_tail_read_size: int | None,
        remote_range_reads: bool,
        verify_checksums: bool | None = True,
        cache: RecordCache | None = None,
    ) -> None:
        if mode not in _MODES:
            raise ValueError(f"{location.name}: invalid mode {mode!r} (expected 'r', 'w', 'w-' or 'x')")
        self._location = location
        self._name = location.name
        self._mode: Literal["r", "w"] = "r" if mode == "r" else "w"
        self._tail_read_size = index_tail_read_size
        self._remote_range_reads = bool(remote_range_reads)
        self._lock = threading.RLock()
        self._closed = False
        self._pid = os.getpid()
        # The index as parallel lists (cheap to build for many records) plus key -> position.
        self._keys: list[str] = []
        self._offsets: list[int] = []
        self._sizes: list[int] = []
        self._crcs = None  # None: the archive has no checksums
        self._positions: dict[str, int] = {}
        self._verify_checksums = verify_checksums
        self._verify = verify_checksums is None or bool(verify_checksums)
        self._cache = cache
        self._cache_version: str | None = None  # of an unpickled archive: the version its index is of
        # Reading: the bytes of the tail read, records prefetched by open_async.
        self._source = None
        self._is_remote = False
        self._tail: bytes | None = None
        self._tail_start = 0
        self._file_size = 0
        self._index_record: Record | None = None
        self._prefetched: dict[str, bytes] = {}
        self._checked_whole: set[int] = set()  # records read whole and checked, for range reads
        # Writing: node metadata records, held until close (or flush); what flush wrote of them.
        self._writer = None
        self._published = False
        self._metadata: dict[str, bytes] = {}
        self._metadata_written: dict[str, bytes] = {}

    # -- opening -------------------------------------------------------------------------

    def _tail_request_size(self) -> int:
        size = self._tail_read_size
        return BLOCK_SIZE if size is None or size < BLOCK_SIZE else size

    def _accept_tail(self, tail: bytes, file_size: int | None) -> tuple[IndexHeader, bytes | None]:
        """Decodes the header from the tail read and keeps the tail; returns the index
        bytes if the tail holds them."""
        if file_size == 0 or not tail:
            raise ArchiveFormatError("empty file, not an indexed tar archive", archive=self._name)
        header = unpack_index_header(tail, self._name)
        if file_size is None:  # remote suffix read: the header tells the size
            file_size = header.file_size
            if file_size < len(tail):
                raise ArchiveFormatError("index header inconsistent with the file size", archive=self._name)
        if header.offset + header.size > file_size - BLOCK_SIZE:
            raise ArchiveFormatError(
                f"index of {header.size} bytes at offset {header.offset} extends past the "
                f"end of the {file_size}-byte file (truncated?)",
                archive=self._name,
            )
        self._file_size = file_size
        self._index_record = Record(header.offset, header.size)
        self._tail = tail
        self._tail_start = file_size - len(tail)
        assert self._source is not None
        self._source.set_file_size(file_size)
        if header.offset >= self._tail_start:
            start = header.offset - self._tail_start
            return header, tail[start : start + header.size]
        return header, None

    @staticmethod
    def _holds_head(tail: bytes, file_size: int | None) -> bool:
        """True if the tail read holds the whole file (its first block too)."""
        return file_size is not None and len(tail) >= file_size

    @staticmethod
    def _head_or_none(read: Callable[[int, int], bytes]) -> bytes:
        try:
            return read(0, BLOCK_SIZE)
        except Exception:  # the error about the tail says enough
            return b""

    def _foreign(self, head: bytes, tail: bytes, file_size: int | None) -> ArchiveFormatError | None:
        """For a file without an index header: the error saying what the file is instead (a
        plain tar, a zip...) and what to do, None if it is none of those."""
        if has_index_magic(tail):
            return None  # an archive, damaged in another way
        description = foreign_file(head, tail, file_size, self._name)
        return None if description is None else ArchiveFormatError(description, archive=self._name)

    def _set_index(self, index: Index, positions: dict[str, int] | None = None) -> None:
        self._keys, self._offsets, self._sizes = index.keys, index.offsets, index.sizes
        self._crcs = index.checksums
        if positions is None:
            positions = dict(zip(index.keys, range(len(index.keys)), strict=True))
        self._positions = positions

    def _load_index(self, data: bytes, header: IndexHeader) -> None:
        """Decodes the index, or takes it from the process-wide cache (read-only, shared)."""
        data = bytes(data)
        cached = _decoded_indices.get((header.offset, data))
        if cached is None:
            index = decode_index(data, header, self._name)
            self._set_index(index)
            if len(self._positions) != len(index.keys):
                # Two entries of one key: reads would return one of two payloads.
                duplicate = next(key for key, count in Counter(index.keys).items() if count > 1)
                raise ArchiveFormatError(
                    f"corrupt record index: key {duplicate!r} has two entries", archive=self._name, key=duplicate
                )
            _decoded_indices.put((header.offset, data), (index, self._positions))
        else:
            self._set_index(*cached)

    def _check_cached_records(self, source: RecordSource) -> None:
        # Records read from a cache are checked as reads check records, once: against the
        # archive's checksums where it has them (a mismatch drops the cached copy and reads
        # the record again), else against the cache's own CRC32C; not at all when
        # verify_checksums=False chose speed.
        if isinstance(source, CachedSource):
            source.verify_hits = self._verify and not self.verify_checksums

    def _read_again(self, key: str, offset: int, size: int, error: ChecksumError) -> bytes:
        """After ``error`` (a record that failed its checksum): drops a cached copy of the
        record and reads it from storage once more; raises ``error`` if there was none."""
        source = self._source
        if not isinstance(source, CachedSource) or not source.discard(offset, size):
            raise error
        data = source.read(offset, size)
        self.check_payload(key, data)
        return data

    async def _read_again_async(self, key: str, offset: int, size: int, error: ChecksumError) -> bytes:
        """:meth:`_read_again` without blocking the running loop."""
        source = self._source
        if not isinstance(source, CachedSource) or not source.discard(offset, size):
            raise error
        data = await source.read_async(offset, size)
        self.check_payload(key, data)
        return data

    @classmethod
    async def open_async(
        cls,
        itar_path: str | PurePath | UPath | Location,
        index_tail_read_size: int | None = TAIL_READ_SIZE,
        remote_range_reads: bool = False,
        prefetch_keys: Iterable[str] = (),
        *,
        verify_checksums: bool | None = True,
        storage_options: Mapping[str, Any] | None = None,
        cache: CacheOption = None,
    ) -> IndexedTarArchive:
        """Opens an archive for reading without blocking the running event loop.

        Remote archives load their index with async range requests (one when the index
        lies within the tail read), so many archives opened with ``asyncio.gather``
        overlap their requests; local ones are opened on a worker thread. The records of
        ``prefetch_keys`` that exist (e.g. the consolidated metadata record) are fetched
        while opening and held in memory until they are read once.
        """
        location = Location(itar_path, storage_options)
        record_cache = as_cache(cache)
        source = _open_source(location, remote_range_reads, record_cache)
        if not source.is_remote:
            source.close()
            archive = await run_in_worker(
                functools.partial(
                    cls,
                    location,
                    "r",
                    index_tail_read_size,
                    remote_range_reads,
                    verify_checksums=verify_checksums,
                    cache=record_cache,
                )
            )
            await run_in_worker(archive._prefetch, tuple(prefetch_keys))
            return archive
        archive = cls.__new__(cls)
        archive._init_state(location, "r", index_tail_read_size, remote_range_reads, verify_checksums, record_cache)
        archive._source, archive._is_remote = source, True
        try:
            tail, file_size = await source.read_tail_async(archive._tail_request_size())
            try:
                header, index_data = archive._accept_tail(tail, file_size)
            except ArchiveFormatError as error:
                head = tail
                if not archive._holds_head(tail, file_size):
                    try:
                        head = await source.read_async(0, BLOCK_SIZE)
                    except Exception:  # the error about the tail says enough
                        head = b""
                raise archive._foreign(head, tail, file_size) or error from None
            if index_data is None:
                index_data = await source.read_async(header.offset, header.size)
            archive._load_index(index_data, header)
            archive._check_cached_records(source)
            await archive._prefetch_async(tuple(prefetch_keys))
        except BaseException:
            source.close()
            raise
        return archive

    def _prefetch(self, keys: tuple[str, ...]) -> None:
        for key in keys:
            if self._needs_io(key):
                self._prefetched[key] = self.read(key)

    def _needs_io(self, key: str) -> bool:
        """True for records that exist and are not held in memory."""
        position = self._positions.get(key)
        if position is None or key in self._prefetched:
            return False
        offset, size = self._offsets[position], self._sizes[position]
        return size > 0 and not (self._tail is not None and offset >= self._tail_start)

    async def _prefetch_async(self, keys: tuple[str, ...]) -> None:
        import asyncio

        # Records of the tail read are in memory already: fetching them again would keep a
        # second copy that nothing ever reads.
        wanted = [key for key in dict.fromkeys(keys) if self._needs_io(key)]
        for key, data in zip(wanted, await asyncio.gather(*(self.read_async(key) for key in wanted)), strict=True):
            self._prefetched[key] = data

    # -- properties ----------------------------------------------------------------------

    @property
    def itar_upath(self) -> UPath:
        """Absolute location of the archive."""
        return self._location.upath

    @property
    def location(self) -> Location:
        """Absolute location of the archive (a local path without fsspec, or a URL)."""
        return self._location

    @property
    def mode(self) -> Literal["r", "w"]:
        """``"r"`` if opened for reading, ``"w"`` if opened for writing (in any writing mode)."""
        return self._mode

    @property
    def is_remote(self) -> bool:
        """True for archives opened for reading on async fsspec filesystems (S3, HTTP, GCS...),
        whose :meth:`read_async` issues async range requests."""
        return self._is_remote

    @property
    def remote_range_reads(self) -> bool:
        """True if synchronous reads of remote archives use exact range requests."""
        return self._remote_range_reads

    @property
    def cache(self) -> RecordCache | None:
        """The local cache of the records of this remote archive (None for none)."""
        return self._cache if self._location.local is None and self._mode == "r" else None

    @property
    def file_size(self) -> int:
        """Size of the archive file in bytes (archives opened for reading; while writing, the
        bytes written so far)."""
        return self._writer.position if self._writer is not None else self._file_size

    @property
    def index_record(self) -> Record | None:
        """Offset and size of the compressed index in the file (None while writing)."""
        return self._index_record

    @property
    def tail_size(self) -> int:
        """Bytes of the tail read held in memory (0 once released)."""
        return len(self._tail) if self._tail is not None else 0

    @property
    def has_checksums(self) -> bool:
        """True if the archive stores a CRC32C of every record (written by ncore_like with
        checksums; archives of nvidia-ncore have none)."""
        return self._crcs is not None

    @property
    def verify_checksums(self) -> bool:
        """True if records read are checked against their CRC32C (see the constructor)."""
        return self._verify and self._crcs is not None

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    @property
    def records(self) -> Mapping[str, Record]:
        """Offset and size of every record by key (a read-only live view; while writing, of
        the records appended so far, without the node metadata records appended at close)."""
        return _RecordsView(self)

    # -- mapping interface ---------------------------------------------------------------

    def keys(self) -> list[str]:
        """Keys of all records: in archive order, then node metadata records not yet written."""
        with self._lock:
            keys = self._live_index()[0]
            return keys + [key for key in self._metadata if key not in self._positions]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        with self._lock:
            return len(self._positions) + sum(1 for key in self._metadata if key not in self._positions)

    def __contains__(self, key: object) -> bool:
        return key in self._positions or key in self._metadata

    def __getitem__(self, key: str) -> bytes:
        return self.read(key)

    def __setitem__(self, key: str, value: bytes | bytearray | memoryview) -> None:
        self.write(key, value)

    # -- reading -------------------------------------------------------------------------

    def _locate(self, key: str) -> tuple[int, int]:
        position = self._positions.get(key)
        if position is None:
            raise KeyError(f"no record {key!r} in {self._name}")
        return self._offsets[position], self._sizes[position]

    def check_payload(self, key: str, data: bytes | memoryview) -> None:
        """Raises :class:`~ncore_like.ChecksumError` unless ``data`` is the payload of the
        record ``key`` as written (no-op for archives without checksums); what reads do when
        :attr:`verify_checksums` is on."""
        crcs = self._crcs
        position = self._positions[key]
        if crcs is not None and checksum(data) != crcs[position]:
            raise self._mismatch(key, position, data)

    def _mismatch(self, key: str, position: int, data: bytes | memoryview) -> ChecksumError:
        """The error for ``data``, read as record ``key``, that doesn't match its checksum."""
        assert self._crcs is not None
        stored, actual, offset = self._crcs[position], checksum(data), self._offsets[position]
        return ChecksumError(
            f"record {key!r} at offset {offset} doesn't match its CRC32C "
            f"(stored {stored:08x}, read {actual:08x}): the archive is damaged there",
            archive=self._name,
            key=key,
            offset=offset,
        )

    def _from_memory(self, key: str, offset: int, start: int, stop: int) -> bytes | None:
        """Bytes ``[start, stop)`` of a record if it is held in memory (a full read of a
        prefetched record releases it)."""
        if stop <= start:
            return b""
        tail = self._tail
        if tail is not None and offset >= self._tail_start:
            base = offset - self._tail_start
            return tail[base + start : base + stop]
        if self._prefetched:
            data = self._prefetched.get(key)
            if data is not None:
                if start == 0 and stop == len(data):
                    self._prefetched.pop(key, None)
                    return data
                return data[start:stop]
        return None

    def _live_source(self) -> RecordSource:
        source = self._source
        if self._closed:
            raise ArchiveClosedError("archive is closed", archive=self._name)
        if source is None:  # unpickled: opened on first use
            with self._lock:
                if self._source is None:
                    opened = _open_source(self._location, self._remote_range_reads, self._cache, self._cache_version)
                    opened.set_file_size(self._file_size)
                    self._check_cached_records(opened)
                    self._source = opened
                source = self._source
        return source

    def read(self, key: str) -> bytes:
        """The payload of a record (``KeyError`` if there is none).

        Records held in memory (tail read, prefetched, node metadata records while writing,
        empty records) need no I/O; local archives are read with ``os.pread``; remote ones
        through the buffered file object or exact range requests (see
        ``remote_range_reads``). Raises :class:`~ncore_like.ArchiveClosedError` for other
        records of a closed archive.
        """
        if self._writer is not None:
            return self._read_while_writing(key)
        # The hot path of random access: written out rather than through the helpers, since
        # each call saved is a noticeable share of a small record's read.
        position = self._positions.get(key)
        if position is None:
            raise KeyError(f"no record {key!r} in {self._name}")
        offset = self._offsets[position]
        size = self._sizes[position]
        tail = self._tail
        data: bytes | None
        if tail is not None and offset >= self._tail_start:
            start = offset - self._tail_start
            data = tail[start : start + size]
        else:
            data = self._from_memory(key, offset, 0, size) if self._prefetched or size == 0 else None
            if data:
                return data  # prefetched: checked when it was fetched
            if data is None:
                source = self._source
                if source is None or self._closed:
                    source = self._live_source()
                try:
                    data = source.read(offset, size)
                except RemoteStorageError as error:
                    raise _naming(error, key) from error
        # Checked at once, on the thread that read it, while the bytes are in the CPU's cache.
        if self._verify:
            crcs = self._crcs
            if crcs is not None and checksum(data) != crcs[position]:
                data = self._read_again(key, offset, size, self._mismatch(key, position, data))
        return data

    def read_into(self, key: str, buffer: memoryview) -> None:
        """Reads the payload of a record into ``buffer`` (writable bytes of the record's size),
        e.g. a region of an output array: local archives read straight into it."""
        if self._writer is not None:
            buffer[:] = self._read_while_writing(key)
            return
        offset, size = self._locate(key)
        if len(buffer) != size:
            raise ValueError(f"{self._name}: record {key!r} has {size} bytes, buffer {len(buffer)}")
        prefetched = key in self._prefetched  # checked when it was fetched
        data = self._from_memory(key, offset, 0, size)
        if data is not None:
            if self._verify and not prefetched:
                self.check_payload(key, data)
            buffer[:] = data
            return
        self._live_source().read_into(offset, buffer)
        if self._verify:
            try:
                self.check_payload(key, buffer)
            except ChecksumError as error:
                buffer[:] = bytes(len(buffer))  # the damaged bytes never reach the caller
                buffer[:] = self._read_again(key, offset, size, error)

    def read_span(self, offset: int, size: int) -> bytes:
        """Bytes ``[offset, offset + size)`` of the archive file: several adjacent records at
        once, with the tar headers between them (see :func:`~ncore_like.archive.scan_records`),
        in one ``pread`` locally or one exact range request remotely. Checksums are the
        caller's to check (:meth:`check_payload`)."""
        if self._writer is not None:
            raise ValueError(f"{self._name}: spans are read from archives opened for reading")
        if offset < 0 or size < 0 or offset + size > self._file_size:
            raise ValueError(
                f"{self._name}: span [{offset}, {offset + size}) lies outside the file of {self._file_size} bytes"
            )
        source = self._live_source()
        if isinstance(source, CachedSource):
            # Scans stream past the cache: a pass over whole sequences would evict what random
            # access reads again.
            source = source.inner
        if self._is_remote:  # an exact range request, also where records use the buffered file
            return sync(source.read_async(offset, size), io_loop())
        return source.read(offset, size)

    def in_memory(self, key: str) -> bool:
        """True for records read without I/O (the tail read, prefetched or empty records)."""
        return not self._needs_io(key)

    def read_range(self, key: str, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of a record's payload, clipped to the payload (for byte-range
        requests of zarr stores, e.g. sharded arrays): one read of just those bytes. When
        checksums are verified, the first range read of a record reads and checks it whole,
        later ones read just their bytes (a shard read chunk by chunk is checked once, not
        once per chunk)."""
        if self._writer is not None:
            whole = self._read_while_writing(key)
            return whole[slice(*_clipped(start, stop, len(whole)))]
        offset, size = self._locate(key)
        start, stop = _clipped(start, stop, size)
        if self.verify_checksums and self._positions[key] not in self._checked_whole:
            whole = self.read(key)
            self._checked_whole.add(self._positions[key])
            return whole[start:stop]
        data = self._from_memory(key, offset, start, stop)
        if data is not None:
            return data
        return self._live_source().read(offset + start, stop - start)

    async def read_async(self, key: str) -> bytes:
        """:meth:`read` without blocking the running event loop: remote archives issue an
        async range request (concurrent reads overlap), others read on a worker thread."""
        if self._writer is not None:
            return await run_in_worker(self._read_while_writing, key)
        offset, size = self._locate(key)
        prefetched = key in self._prefetched  # checked when it was fetched
        data = self._from_memory(key, offset, 0, size)
        if data is None:
            try:
                data = await self._live_source().read_async(offset, size)
            except RemoteStorageError as error:
                raise _naming(error, key) from error
        if self._verify and not prefetched:
            try:
                self.check_payload(key, data)
            except ChecksumError as error:
                data = await self._read_again_async(key, offset, size, error)
        return data

    async def read_range_async(self, key: str, start: int, stop: int) -> bytes:
        """:meth:`read_range` without blocking the running event loop."""
        if self._writer is not None:
            whole = await run_in_worker(self._read_while_writing, key)
            return whole[slice(*_clipped(start, stop, len(whole)))]
        offset, size = self._locate(key)
        start, stop = _clipped(start, stop, size)
        if self.verify_checksums and self._positions[key] not in self._checked_whole:
            whole = await self.read_async(key)
            self._checked_whole.add(self._positions[key])
            return whole[start:stop]
        data = self._from_memory(key, offset, start, stop)
        if data is not None:
            return data
        return await self._live_source().read_async(offset + start, stop - start)

    def _read_while_writing(self, key: str) -> bytes:
        metadata = self._metadata.get(key)
        if metadata is not None:
            return metadata
        offset, size = self._locate(key)
        if size == 0:
            return b""
        with self._lock:
            if self._closed:
                raise ArchiveClosedError("archive is closed", archive=self._name)
            assert self._writer is not None
            return self._writer.read_back(offset, size)

    # -- writing -------------------------------------------------------------------------

    def write(self, key: str, value: bytes | bytearray | memoryview) -> None:
        """Stores a record (same as ``archive[key] = value``).

        Raises :class:`~ncore_like.RecordExistsError` if a record other than node metadata
        exists under ``key``, :class:`~ncore_like.ReadOnlyError` for archives opened for
        reading, :class:`~ncore_like.InvalidKeyError` for keys that can't name a record.
        """
        if self._writer is None:
            raise ReadOnlyError(f"archive is opened for reading, can't write {key!r}", archive=self._name)
        validate_key(key, self._name)
        try:
            view = memoryview(value)
        except TypeError as error:
            raise TypeError(f"{self._name}: record {key!r} must be bytes-like ({error})") from error
        if not view.c_contiguous:
            raise ValueError(f"{self._name}: record {key!r} is not a contiguous buffer")
        payload = view.cast("B")
        metadata = is_node_metadata_key(key)
        with self._lock:
            self._check_writable()
            if metadata:
                self._metadata[key] = bytes(payload)
                return
            if key in self._positions:
                raise RecordExistsError(
                    key, f"record {key!r} exists already (records are write-once)", archive=self._name
                )
            self._append(key, payload)

    @classmethod
    def _resume(
        cls, path: str, position: int, index: Index, *, verify_checksums: bool | None = True
    ) -> IndexedTarArchive:
        """An archive being written that continues the partial file of the local archive
        ``path`` after ``position``, holding the records of ``index`` (found there by
        recovery). Closing it publishes the archive at ``path``."""
        archive = cls.__new__(cls)
        archive._init_state(Location(path), "w", TAIL_READ_SIZE, False, verify_checksums)
        writer = ArchiveWriter.resume(path, position, checksums=index.checksums is not None)
        archive._writer = writer
        archive._set_index(Index(list(index.keys), list(index.offsets), list(index.sizes), index.checksums))
        if writer.crcs is not None:
            writer.crcs.extend(index.checksums or ())
        archive._crcs = writer.crcs
        return archive

    def _check_writable(self) -> None:
        if self._closed:
            raise ArchiveClosedError("archive is closed, can't write", archive=self._name)
        if self._pid != os.getpid():
            raise ValueError(
                f"{self._name}: archive opened for writing in process {self._pid} is used in process "
                f"{os.getpid()}; call reload_resources() first"
            )

    def _append(self, key: str, payload: bytes | memoryview) -> None:
        # A node metadata record written by flush() and changed since is appended again:
        # the key then points to the newer record, the older one stays in the tar unindexed.
        assert self._writer is not None
        offset = self._writer.append(key, payload)  # its checksum goes to self._crcs
        self._positions[key] = len(self._keys)
        self._keys.append(key)
        self._offsets.append(offset)
        self._sizes.append(len(payload))

    def _write_metadata(self) -> None:
        """Appends the node metadata records not written yet in their current version."""
        for key, payload in self._metadata.items():
            if self._metadata_written.get(key) != payload:
                self._append(key, payload)
                self._metadata_written[key] = payload

    def flush(self) -> None:
        """Makes every record written so far durable without closing: the node metadata
        records are appended in their current version (a later change appends them again)
        and a local file is synced to disk, so that :func:`~ncore_like.recover` finds every
        record written before ``flush()`` returned. A remote upload sends what it buffered,
        but becomes an object only at :meth:`close`."""
        with self._lock:
            if self._writer is None:
                return
            self._check_writable()
            self._write_metadata()
            self._writer.flush()

    def abort(self) -> None:
        """Stops writing and discards the archive: the partial file of a local archive is
        deleted, a remote upload is aborted; nothing appears at the archive's name (an
        archive there stays as it was). Also discards what a failed :meth:`close` or ``with``
        block left for recovery. A partial file finished by :func:`~ncore_like.recover` is
        kept (it holds an earlier writer's records). No-op for readers and published
        archives."""
        with self._lock:
            if self._writer is None or self._published:
                return
            self._closed = True
            self._writer.abort()

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the archive (idempotent).

        When writing, appends the node metadata records and the index, which makes the
        archive readable. Releases the file resources; records held in memory stay readable.
        """
        with self._lock:
            if self._closed:
                return
            writer = self._writer
            if writer is None:
                self._closed = True
                if self._source is not None:
                    self._source.close()
                return
            self._check_writable()
            self._closed = True
            try:
                self._write_metadata()
                writer.finish(*self._live_index())
                writer.publish()
                self._published = True
            except BaseException:
                writer.release()  # the partial file stays for recovery
                raise

    def _live_index(self) -> tuple[list[str], list[int], list[int], list[int] | None]:
        """The index lists without records superseded by a newer version (node metadata
        records changed after a flush)."""
        if len(self._positions) == len(self._keys):
            return self._keys, self._offsets, self._sizes, self._crcs
        kept = sorted(self._positions.values())
        crcs = self._crcs
        return (
            [self._keys[i] for i in kept],
            [self._offsets[i] for i in kept],
            [self._sizes[i] for i in kept],
            None if crcs is None else [crcs[i] for i in kept],
        )

    def __enter__(self) -> IndexedTarArchive:
        return self

    def __exit__(self, error_type: type[BaseException] | None, *exc_info: object) -> None:
        if error_type is None or self._writer is None:
            self.close()
            return
        # The block failed: publish nothing. A local archive keeps what it wrote on disk for
        # recovery (the error may well be the data source's, after hours of recording).
        with self._lock:
            if self._closed:
                return
            self._closed = True
            writer = self._writer
            with contextlib.suppress(Exception):  # the block's error matters more
                self._write_metadata()
                writer.flush()
            writer.release()

    def release_index_tail(self, retention: IndexTailRetention, *, consolidated: bool) -> None:
        """Releases the memory of the tail read after the hierarchy was opened (from its
        consolidated metadata if ``consolidated``); records within it are read from the file
        afterwards. ``"keep"`` never releases, ``"release_after_opening"`` always,
        ``"release_if_consolidated"`` if ``consolidated``, ``"keep_complete_archives"`` unless
        the tail holds the whole file. No-op for archives opened for writing.
        """
        if retention not in _RETENTIONS:
            raise ValueError(f"{self._name}: unknown index tail retention {retention!r}")
        if self._mode == "w":
            return
        release = {
            "keep": False,
            "release_after_opening": True,
            "release_if_consolidated": consolidated,
            "keep_complete_archives": self._tail_start > 0,
        }[retention]
        if release:
            self._tail = None

    def reload_resources(self) -> None:
        """Re-opens the file resources (e.g. in a process forked after opening); an archive
        being written continues on the re-opened local file."""
        with self._lock:
            if self._closed:
                return
            if self._writer is not None:
                self._writer.reopen()
            elif self._source is not None:
                self._source.reopen()
            self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        if self._mode == "w":
            raise TypeError(f"{self._name}: an archive opened for writing can't be pickled")
        return {
            "location": self._location,
            "index_tail_read_size": self._tail_read_size,
            "remote_range_reads": self._remote_range_reads,
            "is_remote": self._is_remote,
            "file_size": self._file_size,
            "index_record": self._index_record,
            "verify_checksums": self._verify_checksums,
            "verify": self._verify,
            "index": (self._keys, self._offsets, self._sizes, self._crcs),
            # The cache's settings, and the object version the index is of (records read in
            # the other process are cached under it).
            "cache": self._cache,
            "cache_version": self._source.version if isinstance(self._source, CachedSource) else self._cache_version,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        location: Location = state["location"]
        self._init_state(
            location,
            "r",
            state["index_tail_read_size"],
            state["remote_range_reads"],
            state["verify_checksums"],
            state.get("cache"),
        )
        self._cache_version = state.get("cache_version")
        self._verify = state["verify"]
        self._is_remote = state["is_remote"]
        self._file_size = state["file_size"]
        self._index_record = state["index_record"]
        self._set_index(Index(*state["index"]))

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"mode={self._mode!r}"
        return f"<IndexedTarArchive {self._name} {state}, {len(self)} records>"
