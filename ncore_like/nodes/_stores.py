"""The public store classes: the store layer's stores, whose root groups are typed groups.

The store layer builds zarr-python's root groups (``open_zarr_root_group``,
``create_zarr_root_group``) and never reaches this layer; the classes here compose each of
its stores with the typed :class:`Group`, so ``ncore_like.Store`` and its subclasses are
these (``isinstance`` with the store layer's classes holds too).
"""

from __future__ import annotations

from typing import Any, Literal

from .. import _compat
from ..backend import Backend
from ..store import _adapter, _base, _itar_store
from ._attributes import json_attributes
from ._group import Group

__all__ = ["IndexedTarZarrStore", "Store", "ZarrStoreAdapter"]


class Store(_base.Store):
    __doc__ = _base.Store.__doc__

    def create_root_group(
        self,
        attributes: dict[str, Any] | None = None,
        *,
        zarr_format: Literal[2, 3] = 2,
        backend: Backend | None = None,
    ) -> Group:
        """Creates the root group of the hierarchy in zarr format 2 (default, readable by all
        zarr-python versions) or 3. Its arrays read through ``backend`` (default: the store's
        own, see :attr:`backend`)."""
        self._check_writable()
        try:
            zarr_format = _compat.check_zarr_format(zarr_format)
        except ValueError as error:
            raise ValueError(f"{self.name}: {error}") from None
        root = self.create_zarr_root_group(json_attributes(attributes, f"root group of {self.name}"), zarr_format)
        return Group(root, store=self, backend=backend if backend is not None else self.backend)

    def open_root_group(self, consolidated: _base.Consolidated = True, *, backend: Backend | None = None) -> Group:
        """Opens the root group of the hierarchy for reading.

        ``True``: from the consolidated metadata record alone (``KeyError`` if there is none,
        see :meth:`consolidate`); ``False``: from the node metadata records; ``"auto"``: from
        the consolidated record if there is one. Its arrays read through ``backend``
        (default: the store's own, see :attr:`backend`).
        """
        backend = backend if backend is not None else self.backend
        if isinstance(self, _itar_store.IndexedTarZarrStore) and self.serves_views:
            # An archive opened for reading: a view of the root's metadata, no zarr-python.
            return Group(None, store=self, backend=backend, view=self.open_root_view(consolidated))
        return Group(self.open_zarr_root_group(consolidated), store=self, backend=backend)

    @property
    def backend(self) -> Backend:
        """The :class:`~ncore_like.backend.Backend` (default settings) that the store's root
        groups read through unless given one, made on first use: however often the root is
        opened, the nodes of one array share what the backend learnt about it (a root opened
        per read would work out each array's chunk layout again, ~10 us of a ~55 us read of
        a ~600 KB frame). A pickled store (e.g. sent to a worker process) makes its own."""
        backend: Backend | None = self.__dict__.get("_backend")
        if backend is None:  # two threads at once: one backend wins, the other is dropped
            backend = self.__dict__.setdefault("_backend", Backend())
        return backend


class IndexedTarZarrStore(Store, _itar_store.IndexedTarZarrStore):
    __doc__ = _itar_store.IndexedTarZarrStore.__doc__


class ZarrStoreAdapter(Store, _adapter.ZarrStoreAdapter):
    __doc__ = _adapter.ZarrStoreAdapter.__doc__
