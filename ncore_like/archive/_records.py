"""What both implementations of an archive share: the record table (the index as parallel
lists), its read-only view, and the defaults of the operations of the other mode.

:class:`~ncore_like.archive._reading.ReadingArchive` and
:class:`~ncore_like.archive._writing.WritingArchive` derive from :class:`ArchiveBase`; the
public :class:`~ncore_like.IndexedTarArchive` delegates to one of them. An operation of the
other mode does here what the API reference says it does there (a write to a reader raises
:class:`~ncore_like.ReadOnlyError`, a flush of a reader does nothing...), so neither
implementation carries a branch on the mode.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, ItemsView, Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple, get_args

from ..errors import ArchiveFormatError, ChecksumError, ReadOnlyError
from ._checksum import checksum
from ._format import Index
from ._location import Location
from ._retry import RetryPolicy
from ._table import DecodedTable, KeyText

__all__ = ["ArchiveBase", "IndexTailRetention", "OpenMode", "Record", "RecordTable", "RecordsView", "clipped"]

IndexTailRetention = Literal["release_if_consolidated", "release_after_opening", "keep_complete_archives", "keep"]
RETENTIONS = frozenset(get_args(IndexTailRetention))
#: ``"r"`` reads; ``"w"`` creates or replaces; ``"w-"`` and ``"x"`` create, never replacing.
OpenMode = Literal["r", "w", "w-", "x"]


def clipped(start: int, stop: int, size: int) -> tuple[int, int]:
    """``[start, stop)`` clipped to a payload of ``size`` bytes (negative bounds count as 0,
    not from the end: byte ranges, not Python slices)."""
    return max(0, min(start, size)), max(0, min(stop, size))


class Record(NamedTuple):
    """Where the payload of a record lies in the archive file."""

    offset: int
    """File offset of the first payload byte."""
    size: int
    """Payload size in bytes."""


class RecordTable:
    """The records of an archive: parallel sequences (cheap to build for many records) and
    the position of each key. A reader's table is fixed once decoded (and may be shared with
    other readers of the same index); a writer's grows as records are appended."""

    __slots__ = ("crcs", "keys", "offsets", "positions", "sizes")

    def __init__(
        self, index: Index | DecodedTable, positions: dict[str, int] | None = None, *, where: str = ""
    ) -> None:
        self.keys: Sequence[str] = index.keys
        self.offsets: Sequence[int] = index.offsets
        self.sizes: Sequence[int] = index.sizes
        self.crcs: Sequence[int] | None = index.checksums
        """The CRC32C of every record (None: the archive has no checksums)."""
        self.positions: Mapping[str, int]
        """Position of each key; a reader decoded from a record table starts with a
        :class:`_ScanningPositions` that puts a dict here once that pays (``where`` names
        the archive in its errors)."""
        if positions is not None:
            self.positions = positions
        elif isinstance(index.keys, KeyText):
            self.positions = _ScanningPositions(self, index.keys, where)
        else:
            self.positions = dict(zip(index.keys, range(len(index.keys)), strict=True))

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def empty(cls, checksums: bool) -> RecordTable:
        return cls(Index([], [], [], [] if checksums else None))

    def append(self, key: str, offset: int, size: int) -> None:
        """Adds a record written at ``offset`` (a key written again now names the newer one);
        its CRC32C is appended to :attr:`crcs` by the writer. Writers' tables only: theirs
        are lists and a dict."""
        keys, positions = self.keys, self.positions
        assert isinstance(keys, list) and isinstance(positions, dict)
        positions[key] = len(keys)
        keys.append(key)
        self.offsets.append(offset)  # type: ignore[attr-defined]
        self.sizes.append(size)  # type: ignore[attr-defined]

    def extend(self, keys: Sequence[str], offsets: Sequence[int], sizes: Sequence[int]) -> None:
        """:meth:`append` of every record of a batch, in order (a few calls for the batch)."""
        table_keys, positions = self.keys, self.positions
        assert isinstance(table_keys, list) and isinstance(positions, dict)
        start = len(table_keys)
        positions.update(zip(keys, range(start, start + len(keys)), strict=True))
        table_keys += keys
        self.offsets += offsets  # type: ignore[operator]
        self.sizes += sizes  # type: ignore[operator]

    def live(self) -> tuple[Sequence[str], Sequence[int], Sequence[int], Sequence[int] | None]:
        """The lists without records superseded by a newer version (node metadata records
        changed after a flush)."""
        if len(self.positions) == len(self.keys):
            return self.keys, self.offsets, self.sizes, self.crcs
        kept = sorted(self.positions.values())
        crcs = self.crcs
        return (
            [self.keys[i] for i in kept],
            [self.offsets[i] for i in kept],
            [self.sizes[i] for i in kept],
            None if crcs is None else [crcs[i] for i in kept],
        )

    def check(self, key: str, data: bytes | bytearray | memoryview, name: str) -> None:
        """Raises :class:`~ncore_like.ChecksumError` unless ``data`` is the payload of the
        record ``key`` as written (no-op without checksums); ``name``: the archive's."""
        crcs = self.crcs
        position = self.positions[key]
        if crcs is not None and checksum(data) != crcs[position]:
            raise self.mismatch(key, position, data, name)

    def mismatch(self, key: str, position: int, data: bytes | bytearray | memoryview, name: str) -> ChecksumError:
        """The error for ``data``, read as record ``key``, that doesn't match its checksum."""
        assert self.crcs is not None
        stored, actual, offset = self.crcs[position], checksum(data), self.offsets[position]
        return ChecksumError(
            f"record {key!r} at offset {offset} doesn't match its CRC32C "
            f"(stored {stored:08x}, read {actual:08x}): the archive is damaged there",
            archive=name,
            key=key,
            offset=offset,
        )


