"""Helpers that damage archives on purpose, and files mistaken for archives, shared by the tests."""

from __future__ import annotations

import gzip
import random
import subprocess
import zipfile
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
    writer = getattr(archive._impl, "_writer", None)  # the implementation of a writing archive
    assert writer is not None, "not an archive being written"
    writer.release()


def foreign_files(folder: Path) -> dict[str, Path]:
    """Files people mistake for archives, written by the real tools: GNU tar (a small one, and
    one larger than the tail read, so that its first block is read apart), Python's zipfile,
    gzip."""
    content = folder / "seq.zarr"
    content.mkdir(parents=True)
    (content / ".zgroup").write_text('{"zarr_format": 2}')
    (content / "big").write_bytes(random.Random(7).randbytes(3 << 20))
    files = {"tar": folder / "plain.tar", "big tar": folder / "big.tar", "zip": folder / "plain.zip"}
    subprocess.run(["tar", "-cf", str(files["tar"]), "-C", str(folder), "seq.zarr/.zgroup"], check=True)
    subprocess.run(["tar", "-cf", str(files["big tar"]), "-C", str(folder), "seq.zarr"], check=True)
    with zipfile.ZipFile(files["zip"], "w") as bundle:
        bundle.write(content / ".zgroup", "seq.zarr/.zgroup")
    files["gzip"] = folder / "plain.tar.gz"
    files["gzip"].write_bytes(gzip.compress(files["tar"].read_bytes()))
    return files


#: What opening each of :func:`foreign_files` says (regular expressions).
FOREIGN_MESSAGES = {
    "tar": r": a plain tar file, not an indexed tar archive .*tar -xf.*ncore-like pack FOLDER OUT\.itar",
    "big tar": r": a plain tar file, not an indexed tar archive .*tar -xf",
    "zip": r": a zip file, not an indexed tar archive; .*ncore-like pack 'zip://FOLDER::.*plain\.zip' OUT\.itar",
    "gzip": r": a gzip-compressed file, not an indexed tar archive; decompress it",
}
