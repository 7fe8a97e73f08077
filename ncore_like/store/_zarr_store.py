"""``ItarZarrStore``: a zarr-python store over an :class:`IndexedTarArchive`.

Chunk records are write-once (a rewrite raises :class:`RecordExistsError`); node metadata
records may be rewritten until the archive is closed, since zarr-python rewrites them on
every attribute change. Deleting a key that was never written is a no-op (zarr-python
deletes chunks equal to the fill value); deleting a written record is an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Literal

from .._compat import SyncZarrStore
from .._concurrency import run_in_worker
from .._defaults import TAIL_READ_SIZE
from ..archive import IndexedTarArchive, Location, ReadOptions
from ..archive._format import is_node_metadata_key
from ..errors import ConsolidatedMetadataError, ReadOnlyError, RecordExistsError
from ._consolidated import (
    CONSOLIDATED_KEY_V2,
    CONSOLIDATED_KEY_V3,
    ZARR_PYTHON_CONSOLIDATED_KEY_V2,
    child_nodes,
    decoded_consolidated,
    standard_consolidated,
)

if TYPE_CHECKING:
    from upath import UPath

__all__ = ["ItarZarrStore"]

# zarr-python's own consolidated metadata: format 2's record, and format 3's root node.
_STANDARD_CONSOLIDATED_KEYS = frozenset({ZARR_PYTHON_CONSOLIDATED_KEY_V2, "zarr.json"})
_UNKNOWN = object()


class ItarZarrStore(SyncZarrStore):
    """A zarr-python store of the records of an indexed tar archive.

    With ``node_metadata`` (the decoded node metadata records by key, e.g. of a consolidated
    metadata record), node metadata is served from it, and only from it: zarr-python then
    opens a hierarchy without reading metadata records, and parses only the nodes it opens.

    Args:
        itar: An open archive (used as is, and not closed by this store) or its location
            (opened for reading if ``read_only``, else created, truncating any file there).
        read_only: Whether writes are refused (default: the mode of an open archive, True
            for a location).
        index_tail_read_size, remote_range_reads, verify_checksums: Options for opening a
            location (see :class:`IndexedTarArchive`).
        node_metadata: Node metadata served instead of the archive's metadata records.
    """

    supports_writes = True
    # Deleting a key never written is a no-op (zarr-python deletes chunks equal to the fill
    # value) and deleting a written record raises: no deletes to speak of. Like zarr's own
    # ZipStore, the store says so, and zarr-python then refuses to overwrite existing nodes
    # instead of trying to delete them.
    supports_deletes = False
    supports_listing = True

    def __init__(
        self,
        itar: IndexedTarArchive | str | PurePath | UPath,
        *,
        read_only: bool | None = None,
        index_tail_read_size: int | None = TAIL_READ_SIZE,
        remote_range_reads: bool = False,
        verify_checksums: bool | None = True,
        node_metadata: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(itar, IndexedTarArchive):
            archive, owned = itar, False
            read_only = archive.mode == "r" if read_only is None else read_only
            if not read_only and archive.mode == "r":
                raise ReadOnlyError("archive is opened for reading, store can't write", archive=archive.location.name)
        else:
            read_only = True if read_only is None else read_only
            if read_only:
                options = ReadOptions.of(index_tail_read_size, remote_range_reads, verify_checksums)
                archive = IndexedTarArchive._reading(Location(itar), options)
            else:
                archive = IndexedTarArchive(itar, mode="w", verify_checksums=verify_checksums)
            owned = True
        super().__init__(read_only=read_only)
        self._archive = archive
        self._name = archive.location.name
        self._owns_archive = owned
        self._node_metadata = node_metadata
        self._standard: dict[str, Any] = {}  # zarr-python's consolidated forms, once made

    @property
    def archive(self) -> IndexedTarArchive:
        """The archive holding the records."""
        return self._archive

    def with_read_only(self, read_only: bool = False) -> ItarZarrStore:
        """A store of the same archive that refuses writes (a reader can't become a writer:
        writing would truncate the archive)."""
        if not read_only and self._archive.mode == "r":
            raise ReadOnlyError(
                "archive is opened for reading; open it with mode='w' to write (which truncates it)", archive=self._name
            )
        return ItarZarrStore(self._archive, read_only=read_only)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ItarZarrStore)
            and other._archive.location.name == self._archive.location.name
            and other.read_only == self.read_only
        )

    def __hash__(self) -> int:
        return hash((self._archive.location.name, self.read_only))

    def __repr__(self) -> str:
        # zarr-python names the store in its messages: by the public class users opened.
        mode = "r" if self.read_only else "w"
        return f"IndexedTarZarrStore({self._archive.location.name!r}, mode={mode!r}).zarr"

    def __getstate__(self) -> dict[str, Any]:
        # Only readers pickle (the archive refuses writers), by location, options and index.
        return {"archive": self._archive, "read_only": self.read_only, "node_metadata": self._node_metadata}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["archive"], read_only=state["read_only"], node_metadata=state["node_metadata"]
        )
        self._owns_archive = True

    _NOT_OVERLAID = object()

    def _overlaid(self, key: str) -> Any:
        """The node metadata (JSON bytes, or None if missing) of ``key`` when served from
        ``node_metadata`` or as zarr-python's consolidated metadata; ``_NOT_OVERLAID`` for
        keys the archive serves."""
        metadata = self._node_metadata
        if metadata is None:
            if key in _STANDARD_CONSOLIDATED_KEYS and self._archive.mode == "r":
                return self._standard_consolidated(key)
            return self._NOT_OVERLAID
        if not is_node_metadata_key(key) or key in (CONSOLIDATED_KEY_V2, CONSOLIDATED_KEY_V3):
            return self._NOT_OVERLAID
        value = metadata.get(key)
        return None if value is None else json.dumps(value).encode()

    def _standard_consolidated(self, key: str) -> Any:
        """zarr-python's own consolidated metadata (``.zmetadata`` of format 2, the root
        ``zarr.json`` with inline metadata of format 3), served from the archive's compressed
        record so that zarr-python and xarray open the hierarchy consolidated without a
        warning; the record is never stored twice. ``_NOT_OVERLAID`` where the archive has
        no compressed record (or a damaged one: the plain records are served then, so that
        unconsolidated reads still work), or holds the key in that form already."""
        served = self._standard.get(key, _UNKNOWN)
        if served is _UNKNOWN:
            served = self._standard[key] = self._make_standard_consolidated(key)
        return served

    def _make_standard_consolidated(self, key: str) -> Any:
        archive = self._archive
        zarr_format: Literal[2, 3] = 2 if key == ZARR_PYTHON_CONSOLIDATED_KEY_V2 else 3
        record_key = CONSOLIDATED_KEY_V2 if zarr_format == 2 else CONSOLIDATED_KEY_V3
        if record_key not in archive or (zarr_format == 2 and key in archive):
            return self._NOT_OVERLAID
        try:
            root: Any = {}
            if zarr_format == 3:
                if key not in archive:
                    return self._NOT_OVERLAID
                root = json.loads(archive.read(key))
                if not isinstance(root, dict) or root.get("node_type") != "group" or root.get("consolidated_metadata"):
                    return self._NOT_OVERLAID
            metadata = decoded_consolidated(archive.read(record_key), zarr_format, self._name)
        except (ValueError, ConsolidatedMetadataError):
            return self._NOT_OVERLAID
        return standard_consolidated(metadata, zarr_format, root)

    def close(self) -> None:
        """Closes the store, and the archive if the store opened it (finishing a write)."""
        super().close()
        if self._owns_archive:
            self._archive.close()

    # -- reading (the primitives of SyncZarrStore) ----------------------------------------

    def value_size(self, key: str) -> int | None:
        overlaid = self._overlaid(key)
        if overlaid is not self._NOT_OVERLAID:
            return None if overlaid is None else len(overlaid)
        record = self._archive.records.get(key)
        if record is not None:
            return record.size
        if key not in self._archive:
            return None
        return len(self._archive.read(key))  # node metadata held in memory while writing

    def read_value(self, key: str) -> bytes | None:
        overlaid = self._overlaid(key)
        if overlaid is not self._NOT_OVERLAID:
            return overlaid  # type: ignore[no-any-return]
        return self._archive.read(key) if key in self._archive else None

    async def read_value_async(self, key: str) -> bytes | None:
        overlaid = self._overlaid(key)
        if overlaid is not self._NOT_OVERLAID:
            return overlaid  # type: ignore[no-any-return]
        return await self._archive.read_async(key) if key in self._archive else None

    def read_range(self, key: str, start: int, stop: int) -> bytes:
        overlaid = self._overlaid(key)
        if overlaid is not self._NOT_OVERLAID:
            return overlaid[start:stop]  # type: ignore[no-any-return]
        return self._archive.read_range(key, start, stop)

    async def read_range_async(self, key: str, start: int, stop: int) -> bytes:
        overlaid = self._overlaid(key)
        if overlaid is not self._NOT_OVERLAID:
            return overlaid[start:stop]  # type: ignore[no-any-return]
        return await self._archive.read_range_async(key, start, stop)

    def exists_sync(self, key: str) -> bool:
        overlaid = self._overlaid(key)
        if overlaid is not self._NOT_OVERLAID:
            return overlaid is not None
        return key in self._archive

    # -- writing -------------------------------------------------------------------------

    def set_bytes_sync(self, key: str, value: bytes | memoryview) -> None:
        self._check_writable()
        self._archive[key] = value

    def set_many_sync(self, items: Sequence[tuple[str, bytes | memoryview]]) -> None:
        self._check_writable()
        self._archive.write_many(items)

    async def set_bytes_async(self, key: str, value: bytes | memoryview) -> None:
        self._check_writable()
        if is_node_metadata_key(key):
            self._archive[key] = value
        else:  # a blocking write: keep zarr's event loop free meanwhile
            await run_in_worker(self._archive.write, key, value)

    def delete_sync(self, key: str) -> None:
        self._check_writable()
        if key in self._archive:
            raise RecordExistsError(
                key, f"record {key!r} can't be deleted (archive records are write-once)", archive=self._name
            )

    # -- listing -------------------------------------------------------------------------

    def _keys(self) -> Iterable[str]:
        """The archive's keys, and ``.zmetadata`` where it is served (format 2)."""
        yield from self._archive
        if self._node_metadata is None and self._archive.mode == "r":
            served = self._standard_consolidated(ZARR_PYTHON_CONSOLIDATED_KEY_V2)
            if served is not self._NOT_OVERLAID:
                yield ZARR_PYTHON_CONSOLIDATED_KEY_V2

    def listed_keys(self) -> list[str]:
        """Every key the store lists (the archive's, and what it serves besides)."""
        return list(self._keys())

    def standard_consolidated_records(self) -> dict[str, bytes]:
        """zarr-python's own consolidated metadata that the store serves from the archive's
        compressed record, by key (``.zmetadata``, or the root ``zarr.json`` with inline
        metadata; empty if it serves none): e.g. to write a folder zarr-python opens
        consolidated."""
        served = {}
        for key in sorted(_STANDARD_CONSOLIDATED_KEYS):
            value: Any = self._overlaid(key) if self._node_metadata is None else self._NOT_OVERLAID
            if isinstance(value, bytes):
                served[key] = value
        return served

    def record_bytes(self, key: str) -> bytes:
        """The bytes the store serves for ``key`` (KeyError if none)."""
        data = self.read_value(key)
        if data is None:
            raise KeyError(f"no record {key!r} in {self._name}")
        return data

    def list_dir_sync(self, prefix: str) -> Iterator[str]:
        start = f"{prefix}/" if prefix else ""
        # The compressed consolidated records are no members of the hierarchy: zarr-python
        # would warn about an unknown object when it lists the root group's members.
        seen: set[str] = {CONSOLIDATED_KEY_V2, CONSOLIDATED_KEY_V3} if not prefix else set()
        hierarchy = self._consolidated_group_children(start)
        for key in self._keys():
            if key.startswith(start):
                child, nested, _ = key[len(start) :].partition("/")
                if child in seen:
                    continue
                seen.add(child)
                # A consolidated group lists its nodes only: records under no node (e.g.
                # chunks of an array a recovered writer never described) are no members.
                if hierarchy is None or not nested or child in hierarchy:
                    yield child

    def _consolidated_group_children(self, start: str) -> frozenset[str] | None:
        """Names of the nodes directly under the group at ``start`` per the served node
        metadata; None unless node metadata is served and ``start`` is a group's."""
        metadata = self._node_metadata
        if metadata is None:
            return None
        node = metadata.get(f"{start}zarr.json")
        if f"{start}.zgroup" not in metadata and not (isinstance(node, dict) and node.get("node_type") == "group"):
            return None
        return frozenset(child_nodes(metadata, start))
