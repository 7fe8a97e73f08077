"""Helpers that damage archives on purpose, shared by the tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ncore_like import IndexedTarArchive
from ncore_like.archive._format import encode_index, pack_index_header, padding


def rewrite_index(path: Path, change: Callable[[list[str], list[int], list[int]], None]) -> None:
    """Rewrites the index of a local archive after ``change`` edited its lists (keys,
    payload offsets, sizes); the tar part stays as it is."""
    with IndexedTarArchive(path) as archive:
        keys = archive.keys()
        offsets = [archive.records[key].offset for key in keys]
        sizes = [archive.records[key].size for key in keys]
        index = archive.index_record
    assert index is not None
    change(keys, offsets, sizes)
    data = encode_index(keys, offsets, sizes)
    with path.open("r+b") as file:
        file.seek(index.offset)
        file.write(data + bytes(padding(len(data))) + pack_index_header(index.offset, len(data)))
        file.truncate()


def die(archive: IndexedTarArchive) -> None:
    """What a killed writer leaves behind, without killing the test: its partial file as it
    is, no longer held (its descriptor and lock go, nothing more is written)."""
    writer = archive._writer
    assert writer is not None, "not an archive being written"
    writer.release()
