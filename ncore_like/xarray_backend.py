"""xarray's backend for indexed tar archives (the one module that imports xarray):
``xarray.open_dataset("seq.itar", engine="ncore_like")`` opens a group of a hierarchy in an
archive, local or remote, as a dataset.

Registered under the entry point group ``xarray.backends``. The archive is opened with
:class:`~ncore_like.IndexedTarZarrStore` and read by xarray's own zarr backend through the
store's zarr-python store, which serves the archive's consolidated metadata in zarr-python's
form: opening reads the archive's tail and nothing else. The archive closes with the dataset.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from xarray import Dataset
from xarray.backends import BackendEntrypoint
from xarray.backends.zarr import ZarrBackendEntrypoint

from .store import IndexedTarZarrStore

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
        **decoding: Any,
    ) -> Dataset:
        """The dataset of ``group`` (default: the root group) of the archive at
        ``filename_or_obj``; ``storage_options`` for URLs (as fsspec takes them)."""
        if isinstance(filename_or_obj, IndexedTarZarrStore):
            store, owned = filename_or_obj, False
        else:
            store, owned = IndexedTarZarrStore(_location(filename_or_obj, storage_options)), True
        try:
            dataset = ZarrBackendEntrypoint().open_dataset(
                store.zarr,  # type: ignore[arg-type]  # xarray takes any zarr-python store
                group=group,
                drop_variables=drop_variables,
                mode="r",
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


def _location(location: str | os.PathLike[str], storage_options: dict[str, Any] | None) -> Any:
    if not storage_options:
        return location
    from upath import UPath

    return UPath(location, **storage_options)
