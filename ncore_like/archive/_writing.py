"""An archive opened for writing: :class:`WritingArchive`.

Records are appended through an :class:`~ncore_like.archive._writer.ArchiveWriter` (the
file format and the atomic publish); node metadata records are held in memory until
:meth:`~WritingArchive.close` (or :meth:`~WritingArchive.flush`) appends them. Its one
construction path is the constructor, given the writer and the records it holds already:
none for a new archive (:meth:`WritingArchive.create`), those found by recovery for a
resumed one (:meth:`WritingArchive.resumed`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Literal

from .._concurrency import process_id, run_in_worker
from ..errors import ArchiveClosedError, RecordExistsError
from ._format import Index, is_node_metadata_key, validate_key, validate_keys
from ._location import Location
from ._records import ArchiveBase, RecordTable, clipped
from ._writer import ArchiveWriter, ChecksummedRecords, PackedRecords

__all__ = ["WritingArchive"]


class WritingArchive(ArchiveBase):
    """The records of an archive being written (see :class:`~ncore_like.IndexedTarArchive`).
    Not thread-safe by itself beyond its lock: every change happens under it."""

    mode: Literal["r", "w"] = "w"

    def __init__(
        self, location: Location, writer: ArchiveWriter, table: RecordTable, *, verify_checksums: bool
    ) -> None:
        super().__init__(location, table)
        self._writer = writer
        self._verify = verify_checksums
        self._pid = process_id()
        self._published = False
        self._close_failure: str | None = None  # why a close() failed, for the calls after it
        self._interrupted: str | None = None  # why writing stopped (see _after_failed_write)
        # Node metadata records, held until close (or flush); what flush wrote of them.
        self._metadata: dict[str, bytes] = {}
        self._metadata_written: dict[str, bytes] = {}

    @classmethod
    def create(
        cls,
        location: Location,
        *,
        checksums: bool,
        verify_checksums: bool | None,
        exclusive: bool = False,
        durable: bool = True,
    ) -> WritingArchive:
        """A new archive; ``exclusive``: never replacing a file at its name (modes ``"w-"``,
        ``"x"``); ``durable``: flush and close sync a local file to disk."""
        writer = ArchiveWriter(location, checksums=checksums, exclusive=exclusive, durable=durable)
        return cls(
            location,
            writer,
            RecordTable(Index([], [], [], writer.crcs)),
            verify_checksums=verify_checksums is None or bool(verify_checksums),
        )

    @classmethod
    def resumed(cls, path: str, position: int, index: Index, *, verify_checksums: bool | None) -> WritingArchive:
        """An archive that continues the partial file of the local archive ``path`` after
        ``position``, holding the records of ``index`` (found there by recovery). Closing it
        publishes the archive at ``path``."""
        writer = ArchiveWriter.resume(path, position, checksums=index.checksums is not None)
        if writer.crcs is not None:
            writer.crcs.extend(index.checksums or ())
        table = RecordTable(Index(list(index.keys), list(index.offsets), list(index.sizes), writer.crcs))
        return cls(Location(path), writer, table, verify_checksums=verify_checksums is None or bool(verify_checksums))

    # -- properties ------------------------------------------------------------------------

    @property
    def file_size(self) -> int:
        return self._writer.position

    @property
    def verify_checksums(self) -> bool:
        return self._verify and self.table.crcs is not None

    # -- the mapping: appended records, then node metadata records not written yet --------

    def keys(self) -> list[str]:
        with self.lock:
            keys = list(self.table.live()[0])
            return keys + [key for key in self._metadata if key not in self.table.positions]

    def __len__(self) -> int:
        with self.lock:
            positions = self.table.positions
            return len(positions) + sum(1 for key in self._metadata if key not in positions)

    def __contains__(self, key: object) -> bool:
        return key in self.table.positions or key in self._metadata

    # -- reading back ----------------------------------------------------------------------

    def read(self, key: str) -> bytes:
        metadata = self._metadata.get(key)
        if metadata is not None:
            return metadata
        offset, size = self.locate(key)
        if size == 0:
            return b""
        with self.lock:
            if self.closed:
                raise ArchiveClosedError("archive is closed", archive=self.name)
            return self._writer.read_back(offset, size)

    async def read_async(self, key: str) -> bytes:
        return await run_in_worker(self.read, key)

    def read_into(self, key: str, buffer: memoryview) -> None:
        buffer[:] = self.read(key)

    def read_range(self, key: str, start: int, stop: int) -> bytes:
        whole = self.read(key)
        return whole[slice(*clipped(start, stop, len(whole)))]

    async def read_range_async(self, key: str, start: int, stop: int) -> bytes:
        whole = await self.read_async(key)
        return whole[slice(*clipped(start, stop, len(whole)))]

    # -- writing ---------------------------------------------------------------------------

    def _payload(self, key: str, value: bytes | bytearray | memoryview) -> bytes | memoryview:
        """The bytes of a record to write under ``key`` (checked, as is the key)."""
        validate_key(key, self.name)
        if type(value) is bytes:  # the common case, as it is (a memoryview costs ~0.2 us)
            return value
        try:
            view = memoryview(value)
        except TypeError as error:
            raise TypeError(f"{self.name}: record {key!r} must be bytes-like ({error})") from error
        if not view.c_contiguous:
            raise ValueError(f"{self.name}: record {key!r} is not a contiguous buffer")
        return view.cast("B")

    def _exists_error(self, key: str) -> RecordExistsError:
        return RecordExistsError(key, f"record {key!r} exists already (records are write-once)", archive=self.name)

    def write_many(self, items: Sequence[tuple[str, bytes | bytearray | memoryview]]) -> None:
        """Writes records in order under one lock (the bytes of :meth:`write` one by one).
        Every key is checked first: a bad or taken key (also one twice in ``items``) writes
        nothing of the batch."""
        if type(items) is PackedRecords and items.checksums == self.has_checksums and not items.has_node_metadata:
            self._write_packed(items)
            return
        checked = [(key, self._payload(key, value)) for key, value in items]
        # Checksums computed where the payloads were made, for records of chunks only (node
        # metadata records are held back and would leave gaps).
        given = items.crcs if type(items) is ChecksummedRecords and not items.has_node_metadata else None
        with self.lock:
            self._check_writable()
            positions = self.table.positions
            keys: list[str] = []
            payloads: list[bytes | memoryview] = []
            metadata: dict[str, bytes] = {}
            for key, payload in checked:
                if is_node_metadata_key(key):
                    metadata[key] = bytes(payload)
                    continue
                if key in positions:
                    raise self._exists_error(key)
                keys.append(key)
                payloads.append(payload)
            self._refuse_repeated(keys)
            self._metadata.update(metadata)
            offsets: list[int] = []
            try:
                try:
                    self._writer.append_many(keys, payloads, offsets, given)
                finally:  # the records written before a failure are counted, as one by one
                    append = self.table.append
                    for key, offset, payload in zip(keys, offsets, payloads, strict=False):
                        append(key, offset, len(payload))
            except BaseException as error:
                self._after_failed_write(error)
                raise

    def _refuse_repeated(self, keys: Sequence[str]) -> None:
        """Raises the error of the first key given twice in ``keys`` (write-once)."""
        if len(set(keys)) != len(keys):
            seen: set[str] = set()
            for key in keys:
                if key in seen:
                    raise self._exists_error(key)
                seen.add(key)

    def _write_packed(self, packed: PackedRecords) -> None:
        """:meth:`write_many` of records packed as tar members (the same bytes, the same
        checks), written in one piece: a failure counts none of them."""
        keys = packed.keys
        validate_keys(keys, self.name)
        with self.lock:
            self._check_writable()
            positions = self.table.positions
            # Taken keys first, then keys given twice, as write_many reports them.
            if not positions.keys().isdisjoint(keys):
                raise self._exists_error(next(key for key in keys if key in positions))
            self._refuse_repeated(keys)
            try:
                start = self._writer.append_packed(packed)
                self.table.extend(keys, [start + offset for offset in packed.offsets], packed.sizes)
            except BaseException as error:
                self._after_failed_write(error)
                raise

    def write(self, key: str, value: bytes | bytearray | memoryview) -> None:
        payload = self._payload(key, value)
        metadata = is_node_metadata_key(key)
        with self.lock:
            self._check_writable()
            if metadata:
                self._metadata[key] = bytes(payload)
                return
            table = self.table
            if key in table.positions:
                raise self._exists_error(key)
            # self._append, inline: this runs once per record
            try:
                table.append(key, self._writer.append(key, payload), len(payload))
            except BaseException as error:
                self._after_failed_write(error)
                raise

    def _check_writable(self) -> None:
        if self.closed:
            raise ArchiveClosedError("archive is closed, can't write", archive=self.name)
        if self._interrupted is not None:
            raise ArchiveClosedError(self._interrupted, archive=self.name)
        if self._pid != process_id():
            raise ValueError(
                f"{self.name}: archive opened for writing in process {self._pid} is used in process "
                f"{os.getpid()}; call reload_resources() first"
            )

    def _append(self, key: str, payload: bytes | memoryview) -> None:
        # A node metadata record written by flush() and changed since is appended again:
        # the key then points to the newer record, the older one stays in the tar unindexed.
        offset = self._writer.append(key, payload)  # its checksum goes to the table's crcs
        self.table.append(key, offset, len(payload))

    def _write_metadata(self) -> None:
        """Appends the node metadata records not written yet in their current version."""
        for key, payload in self._metadata.items():
            if self._metadata_written.get(key) != payload:
                self._append(key, payload)
                self._metadata_written[key] = payload

    def flush(self) -> None:
        with self.lock:
            self._check_writable()
            try:
                self._write_metadata()
                self._writer.flush()
            except BaseException as error:
                self._after_failed_write(error)
                raise

    def _after_failed_write(self, error: BaseException) -> None:
        """Called with the exception that stopped a write after it began changing the file
        or the table. A failure that cleaned up after itself (a full disk: the sink cuts the
        file back to its last record) leaves writer, file and table agreeing, and writing
        goes on. Anything else, such as an exception raised by a signal handler between two
        steps (Ctrl-C's KeyboardInterrupt, an alarm's timeout), may leave a record in the
        file but not in the table or the other way round: the index published at close would
        then give later records wrong offsets or checksums. Such an archive takes no more
        writes and publishes nothing; its records stay in the partial file for recovery."""
        if self._interrupted is None and not self._consistent():
            local = self.location.local
            self._interrupted = (
                f"a write was interrupted ({type(error).__name__}: {error}) where the archive's index "
                "can't follow it; nothing more is written and nothing is published"
                + (
                    f"; the records written stay in the partial file: `ncore-like recover {local}`"
                    if local
                    else "; the upload is abandoned at close"
                )
            )

    def _consistent(self) -> bool:
        """Whether the table's lists agree with each other and end where the writer does."""
        table, writer = self.table, self._writer
        count = len(table.keys)
        if len(table.offsets) != count or len(table.sizes) != count:
            return False
        if table.crcs is not None and len(table.crcs) != count:
            return False
        if not all(position < count for position in table.positions.values()):
            return False
        if count and table.offsets[-1] + table.sizes[-1] > writer.position:
            return False
        return writer.in_step()

    def abort(self) -> None:
        # Also after a failed close (what it kept for recovery goes), never after a publish.
        with self.lock:
            if self._published:
                return
            self.closed = True
            self._writer.abort()

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        with self.lock:
            if self.closed:
                if self._close_failure is not None:  # not published: said again, not taken for done
                    raise ArchiveClosedError(self._close_failure, archive=self.name)
                return
            if self._interrupted is not None:  # its index can't be trusted: published never
                self.closed = True
                self._writer.release()
                self._close_failure = self._interrupted
                raise ArchiveClosedError(self._interrupted, archive=self.name)
            self._check_writable()
            self.closed = True
            writer = self._writer
            try:
                self._write_metadata()
                writer.finish(*self.table.live())
                writer.publish()
                self._published = True
            except BaseException as error:
                writer.release()  # the partial file stays for recovery
                local = self.location.local
                self._close_failure = (
                    f"closing failed earlier ({error}), nothing was published"
                    + (f"; its records stay in the partial file: `ncore-like recover {local}`" if local else "")
                    + ", or abort() to discard them"
                )
                raise

    def exit(self, failed: bool) -> None:
        """The end of a ``with`` block: closes, or (the block failed) publishes nothing. A
        local archive keeps what it wrote on disk for recovery (the error may well be the
        data source's, after hours of recording)."""
        if not failed:
            self.close()
            return
        with self.lock:
            if self.closed:
                return
            self.closed = True
            writer = self._writer
            if self._interrupted is None:  # else the file's end is unsure: recovery finds its records
                with contextlib.suppress(Exception):  # the block's error matters more
                    self._write_metadata()
                    writer.flush()
            writer.release()

    def reload_resources(self) -> None:
        with self.lock:
            if self.closed:
                return
            self._writer.reopen()
            self._pid = process_id()
