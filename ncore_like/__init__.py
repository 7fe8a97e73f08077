"""ncore_like: zarr hierarchies in single-file indexed tar archives (``.itar``), read fast
from local disks and object storage."""

from ._concurrency import set_sync_timeout, set_worker_threads, sync_timeout, worker_threads
from ._lru import clear_caches
from .archive import IndexedTarArchive, IndexTailRetention, Record
from .backend import Backend
from .errors import (
    ArchiveClosedError,
    ArchiveFormatError,
    ChecksumError,
    ConsolidatedMetadataError,
    EventLoopError,
    InvalidKeyError,
    NcoreLikeError,
    NodeMetadataError,
    ReadOnlyError,
    RecordExistsError,
    UnfinishedArchiveError,
)
from .nodes import Array, BloscCompression, EncodedArray, Group, NodeCache
from .store import IndexedTarZarrStore, RecoveryReport, Store, ZarrStoreAdapter, recover

__all__ = [
    "ArchiveClosedError",
    "ArchiveFormatError",
    "Array",
    "Backend",
    "BloscCompression",
    "ChecksumError",
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
    "NodeMetadataError",
    "ReadOnlyError",
    "Record",
    "RecordExistsError",
    "RecoveryReport",
    "Store",
    "UnfinishedArchiveError",
    "ZarrStoreAdapter",
    "clear_caches",
    "recover",
    "set_sync_timeout",
    "set_worker_threads",
    "sync_timeout",
    "worker_threads",
]
__version__ = "0.1.0"
