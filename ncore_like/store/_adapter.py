"""``ZarrStoreAdapter``: the :class:`Store` API over any other zarr-python store."""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING, Self

from .. import _compat
from ..archive._location import Location
from ._base import Store

if TYPE_CHECKING:
    from upath import UPath

__all__ = ["ZarrStoreAdapter"]


class ZarrStoreAdapter(Store):
    """A zarr hierarchy in any zarr-python store: in memory, a local directory, fsspec..."""

    def __init__(self, zarr_store: _compat.ZarrStore) -> None:
        if not _compat.is_zarr_store(zarr_store):
            raise TypeError(f"expected a zarr-python store, got {type(zarr_store).__name__}")
        super().__init__(zarr_store)

    @classmethod
    def directory(cls, path: str | PurePath | UPath) -> Self:
        """A hierarchy in a local directory (a folder per node, a file per record, e.g. for
        debugging); existing files are kept when writing."""
        location = Location(path).local
        if location is None:
            raise ValueError(f"{path}: not a local directory")
        return cls(_compat.local_store(location, read_only=False))

    @property
    def name(self) -> str:
        return repr(self.zarr)

    def __repr__(self) -> str:
        return f"ZarrStoreAdapter({self.zarr!r})"