#: Lookups a reader decoded from a record table answers by scanning the keys' text before it
#: builds its dict: a first open that reads a few records never builds one (see KeyText).
_SCANS_BEFORE_DICT = 8


class _ScanningPositions(Mapping[str, int]):
    """The positions of a decoded table's keys, found by scanning its key text for the
    first few lookups; then built as a dict, which replaces this in the table."""

    def __init__(self, table: RecordTable, keys: KeyText, where: str) -> None:
        self._table, self._keys, self._where = table, keys, where
        self._scans_left = _SCANS_BEFORE_DICT

    def get(self, key: str, default: Any = None) -> Any:
        if self._scans_left <= 0:
            return self.built().get(key, default)
        self._scans_left -= 1  # a race loses a scan or two: harmless
        found = self._keys.find(key) if isinstance(key, str) else None
        if found is None:
            return default
        position, twice = found
        if twice:
            raise _duplicate(key, self._where)
        return position

    def __getitem__(self, key: str) -> int:
        position: int | None = self.get(key)
        if position is None:
            raise KeyError(key)
        return position

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self.built())

    def built(self) -> dict[str, int]:
        """The dict of all positions, built once and put in the table in place of this."""
        keys = self._keys.as_list()
        positions = dict(zip(keys, range(len(keys)), strict=True))
        if len(positions) != len(keys):
            duplicate = next(key for key, count in Counter(keys).items() if count > 1)
            raise _duplicate(duplicate, self._where)
        # Steady state from here on: lists too, whose items are ready ints (an array makes
        # one per access, ~20 ns, three times a read).
        table = self._table
        table.offsets, table.sizes = list(table.offsets), list(table.sizes)
        if table.crcs is not None:
            table.crcs = list(table.crcs)
        table.positions = positions
        return positions


def _duplicate(key: str, where: str) -> ArchiveFormatError:
    # Two entries of one key: reads would return one of two payloads.
    return ArchiveFormatError(f"corrupt record index: key {key!r} has two entries", archive=where, key=key)


class RecordsView(Mapping[str, Record]):
    """A read-only, live view of a record table (no object per record until one is asked for)."""

    def __init__(self, table: RecordTable) -> None:
        self._table = table

    def __getitem__(self, key: str) -> Record:
        table = self._table
        position = table.positions[key]
        return Record(table.offsets[position], table.sizes[position])

    def get(self, key: str, default: Any = None) -> Any:
        # Without Mapping.get's exception for missing keys: planning reads looks records up.
        table = self._table
        position = table.positions.get(key)
        if position is None:
            return default
        return Record(table.offsets[position], table.sizes[position])

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._table.positions))

    def __len__(self) -> int:
        return len(self._table.positions)

    def __contains__(self, key: object) -> bool:
        return key in self._table.positions

    def items(self) -> ItemsView[str, Record]:
        """``(key, record)`` pairs in archive order, made from the table's lists in one pass
        (no lookup per key: ``ncore-like ls --long`` of 10,000 records, ~20 -> ~5 ms)."""
        return _RecordItems(self)


