"""Layer 1: the ``.itar`` format and ``IndexedTarArchive`` (knows nothing about zarr beyond
which keys are node metadata)."""

from ._archive import IndexedTarArchive, IndexTailRetention, Record
from ._format import is_node_metadata_key

__all__ = ["IndexTailRetention", "IndexedTarArchive", "Record", "is_node_metadata_key"]

# Bulk reads of many records, and verification of whole archives.
from ._bulk import map_records, read_records
from ._verify import (
    ArchiveReport,
    Problem,
    TarMember,
    TarStop,
    VerifyProgress,
    error_detail,
    scan_tar,
    verify_archive,
)

__all__ += [
    "ArchiveReport",
    "Problem",
    "TarMember",
    "TarStop",
    "VerifyProgress",
    "error_detail",
    "map_records",
    "read_records",
    "scan_tar",
    "verify_archive",
]
