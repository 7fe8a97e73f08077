"""ncore_like: zarr hierarchies in single-file indexed tar archives (``.itar``), read fast
from local disks and object storage."""

from ._concurrency import set_worker_threads, worker_threads
from .archive import IndexedTarArchive, IndexTailRetention, Record
from .errors import (
    ArchiveClosedError,
    ArchiveFormatError,
    InvalidKeyError,
    ReadOnlyError,
    RecordExistsError,
)
from .nodes import Array, BloscCompression, EncodedArray, Group, NodeCache
from .store import IndexedTarZarrStore, Store, ZarrStoreAdapter, clear_caches

__all__ = [
    "ArchiveClosedError",
    "ArchiveFormatError",
    "Array",
    "BloscCompression",
    "EncodedArray",
    "Group",
    "IndexTailRetention",
    "IndexedTarArchive",
    "IndexedTarZarrStore",
    "InvalidKeyError",
    "NodeCache",
    "ReadOnlyError",
    "Record",
    "RecordExistsError",
    "Store",
    "ZarrStoreAdapter",
    "clear_caches",
    "set_worker_threads",
    "worker_threads",
]
__version__ = "0.1.0"
