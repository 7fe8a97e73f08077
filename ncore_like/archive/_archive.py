"""``IndexedTarArchive``: the records of an indexed tar archive, for reading or writing.

The public class is a thin face: an archive opened for reading is a
:class:`~ncore_like.archive._reading.ReadingArchive`, one opened for writing a
:class:`~ncore_like.archive._writing.WritingArchive`, and every method hands over to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Literal, get_args

from .._defaults import TAIL_READ_SIZE
from ._format import Index
from ._location import Location
from ._reading import ReadingArchive, ReadOptions
from ._records import IndexTailRetention, OpenMode, Record
from ._retry import RetryPolicy

if TYPE_CHECKING:
    from upath import UPath

    from ._cache import CacheOption, RecordCache
    from ._writing import WritingArchive

__all__ = ["IndexTailRetention", "IndexedTarArchive", "OpenMode", "Record"]

_MODES = frozenset(get_args(OpenMode))


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
        retry: The :class:`~ncore_like.RetryPolicy` of remote reads (default: 5 attempts
            within 30 s); it also sets the filesystem's own retries to one attempt, so that
            they don't multiply its attempts (see the remote page).
        durable: When writing a local archive, :meth:`flush` and :meth:`close` sync the
            file (and its folder after the rename) to disk (the default): once they
            return, what they made durable survives a crash or power cut. ``False`` skips
            the syncs, for scratch conversions: the archive is complete once :meth:`close`
            returns, but a power cut (not a killed process) soon after can lose or tear it,
            and records acknowledged by :meth:`flush` may be lost. Remote archives ignore it.
            A durable local archive writes the large records it compressed itself past the
            page cache (``O_DIRECT``), behind the caller: their failure (a full disk) is
            raised by a later call and stops the archive (the API page says more).

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

    # The class is a face: reading and writing are two implementations (``_reading``,
    # ``_writing``), each built one way, and every method here hands over to the one of
    # this archive's mode (operations of the other mode are defaults of their base class).

    _impl: ReadingArchive | WritingArchive

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
        retry: RetryPolicy | None = None,
        durable: bool = True,
    ) -> None:
        location = Location(itar_path, storage_options)
        if mode not in _MODES:
            raise ValueError(f"{location.name}: invalid mode {mode!r} (expected 'r', 'w', 'w-' or 'x')")
        if mode != "r":
            from ._writing import WritingArchive  # here: processes that only read never load the writer

            self._impl = WritingArchive.create(
                location,
                checksums=checksums,
                verify_checksums=verify_checksums,
                exclusive=mode in ("w-", "x"),
                durable=durable,
            )
        else:
            options = ReadOptions.of(index_tail_read_size, remote_range_reads, verify_checksums, cache, retry)
            self._impl = ReadingArchive.open(location, options)

    @classmethod
    def _of(cls, impl: ReadingArchive | WritingArchive) -> IndexedTarArchive:
        archive = cls.__new__(cls)
        archive._impl = impl
        return archive

    @classmethod
    def _reading(cls, location: Location, options: ReadOptions) -> IndexedTarArchive:
        """Opens an archive for reading with options built once by the caller (stores and
        collections pass theirs down instead of repeating the keyword arguments)."""
        return cls._of(ReadingArchive.open(location, options))

    @classmethod
    async def _reading_async(
        cls, location: Location, options: ReadOptions, prefetch_keys: Iterable[str] = ()
    ) -> IndexedTarArchive:
        """:meth:`open_async` with options built once by the caller."""
        return cls._of(await ReadingArchive.open_async(location, options, prefetch_keys))

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
        retry: RetryPolicy | None = None,
    ) -> IndexedTarArchive:
        """Opens an archive for reading without blocking the running event loop.

        Remote archives load their index with async range requests (one when the index
        lies within the tail read), so many archives opened with ``asyncio.gather``
        overlap their requests; local ones are opened on a worker thread. The records of
        ``prefetch_keys`` that exist (e.g. the consolidated metadata record) are fetched
        while opening and held in memory until they are read once.
        """
        location = Location(itar_path, storage_options)
        options = ReadOptions.of(index_tail_read_size, remote_range_reads, verify_checksums, cache, retry)
        return await cls._reading_async(location, options, prefetch_keys)

    @classmethod
    def _resume(
        cls, path: str, position: int, index: Index, *, verify_checksums: bool | None = True
    ) -> IndexedTarArchive:
        """An archive being written that continues the partial file of the local archive
        ``path`` after ``position``, holding the records of ``index`` (found there by
        recovery). Closing it publishes the archive at ``path``."""
        from ._writing import WritingArchive

        return cls._of(WritingArchive.resumed(path, position, index, verify_checksums=verify_checksums))

    # -- properties ----------------------------------------------------------------------

    @property
    def itar_upath(self) -> UPath:
        """Absolute location of the archive."""
        return self._impl.location.upath

    @property
    def location(self) -> Location:
        """Absolute location of the archive (a local path without fsspec, or a URL)."""
        return self._impl.location

    @property
    def mode(self) -> Literal["r", "w"]:
        """``"r"`` if opened for reading, ``"w"`` if opened for writing (in any writing mode)."""
        return self._impl.mode

    @property
    def is_remote(self) -> bool:
        """True for archives opened for reading on async fsspec filesystems (S3, HTTP, GCS...),
        whose :meth:`read_async` issues async range requests."""
        return self._impl.is_remote

    @property
    def remote_range_reads(self) -> bool:
        """True if synchronous reads of remote archives use exact range requests."""
        return self._impl.remote_range_reads

    @property
    def cache(self) -> RecordCache | None:
        """The local cache of the records of this remote archive (None for none)."""
        cache: RecordCache | None = self._impl.cache
        return cache

    @property
    def retry(self) -> RetryPolicy | None:
        """The retry policy of remote reads (None for archives opened for writing)."""
        return self._impl.retry

    @property
    def file_size(self) -> int:
        """Size of the archive file in bytes (archives opened for reading; while writing, the
        bytes written so far)."""
        return self._impl.file_size

    @property
    def index_record(self) -> Record | None:
        """Offset and size of the compressed index in the file (None while writing)."""
        return self._impl.index_record

    @property
    def tail_size(self) -> int:
        """Bytes of the tail read held in memory (0 once released)."""
        return self._impl.tail_size

    @property
    def has_checksums(self) -> bool:
        """True if the archive stores a CRC32C of every record (written by ncore_like with
        checksums; archives of nvidia-ncore have none)."""
        return self._impl.has_checksums

    @property
    def verify_checksums(self) -> bool:
        """True if records read are checked against their CRC32C (see the constructor)."""
        return self._impl.verify_checksums

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._impl.closed

    @property
    def records(self) -> Mapping[str, Record]:
        """Offset and size of every record by key (a read-only live view; while writing, of
        the records appended so far, without the node metadata records appended at close)."""
        return self._impl.records

    # -- mapping interface ---------------------------------------------------------------

    def keys(self) -> list[str]:
        """Keys of all records: in archive order, then node metadata records not yet written."""
        return self._impl.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self._impl.keys())

    def __len__(self) -> int:
        return len(self._impl)

    def __contains__(self, key: object) -> bool:
        return key in self._impl

    def __getitem__(self, key: str) -> bytes:
        return self._impl.read(key)

    def __setitem__(self, key: str, value: bytes | bytearray | memoryview) -> None:
        self._impl.write(key, value)

    # -- reading -------------------------------------------------------------------------

    def check_payload(self, key: str, data: bytes | memoryview) -> None:
        """Raises :class:`~ncore_like.ChecksumError` unless ``data`` is the payload of the
        record ``key`` as written (no-op for archives without checksums); what reads do when
        :attr:`verify_checksums` is on."""
        self._impl.check_payload(key, data)

    def read(self, key: str) -> bytes:
        """The payload of a record (``KeyError`` if there is none).

        Records held in memory (tail read, prefetched, node metadata records while writing,
        empty records) need no I/O; local archives are read with ``os.pread``; remote ones
        through the buffered file object or exact range requests (see
        ``remote_range_reads``). Raises :class:`~ncore_like.ArchiveClosedError` for other
        records of a closed archive.
        """
        return self._impl.read(key)

    def record_reader(self) -> Callable[[str], bytes]:
        """:meth:`read` as a function of the key, bound to the archive's own implementation:
        the same reads and checks one call shorter (~0.1 us), for loops of many small reads."""
        return self._impl.read

    def numbered_reader(self, key_of: Callable[[int], str]) -> Callable[[int], bytes | None]:
        """:meth:`read` of the record ``key_of(number)`` as a function of ``number``, None
        where there is no such record, for loops reading records named by numbers, e.g. an
        array's rows: the same reads and checks, with each number's key formatted and looked
        up once rather than at every read."""
        return self._impl.numbered_reader(key_of)

    def read_into(self, key: str, buffer: memoryview) -> None:
        """Reads the payload of a record into ``buffer`` (writable bytes of the record's size),
        e.g. a region of an output array: local archives read straight into it."""
        self._impl.read_into(key, buffer)

    def read_span(self, offset: int, size: int) -> bytes:
        """Bytes ``[offset, offset + size)`` of the archive file: several adjacent records at
        once, with the tar headers between them (see :func:`~ncore_like.archive.scan_records`),
        in one ``pread`` locally or one exact range request remotely. Checksums are the
        caller's to check (:meth:`check_payload`)."""
        return self._impl.read_span(offset, size)

    def in_memory(self, key: str) -> bool:
        """True for records read without I/O (the tail read, prefetched or empty records)."""
        return self._impl.in_memory(key)

    def read_range(self, key: str, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of a record's payload, clipped to the payload (for byte-range
        requests of zarr stores, e.g. sharded arrays): one read of just those bytes. When
        checksums are verified, the first range read of a record reads and checks it whole,
        later ones read just their bytes (a shard read chunk by chunk is checked once, not
        once per chunk)."""
        return self._impl.read_range(key, start, stop)

    async def read_async(self, key: str) -> bytes:
        """:meth:`read` without blocking the running event loop: remote archives issue an
        async range request (concurrent reads overlap), others read on a worker thread."""
        return await self._impl.read_async(key)

    async def read_range_async(self, key: str, start: int, stop: int) -> bytes:
        """:meth:`read_range` without blocking the running event loop."""
        return await self._impl.read_range_async(key, start, stop)

    # -- writing -------------------------------------------------------------------------

    def write(self, key: str, value: bytes | bytearray | memoryview) -> None:
        """Stores a record (same as ``archive[key] = value``).

        Raises :class:`~ncore_like.RecordExistsError` if a record other than node metadata
        exists under ``key``, :class:`~ncore_like.ReadOnlyError` for archives opened for
        reading, :class:`~ncore_like.InvalidKeyError` for keys that can't name a record.
        """
        self._impl.write(key, value)

    def write_many(self, items: Sequence[tuple[str, bytes | bytearray | memoryview]]) -> None:
        """Stores records in order: the same archive as :meth:`write` one by one, faster for
        many small records (one lock, one pass). Every key is checked before anything is
        written: a key that can't name a record, one that exists, or one given twice raises
        what :meth:`write` raises for it and writes nothing of the batch."""
        self._impl.write_many(items)

    def flush(self) -> None:
        """Makes every record written so far durable without closing: the node metadata
        records are appended in their current version (a later change appends them again),
        small records still in the write buffer are written, and a local file is synced to
        disk (unless ``durable=False``), so that :func:`~ncore_like.recover` finds every
        record written before ``flush()`` returned. A remote upload sends what it buffered,
        but becomes an object only at :meth:`close`."""
        self._impl.flush()

    def abort(self) -> None:
        """Stops writing and discards the archive: the partial file of a local archive is
        deleted, a remote upload is aborted; nothing appears at the archive's name (an
        archive there stays as it was). Also discards what a failed :meth:`close` or ``with``
        block left for recovery. A partial file finished by :func:`~ncore_like.recover` is
        kept (it holds an earlier writer's records). No-op for readers and published
        archives."""
        self._impl.abort()

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the archive (idempotent).

        When writing, appends the node metadata records and the index, which makes the
        archive readable. Releases the file resources; records held in memory stay readable.
        """
        self._impl.close()

    def __enter__(self) -> IndexedTarArchive:
        return self

    def __exit__(self, error_type: type[BaseException] | None, *exc_info: object) -> None:
        # A writer whose block failed publishes nothing (see the class documentation).
        self._impl.exit(failed=error_type is not None)

    def release_index_tail(self, retention: IndexTailRetention, *, consolidated: bool) -> None:
        """Releases the memory of the tail read after the hierarchy was opened (from its
        consolidated metadata if ``consolidated``); records within it are read from the file
        afterwards. ``"keep"`` never releases, ``"release_after_opening"`` always,
        ``"release_if_consolidated"`` if ``consolidated``, ``"keep_complete_archives"`` unless
        the tail holds the whole file. No-op for archives opened for writing.
        """
        self._impl.release_index_tail(retention, consolidated=consolidated)

    def reload_resources(self) -> None:
        """Re-opens the file resources (e.g. in a process forked after opening); an archive
        being written continues on the re-opened local file."""
        self._impl.reload_resources()

    def __getstate__(self) -> dict[str, Any]:
        return self._impl.state()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._impl = ReadingArchive.unpickled(state)

    def __repr__(self) -> str:
        return repr(self._impl)
