"""Opening and creating root groups: the typed layer's side of
:meth:`Store.open_root_group` and :meth:`Store.create_root_group`.

The store layer builds zarr-python's root group (from the consolidated record or the node
metadata records); this module wraps it in a typed :class:`Group` with the store and the
backend its arrays read through. :func:`install` hands it to the store layer, which never
imports this layer.
"""

from __future__ import annotations

from typing import Literal

from ..backend import Backend
from ..store import IndexedTarZarrStore, Store
from ..store._base import Attributes, Consolidated, install_typed_layer
from ._group import Group

__all__ = ["create_root_group", "install", "open_root_group"]


def open_root_group(store: Store, consolidated: Consolidated = True, backend: Backend | None = None) -> Group:
    """The root group of ``store``'s hierarchy, opened for reading (see :meth:`Store.open_root_group`):
    from the view of its metadata where the store serves views (archives opened for reading:
    no zarr-python), else zarr-python's root group."""
    if isinstance(store, IndexedTarZarrStore) and store.serves_views:
        return Group(None, store=store, backend=backend, view=store.open_root_view(consolidated))
    return Group(store.open_zarr_root_group(consolidated), store=store, backend=backend)


def create_root_group(
    store: Store, attributes: Attributes, zarr_format: Literal[2, 3], backend: Backend | None = None
) -> Group:
    """A new root group in ``store`` (see :meth:`Store.create_root_group`)."""
    return Group(store.create_zarr_root_group(attributes, zarr_format), store=store, backend=backend)


class _TypedLayer:
    """This module as the store layer sees it (:class:`~ncore_like.store._base.TypedLayer`)."""

    open_root_group = staticmethod(open_root_group)
    create_root_group = staticmethod(create_root_group)


def install() -> None:
    """Makes the store layer's root-group methods return typed groups."""
    install_typed_layer(_TypedLayer())
