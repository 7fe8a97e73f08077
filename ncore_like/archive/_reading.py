"""An archive opened for reading: :class:`ReadingArchive`.

Its one construction path is the constructor, given the decoded index and what the opening
read (:meth:`ReadingArchive.open`, :meth:`ReadingArchive.open_async`), or what a pickled
archive carried (:meth:`ReadingArchive.unpickled`, which opens its source on first use).

Records within the tail read of the opening are served from memory, prefetched records
until they are read once; others come from the record source (a local ``pread``, or the
remote source's one read path) and are checked against their CRC32C when verification is
on.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from .._concurrency import run_in_worker
from .._defaults import DECODED_INDEX_RECORDS, TAIL_READ_SIZE
from .._log import library_logger
from .._lru import LRUCache, process_cache
from ..errors import ArchiveClosedError, ArchiveFormatError, ChecksumError, RemoteStorageError
from ._checksum import checksum
from ._format import (
    BLOCK_SIZE,
    Index,
    IndexHeader,
    decode_index,
    foreign_file,
    has_index_magic,
    header_checksum,
    unpack_index_header,
)
from ._location import Location
from ._records import RETENTIONS, ArchiveBase, IndexTailRetention, Record, RecordTable, clipped
from ._retry import RetryPolicy
from ._sources import LocalSource, RecordSource
from ._table import TablePointer, decode_records, pointer_damaged, unpack_table_pointer

if TYPE_CHECKING:
    from ._cache import CachedSource, CacheOption, RecordCache

__all__ = ["ReadOptions", "ReadingArchive"]

logger = library_logger("ncore_like.archive.index")

# Decoding the index of a 20,000-record archive (xz, then CBOR, then the key lookup table)
# takes ~7 ms, most of an archive's opening, and jobs often open the same archive again and
# again (a dataset that opens its store per sample...). The key is the compressed index and
# the offset it was found at, so a changed archive never finds a stale entry, and there is
# no file identity to get wrong (paths, remote objects, renames). Entries are read-only and
# shared; the bound counts records.
_decoded_indices: LRUCache[tuple[int, bytes], RecordTable] = process_cache(DECODED_INDEX_RECORDS, weight=len)

# Repeat opens of an unchanged local archive with a record table skip the tail read (1 MiB
# by default, most of a cached open): the file's identity (``LocalSource.identity``) finds
# the opening, and its last block, read again, must be the one it had. That block holds the
# index's place and the CRC32C of the whole record table, so a stale hit needs a rewrite
# within one timestamp tick, of the same size, with a table of the same CRC32C. Entries
# share their tables with ``_decoded_indices``.
_local_openings: LRUCache[tuple[int, ...], tuple[bytes, RecordTable, _Opening]] = process_cache(
    DECODED_INDEX_RECORDS, weight=lambda entry: len(entry[1].keys)
)

DEFAULT_RETRY = RetryPolicy()

#: ``ReadingArchive._direct`` of an archive whose reads all take the general path.
_NO_DIRECT_READS = (-1, -1, False)


class ReadOptions(NamedTuple):
    """How an archive is read: the reading parameters of :class:`~ncore_like.IndexedTarArchive`
    (and of the stores and collections that open archives), built once from the public
    keyword arguments (:meth:`of`) and passed down as one object (a named tuple: an opening
    builds no dataclass)."""

    index_tail_read_size: int | None = TAIL_READ_SIZE
    remote_range_reads: bool = False
    verify_checksums: bool | None = True
    """None means the default: verify."""
    cache: RecordCache | None = None
    retry: RetryPolicy = DEFAULT_RETRY

    @classmethod
    def of(
        cls,
        index_tail_read_size: int | None = TAIL_READ_SIZE,
        remote_range_reads: bool = False,
        verify_checksums: bool | None = True,
        cache: CacheOption = None,
        retry: RetryPolicy | None = None,
    ) -> ReadOptions:
        """The options of the public keyword arguments of the same names, checked."""
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy, got {type(retry).__name__}")
        cache_ = None
        if cache is not None:  # the cache module (and hashlib) come with the first cache
            from ._cache import as_cache

            cache_ = as_cache(cache)
        return cls(index_tail_read_size, bool(remote_range_reads), verify_checksums, cache_, retry or DEFAULT_RETRY)

    @property
    def tail_request_size(self) -> int:
        size = self.index_tail_read_size
        return BLOCK_SIZE if size is None or size < BLOCK_SIZE else size

    def source(self, location: Location, version: str | None = None) -> RecordSource:
        """The source of an archive at ``location``: a local file, or an fsspec filesystem
        (read through :attr:`cache` if set; ``version``: the object version its index is
        of, if known)."""
        if location.local is not None:
            return LocalSource(location.local)  # a local read is one pread already: no cache
        from ._remote import FsspecSource  # fsspec and asyncio come with the first URL

        remote = FsspecSource(location, range_reads=self.remote_range_reads, retry=self.retry)
        if self.cache is None:
            return remote
        from ._cache import cached_source

        return cached_source(remote, self.cache, version)


class _Opening(NamedTuple):
    """What the tail read of an opening tells: the index header, the file size, the index
    bytes if the tail holds them, and the same for the record table (archives written by
    ncore_like)."""

    header: IndexHeader
    file_size: int
    index_data: bytes | None
    table: TablePointer | None
    table_data: bytes | None
    pointer_damaged: bool = False
    """Something that isn't a table pointer where one goes (see :func:`pointer_damaged`)."""

    @classmethod
    def of(cls, tail: bytes, file_size: int | None, name: str) -> _Opening:
        if file_size == 0 or not tail:
            raise ArchiveFormatError("empty file, not an indexed tar archive", archive=name)
        header = unpack_index_header(tail, name)
        if file_size is None:  # remote suffix read: the header tells the size
            file_size = header.file_size
            if file_size < len(tail):
                raise ArchiveFormatError("index header inconsistent with the file size", archive=name)
        if header.offset + header.size > file_size - BLOCK_SIZE:
            raise ArchiveFormatError(
                f"index of {header.size} bytes at offset {header.offset} extends past the "
                f"end of the {file_size}-byte file (truncated?)",
                archive=name,
            )
        tail_start = file_size - len(tail)
        index_data = table_data = None
        if header.offset >= tail_start:
            start = header.offset - tail_start
            index_data = tail[start : start + header.size]
        table = unpack_table_pointer(tail, header.offset)
        if table is not None and table.offset >= tail_start:
            start = table.offset - tail_start
            table_data = tail[start : start + table.size]
        damaged = table is None and pointer_damaged(tail, header.offset)
        return cls(header, file_size, index_data, table, table_data, damaged)


