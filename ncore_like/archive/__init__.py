"""Layer 1: the ``.itar`` format and ``IndexedTarArchive`` (knows nothing about zarr beyond
which keys are node metadata)."""

from ._archive import IndexedTarArchive, IndexTailRetention, Record
from ._format import is_node_metadata_key

__all__ = ["IndexTailRetention", "IndexedTarArchive", "Record", "is_node_metadata_key"]
