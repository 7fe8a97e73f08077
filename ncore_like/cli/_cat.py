"""``ncore-like cat``: the payload of one record, or of a blob array, to standard output."""

from __future__ import annotations

import argparse
import io
import math
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from types import EllipsisType
from typing import Any

import numpy as np

from .._pack._hierarchy import blob_size, has_hierarchy, is_blob, is_variable_length, open_root
from ..archive import IndexedTarArchive, is_node_metadata_key
from ..nodes import Array, Group, Selection
from ..nodes._array import chunk_key_of
from ._common import (
    CommandError,
    add_quiet_option,
    archive_store,
    close_matches,
    describe_error,
    format_bytes,
    progress,
)

__all__ = ["parse_selection", "register", "run"]

#: Remote payloads and arrays larger than this are read in pieces of this size under a
#: progress bar (one request, or one read of all chunks, would show nothing until the end).
_PIECE_BYTES = 8 << 20
#: Pieces of a record read at once (the requests overlap).
_PIECES_IN_FLIGHT = 4


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Adds the ``cat`` command."""
    parser = commands.add_parser(
        "cat",
        parents=parents,
        help="write the payload of a record (or a blob array) to standard output",
        description="Write the payload of one record, as stored (binary), to standard output. KEY may also be "
        "the path of an array, with a selection in brackets ('poses[10:20]', 'lidar/points[3, :2]', "
        "'cameras/front[7]'): a blob (e.g. an encoded image) is written as its bytes, one element of a "
        "variable-length bytes array as its bytes, any other array or selection in numpy's .npy format "
        "(redirect it to a file).",
    )
    parser.add_argument("archive", metavar="ARCHIVE", help="the .itar archive (path or URL)")
    parser.add_argument(
        "key",
        metavar="KEY",
        help="key of a record (see 'ncore-like ls') or path of an array, optionally with a selection: "
        "ints, slices START:STOP:STEP and ... separated by commas, in brackets",
    )
    add_quiet_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Writes the payload of the record or array."""
    key = args.key
    with archive_store(args) as store:
        archive = store.archive
        if key in archive:
            data = _record(archive, key, args.quiet)
        else:
            path, selection = _split_selection(key, store.name)
            node = _node(store, path.strip("/")) if has_hierarchy(archive) else None
            if isinstance(node, Group):
                members = [f"{path.strip('/')}/{name}" for name in list(node.keys())[:3]]
                example = f" (its members: {', '.join(map(repr, members))}...)" if members else ""
                raise CommandError(f"{store.name}: {path!r} is a group; cat writes a record or an array{example}")
            array = node if isinstance(node, Array) else None
            if array is None:
                keys = archive.keys()
                nodes = {key.rpartition("/")[0] for key in keys if is_node_metadata_key(key)}
                nearby = close_matches(path, [*keys, *sorted(nodes - {""})])
                raise CommandError(f"{store.name}: no record or array {path!r}{nearby}")
            if selection is None:
                data = _payload(array, archive, store.name, args.quiet)
            else:
                data = _selected(array, selection, key, store.name)
    out = sys.stdout.buffer
    try:
        out.write(data)
        out.flush()
    except BrokenPipeError:
        raise  # the reader went away: the command line's handling
    except OSError as error:  # a full disk behind a redirection (> /dev/full)
        raise CommandError(f"can't write to standard output: {error.strerror}") from error
    return 0


def _node(store: Any, path: str) -> Array | Group | None:
    node: Array | Group | None = open_root(store, store.archive).get(path) if path else None
    return node


def _record(archive: IndexedTarArchive, key: str, quiet: bool) -> bytes:
    """A record's payload; a large remote one read in pieces, a few at a time, under a
    progress bar (its checksum checked on the whole, as a read of the record does)."""
    record = archive.records[key]
    if not archive.is_remote or record.size <= _PIECE_BYTES or archive.in_memory(key):
        return archive[key]
    starts = range(0, record.size, _PIECE_BYTES)

    def piece(start: int) -> bytes:
        return archive.read_span(record.offset + start, min(_PIECE_BYTES, record.size - start))

    data = bytearray(record.size)
    with (
        progress(total=record.size, desc="cat", quiet=quiet) as bar,
        ThreadPoolExecutor(_PIECES_IN_FLIGHT, thread_name_prefix="ncore_like-cat") as pool,
    ):
        for start, chunk in zip(starts, pool.map(piece, starts), strict=True):
            data[start : start + len(chunk)] = chunk
            bar.update(len(chunk))
    payload = bytes(data)
    if archive.verify_checksums:
        archive.check_payload(key, payload)
    return payload


def _raw_blob_key(array: Array, archive: IndexedTarArchive) -> str | None:
    """The record holding a blob as it is (one uncompressed chunk), if it does."""
    if array.shape and array.chunks[0] < array.shape[0]:
        return None
    try:
        if array.compression is not None:
            return None
    except ValueError:  # codecs the typed API doesn't name: not raw
        return None
    key = chunk_key_of(array, (0,) * len(array.shape))
    record = archive.records.get(key)
    return key if record is not None and record.size == blob_size(array) else None


