"""xarray's backend for indexed tar archives (the one module that imports xarray):
``xarray.open_dataset("seq.itar", engine="ncore_like")`` opens a group of a hierarchy in an
archive, local or remote, as a dataset.

Registered under the entry point group ``xarray.backends``. The archive is opened with
:class:`~ncore_like.IndexedTarZarrStore`; xarray's own zarr backend reads the metadata
(dimensions, attributes, encodings, its decoding conventions) through the store's
zarr-python store, which serves the archive's consolidated metadata in zarr-python's form,
so opening reads the archive's tail and nothing else. The values are read by ncore_like's
fast backend (chunks fetched together and decoded on the worker pool, straight into the
result), not by zarr-python. The archive closes with the dataset.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
from xarray import Dataset, Variable
from xarray.backends import BackendArray, BackendEntrypoint
from xarray.backends.zarr import ZarrBackendEntrypoint, ZarrStore
from xarray.core import indexing

from .nodes import IndexedTarZarrStore

if TYPE_CHECKING:  # the typed nodes come from the store (the layer above it isn't imported here)
    from .nodes import Array, Group

__all__ = ["NcoreLikeBackendEntrypoint"]

#: What a location may be: a path, a URL, a ``UPath`` (with its storage options), or an
#: archive opened already (which the dataset doesn't close).
Location = str | os.PathLike[str] | IndexedTarZarrStore


class NcoreLikeBackendEntrypoint(BackendEntrypoint):
    """``engine="ncore_like"``: datasets from groups of zarr hierarchies in ``.itar`` archives."""

    description = "Open zarr groups in indexed tar archives (.itar) with ncore_like"
    open_dataset_parameters = (
        "filename_or_obj",
        "drop_variables",
        "group",
        "storage_options",
        "verify_checksums",
        "mask_and_scale",
        "decode_times",
        "concat_characters",
        "decode_coords",
        "use_cftime",
        "decode_timedelta",
    )

    def open_dataset(  # type: ignore[override]
        self,
        filename_or_obj: Location,
        *,
        drop_variables: str | Iterable[str] | None = None,
        group: str | None = None,
        storage_options: dict[str, Any] | None = None,
        verify_checksums: bool | None = True,
        **decoding: Any,
    ) -> Dataset:
        """The dataset of ``group`` (default: the root group) of the archive at
        ``filename_or_obj``; ``storage_options`` for URLs (as fsspec takes them). Every
        record read is checked against its checksum (a damaged chunk raises
        :class:`~ncore_like.ChecksumError`) unless ``verify_checksums=False``; a store
        passed in reads as it was opened."""
        if isinstance(filename_or_obj, IndexedTarZarrStore):
            store, owned = filename_or_obj, False
        else:
            location = _location(filename_or_obj, storage_options)
            store, owned = IndexedTarZarrStore(location, verify_checksums=verify_checksums), True
        try:
            root = store.open_root_group(consolidated="auto")
            group_node = root.group(group.strip("/")) if group and group.strip("/") else root
            metadata = _ArchiveZarrStore.open_group(store.zarr, group=group, mode="r", consolidated=None)
            metadata.typed_group = group_node
            dataset = ZarrBackendEntrypoint().open_dataset(
                store.zarr,  # type: ignore[arg-type]  # xarray takes any zarr-python store
                store=metadata,
                drop_variables=drop_variables,
                **decoding,
            )
        except BaseException:
            if owned:
                store.close()
            raise
        if owned:
            dataset.set_close(store.close)
        return dataset

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        if isinstance(filename_or_obj, IndexedTarZarrStore):
            return True
        try:
            return str(os.fspath(filename_or_obj)).endswith(".itar")
        except TypeError:
            return False


class _ArchiveZarrStore(ZarrStore):
    """xarray's zarr store of a group, whose variables read through the typed API."""

    typed_group: Group

    def open_store_variable(self, name: str) -> Variable:
        variable: Variable = super().open_store_variable(name)  # type: ignore[no-untyped-call]
        fast = _ArchiveArray(self.typed_group.array(name), variable.dtype)
        return Variable(variable.dims, indexing.LazilyIndexedArray(fast), variable.attrs, variable.encoding)


class _ArchiveArray(BackendArray):
    """An array of an archive as xarray reads it: outer indexing with one index array (ints,
    slices and one integer array; xarray applies the others to what is read), through
    :meth:`Array.read`, which pairs several index arrays as numpy does."""

    def __init__(self, array: Array, dtype: np.dtype[Any]) -> None:
        self._array = array
        self.shape = array.shape
        self.dtype = dtype

    def __getitem__(self, key: indexing.ExplicitIndexer) -> Any:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.OUTER_1VECTOR, self._read)

    def _read(self, key: tuple[Any, ...]) -> Any:
        # Outer indexing keeps the index array's axis in place; numpy (and read()) moves it
        # first when an int stands apart from it: ints are read as slices of one, then dropped.
        ints = [axis for axis, item in enumerate(key) if isinstance(item, int | np.integer)]
        if not ints or not any(isinstance(item, np.ndarray) for item in key):
            return self._array.read(key)
        spelled = tuple(
            slice(int(item) % size, int(item) % size + 1) if axis in ints else item
            for axis, (item, size) in enumerate(zip(key, self.shape, strict=True))
        )
        return self._array.read(spelled).squeeze(axis=tuple(ints))


def _location(location: str | os.PathLike[str], storage_options: dict[str, Any] | None) -> Any:
    if not storage_options:
        return location
    from upath import UPath

    return UPath(location, **storage_options)
