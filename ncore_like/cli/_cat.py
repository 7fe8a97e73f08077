"""``ncore-like cat``: the payload of one record, or of a blob array, to standard output."""

from __future__ import annotations

import argparse
import io
import sys
from typing import Any

import numpy as np

from ..nodes import Array
from ._common import CommandError, archive_store, close_matches
from ._hierarchy import has_hierarchy, is_blob, open_root

__all__ = ["register", "run"]


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Adds the ``cat`` command."""
    parser = commands.add_parser(
        "cat",
        parents=parents,
        help="write the payload of a record (or a blob array) to standard output",
        description="Write the payload of one record, as stored (binary), to standard output. KEY may also be "
        "the path of an array: a blob (e.g. an encoded image) is written as its bytes, any other array in "
        "numpy's .npy format (redirect it to a file).",
    )
    parser.add_argument("archive", metavar="ARCHIVE", help="the .itar archive (path or URL)")
    parser.add_argument("key", metavar="KEY", help="key of a record (see 'ncore-like ls') or path of an array")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Writes the payload of the record or array."""
    key = args.key
    with archive_store(args) as store:
        archive = store.archive
        if key in archive:
            data = archive[key]
        else:
            array = _array(store, key.strip("/")) if has_hierarchy(archive) else None
            if array is None:
                nearby = close_matches(key, archive.keys())
                raise CommandError(f"{store.name}: no record or array {key!r}{nearby}")
            data = _payload(array, store.name)
    out = sys.stdout.buffer
    out.write(data)
    out.flush()
    return 0


def _array(store: Any, path: str) -> Array | None:
    node = open_root(store, store.archive).get(path) if path else None
    return node if isinstance(node, Array) else None


def _payload(array: Array, name: str) -> bytes:
    if is_blob(array):
        return array.read_bytes()
    if sys.stdout.isatty():
        raise CommandError(
            f"{name}: array {array.path!r} ({array.dtype}, shape {array.shape}) is no blob: its values come as "
            "numpy's .npy format; redirect the output to a file"
        )
    buffer = io.BytesIO()
    np.save(buffer, array.read(), allow_pickle=False)
    return buffer.getvalue()