def _holds_head(tail: bytes, file_size: int | None) -> bool:
    """True if the tail read holds the whole file (its first block too)."""
    return file_size is not None and len(tail) >= file_size


def _head_or_empty(read: Callable[[int, int], bytes]) -> bytes:
    try:
        return read(0, BLOCK_SIZE)
    except Exception:  # the error about the tail says enough
        return b""


def _foreign(head: bytes, tail: bytes, file_size: int | None, name: str) -> ArchiveFormatError | None:
    """For a file without an index header: the error saying what the file is instead (a
    plain tar, a zip...) and what to do, None if it is none of those."""
    if has_index_magic(tail):
        return None  # an archive, damaged in another way
    description = foreign_file(head, tail, file_size, name)
    return None if description is None else ArchiveFormatError(description, archive=name)


def _decoded(data: bytes, header: IndexHeader, name: str) -> RecordTable:
    """The record table of an index, decoded or from the process-wide cache (read-only, shared)."""
    data = bytes(data)
    cached = _decoded_indices.get((header.offset, data))
    if cached is not None:
        return cached
    table = _unique(decode_index(data, header, name), name)
    _decoded_indices.put((header.offset, data), table)
    return table


def _reopened(source: LocalSource) -> tuple[bytes, RecordTable, _Opening] | None:
    """The last block, records and opening of a local archive opened before and unchanged
    since (see ``_local_openings``), or None."""
    identity = source.identity()
    entry = _local_openings.get(identity)
    if entry is None:
        return None
    block, table, opening = entry
    last = source.read(identity[2] - BLOCK_SIZE, BLOCK_SIZE)
    return (last, table, opening) if last == block else None


