"""What the viewer shows, opened for reading: an archive, or a zarr hierarchy that
``ncore-like pack`` accepts (a zarr directory, or a zarr store URL of any fsspec filesystem)."""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from .. import _compat
from ..archive import IndexedTarArchive, Location
from ..nodes import Group, IndexedTarZarrStore, Store, ZarrStoreAdapter
from ..store import is_consolidated_metadata_key

if TYPE_CHECKING:
    from upath import UPath

__all__ = ["ROOT_METADATA_KEYS", "Source", "open_source"]

#: The records (files) of a root group, by zarr format.
ROOT_METADATA_KEYS = (".zgroup", "zarr.json")


@dataclass(frozen=True)
class Source:
    """An opened hierarchy: its store and root group, and its archive when it is one (whose
    records are read by key, and scanned for nearby frames)."""

    name: str
    store: Store
    root: Group
    archive: IndexedTarArchive | None

    def close(self) -> None:
        self.store.close()


def open_source(location: str | PurePath | UPath, storage_options: Mapping[str, Any] | None = None) -> Source:
    """Opens ``location`` for reading: a local path or a URL (``storage_options`` for URLs).

    Archives are opened with checksums verified (a damaged record is an error, never wrong
    pixels) and, when remote, with exact range requests (several frames fetched at once,
    and nothing read that isn't shown).

    Raises:
        FileNotFoundError: For a local path that doesn't exist.
        ValueError: For a folder without a zarr hierarchy at its top, an archive without
            one, or a file that isn't an archive (``ArchiveFormatError``).
    """
    where = Location(location, storage_options)
    name = where.name
    if where.local is not None:
        path = Path(where.local)
        if path.is_dir():
            if not any((path / key).is_file() for key in ROOT_METADATA_KEYS):
                raise ValueError(f"{name}: a folder without a zarr hierarchy at its top (no .zgroup or zarr.json)")
            return _hierarchy(name, ZarrStoreAdapter(_compat.local_store(where.local, read_only=True)), None)
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
        return _archive(name, where.local)
    upath = where.upath
    if upath.name.endswith(".itar") or upath.is_file():
        return _archive(name, upath)
    store = ZarrStoreAdapter(_compat.fsspec_store(upath.fs, upath.path, read_only=True))
    return _hierarchy(name, store, None)


def _archive(name: str, target: str | UPath) -> Source:
    store = IndexedTarZarrStore(target, "r", remote_range_reads=True, verify_checksums=True)
    archive = store.archive
    if not any(key in archive for key in ROOT_METADATA_KEYS):
        store.close()
        raise ValueError(f"{name}: no zarr hierarchy in the archive (no .zgroup or zarr.json record)")
    if archive.is_remote and not any(is_consolidated_metadata_key(key) for key in archive.keys()):
        # The viewer lists the whole hierarchy: without a consolidated record, the node
        # metadata records of a remote archive are fetched together, not one round trip each.
        store.load_node_metadata()
    return _hierarchy(name, store, archive)


def _hierarchy(name: str, store: Store, archive: IndexedTarArchive | None) -> Source:
    try:
        root = store.open_root_group(consolidated="auto")
    except BaseException:
        store.close()
        raise
    return Source(name, store, root, archive)
