"""``IndexedTarZarrStore``: a zarr hierarchy in an indexed tar archive."""

from __future__ import annotations

import errno
import json
import sys
from collections.abc import Mapping
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Literal, Self, TypeGuard

from .. import _compat
from .._defaults import TAIL_READ_SIZE
from ..archive import (
    IndexedTarArchive,
    IndexTailRetention,
    Location,
    OpenMode,
    ReadOptions,
    RetryPolicy,
    is_node_metadata_key,
    read_records,
)
from ..errors import NodeMetadataError
from ._base import Consolidated, Store
from ._consolidated import (
    CONSOLIDATED_KEY_V2,
    CONSOLIDATED_KEY_V3,
    child_nodes,
    decoded_consolidated,
    is_consolidated_metadata_key,
)
from ._documents import GroupView, children_by_record

if TYPE_CHECKING:
    from upath import UPath

    from ..archive._cache import CacheOption
    from ._metadata import NodeView
    from ._zarr_store import ItarZarrStore

__all__ = ["IndexedTarZarrStore"]


class IndexedTarZarrStore(Store):
    """A zarr hierarchy in an indexed tar archive, local or remote.

    The parameters are those of :class:`IndexedTarArchive`; the constructor opens the
    archive (blocking), :meth:`open_async` opens it for reading without blocking. Like the
    archive, a store replaces an archive at its name only when it closes (``mode="x"`` or
    ``"w-"``: never), and a store written in a ``with`` block that raises publishes nothing
    (a local archive's partial file stays for :func:`~ncore_like.recover`). Node
    metadata records are appended when the store is closed, at the end of the file, so
    opening the hierarchy from its consolidated metadata costs no I/O beyond the tail read.

    Stores opened for reading pickle by location, options and index (no I/O when
    unpickled), so they can be handed to worker processes; in a forked child they reopen
    remote filesystem objects by themselves (local descriptors stay valid), and
    :meth:`reload_resources` is there for explicit control.
    """

    def __init__(
        self,
        itar_path: str | PurePath | UPath,
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
        if mode == "r":
            options = ReadOptions.of(index_tail_read_size, remote_range_reads, verify_checksums, cache, retry)
            self._archive = IndexedTarArchive._reading(Location(itar_path, storage_options), options)
        else:
            self._archive = IndexedTarArchive(
                itar_path,
                mode,
                verify_checksums=verify_checksums,
                checksums=checksums,
                storage_options=storage_options,
                durable=durable,
            )
        super().__init__()
        self._init_views()

    @classmethod
    def _reading(cls, location: Location, options: ReadOptions) -> Self:
        """A store opened for reading with options built once by the caller (a collection's)."""
        return cls._of_archive(IndexedTarArchive._reading(location, options))

    @classmethod
    async def _reading_async(cls, location: Location, options: ReadOptions) -> Self:
        """:meth:`open_async` with options built once by the caller."""
        keys = (CONSOLIDATED_KEY_V2, CONSOLIDATED_KEY_V3)
        return cls._of_archive(await IndexedTarArchive._reading_async(location, options, prefetch_keys=keys))

    def _make_zarr_store(self) -> _compat.ZarrStore:
        from ._zarr_store import ItarZarrStore  # zarr-python: imported when first needed

        return ItarZarrStore(self._archive)

    def _init_views(self) -> None:
        # Node metadata documents of the consolidated record (once opened from it) or of the
        # node metadata records (once loaded), and the views of nodes looked up: an archive
        # opened for reading never changes. The store serves the source of its latest open.
        self._documents: dict[str, Any] | None = None
        self._consolidated_documents = False
        self._views: dict[tuple[str, int], NodeView | None] = {}
        self._view_store: ItarZarrStore | None = None
        # Members of each group per zarr format, from the node metadata records' keys.
        self._record_children: dict[int, dict[str, list[str]]] = {}

    @classmethod
    def _of_archive(cls, archive: IndexedTarArchive) -> Self:
        store = cls.__new__(cls)
        store._archive = archive
        Store.__init__(store)
        store._init_views()
        return store

    @classmethod
    async def open_async(
        cls,
        itar_path: str | PurePath | UPath,
        index_tail_read_size: int | None = TAIL_READ_SIZE,
        remote_range_reads: bool = False,
        *,
        verify_checksums: bool | None = True,
        storage_options: Mapping[str, Any] | None = None,
        cache: CacheOption = None,
        retry: RetryPolicy | None = None,
    ) -> Self:
        """Opens a store for reading without blocking the running loop; the consolidated
        metadata record is fetched while opening (see :meth:`IndexedTarArchive.open_async`)."""
        options = ReadOptions.of(index_tail_read_size, remote_range_reads, verify_checksums, cache, retry)
        return await cls._reading_async(Location(itar_path, storage_options), options)

    @property
    def archive(self) -> IndexedTarArchive:
        """The archive holding the records."""
        return self._archive

    @property
    def name(self) -> str:
        return self._archive.location.name

    @property
    def read_only(self) -> bool:
        return self._archive.mode == "r"

    def close(self) -> None:
        """Closes the store: when writing, appends the node metadata records (consolidated
        again if they changed since :meth:`consolidate`) and the index."""
        if not self._archive.closed:
            self._consolidate_if_stale()
        super().close()
        self._archive.close()

    def flush(self) -> None:
        """Makes every record written so far durable (see :meth:`IndexedTarArchive.flush`)."""
        self._archive.flush()

    def abort(self) -> None:
        """Discards the archive being written (see :meth:`IndexedTarArchive.abort`)."""
        self._archive.abort()

    def _close_after_error(self) -> None:
        self._archive.__exit__(RuntimeError)

    def reload_resources(self) -> None:
        """Re-opens the archive's file resources (e.g. in a forked process)."""
        self._archive.reload_resources()

    def to_references(self, url: str | None = None) -> dict[str, Any]:
        """The archive as a kerchunk-style reference set (``{"version": 1, "refs": ...}``):
        node metadata inline, every chunk ``[url, offset, size]`` of the archive, so that
        zarr-python and xarray read the hierarchy through fsspec's ``reference://``
        filesystem without ncore_like. ``url``: where the chunks are read from (default: the
        archive's location), e.g. where the archive will be published."""
        from ._references import archive_references  # zarr-python's store: imported with it

        return archive_references(self._archive, url)

    def release_index_tail(self, retention: IndexTailRetention, *, consolidated: bool) -> None:
        """Releases the archive's tail read as per ``retention`` after the hierarchy was
        opened, see :meth:`IndexedTarArchive.release_index_tail`."""
        self._archive.release_index_tail(retention, consolidated=consolidated)

    def load_node_metadata(self) -> None:
        """Reads every node metadata record of the archive at once (records of a remote
        archive as requests in flight together) and serves the hierarchy from them, as from
        a consolidated record: for walking a whole hierarchy that has none, where a lookup
        per node costs a round trip each. Archives opened for reading; no-op once done, or
        when the hierarchy was opened from its consolidated record."""
        archive = self._archive
        if archive.mode != "r" or (self._documents is not None and not self._consolidated_documents):
            return
        keys = [key for key in archive.keys() if is_node_metadata_key(key) and not is_consolidated_metadata_key(key)]
        documents = {key: self._parsed(key, data) for key, data in read_records(archive, keys)}
        self._documents, self._consolidated_documents = documents, False
        self._view_store = None  # zarr-python's store of the documents: built when needed
        self._views.clear()

    def _reading_store(self) -> _compat.ZarrStore:
        # Once the node metadata is loaded, zarr-python reads it from memory too.
        store = self._documents_store()
        return store if store is not None else super()._reading_store()

    def _documents_store(self) -> ItarZarrStore | None:
        """zarr-python's store serving the node metadata documents held (of the consolidated
        record, or loaded), built on first use; None if none are held."""
        if self._view_store is None and self._documents is not None:
            self._view_store = _zarr_store(self._archive, node_metadata=self._documents)
        return self._view_store

    def _node_records_store(self) -> _compat.ZarrStore:
        self._forget_consolidated()
        return self._reading_store()

    def _forget_consolidated(self) -> None:
        # Opened from the node metadata records: the documents of a consolidated record
        # opened before are not theirs (they may disagree), so lookups go to the records.
        if self._consolidated_documents:
            self._documents, self._view_store, self._consolidated_documents = None, None, False
            self._views.clear()

    def _open_consolidated(self, record: bytes, zarr_format: Literal[2, 3]) -> _compat.ZarrGroup:
        # zarr-python would parse the metadata of every node of the hierarchy when handed
        # consolidated metadata; serving the node metadata from the decoded record instead
        # parses only the nodes that are opened, and still reads no metadata record.
        metadata = decoded_consolidated(record, zarr_format, self.name)
        if self._documents is not metadata:
            self._views.clear()  # views of another source (node records)
        self._documents, self._consolidated_documents, self._view_store = metadata, True, None
        store = self._documents_store()
        assert store is not None
        return _compat.open_group(store)

    # -- node views (the typed layer's lookups, without zarr-python) -----------------------

    def open_root_documents(self, consolidated: Consolidated = True) -> Literal[2, 3]:
        """Picks the node metadata documents :meth:`node_document`, :meth:`node_view` and
        :meth:`child_names` serve, as :meth:`open_zarr_root_group` picks zarr-python's (the
        consolidated record if asked and there is one, else the node metadata records), and
        returns the hierarchy's zarr format. Archives opened for reading."""
        if consolidated not in (True, False, "auto"):
            raise ValueError(f"{self.name}: consolidated must be True, False or 'auto', got {consolidated!r}")
        record = self._consolidated_record() if consolidated else None
        if record is not None:
            zarr_format, data = record
            metadata = decoded_consolidated(data, zarr_format, self.name)
            if self._documents is not metadata:
                self._views.clear()  # views of another source (node records)
            self._documents, self._consolidated_documents, self._view_store = metadata, True, None
        elif consolidated is True:
            raise KeyError(
                f"{self.name}: no consolidated metadata record ({CONSOLIDATED_KEY_V2} or "
                f"{CONSOLIDATED_KEY_V3}); write one with consolidate(), or open with consolidated=False"
            )
        else:
            self._forget_consolidated()  # lookups go to the node metadata records
            zarr_format = 2 if ".zgroup" in self._archive or "zarr.json" not in self._archive else 3
        if zarr_format == 3 and _compat.installed_zarr_major() < 3:
            try:
                _compat.check_zarr_format(3)  # zarr-python 2 reads no format 3 (and says so)
            except ValueError as error:
                raise ValueError(f"{self.name}: {error}") from None
        return zarr_format

    def open_root_view(self, consolidated: Consolidated = True) -> GroupView:
        """The view of the root group, opened as :meth:`open_zarr_root_group` opens
        zarr-python's (the same records and the same errors) but without zarr-python:
        reading an archive never needs it. Archives opened for reading."""
        zarr_format = self.open_root_documents(consolidated)
        view = self.node_view("", zarr_format)
        if view is None:  # as zarr-python says it
            raise FileNotFoundError(errno.ENOENT, "no root group (no .zgroup or zarr.json record)", self.name)
        if not isinstance(view, GroupView):
            raise NodeMetadataError("the root node is an array, not a group", archive=self.name)
        found = view.document.get("zarr_format")
        if found != zarr_format:
            raise NodeMetadataError(
                f"the metadata of node '/' can't be understood (zarr_format {found!r}, expected {zarr_format})",
                archive=self.name,
            )
        return view

    @property
    def serves_views(self) -> bool:
        """True if nodes can be looked up as views (:meth:`node_view`): archives opened for
        reading."""
        return self._archive.mode == "r"

    def _document(self, key: str) -> Any:
        documents = self._documents
        if documents is not None:
            return documents.get(key)
        data = self._read_record(key)
        return None if data is None else self._parsed(key, data)

    def _parsed(self, key: str, data: bytes) -> Any:
        try:
            return json.loads(data)
        except ValueError as error:
            raise NodeMetadataError(f"node metadata record {key} is no JSON ({error})", archive=self.name) from error

    def node_document(self, path: str, zarr_format: Literal[2, 3]) -> dict[str, Any] | None:
        """The metadata document of the node at ``path`` (None if there is none) in
        zarr-python's consolidated form (v2: ``.zarray`` or ``.zgroup`` plus
        ``"attributes"``; v3: ``zarr.json``), from the consolidated record if the hierarchy
        was opened from it, else from the node's metadata records (archives opened for
        reading only).

        Raises:
            NodeMetadataError: For a document that is no JSON object.
        """
        prefix = f"{path}/" if path else ""
        if zarr_format == 2:
            node = self._document(prefix + ".zarray")
            if node is None:
                node = self._document(prefix + ".zgroup")
            document = None if node is None else {**node, "attributes": self._document(prefix + ".zattrs") or {}}
        else:
            document = self._document(prefix + "zarr.json")
        if document is not None and not isinstance(document, dict):
            raise NodeMetadataError(f"the metadata of node {path or '/'!r} is no JSON object", archive=self.name)
        return document

    def node_view(self, path: str, zarr_format: Literal[2, 3]) -> NodeView | None:
        """The view of the node at ``path`` (None if there is none) of its
        :meth:`node_document`, parsed once per store (archives opened for reading only)."""
        cache_key = (path, zarr_format)
        views = self._views
        if cache_key in views:
            return views[cache_key]
        document = self.node_document(path, zarr_format)
        view = None
        if document is not None:
            from ._metadata import parse_node  # numpy: a command describing documents needs none

            view = parse_node(path, document, zarr_format, self.name)
        views[cache_key] = view
        return view

    def child_names(self, path: str, zarr_format: Literal[2, 3]) -> list[str] | None:
        """Names of the nodes directly under the group at ``path`` per the consolidated
        record, or else (an archive opened for reading) per its node metadata records' keys,
        as zarr-python lists them; None while the archive is written."""
        documents = self._documents
        if documents is not None:
            return sorted(child_nodes(documents, path))
        if self._archive.mode != "r":
            return None  # records still being written: zarr-python lists them
        children = self._record_children.get(zarr_format)
        if children is None:
            children = self._record_children[zarr_format] = children_by_record(self._archive.keys(), zarr_format)
        return children.get(path.strip("/"), [])

    def zarr_node(self, view: NodeView) -> _compat.ZarrArray | _compat.ZarrGroup:
        """zarr-python's node of a view (built when asked for: ``.zarr``, fallback reads)."""
        if self._archive.mode == "w":  # arrays created in this store
            return super().zarr_node(view)
        store = self._documents_store() or _zarr_store(self._archive)
        if isinstance(view, GroupView):
            return _compat.group_from_document(store, view.path, dict(view.document))
        return _compat.array_from_document(store, view.path, dict(view.document))

    # Records are read straight from the archive: no hop through zarr's event loop.
    def _read_record(self, key: str) -> bytes | None:
        return self._archive.read(key) if key in self._archive else None

    def _write_record(self, key: str, value: bytes) -> None:
        self._check_writable()
        self._archive[key] = value

    def _record_keys(self) -> list[str]:
        return self._archive.keys()

    def __getstate__(self) -> dict[str, Any]:
        return {"archive": self._archive}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._archive = state["archive"]
        Store.__init__(self)
        self._init_views()

    def __repr__(self) -> str:
        return f"IndexedTarZarrStore({self.name!r}, mode={self._archive.mode!r})"


def _zarr_store(archive: IndexedTarArchive, node_metadata: dict[str, Any] | None = None) -> ItarZarrStore:
    """A read-only zarr-python store of ``archive`` (serving ``node_metadata`` if given)."""
    from ._zarr_store import ItarZarrStore  # zarr-python: imported when first needed

    return ItarZarrStore(archive, read_only=True, node_metadata=node_metadata)


def is_itar_zarr_store(store: object) -> TypeGuard[ItarZarrStore]:
    """True for the zarr-python store of an archive, without importing zarr-python (none can
    exist before its module was imported)."""
    module = sys.modules.get("ncore_like.store._zarr_store")
    return module is not None and isinstance(store, module.ItarZarrStore)