def _remember(source: LocalSource, tail: bytes, table: RecordTable, opening: _Opening) -> None:
    """Keeps an opening from a record table for :func:`_reopened` (without the index and
    table bytes: a reopening reads neither)."""
    identity = source.identity()
    if identity[2] == opening.file_size and len(tail) >= BLOCK_SIZE:
        kept = opening._replace(index_data=None, table_data=None)
        _local_openings.put(identity, (tail[-BLOCK_SIZE:], table, kept))


def _from_table(data: bytes, opening: _Opening, name: str) -> RecordTable | None:
    """The records of an archive's record table (see ``_table.py``), decoded or from the
    process-wide cache; None if the table is damaged (the xz index is read instead)."""
    pointer = opening.table
    assert pointer is not None
    cached = _decoded_indices.get((pointer.offset, data))
    if cached is not None:
        return cached
    try:
        # Duplicate keys are refused when they are looked up (see RecordTable).
        table = RecordTable(decode_records(data, pointer, name), where=name)
    except ArchiveFormatError as error:
        logger.warning("%s; reading its xz index instead", error)
        return None
    _decoded_indices.put((pointer.offset, data), table)
    return table


#: The checksum of a record whose tar header holds none: no payload matches it.
_NO_CRC = -1


def _checked_fallback(table: RecordTable, source: RecordSource, options: ReadOptions, name: str) -> RecordTable:
    """The records of the xz index of an archive whose record table couldn't be read (a
    damaged table or pointer). Its checksums are in the table, not the index: read as it is,
    the archive would hand out unverified bytes. A local archive's records get the CRC32C of
    their tar headers (a block read per record; a header without one: a mismatch on reading);
    a remote one is refused unless ``verify_checksums=False``."""
    if table.crcs is not None or options.verify_checksums is False:
        return table
    if not isinstance(source, LocalSource):
        raise ArchiveFormatError(
            "its record table, which holds the records' checksums, is damaged: open it with "
            "verify_checksums=False to read it unverified; `ncore-like verify` says more",
            archive=name,
        )
    crcs = [header_checksum(source.read(offset - BLOCK_SIZE, BLOCK_SIZE)) for offset in table.offsets]
    logger.warning("%s: its record table is damaged: the records' checksums come from their tar headers", name)
    index = Index(
        list(table.keys), list(table.offsets), list(table.sizes), [_NO_CRC if crc is None else crc for crc in crcs]
    )
    return RecordTable(index)


def _unique(index: Index, name: str) -> RecordTable:
    table = RecordTable(index)
    if len(table.positions) != len(index.keys):
        # Two entries of one key: reads would return one of two payloads.
        duplicate = next(key for key, count in Counter(index.keys).items() if count > 1)
        raise ArchiveFormatError(
            f"corrupt record index: key {duplicate!r} has two entries", archive=name, key=duplicate
        )
    return table


def _cached(source: RecordSource | None) -> CachedSource | None:
    """``source`` if it reads through a record cache (only remote sources do)."""
    if source is None or isinstance(source, LocalSource):
        return None
    from ._cache import CachedSource

    return source if isinstance(source, CachedSource) else None


def _naming(error: RemoteStorageError, key: str) -> RemoteStorageError:
    """``error`` of a remote read, naming the record read."""
    return RemoteStorageError(f"record {key!r}: {error.detail}", archive=error.archive, key=key)


