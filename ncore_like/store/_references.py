"""An archive described as a kerchunk-style reference set: every chunk is a byte range of
the archive file, so fsspec's ``reference://`` filesystem serves the hierarchy to zarr-python
(and xarray) with no ncore_like installed.

The set is ``{"version": 1, "refs": {key: value}}``: node metadata records inline as their
JSON text (with zarr-python's consolidated metadata: ``.zmetadata`` in format 2, the root
``zarr.json`` with inline metadata in format 3), and every other record as
``[url, offset, size]`` of its payload (records of no byte are inline, empty). The
archive's own compressed records of consolidated metadata are left out: the inline forms
replace them.
"""

from __future__ import annotations

from typing import Any

from ..archive import IndexedTarArchive, is_node_metadata_key, read_records
from ._consolidated import is_consolidated_metadata_key
from ._zarr_store import ItarZarrStore

__all__ = ["archive_references"]

_SERVED_BY_THE_STORE = frozenset({".zmetadata", "zarr.json"})


def archive_references(archive: IndexedTarArchive, url: str | None = None) -> dict[str, Any]:
    """The reference set of an archive opened for reading; chunks point at ``url`` (default:
    the archive's own location, a path or a URL), e.g. where the archive will be published."""
    if archive.mode != "r":
        raise ValueError(f"{archive.location.name}: references describe an archive opened for reading")
    target = url if url is not None else archive.location.name
    zarr_store = ItarZarrStore(archive, read_only=True)
    keys = [key for key in zarr_store.listed_keys() if not is_consolidated_metadata_key(key) or key == ".zmetadata"]
    # Node metadata is inlined: the archive's records are read together (remote ones are
    # requests in flight at once); the root's records, which the store serves in
    # zarr-python's consolidated form, come from the store.
    stored = [key for key in keys if is_node_metadata_key(key) and key not in _SERVED_BY_THE_STORE]
    inline = dict(read_records(archive, stored))
    refs: dict[str, Any] = {}
    for key in keys:
        if is_node_metadata_key(key) or key == ".zmetadata":
            data = inline[key] if key in inline else zarr_store.record_bytes(key)
            refs[key] = data.decode("utf-8")
            continue
        record = archive.records[key]
        refs[key] = [target, record.offset, record.size] if record.size else ""
    return {"version": 1, "refs": refs}
