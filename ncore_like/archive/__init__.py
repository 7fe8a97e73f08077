"""Layer 1: the ``.itar`` format and ``IndexedTarArchive`` (knows nothing about zarr beyond
which keys are node metadata).

``IndexedTarArchive`` is a face over two implementations, ``_reading`` and ``_writing``;
record sources (``_sources``, ``_remote`` for fsspec URLs, ``_cache``) fetch the bytes,
remote ones through one retried read path (``_retry``).

Every name is imported on first use (see :mod:`ncore_like._lazy`): reading records needs
neither bulk reads nor verification, and a module that needs one small part (the command
line's ``--help`` its :class:`Location`) imports only that part.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._archive import (
        IndexedTarArchive as IndexedTarArchive,
        IndexTailRetention as IndexTailRetention,
        OpenMode as OpenMode,
        Record as Record,
    )
    from ._bulk import map_records as map_records, read_records as read_records, scan_records as scan_records
    from ._cache import RecordCache as RecordCache
    from ._format import is_node_metadata_key as is_node_metadata_key
    from ._location import Location as Location, is_url as is_url
    from ._reading import ReadOptions as ReadOptions
    from ._retry import RetryPolicy as RetryPolicy, is_transient as is_transient
    from ._verify import (
        ArchiveReport as ArchiveReport,
        Problem as Problem,
        TarMember as TarMember,
        TarStop as TarStop,
        VerifyProgress as VerifyProgress,
        error_detail as error_detail,
        scan_tar as scan_tar,
        verify_archive as verify_archive,
    )

_LAZY = {
    **dict.fromkeys(["IndexedTarArchive", "IndexTailRetention", "OpenMode", "Record"], "._archive"),
    "is_node_metadata_key": "._format",
    **dict.fromkeys(["Location", "is_url"], "._location"),
    **dict.fromkeys(["RetryPolicy", "is_transient"], "._retry"),
    "RecordCache": "._cache",
    **dict.fromkeys(["map_records", "read_records", "scan_records"], "._bulk"),
    **dict.fromkeys(
        [
            "ArchiveReport",
            "Problem",
            "TarMember",
            "TarStop",
            "VerifyProgress",
            "error_detail",
            "scan_tar",
            "verify_archive",
        ],
        "._verify",
    ),
    "ReadOptions": "._reading",
}

__all__ = [
    "ArchiveReport",
    "IndexTailRetention",
    "IndexedTarArchive",
    "Location",
    "OpenMode",
    "Problem",
    "ReadOptions",
    "Record",
    "RecordCache",
    "RetryPolicy",
    "TarMember",
    "TarStop",
    "VerifyProgress",
    "error_detail",
    "is_node_metadata_key",
    "is_transient",
    "is_url",
    "map_records",
    "read_records",
    "scan_records",
    "scan_tar",
    "verify_archive",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
