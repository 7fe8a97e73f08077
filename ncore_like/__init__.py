"""ncore_like: zarr hierarchies in single-file indexed tar archives (``.itar``), read fast
from local disks and object storage."""

from ._concurrency import set_sync_timeout, set_worker_threads, sync_timeout, worker_threads
from ._lru import clear_caches
from .archive import IndexedTarArchive, IndexTailRetention, Record
from .backend import Backend
from .errors import (
    ArchiveClosedError,
    ArchiveFormatError,
    ConsolidatedMetadataError,
    EventLoopError,
    InvalidKeyError,
    NcoreLikeError,
    ReadOnlyError,
    RecordExistsError,
)
from .nodes import Array, BloscCompression, EncodedArray, Group, NodeCache
from .store import IndexedTarZarrStore, Store, ZarrStoreAdapter

__all__ = [
    "ArchiveClosedError",
    "ArchiveFormatError",
    "Array",
    "Backend",
    "BloscCompression",
    "ConsolidatedMetadataError",
    "EncodedArray",
    "EventLoopError",
    "Group",
    "IndexTailRetention",
    "IndexedTarArchive",
    "IndexedTarZarrStore",
    "InvalidKeyError",
    "NcoreLikeError",
    "NodeCache",
    "ReadOnlyError",
    "Record",
    "RecordExistsError",
    "Store",
    "ZarrStoreAdapter",
    "clear_caches",
    "set_sync_timeout",
    "set_worker_threads",
    "sync_timeout",
    "worker_threads",
]
__version__ = "0.1.0"