def _payload(array: Array, archive: IndexedTarArchive, name: str, quiet: bool) -> bytes:
    if is_blob(array):
        key = _raw_blob_key(array, archive) if archive.is_remote and blob_size(array) > _PIECE_BYTES else None
        return array.read_bytes() if key is None else _record(archive, key, quiet)
    if is_variable_length(array):
        raise _no_single_form(array, math.prod(array.shape), name)
    _refuse_npy_on_a_terminal(array, name)  # before reading: a large array takes a while
    nbytes = array.dtype.itemsize * math.prod(array.shape)
    if nbytes > _MAX_CAT_BYTES:
        example = f"'{array.path}[0:{max(1, _MAX_CAT_BYTES // max(1, nbytes // max(1, array.shape[0])))}]'"
        raise CommandError(
            f"{name}: array {array.path!r} holds {format_bytes(nbytes)}, more than cat reads at once "
            f"({format_bytes(_MAX_CAT_BYTES)}); select a part, e.g. {example}"
        )
    return _npy(_values(array, archive.is_remote, quiet), array, name)


#: The most an array cat writes whole may hold (it is read into memory, then written).
_MAX_CAT_BYTES = 4 << 30


def _refuse_npy_on_a_terminal(array: Array, name: str) -> None:
    if sys.stdout.isatty():
        raise CommandError(
            f"{name}: array {array.path!r} ({array.dtype}, shape {array.shape}) is no blob: its values come as "
            "numpy's .npy format; redirect the output to a file"
        )


def _npy(values: np.ndarray[Any, Any], array: Array, name: str) -> bytes:
    """Values in numpy's .npy format (refused on a terminal)."""
    _refuse_npy_on_a_terminal(array, name)
    buffer = io.BytesIO()
    np.save(buffer, values, allow_pickle=False)
    return buffer.getvalue()


def _no_single_form(array: Array, count: int, name: str) -> CommandError:
    example = f"'{array.path}[{0 if array.ndim == 1 else ', '.join('0' * array.ndim)}]'"
    return CommandError(
        f"{name}: array {array.path!r} holds variable-length elements ({count} selected), which have no single "
        f"binary form; cat one element, e.g. {example} (its bytes), or pack the archive with --bytes-as-blobs "
        "(one blob per element)"
    )


def _split_selection(key: str, name: str) -> tuple[str, Selection | None]:
    """``path[selection]`` as the path and the parsed selection (None without brackets)."""
    if not key.endswith("]") or "[" not in key:
        return key, None
    path, _, inside = key[:-1].partition("[")
    try:
        return path, parse_selection(inside)
    except ValueError as error:
        raise CommandError(f"{name}: {key!r}: {error}") from None


_INTEGER = re.compile(r"[+-]?\d+")


def parse_selection(text: str) -> tuple[int | slice | EllipsisType, ...]:
    """A selection as written between brackets in Python (``3``, ``10:20``, ``::-1, 0``,
    ``..., 2``): integers, slices and ``...`` separated by commas; parsed, never evaluated.

    Raises:
        ValueError: For anything else, saying what is accepted.
    """
    items = [item.strip() for item in text.split(",")]
    if len(items) > 1 and not items[-1]:
        items.pop()  # "3," is the tuple (3,)
    selection: list[int | slice | EllipsisType] = []
    for item in items:
        if item == "...":
            selection.append(Ellipsis)
        elif _INTEGER.fullmatch(item):
            selection.append(int(item))
        elif ":" in item and item.count(":") <= 2:
            parts = [part.strip() for part in item.split(":")]
            if not all(not part or _INTEGER.fullmatch(part) for part in parts):
                break
            start, stop, step = (int(part) if part else None for part in [*parts, ""][:3])
            if step == 0:
                raise ValueError(f"slice {item!r} has a step of 0")
            selection.append(slice(start, stop, step))
        else:
            break
    else:
        return tuple(selection)
    raise ValueError(
        f"selection [{text}] is not understood (integers, slices START:STOP:STEP and ... separated by commas, "
        "e.g. [3], [10:20], [::2, 0])"
    )


def _selected(array: Array, selection: tuple[Any, ...], key: str, name: str) -> bytes:
    """The bytes of a selection: a blob's bytes, one variable-length element's bytes, else
    the values in numpy's .npy format."""
    try:
        values = array[selection]
    except (IndexError, TypeError) as error:  # the array and the archive are named in it
        raise CommandError(describe_error(error, name)) from error
    if is_blob(array):
        return bytes(np.ascontiguousarray(values).tobytes())
    if is_variable_length(array):
        if values.ndim:
            raise _no_single_form(array, values.size, name)
        element = values[()]
        return element.encode() if isinstance(element, str) else bytes(element)
    return _npy(values, array, name)


def _values(array: Array, remote: bool, quiet: bool) -> np.ndarray[Any, Any]:
    """The array's values; a large remote array read in slabs of whole chunk rows under a
    progress bar."""
    nbytes = array.dtype.itemsize * math.prod(array.shape)
    if not remote or not array.shape or nbytes <= _PIECE_BYTES:
        return array.read()
    rows = array.shape[0]
    row_bytes = nbytes // rows
    step = max(1, _PIECE_BYTES // (row_bytes * array.chunks[0])) * array.chunks[0]
    out = np.empty(array.shape, dtype=array.dtype)
    with progress(total=nbytes, desc="cat", quiet=quiet) as bar:
        for start in range(0, rows, step):
            stop = min(start + step, rows)
            array.read(slice(start, stop), out=out[start:stop])
            bar.update((stop - start) * row_bytes)
    return out
