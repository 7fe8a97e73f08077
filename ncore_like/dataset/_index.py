"""``SampleIndex``: every sample of a fleet of archives, and where its bytes lie.

Building it opens each archive once — its tail read, gathered concurrently for remote fleets —
and takes from the metadata alone how many samples each sequence has and which record holds
each field of each sample (offset, size, CRC32C). Nothing else is read. The index then reads
samples without opening any archive again, in any process: it pickles as its tables, and
:meth:`SampleIndex.save` / :meth:`SampleIndex.load` keep it in a file, so that the ranks of a
job (and the next job) don't each re-open the fleet.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

import numpy as np

from .._concurrency import io_loop, sync
from ..archive import Location, ReadOptions, is_url
from ..archive._cache import CacheOption, RecordCache, as_cache
from ..archive._ranges import KnownArchive, describe, record_checksums
from ..archive._reading import DEFAULT_RETRY
from ..archive._remote import read_object
from ..archive._sources import remote_errors
from ..archive._writer import write_file
from ..nodes import ArchiveCollection, IndexedTarZarrStore
from ._fields import Blob, Field, FieldLayout, FieldSpec, Rows, SampleNumber, as_field, resolve

if TYPE_CHECKING:
    from ..nodes import Group

__all__ = ["SampleIndex"]

#: Bytes read from the end of each archive while building: the index and the node metadata of
#: archives of a few thousand records (bigger ones cost one more request).
BUILD_TAIL_BYTES = 256 << 10
#: Archives opened at once while building.
BUILD_CONCURRENCY = 64
_FORMAT = "ncore_like.SampleIndex/1"

Int64Array = np.ndarray[Any, np.dtype[np.int64]]


@dataclass
class FieldTable:
    """Per sample of the index, the record of one stored field."""

    offsets: Int64Array
    sizes: Int64Array
    """-1 where the record was never written (the fill value)."""
    crcs: np.ndarray[Any, np.dtype[np.uint32]]
    lengths: Int64Array
    """A blob's length (0 for rows)."""
    layouts: list[FieldLayout]
    """Per archive."""


