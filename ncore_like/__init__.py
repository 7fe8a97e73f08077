"""ncore_like: zarr hierarchies in single-file indexed tar archives (``.itar``), read fast
from local disks and object storage."""

from .archive import IndexedTarArchive, IndexTailRetention, Record
from .errors import (
    ArchiveClosedError,
    ArchiveFormatError,
    InvalidKeyError,
    ReadOnlyError,
    RecordExistsError,
)

__all__ = [
    "ArchiveClosedError",
    "ArchiveFormatError",
    "IndexTailRetention",
    "IndexedTarArchive",
    "InvalidKeyError",
    "ReadOnlyError",
    "Record",
    "RecordExistsError",
]
__version__ = "0.1.0"
