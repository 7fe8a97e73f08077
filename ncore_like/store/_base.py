"""``Store``: the abstract store of a zarr hierarchy, and the root-group operations all
stores share (create, open from node metadata or from one consolidated record, consolidate).

The store layer builds zarr-python's root groups; the public store classes, whose
``open_root_group`` and ``create_root_group`` wrap them in typed groups, are composed in the
typed layer (``ncore_like/nodes/_stores.py``): this layer never reaches it.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Literal, Self

from .. import _compat
from .._json import encode_json
from ..errors import ReadOnlyError
from ._consolidated import (
    CONSOLIDATED_KEY_V2,
    CONSOLIDATED_KEY_V3,
    ZARR_PYTHON_CONSOLIDATED_KEY_V2,
    collects,
    decode_consolidated,
    encode_consolidated,
    is_consolidated_metadata_key as _is_consolidated_metadata_key,
    standard_consolidated,
    zarr_nodes,
)
from ._documents import GroupView

if TYPE_CHECKING:
    from ._metadata import NodeView

__all__ = ["Consolidated", "Store"]


ZarrFormat = Literal[2, 3]
Attributes = dict[str, Any]
Consolidated = bool | Literal["auto"]


class Store(ABC):
    """A store of a zarr hierarchy, wrapping a zarr-python store (:attr:`zarr`).

    Stores are context managers that close on exit. Use :class:`IndexedTarZarrStore` for
    ``.itar`` archives and :class:`ZarrStoreAdapter` for any other zarr-python store.
    """

    def __init__(self, zarr_store: _compat.ZarrStore | None = None) -> None:
        # None: built on first use by _make_zarr_store (reading an archive needs none).
        self._zarr_store_or_none = zarr_store
        # The format and node metadata records of the last consolidate() (see close()).
        self._consolidated: tuple[ZarrFormat, dict[str, bytes]] | None = None

    def _make_zarr_store(self) -> _compat.ZarrStore:
        raise TypeError(f"{type(self).__name__} was given no zarr-python store")

    @property
    def _zarr_store(self) -> _compat.ZarrStore:
        store = self._zarr_store_or_none
        if store is None:
            store = self._zarr_store_or_none = self._make_zarr_store()
        return store

    @property
    def zarr(self) -> _compat.ZarrStore:
        """The wrapped zarr-python store (usable with ``zarr.open_group(store.zarr, ...)``)."""
        return self._zarr_store

    @property
    @abstractmethod
    def name(self) -> str:
        """How errors name the store (its location)."""

    @property
    def read_only(self) -> bool:
        """True if the store was opened for reading."""
        return _compat.store_read_only(self._zarr_store)

    def close(self) -> None:
        """Closes the store (finishes writing)."""
        if self._zarr_store_or_none is not None:
            self._zarr_store_or_none.close()

    def reload_resources(self) -> None:  # noqa: B027 - a no-op unless a store holds file resources
        """Re-opens file resources (e.g. in a forked process); no-op by default."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, error_type: type[BaseException] | None, *exc_info: object) -> None:
        if error_type is None:
            self.close()
        else:
            self._close_after_error()

    def _close_after_error(self) -> None:
        """Ends a ``with`` block that raised (stores that publish their writes at close
        publish nothing then)."""
        self.close()

    # -- node views (see ncore_like.store._metadata); served by archives opened for reading --

    @property
    def serves_views(self) -> bool:
        """True if members can be looked up as views of their metadata (:meth:`node_view`)
        instead of zarr-python's nodes."""
        return False

    def node_view(self, path: str, zarr_format: ZarrFormat) -> NodeView | None:
        """The view of the node at ``path``, None if there is none (stores that serve views)."""
        raise NotImplementedError(f"{type(self).__name__} serves no node views")

    def child_names(self, path: str, zarr_format: ZarrFormat) -> list[str] | None:
        """Names of the nodes directly under the group at ``path``, None if unknown."""
        return None

    def zarr_node(self, view: NodeView) -> _compat.ZarrArray | _compat.ZarrGroup:
        """zarr-python's node of a view (built when asked for: ``.zarr``, fallback reads),
        without store I/O."""
        if isinstance(view, GroupView):
            return _compat.group_from_document(self._zarr_store, view.path, dict(view.document))
        return _compat.array_from_document(self._zarr_store, view.path, dict(view.document))

    @staticmethod
    def is_consolidated_metadata_key(key: str) -> bool:
        """True for keys of consolidated metadata records (``.zmetadata.cbor.xz``,
        ``zarr.json.cbor.zlib`` and zarr-python 2's ``.zmetadata``), which
        :meth:`consolidate` regenerates (e.g. to skip when copying records)."""
        return _is_consolidated_metadata_key(key)

    # -- record access (overridden by stores that reach their records more directly) -----

    def record_keys(self) -> list[str]:
        """Every record key of the store (node metadata, chunks, anything else)."""
        return self._record_keys()

    def read_record(self, key: str) -> bytes | None:
        """The bytes of record ``key`` as stored, None if there is none."""
        return self._read_record(key)

    def _read_record(self, key: str) -> bytes | None:
        return _compat.read_record(self._zarr_store, key)

    def _write_record(self, key: str, value: bytes) -> None:
        _compat.write_record(self._zarr_store, key, value)

    def _record_keys(self) -> list[str]:
        return _compat.store_keys(self._zarr_store)

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyError("store is opened for reading, can't write", archive=self.name)

    # -- hierarchy -----------------------------------------------------------------------

    def create_zarr_root_group(self, attributes: Attributes, zarr_format: ZarrFormat) -> _compat.ZarrGroup:
        """Creates the root group as zarr-python's group (the public stores' typed
        ``create_root_group`` wraps it)."""
        self._check_writable()
        return _compat.create_group(self._zarr_store, attributes, zarr_format)

    def _consolidated_record(self) -> tuple[ZarrFormat, bytes] | None:
        for zarr_format, key in ((2, CONSOLIDATED_KEY_V2), (3, CONSOLIDATED_KEY_V3)):
            data = self._read_record(key)
            if data is not None:
                return zarr_format, data  # type: ignore[return-value]
        return None

    def _reading_store(self) -> _compat.ZarrStore:
        return _compat.reading_store(self._zarr_store)

    def _node_records_store(self) -> _compat.ZarrStore:
        """The store an unconsolidated open reads node metadata from (the node metadata
        records, never a consolidated record)."""
        return self._reading_store()

    def open_zarr_root_group(self, consolidated: Consolidated = True) -> _compat.ZarrGroup:
        """Opens the root group for reading as zarr-python's group (the public stores' typed
        ``open_root_group`` wraps it): ``True`` from the consolidated metadata record alone
        (``KeyError`` if there is none), ``False`` from the node metadata records,
        ``"auto"`` from the consolidated record if there is one."""
        if consolidated not in (True, False, "auto"):
            raise ValueError(f"{self.name}: consolidated must be True, False or 'auto', got {consolidated!r}")
        record = self._consolidated_record() if consolidated else None
        if record is None:
            if consolidated is True:
                raise KeyError(
                    f"{self.name}: no consolidated metadata record ({CONSOLIDATED_KEY_V2} or "
                    f"{CONSOLIDATED_KEY_V3}); write one with consolidate(), or open with consolidated=False"
                )
            group: _compat.ZarrGroup = _compat.open_group(self._node_records_store())
        else:
            zarr_format, data = record
            group = self._open_consolidated(data, zarr_format)
        return group

    def _open_consolidated(self, record: bytes, zarr_format: ZarrFormat) -> _compat.ZarrGroup:
        """The root group built from a consolidated metadata record, without store I/O."""
        metadata = decode_consolidated(record, zarr_format, self.name)
        root, members = zarr_nodes(metadata, zarr_format, self.name)
        return _compat.group_from_node_metadata(self._reading_store(), root, members)

    def consolidate(self) -> None:
        """Stores the consolidated metadata of the hierarchy (after all nodes were written):
        one compressed record with the metadata of every node, from which
        :meth:`open_root_group` opens the hierarchy without reading node metadata records.
        The node metadata records stay complete (plain zarr-python opens the hierarchy
        unconsolidated). zarr-python's own consolidated metadata, where it wrote some
        (``.zmetadata``, or nodes inline in the root ``zarr.json``), is brought up to date
        too: zarr-python and xarray read theirs first. A store closed after nodes changed
        since is consolidated again at close (:meth:`_consolidate_if_stale`)."""
        self._check_writable()
        keys = self._record_keys()
        if "zarr.json" in keys:
            zarr_format: ZarrFormat = 3
        elif ".zgroup" in keys:
            zarr_format = 2
        else:
            raise ValueError(f"{self.name}: no root group to consolidate (create_root_group() first)")
        root: dict[str, Any] = {}
        if zarr_format == 3:  # zarr-python's inline copy, out of what is consolidated
            root = json.loads(self._read_record("zarr.json") or b"{}")
            if root.get("consolidated_metadata"):
                root = {name: value for name, value in root.items() if name != "consolidated_metadata"}
                self._write_record("zarr.json", encode_json(root))
            else:
                root = {}
        records = self._collected(keys, zarr_format)
        key = CONSOLIDATED_KEY_V2 if zarr_format == 2 else CONSOLIDATED_KEY_V3
        self._write_record(key, encode_consolidated(records, zarr_format))
        # zarr-python's own copy, where it wrote one (only then are the records decoded here).
        if zarr_format == 2:
            standard = ZARR_PYTHON_CONSOLIDATED_KEY_V2 if ZARR_PYTHON_CONSOLIDATED_KEY_V2 in keys else None
        else:
            standard = "zarr.json" if root else None
        if standard is not None:
            metadata = {name: json.loads(value) for name, value in records.items()}
            self._write_record(standard, standard_consolidated(metadata, zarr_format, root))
        self._consolidated = (zarr_format, records)

    def _collected(self, keys: list[str], zarr_format: ZarrFormat) -> dict[str, bytes]:
        """The node metadata records a consolidated record of ``zarr_format`` holds."""
        records = {}
        for key in keys:
            if collects(key, zarr_format):
                data = self._read_record(key)
                if data is not None:
                    records[key] = data
        return records

    def _consolidate_if_stale(self) -> None:
        """Before a writing store closes: consolidates again if nodes changed since the last
        :meth:`consolidate` (an attribute set, an array created after it), so that no reader
        opens an outdated hierarchy from the consolidated record."""
        consolidated = self._consolidated
        if consolidated is None or self.read_only:
            return
        zarr_format, records = consolidated
        if self._collected(self._record_keys(), zarr_format) != records:
            self.consolidate()