class ReadingArchive(ArchiveBase):
    """The records of an archive opened for reading (see :class:`~ncore_like.IndexedTarArchive`)."""

    mode: Literal["r", "w"] = "r"

    def __init__(
        self,
        location: Location,
        options: ReadOptions,
        table: RecordTable,
        *,
        source: RecordSource | None,
        is_remote: bool,
        file_size: int,
        index_record: Record,
        tail: bytes | None = None,
        cache_version: str | None = None,
    ) -> None:
        super().__init__(location, table)
        self.options = options
        self.retry: RetryPolicy | None = options.retry
        self.is_remote = is_remote
        self.remote_range_reads = options.remote_range_reads
        self.file_size = file_size
        self.index_record = index_record
        self._verify = options.verify_checksums is None or bool(options.verify_checksums)
        self._source = source
        # The descriptor of a local archive (None once closed); read() preads it itself (see
        # _direct).
        self._fd = source.fd if isinstance(source, LocalSource) else None
        self._cache_version = cache_version  # of an unpickled archive: the version its index is of
        # The bytes of the tail read, and records prefetched by open_async until read once.
        self._tail = tail
        self._tail_start = file_size - len(tail) if tail is not None else file_size
        self._prefetched: dict[str, bytes] = {}
        self._checked_whole: set[int] = set()  # records read whole and checked, for range reads
        self._direct = _NO_DIRECT_READS
        if source is not None:
            self._check_cached_records(source)
        self._update_direct()

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def open(cls, location: Location, options: ReadOptions) -> ReadingArchive:
        source = options.source(location)
        name = location.name
        try:
            reopened = _reopened(source) if isinstance(source, LocalSource) else None
            if reopened is not None:
                last, cached, opened = reopened
                return cls._opened(location, options, cached, source, last, opened)
            tail, file_size = source.read_tail(options.tail_request_size)
            try:
                opening = _Opening.of(tail, file_size, name)
            except ArchiveFormatError as error:
                head = tail if _holds_head(tail, file_size) else _head_or_empty(source.read)
                raise _foreign(head, tail, file_size, name) or error from None
            source.set_file_size(opening.file_size)
            header, pointer = opening.header, opening.table
            table = None
            if pointer is not None:
                table_data = opening.table_data
                if table_data is None:
                    table_data = source.read(pointer.offset, pointer.size)
                table = _from_table(table_data, opening, name)
                if table is not None and isinstance(source, LocalSource):
                    _remember(source, tail, table, opening)
            if table is None:
                index_data = opening.index_data
                if index_data is None:
                    index_data = source.read(header.offset, header.size)
                table = _decoded(index_data, header, name)
                if pointer is not None or opening.pointer_damaged:
                    table = _checked_fallback(table, source, options, name)
        except BaseException:
            source.close()
            raise
        return cls._opened(location, options, table, source, tail, opening)

    @classmethod
    async def open_async(cls, location: Location, options: ReadOptions, prefetch_keys: Iterable[str]) -> ReadingArchive:
        source = options.source(location)
        if not source.is_remote:
            source.close()
            archive = await run_in_worker(cls.open, location, options)
            await run_in_worker(archive._prefetch, tuple(prefetch_keys))
            return archive
        try:
            tail, file_size = await source.read_tail_async(options.tail_request_size)
            try:
                opening = _Opening.of(tail, file_size, location.name)
            except ArchiveFormatError as error:
                head = tail
                if not _holds_head(tail, file_size):
                    try:
                        head = await source.read_async(0, BLOCK_SIZE)
                    except Exception:  # the error about the tail says enough
                        head = b""
                raise _foreign(head, tail, file_size, location.name) or error from None
            source.set_file_size(opening.file_size)
            header, pointer = opening.header, opening.table
            table = None
            if pointer is not None:
                table_data = opening.table_data
                if table_data is None:
                    table_data = await source.read_async(pointer.offset, pointer.size)
                table = _from_table(table_data, opening, location.name)
            if table is None:
                index_data = opening.index_data
                if index_data is None:
                    index_data = await source.read_async(header.offset, header.size)
                table = _decoded(index_data, header, location.name)
                if pointer is not None or opening.pointer_damaged:
                    table = _checked_fallback(table, source, options, location.name)  # remote: no reads
            archive = cls._opened(location, options, table, source, tail, opening)
            await archive._prefetch_async(tuple(prefetch_keys))
        except BaseException:
            source.close()
            raise
        return archive

    @classmethod
    def _opened(
        cls,
        location: Location,
        options: ReadOptions,
        table: RecordTable,
        source: RecordSource,
        tail: bytes,
        opening: _Opening,
    ) -> ReadingArchive:
        header = opening.header
        return cls(
            location,
            options,
            table,
            source=source,
            is_remote=source.is_remote,
            file_size=opening.file_size,
            index_record=Record(header.offset, header.size),
            tail=tail,
        )

    # -- pickling: location, options and index; the source opens on first use ----------------

    def state(self) -> dict[str, Any]:
        source = self._source
        return {
            "location": self.location,
            "options": self.options,
            "is_remote": self.is_remote,
            "file_size": self.file_size,
            "index_record": self.index_record,
            "index": (self.table.keys, self.table.offsets, self.table.sizes, self.table.crcs),
            # The object version the index is of (records read in the other process are
            # cached under it).
            "cache_version": cached.version if (cached := _cached(source)) is not None else self._cache_version,
        }

    @classmethod
    def unpickled(cls, state: dict[str, Any]) -> ReadingArchive:
        from ._format import Index

        return cls(
            state["location"],
            state["options"],
            RecordTable(Index(*state["index"]), where=state["location"].name),
            source=None,
            is_remote=state["is_remote"],
            file_size=state["file_size"],
            index_record=state["index_record"],
            cache_version=state["cache_version"],
        )

    # -- properties ------------------------------------------------------------------------

    @property
    def cache(self) -> RecordCache | None:
        return self.options.cache if self.location.local is None else None

    @property
    def tail_size(self) -> int:
        return len(self._tail) if self._tail is not None else 0

    @property
    def verify_checksums(self) -> bool:
        return self._verify and self.table.crcs is not None

    # -- the source ------------------------------------------------------------------------

    def _check_cached_records(self, source: RecordSource) -> None:
        # Records read from a cache are checked as reads check records, once: against the
        # archive's checksums where it has them (a mismatch drops the cached copy and reads
        # the record again), else against the cache's own CRC32C; not at all when
        # verify_checksums=False chose speed.
        cached = _cached(source)
        if cached is not None:
            cached.verify_hits = self._verify and not self.verify_checksums

    def _live_source(self) -> RecordSource:
        source = self._source
        if self.closed:
            raise ArchiveClosedError("archive is closed", archive=self.name)
        if source is None:  # unpickled: opened on first use
            with self.lock:
                if self._source is None:
                    opened = self.options.source(self.location, self._cache_version)
                    opened.set_file_size(self.file_size)
                    self._check_cached_records(opened)
                    self._source = opened
                    self._fd = opened.fd if isinstance(opened, LocalSource) else None
                    self._update_direct()
                source = self._source
        return source

    def _discarded(self, offset: int, size: int, error: ChecksumError) -> RecordSource:
        """After ``error`` (a record that failed its checksum): the source, once it dropped
        its cached copy of the record (read it again from there); raises ``error`` if it
        kept none."""
        source = self._source
        if source is None or not source.discard(offset, size):
            raise error
        return source

    # -- records held in memory ------------------------------------------------------------

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
                    if not self._prefetched:
                        self._update_direct()
                    return data
                return data[start:stop]
        return None

    def _needs_io(self, key: str) -> bool:
        """True for records that exist and are not held in memory."""
        table = self.table
        position = table.positions.get(key)
        if position is None or key in self._prefetched:
            return False
        offset, size = table.offsets[position], table.sizes[position]
        return size > 0 and not (self._tail is not None and offset >= self._tail_start)

    def in_memory(self, key: str) -> bool:
        return not self._needs_io(key)

    def _prefetch(self, keys: tuple[str, ...]) -> None:
        for key in keys:
            if self._needs_io(key):
                self._prefetched[key] = self.read(key)
        self._update_direct()

    async def _prefetch_async(self, keys: tuple[str, ...]) -> None:
        import asyncio

        # Records of the tail read are in memory already: fetching them again would keep a
        # second copy that nothing ever reads.
        wanted = [key for key in dict.fromkeys(keys) if self._needs_io(key)]
        for key, data in zip(wanted, await asyncio.gather(*(self.read_async(key) for key in wanted)), strict=True):
            self._prefetched[key] = data
        self._update_direct()

    def release_index_tail(self, retention: IndexTailRetention, *, consolidated: bool) -> None:
        if retention not in RETENTIONS:
            raise ValueError(f"{self.name}: unknown index tail retention {retention!r}")
        release = {
            "keep": False,
            "release_after_opening": True,
            "release_if_consolidated": consolidated,
            "keep_complete_archives": self._tail_start > 0,
        }[retention]
        if release:
            self._tail = None
            self._update_direct()

    # -- reading ---------------------------------------------------------------------------

    def _update_direct(self) -> None:
        """Sets :attr:`_direct` from the archive's state; called whenever that changes (the
        descriptor, the tail read, prefetched records, closing)."""
        with self.lock:  # as close() does: a closed archive never gets a descriptor back
            fd = self._fd
            if fd is None or self.closed or self._prefetched:
                self._direct = _NO_DIRECT_READS
            else:
                below = self._tail_start if self._tail is not None else self.file_size
                self._direct = (fd, below, self.verify_checksums)

    def read(self, key: str) -> bytes:
        # The hot path of random access, a small record read locally, takes as few steps as
        # can be: ``_direct`` says in one tuple (read at once, so a concurrent close or
        # reopen is seen whole) the descriptor, the offset from which records lie in the
        # tail read (-1 while reads must take the general path: closed, not yet opened,
        # prefetched records pending) and whether to verify checksums. Anything else (a
        # short read, a checksum mismatch: their errors) takes the general path.
        table = self.table
        try:
            position = table.positions[key]  # a subscript: cheaper than a call of get()
        except KeyError:
            raise KeyError(f"no record {key!r} in {self.name}") from None
        offset = table.offsets[position]
        fd, below, verify = self._direct
        if offset < below:
            size = table.sizes[position]
            data = os.pread(fd, size, offset)
            if len(data) == size and (not verify or checksum(data) == table.crcs[position]):  # type: ignore[index]
                return data
        return self._read_at(key, position, offset)

    def numbered_reader(self, key_of: Callable[[int], str]) -> Callable[[int], bytes | None]:
        """:meth:`read` of record ``key_of(number)`` as a function of the number, None where
        there is no such record: each number's record (its position, offset, size and
        checksum) is looked up once (a reader's table never changes), so that later reads
        neither format nor hash its key nor index the table's lists (~1 us of a ~4 us read of
        a few KB: the table's entries are scattered in memory). Then the direct read of
        :meth:`read`, written out as there (a call through a shared helper would cost both a
        noticeable share). Numbers without a record are looked up at every read (kept, a
        sparse array's reads would keep one entry per row read)."""
        # A dict, not a list of every number: a sparse array may have 10**9 rows and a few
        # records; only numbers found are kept, so it holds at most the table's records.
        table = self.table
        found: dict[int, tuple[int, int, int, int | None]] = {}
        crcs = table.crcs

        def read_number(number: int) -> bytes | None:
            entry = found.get(number)
            if entry is None:
                position = table.positions.get(key_of(number))
                if position is None:
                    return None
                entry = found[number] = (
                    position,
                    table.offsets[position],
                    table.sizes[position],
                    None if crcs is None else crcs[position],
                )
            position, offset, size, crc = entry
            fd, below, verify = self._direct
            if offset < below:
                data = os.pread(fd, size, offset)
                if len(data) == size and (not verify or checksum(data) == crc):
                    return data
            return self._read_at(key_of(number), position, offset)

        return read_number

    def _read_at(self, key: str, position: int, offset: int) -> bytes:
        """:meth:`read` of a record held in memory or read through the source, or one whose
        direct read failed (read again: the source retries a short read, a mismatch is
        raised unless the source kept a copy to drop)."""
        table = self.table
        size = table.sizes[position]
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
                if source is None or self.closed:
                    source = self._live_source()
                try:
                    data = source.read(offset, size)
                except RemoteStorageError as error:
                    raise _naming(error, key) from error
        if self._verify:
            crcs = table.crcs
            if crcs is not None and checksum(data) != crcs[position]:
                mismatch = table.mismatch(key, position, data, self.name)
                data = self._discarded(offset, size, mismatch).read(offset, size)
                table.check(key, data, self.name)
        return data

    async def read_async(self, key: str) -> bytes:
        offset, size = self.locate(key)
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
                data = await self._discarded(offset, size, error).read_async(offset, size)
                self.check_payload(key, data)
        return data

    def read_into(self, key: str, buffer: memoryview) -> None:
        # The direct path of read(), into the buffer (a large frame into reused memory): one
        # preadv and the checksum; anything else (a short read, a mismatch, whose buffer
        # holds what was read until the general path below reads it again) takes that path.
        table = self.table
        position = table.positions.get(key)
        if position is not None:
            fd, below, verify = self._direct
            offset = table.offsets[position]
            if (
                offset < below
                and len(buffer) == table.sizes[position]
                and os.preadv(fd, [buffer], offset) == len(buffer)
                and (not verify or checksum(buffer) == table.crcs[position])  # type: ignore[index]
            ):
                return
        offset, size = self.locate(key)
        if len(buffer) != size:
            raise ValueError(f"{self.name}: record {key!r} has {size} bytes, buffer {len(buffer)}")
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
                data = self._discarded(offset, size, error).read(offset, size)
                self.check_payload(key, data)
                buffer[:] = data

    def read_range(self, key: str, start: int, stop: int) -> bytes:
        offset, size = self.locate(key)
        start, stop = clipped(start, stop, size)
        if self.verify_checksums and self.table.positions[key] not in self._checked_whole:
            whole = self.read(key)
            self._checked_whole.add(self.table.positions[key])
            return whole[start:stop]
        data = self._from_memory(key, offset, start, stop)
        if data is not None:
            return data
        return self._live_source().read(offset + start, stop - start)

    async def read_range_async(self, key: str, start: int, stop: int) -> bytes:
        offset, size = self.locate(key)
        start, stop = clipped(start, stop, size)
        if self.verify_checksums and self.table.positions[key] not in self._checked_whole:
            whole = await self.read_async(key)
            self._checked_whole.add(self.table.positions[key])
            return whole[start:stop]
        data = self._from_memory(key, offset, start, stop)
        if data is not None:
            return data
        return await self._live_source().read_async(offset + start, stop - start)

    def read_span(self, offset: int, size: int) -> bytes:
        if offset < 0 or size < 0 or offset + size > self.file_size:
            raise ValueError(
                f"{self.name}: span [{offset}, {offset + size}) lies outside the file of {self.file_size} bytes"
            )
        return self._live_source().read_span(offset, size)

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self._direct = _NO_DIRECT_READS  # first: a read from here on takes the general path
            self._fd = None
            if self._source is not None:
                self._source.close()

    def exit(self, failed: bool) -> None:
        self.close()

    def reload_resources(self) -> None:
        with self.lock:
            if not self.closed and self._source is not None:
                self._source.reopen()
                self._fd = self._source.fd if isinstance(self._source, LocalSource) else None
                self._update_direct()