class _RecordItems(ItemsView[str, Record]):
    _mapping: RecordsView

    def __iter__(self) -> Iterator[tuple[str, Record]]:
        keys, offsets, sizes, _ = self._mapping._table.live()  # lists or array.array: ints
        # Not strict: a writer may append to the lists while they are read.
        return zip(keys, map(Record, offsets, sizes), strict=False)


class ArchiveBase:
    """The state and operations both modes share; defaults for those of the other mode."""

    mode: Literal["r", "w"]

    def __init__(self, location: Location, table: RecordTable) -> None:
        self.location = location
        self.name = location.name
        self.table = table
        self.lock = threading.RLock()
        self.closed = False

    # -- both modes ------------------------------------------------------------------------

    @property
    def records(self) -> Mapping[str, Record]:
        return RecordsView(self.table)

    @property
    def has_checksums(self) -> bool:
        return self.table.crcs is not None

    def check_payload(self, key: str, data: bytes | bytearray | memoryview) -> None:
        self.table.check(key, data, self.name)

    def numbered_reader(self, key_of: Callable[[int], str]) -> Callable[[int], bytes | None]:
        """``read(key_of(number))`` as a function of ``number``, None where there is no such
        record, for reads of records named by numbers (an array's rows); readers make it
        cheaper (see :meth:`ReadingArchive.numbered_reader`)."""
        read = self.read  # type: ignore[attr-defined]

        def read_number(number: int) -> bytes | None:
            key = key_of(number)
            return read(key) if key in self else None  # a writer's too: node metadata held back

        return read_number

    def locate(self, key: str) -> tuple[int, int]:
        """Offset and size of a record's payload (``KeyError`` naming the archive if none)."""
        table = self.table
        position = table.positions.get(key)
        if position is None:
            raise KeyError(f"no record {key!r} in {self.name}")
        return table.offsets[position], table.sizes[position]

    def keys(self) -> list[str]:
        with self.lock:
            return list(self.table.live()[0])

    def __len__(self) -> int:
        return len(self.table.positions)

    def __contains__(self, key: object) -> bool:
        return key in self.table.positions

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"mode={self.mode!r}"
        return f"<IndexedTarArchive {self.name} {state}, {len(self)} records>"

    # -- reading only (defaults for writers) ---------------------------------------------------

    is_remote = False
    remote_range_reads = False
    index_record: Record | None = None
    retry: RetryPolicy | None = None

    @property
    def cache(self) -> Any:
        return None

    @property
    def tail_size(self) -> int:
        return 0

    def read_span(self, offset: int, size: int) -> bytes:
        raise ValueError(f"{self.name}: spans are read from archives opened for reading")

    def state(self) -> dict[str, Any]:
        """What a pickled archive carries."""
        raise TypeError(f"{self.name}: an archive opened for writing can't be pickled")

    def in_memory(self, key: str) -> bool:
        table = self.table
        position = table.positions.get(key)
        return position is None or table.sizes[position] == 0

    def release_index_tail(self, retention: IndexTailRetention, *, consolidated: bool) -> None:
        if retention not in RETENTIONS:
            raise ValueError(f"{self.name}: unknown index tail retention {retention!r}")

    # -- writing only (defaults for readers) ---------------------------------------------------

    def write(self, key: str, value: bytes | bytearray | memoryview) -> None:
        raise ReadOnlyError(f"archive is opened for reading, can't write {key!r}", archive=self.name)

    def write_many(self, items: Sequence[tuple[str, bytes | bytearray | memoryview]]) -> None:
        keys = ", ".join(repr(key) for key, _ in items[:3]) + (", ..." if len(items) > 3 else "")
        raise ReadOnlyError(f"archive is opened for reading, can't write {keys}", archive=self.name)

    def flush(self) -> None:
        pass

    def abort(self) -> None:
        pass
