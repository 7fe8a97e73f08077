"""``recover``: finishing the archive of a writer that died, with its zarr hierarchy.

The archive layer keeps every complete, intact record (:func:`recover_records`); this
module then regenerates the consolidated metadata record when the zarr hierarchy in the
recovered records is complete (a root group, the metadata of every node's parent groups,
and every chunk record under an array), so the archive opens as its writer would have
closed it. A hierarchy that is not complete (e.g. the writer died before the first
``flush()`` wrote the node metadata) is left without consolidated metadata, and the report
says what is missing; its records are all there (``IndexedTarArchive`` reads them).
Records under no array (chunks of arrays whose metadata was written after the last
``flush()``) are kept as records, outside the hierarchy, and counted in the report.
"""

from __future__ import annotations

import json
from pathlib import PurePath
from typing import TYPE_CHECKING

from .._log import library_logger
from ..archive import IndexedTarArchive
from ..archive._format import is_node_metadata_key
from ..archive._recover import RecoveryReport, recover_records, remove_copied_source
from ._consolidated import CONSOLIDATED_KEY_V2, CONSOLIDATED_KEY_V3, is_consolidated_metadata_key
from ._itar_store import IndexedTarZarrStore

if TYPE_CHECKING:
    from upath import UPath

__all__ = ["RecoveryReport", "recover"]

logger = library_logger("ncore_like.store.recover")


def recover(path: str | PurePath | UPath, output: str | PurePath | None = None) -> RecoveryReport:
    """Recovers the archive of a writer that died (killed, out of memory, power cut).

    Finds the unfinished file of the local archive ``path`` (``<path>.partial``; the partial
    file itself may be given too), keeps every complete record whose payload matches its
    CRC32C, drops a torn last record, regenerates the consolidated metadata when the zarr
    hierarchy is complete, and writes a valid, closed archive: at ``path`` itself (the
    partial file is finished in place, without copying records) or at ``output``.

    Recovery never replaces a file: if one is at ``path`` (e.g. the intact archive that a
    failed overwrite left there) or at ``output``, it is refused before anything changes;
    give another ``output`` to recover the partial file beside it.

    Returns:
        What was kept and dropped.

    Raises:
        FileNotFoundError: If there is no unfinished file.
        ArchiveExistsError: If a file is at the name to write (a ``FileExistsError``; the
            message names both files and a safe command).
        UnfinishedArchiveError: If a running writer holds the partial file.
        ValueError: For remote locations (an unfinished upload leaves nothing behind).
    """
    archive, report = recover_records(path, output)
    try:
        notes = len(report.notes)
        _consolidate(archive, report)
        for note in report.notes[notes:]:  # the decisions about the hierarchy
            logger.info("%s: %s", report.archive, note)
        archive.close()
    except BaseException:
        archive.abort()  # a copy is discarded; a partial file finished in place is kept
        raise
    remove_copied_source(report)
    return report


def _consolidate(archive: IndexedTarArchive, report: RecoveryReport) -> None:
    keys = [key for key in archive.keys() if key not in (CONSOLIDATED_KEY_V2, CONSOLIDATED_KEY_V3)]
    if ".zgroup" in keys:
        zarr_format = 2
    elif "zarr.json" in keys:
        zarr_format = 3
    else:
        report.notes.append("no zarr root group among the records: no consolidated metadata written")
        return
    nodes = _nodes(archive, keys, zarr_format)
    missing = nodes if isinstance(nodes, str) else _incomplete(*nodes)
    if missing is not None:
        report.notes.append(f"the zarr hierarchy is incomplete ({missing}): no consolidated metadata written")
        return
    assert not isinstance(nodes, str)
    orphans = _orphans(keys, nodes[1])
    if orphans:
        report.notes.append(
            f"{len(orphans)} records belong to no array (e.g. {orphans[0]!r}; chunks of arrays whose metadata "
            "was not flushed): kept as records, not part of the hierarchy"
        )
    store = IndexedTarZarrStore._of_archive(archive)
    store.consolidate()
    key = CONSOLIDATED_KEY_V2 if zarr_format == 2 else CONSOLIDATED_KEY_V3
    report.notes.append(f"consolidated metadata regenerated ({key})")


def _nodes(archive: IndexedTarArchive, keys: list[str], zarr_format: int) -> tuple[set[str], set[str], set[str]] | str:
    """The paths of the groups, the arrays and the attributes among the records, or why
    they can't be told (a ``zarr.json`` that is no JSON object)."""
    groups: set[str] = set()
    arrays: set[str] = set()
    attributes: set[str] = set()
    for key in keys:
        if not is_node_metadata_key(key) or is_consolidated_metadata_key(key):
            continue
        path, _, name = key.rpartition("/")
        if zarr_format == 2:
            if name == ".zgroup":
                groups.add(path)
            elif name == ".zarray":
                arrays.add(path)
            elif name == ".zattrs":
                attributes.add(path)
        elif name == "zarr.json":
            try:
                node_type = json.loads(archive.read(key)).get("node_type")
            except (ValueError, AttributeError):
                return f"{key} is no JSON object"
            (arrays if node_type == "array" else groups).add(path)
    return groups, arrays, attributes


def _incomplete(groups: set[str], arrays: set[str], attributes: set[str]) -> str | None:
    """What the hierarchy lacks (None if complete): the group metadata of a node's parent,
    or the node metadata of attributes."""
    for path in sorted(attributes - groups - arrays):
        return f"attributes but no node metadata for {path or '/'!r}"
    for path in sorted(groups | arrays):
        parent = path.rpartition("/")[0] if path else None
        while parent is not None:
            if parent not in groups:
                return f"no group metadata for {parent or '/'!r}, parent of {path!r}"
            parent = parent.rpartition("/")[0] if parent else None
    return None


def _orphans(keys: list[str], arrays: set[str]) -> list[str]:
    """Records that lie under no array of the hierarchy (e.g. chunks of an array whose
    metadata the writer held in memory when it died)."""
    orphans = []
    for key in keys:
        if is_node_metadata_key(key):
            continue
        parent = key.rpartition("/")[0]
        while parent and parent not in arrays:
            parent = parent.rpartition("/")[0]
        if parent not in arrays:
            orphans.append(key)
    return orphans
