"""ncore_like: zarr hierarchies in single-file indexed tar archives (``.itar``), read fast
from local disks and object storage.

The names below are imported on first use (PEP 562), so that ``import ncore_like`` and the
archive layer alone (``ncore_like.archive``) don't pay for zarr-python, numcodecs and
fsspec: a script that only reads records starts in a fraction of the time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

# The library's loggers ("ncore_like.archive.retry"...) are quiet until the application
# configures logging: ``_log`` gives ``ncore_like`` a NullHandler before it makes the first.

if TYPE_CHECKING:  # the names as type checkers see them (``X as X``: re-exported)
    from ._concurrency import (
        set_sync_timeout as set_sync_timeout,
        set_worker_threads as set_worker_threads,
        sync_timeout as sync_timeout,
        worker_threads as worker_threads,
    )
    from ._lru import (
        clear_caches as clear_caches,
    )
    from ._pack import (
        PackResult as PackResult,
        pack as pack,
        pack_many as pack_many,
    )
    from .archive import (
        IndexedTarArchive as IndexedTarArchive,
        IndexTailRetention as IndexTailRetention,
        Record as Record,
        RecordCache as RecordCache,
        RetryPolicy as RetryPolicy,
    )
    from .backend import (
        Backend as Backend,
    )
    from .errors import (
        ArchiveClosedError as ArchiveClosedError,
        ArchiveExistsError as ArchiveExistsError,
        ArchiveFormatError as ArchiveFormatError,
        ChecksumError as ChecksumError,
        ConsolidatedMetadataError as ConsolidatedMetadataError,
        EventLoopError as EventLoopError,
        InvalidKeyError as InvalidKeyError,
        NcoreLikeError as NcoreLikeError,
        NodeMetadataError as NodeMetadataError,
        ReadOnlyError as ReadOnlyError,
        RecordExistsError as RecordExistsError,
        UnfinishedArchiveError as UnfinishedArchiveError,
    )
    from .nodes import (
        ArchiveCollection as ArchiveCollection,
        Array as Array,
        BloscCompression as BloscCompression,
        EncodedArray as EncodedArray,
        Group as Group,
        IndexedTarZarrStore as IndexedTarZarrStore,
        NodeCache as NodeCache,
        Store as Store,
        ZarrStoreAdapter as ZarrStoreAdapter,
    )
    from .store import (
        RecoveryReport as RecoveryReport,
        recover as recover,
    )
    from .viewer import (
        Viewer as Viewer,
        view as view,
    )

# Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["set_sync_timeout", "set_worker_threads", "sync_timeout", "worker_threads"], "._concurrency"),
    "clear_caches": "._lru",
    **dict.fromkeys(["PackResult", "pack", "pack_many"], "._pack"),
    **dict.fromkeys(["IndexedTarArchive", "IndexTailRetention", "Record", "RecordCache", "RetryPolicy"], ".archive"),
    "Backend": ".backend",
    **dict.fromkeys(
        [
            "ArchiveClosedError",
            "ArchiveExistsError",
            "ArchiveFormatError",
            "ChecksumError",
            "ConsolidatedMetadataError",
            "EventLoopError",
            "InvalidKeyError",
            "NcoreLikeError",
            "NodeMetadataError",
            "ReadOnlyError",
            "RecordExistsError",
            "UnfinishedArchiveError",
        ],
        ".errors",
    ),
    **dict.fromkeys(
        [
            "ArchiveCollection",
            "Array",
            "BloscCompression",
            "EncodedArray",
            "Group",
            "IndexedTarZarrStore",
            "NodeCache",
            "Store",
            "ZarrStoreAdapter",
        ],
        ".nodes",
    ),
    **dict.fromkeys(["RecoveryReport", "recover"], ".store"),
    **dict.fromkeys(["Viewer", "view"], ".viewer"),
}

_SUBPACKAGES = frozenset(["archive", "backend", "cli", "dataset", "errors", "nodes", "store", "viewer"])

__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), _SUBPACKAGES)