class SampleIndex:
    """The samples of many archives: sample ``n`` is element ``i`` of sequence (archive)
    ``a``, numbered sequence after sequence.

    Build it with :meth:`build`; it is read by :class:`~ncore_like.dataset.TrainingDataset`
    (iteration with shuffling, splitting and resuming) and :class:`~ncore_like.dataset.SampleView`
    (by number).
    """

    def __init__(
        self,
        archives: Sequence[KnownArchive],
        lengths: Sequence[int] | np.ndarray[Any, Any],
        fields: Mapping[str, Field],
        tables: Mapping[str, FieldTable],
        has_checksums: Sequence[bool],
        *,
        storage_options: Mapping[str, Any] | None = None,
        cache: RecordCache | None = None,
    ) -> None:
        self.archives = list(archives)
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)
        self.fields = dict(fields)
        self.tables = dict(tables)
        self.has_checksums = list(has_checksums)
        self.storage_options = dict(storage_options or {})
        self.cache = cache

    def fingerprint(self) -> str:
        """A short digest of which samples the index numbers how: its archives (location,
        size, version) and their lengths, in order. Two indexes with the same number of
        samples from other archives, or in another order, differ in it."""
        import hashlib
        import json

        described = [[archive.location, archive.file_size, archive.version] for archive in self.archives]
        text = json.dumps([described, self.lengths.tolist()], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    # -- building -----------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        archives: str | PurePath | Iterable[str | PurePath],
        fields: Mapping[str, FieldSpec],
        *,
        storage_options: Mapping[str, Any] | None = None,
        cache: CacheOption = None,
        length: Callable[[Group], int] | None = None,
        tail_bytes: int = BUILD_TAIL_BYTES,
        concurrency: int = BUILD_CONCURRENCY,
    ) -> SampleIndex:
        """Indexes the samples of ``archives``.

        Args:
            archives: Paths or URLs of the archives, or one glob pattern (local or remote).
            fields: Name -> field (:class:`Rows`, :class:`Blob`, :class:`SampleNumber`, a
                function of ``(group, i)``, or a string: see :func:`as_field`).
            storage_options: Options of the URLs' filesystem (kept in memory, never saved).
            cache: A :class:`~ncore_like.RecordCache` (or its folder) remote samples are read
                through; the object versions its entries are keyed by are taken while building.
            length: The number of samples of a sequence, from its root group; default: the
                smallest length of the stored fields (rows: the first dimension; blobs: how
                many exist from ``i = 0`` on). Needed when every field is a function.
            tail_bytes: Bytes read from the end of each archive to open it.
            concurrency: Archives opened at once.

        Raises:
            ValueError: For no fields, a field the archives don't hold, stored in a way that
                can't be read by record (naming the archive and the field), no archive.
        """
        specs = {name: as_field(spec) for name, spec in fields.items()}
        if not specs:
            raise ValueError("a sample needs at least one field")
        if length is not None and not callable(length):
            raise TypeError(
                "length= is a function of a sequence's root group returning its number of samples "
                f"(e.g. lambda root: root.array('poses').shape[0]), got {type(length).__name__} {length!r}"
            )
        if length is None and not any(isinstance(field, Rows | Blob) for field in specs.values()):
            raise ValueError("every field is a function: pass length= (the samples of a sequence, from its group)")
        options = dict(storage_options or {})
        record_cache = as_cache(cache)
        locations = ArchiveCollection(archives, storage_options=options).locations
        if not locations:
            raise ValueError("no archive to index (an empty list)")
        stores = _open_all(locations, options, record_cache, tail_bytes, concurrency)
        known: list[KnownArchive] = []
        lengths: list[int] = []
        checksums: list[bool] = []
        columns: dict[str, list[tuple[FieldLayout, list[tuple[int, int, int, int]]]]] = {
            name: [] for name, field in specs.items() if isinstance(field, Rows | Blob)
        }
        try:
            for location, store in zip(locations, stores, strict=True):
                archive = store.archive
                root = store.open_root_group()
                resolved = {name: resolve(field, root, location) for name, field in specs.items()}
                counts = [len(found.keys) for found in resolved.values() if found is not None]
                count = int(length(root)) if length is not None else min(counts)
                for name, found in resolved.items():
                    if found is None:
                        continue
                    if len(found.keys) < count:
                        raise ValueError(
                            f"{location}: field {name!r} has {len(found.keys)} samples, the sequence {count}"
                        )
                    present = [key for key in found.keys[:count] if key is not None]
                    crcs = iter(record_checksums(archive, present) or [0] * len(present))
                    rows = []
                    for key, blob_length in zip(found.keys[:count], found.lengths[:count], strict=True):
                        if key is None:
                            rows.append((0, -1, 0, blob_length))
                        else:
                            record = archive.records[key]
                            rows.append((record.offset, record.size, next(crcs), blob_length))
                    columns[name].append((found.layout, rows))
                known.append(describe(archive))
                lengths.append(count)
                checksums.append(archive.has_checksums)
        finally:
            for store in stores:
                store.close()
        tables = {name: _table(parts) for name, parts in columns.items()}
        return cls(known, lengths, specs, tables, checksums, storage_options=options, cache=record_cache)

    # -- looking up ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.starts[-1])

    @property
    def sequences(self) -> int:
        """The number of sequences (archives)."""
        return len(self.archives)

    def locate(self, number: int) -> tuple[int, int]:
        """``(sequence, i)`` of sample ``number``."""
        if not 0 <= number < len(self):
            raise IndexError(f"sample {number} of an index of {len(self)}")
        sequence = int(np.searchsorted(self.starts, number, side="right")) - 1
        return sequence, number - int(self.starts[sequence])

    def sequence_of(self, numbers: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The sequence of each sample number."""
        return np.searchsorted(self.starts, numbers, side="right") - 1

    def location(self, sequence: int) -> str:
        """The path or URL of a sequence's archive."""
        return self.archives[sequence].location

    def sample_bytes(self, numbers: np.ndarray[Any, Any] | None = None) -> np.ndarray[Any, Any]:
        """The bytes of the records of each of these samples (their stored fields); of every
        sample for None."""
        total = np.zeros(len(self) if numbers is None else len(numbers), dtype=np.int64)
        for table in self.tables.values():
            total += np.maximum(table.sizes if numbers is None else table.sizes[numbers], 0)
        return total

    def stored_bytes(self, numbers: Iterable[int] | None = None) -> int:
        """The bytes of the records of these samples (their stored fields); of every sample
        for None."""
        return int(self.sample_bytes(None if numbers is None else np.fromiter(numbers, dtype=np.int64)).sum())

    # -- saving -------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str], *, storage_options: Mapping[str, Any] | None = None) -> None:
        """Writes the index to ``path`` (numpy's ``.npz``), a local path or a URL (e.g. beside
        the archives on S3, for ranks on other machines): the archives' paths or URLs, the
        sequences' lengths, the field layouts and the record tables. Storage options (which may
        hold credentials) and functions are not saved: :meth:`load` takes them.

        The file is written whole or not at all: locally under a temporary name, then renamed
        (a failure leaves what was there); a URL in one upload, with ``storage_options``
        (default: the index's own)."""
        meta = {
            "format": _FORMAT,
            "archives": [list(known) for known in self.archives],
            "has_checksums": self.has_checksums,
            "fields": {name: _field_json(field) for name, field in self.fields.items()},
            "layouts": {name: [layout.to_json() for layout in table.layouts] for name, table in self.tables.items()},
        }
        arrays: dict[str, Any] = {"meta": np.frombuffer(json.dumps(meta).encode(), np.uint8), "lengths": self.lengths}
        for number, table in enumerate(self.tables.values()):
            for column in ("offsets", "sizes", "crcs", "lengths"):
                arrays[f"t{number}_{column}"] = getattr(table, column)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        name = os.fspath(path)
        if is_url(name):
            options = self.storage_options if storage_options is None else dict(storage_options)
            with remote_errors(name):
                Location(name, options or None).upath.write_bytes(buffer.getvalue())
        else:
            write_file(name, buffer.getvalue())

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        storage_options: Mapping[str, Any] | None = None,
        cache: CacheOption = None,
        functions: Mapping[str, Callable[[Group, int], Any]] | None = None,
    ) -> SampleIndex:
        """An index saved by :meth:`save` (a local path or a URL, read with
        ``storage_options``), with the storage options, cache and function fields to read it
        with (ValueError, naming the file, for a missing function or a file that is no saved
        index)."""
        name = os.fspath(path)
        source: Any = name
        if is_url(name):  # a missing object or denied access raise as such, naming the URL
            # With the filesystem object (the S3 client) the archives are then read with.
            source = io.BytesIO(read_object(Location(name, dict(storage_options or {}) or None), DEFAULT_RETRY))
        try:
            with np.load(source, allow_pickle=False) as data:
                meta = json.loads(bytes(data["meta"]).decode())
                if meta.get("format") != _FORMAT:
                    raise ValueError(f"{name}: not a saved sample index (format {meta.get('format')!r})")
                arrays = {key: data[key] for key in data.files}
        except FileNotFoundError:  # missing, not malformed
            raise
        except (OSError, KeyError, ValueError) as error:
            if isinstance(error, ValueError) and str(error).startswith(name):
                raise
            raise ValueError(f"{name}: not a saved sample index ({error})") from error
        fields: dict[str, Field] = {}
        for field_name, spec in meta["fields"].items():
            if spec["kind"] == "function":
                function = (functions or {}).get(field_name)
                if function is None:
                    raise ValueError(f"{name}: field {field_name!r} is a function: pass it in functions=")
                fields[field_name] = function
            else:
                fields[field_name] = _field_from_json(spec)
        tables = {}
        for number, (field_name, layouts) in enumerate(meta["layouts"].items()):
            columns = [arrays[f"t{number}_{column}"] for column in ("offsets", "sizes", "crcs", "lengths")]
            offsets, sizes, crcs, blob_lengths = columns
            tables[field_name] = FieldTable(
                offsets, sizes, crcs, blob_lengths, [FieldLayout.from_json(layout) for layout in layouts]
            )
        archives = [KnownArchive(*entry) for entry in meta["archives"]]
        return cls(
            archives, arrays["lengths"], fields, tables, meta["has_checksums"],
            storage_options=storage_options, cache=as_cache(cache),
        )  # fmt: skip

    def with_storage(
        self, *, storage_options: Mapping[str, Any] | None = None, cache: CacheOption = None
    ) -> SampleIndex:
        """The same index reading with other storage options or cache."""
        return SampleIndex(
            self.archives, self.lengths, self.fields, self.tables, self.has_checksums,
            storage_options=storage_options, cache=as_cache(cache),
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"<SampleIndex of {len(self)} samples in {self.sequences} sequences, fields {list(self.fields)}>"


def _open_all(
    locations: list[str], options: dict[str, Any], cache: RecordCache | None, tail: int, concurrency: int
) -> list[IndexedTarZarrStore]:
    """Every archive opened for reading, ``concurrency`` at once (remote tails in flight together)."""

    local_options = ReadOptions.of(tail)

    async def open_all() -> list[IndexedTarZarrStore]:
        gate = asyncio.Semaphore(max(1, concurrency))

        async def one(location: str) -> IndexedTarZarrStore:
            where = Location(location)
            if where.local is None:  # remote: the storage options and the cache apply
                where, read_options = Location(location, options), ReadOptions.of(tail, cache=cache)
            else:
                read_options = local_options
            async with gate:
                return await IndexedTarZarrStore._reading_async(where, read_options)

        results = await asyncio.gather(*(one(location) for location in locations), return_exceptions=True)
        opened = [result for result in results if isinstance(result, IndexedTarZarrStore)]
        for result in results:
            if isinstance(result, BaseException):
                for store in opened:
                    store.close()
                raise result
        return opened

    return sync(open_all(), io_loop())


def _table(parts: list[tuple[FieldLayout, list[tuple[int, int, int, int]]]]) -> FieldTable:
    rows = [row for _, archive_rows in parts for row in archive_rows]
    data = np.array(rows, dtype=np.int64).reshape(-1, 4)
    return FieldTable(
        data[:, 0].copy(), data[:, 1].copy(), data[:, 2].astype(np.uint32), data[:, 3].copy(),
        [layout for layout, _ in parts],
    )  # fmt: skip


def _field_json(field: Field) -> dict[str, str]:
    if isinstance(field, Rows):
        return {"kind": "rows", "path": field.path}
    if isinstance(field, Blob):
        return {"kind": "blob", "pattern": field.pattern}
    if isinstance(field, SampleNumber):
        return {"kind": "number"}
    return {"kind": "function"}


def _field_from_json(spec: dict[str, str]) -> Field:
    if spec["kind"] == "rows":
        return Rows(spec["path"])
    if spec["kind"] == "blob":
        return Blob(spec["pattern"])
    return SampleNumber()
