"""Command-line bridge to the reference implementation ``nvidia-ncore`` 19.8.3.

This script runs INSIDE the reference virtual environment created by
``tests/support/reference.py`` (``nvidia-ncore`` 19.8.3 with zarr-python 2).  It must
never import ``ncore_like``: its whole point is to give the test-suite an independent
reader and writer of indexed tar archives (``.itar``).

Every command prints exactly one JSON document to stdout:

``dump-records ARCHIVE``
    ``{"keys": [key, ...], "records": {key: {"offset": int, "size": int,
    "sha256": str}}}``. ``keys`` is the ``IndexedTarStore`` iteration order; offsets
    and sizes come from the reference's own index, and each sha256 is taken over the
    value read back through the store (``store[key]``).

``write-records ARCHIVE SPEC_JSON``
    ``SPEC_JSON`` is a path (or ``-`` for stdin) to ``{"records": [[key,
    payload_base64], ...]}``. The records are written in that order with
    ``IndexedTarStore(mode="w")``, the store is closed, and the ``dump-records`` output
    of the written archive is printed.

``dump-zarr ARCHIVE [--consolidated]``
    ``{"groups": {path: attrs}, "arrays": {path: {"dtype", "shape", "chunks",
    "fill_value", "compressor", "attrs", "sha256", "kind"}}}`` for the zarr v2
    hierarchy in the archive (root group path ``""``). ``sha256`` is over the array's
    values in C order, except for 0-d ``|S`` arrays (``"kind": "bytes"``), where it is
    over the blob itself and ``"size"`` (the blob length) is added too, matching the
    golden manifest's conventions.

``write-zarr ARCHIVE``
    Writes a small, deterministic, representative zarr v2 hierarchy with the reference,
    consolidates it with ``consolidate_compressed_metadata`` and prints the
    ``dump-zarr`` output of the result (opened through the consolidated metadata).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from ncore.impl.data.stores import (
    IndexedTarStore,
    consolidate_compressed_metadata,
    open_compressed_consolidated,
)
from zarr.meta import Metadata2

JsonDict = dict[str, Any]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- records


def dump_records(archive: Path) -> JsonDict:
    """Lists every record of an archive as the reference implementation sees it.

    Args:
        archive: Path of the ``.itar`` archive to read.

    Returns:
        ``{"keys": [...], "records": {key: {"offset", "size", "sha256"}}}``.

    Raises:
        RuntimeError: If a value read through the store disagrees with its indexed size.
    """
    with IndexedTarStore(str(archive), mode="r") as store:
        keys = list(store)
        records: JsonDict = {}
        for key in keys:
            record = store.index.records[key]
            value = bytes(store[key])
            if len(value) != record.size:
                msg = f"{key!r}: index size {record.size} but read {len(value)} bytes"
                raise RuntimeError(msg)
            records[key] = {
                "offset": int(record.offset_data),
                "size": int(record.size),
                "sha256": _sha256(value),
            }
    return {"keys": keys, "records": records}


def write_records(archive: Path, spec_source: str) -> JsonDict:
    """Writes raw records with the reference implementation and dumps the result.

    Args:
        archive: Path of the ``.itar`` archive to create (truncated if present).
        spec_source: Path of the JSON spec, or ``-`` to read it from stdin.

    Returns:
        The ``dump_records`` output for the written archive.

    Raises:
        ValueError: If the spec is malformed.
    """
    if spec_source == "-":
        spec = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    else:
        spec = json.loads(Path(spec_source).read_text(encoding="utf-8"))
    entries = spec.get("records") if isinstance(spec, dict) else None
    if not isinstance(entries, list):
        msg = 'spec must be a JSON object {"records": [[key, payload_base64], ...]}'
        raise ValueError(msg)

    records: list[tuple[str, bytes]] = []
    for entry in entries:
        if not (
            isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str) and isinstance(entry[1], str)
        ):
            msg = f"each record must be [key, payload_base64], got {entry!r}"
            raise ValueError(msg)
        records.append((entry[0], base64.b64decode(entry[1], validate=True)))

    with IndexedTarStore(str(archive), mode="w") as store:
        for key, payload in records:
            store[key] = payload
    return dump_records(archive)


# --------------------------------------------------------------------------- zarr


def _json_safe(value: Any) -> Any:
    """Converts numpy scalars / containers from zarr attributes into plain JSON values."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    if isinstance(value, bytes):
        return base64.standard_b64encode(value).decode("ascii")
    return value


def _describe_array(array: zarr.Array) -> JsonDict:
    dtype = np.dtype(array.dtype)
    values = np.asarray(array[...])
    is_blob = dtype.kind == "S" and array.shape == ()
    # tobytes() keeps trailing NUL bytes that a numpy bytes_ scalar would strip.
    data = np.ascontiguousarray(values).tobytes(order="C")
    compressor = array.compressor
    description: JsonDict = {
        "dtype": dtype.str,
        "shape": list(array.shape),
        "chunks": list(array.chunks),
        # The zarr v2 metadata encoding of the fill value: already JSON-safe
        # (NaN/Infinity as strings, bytes as base64).
        "fill_value": _json_safe(Metadata2.encode_fill_value(array.fill_value, dtype)),
        "compressor": None if compressor is None else _json_safe(compressor.get_config()),
        "attrs": _json_safe(array.attrs.asdict()),
        "sha256": _sha256(data),
        "kind": "bytes" if is_blob else "array",
    }
    if is_blob:
        description["size"] = len(data)
    return description


def _walk(group: zarr.Group, groups: JsonDict, arrays: JsonDict) -> None:
    groups[group.path] = _json_safe(group.attrs.asdict())
    for _, array in group.arrays():
        arrays[array.path] = _describe_array(array)
    for _, child in group.groups():
        _walk(child, groups, arrays)


def dump_zarr(archive: Path, *, consolidated: bool) -> JsonDict:
    """Describes the zarr v2 hierarchy stored in an archive, read by the reference.

    Args:
        archive: Path of the ``.itar`` archive to read.
        consolidated: Open through the compressed consolidated metadata record
            (``open_compressed_consolidated``) instead of the per-node metadata.

    Returns:
        ``{"groups": {path: attrs}, "arrays": {path: description}}``.

    Raises:
        TypeError: If the archive's root node is not a group.
    """
    with IndexedTarStore(str(archive), mode="r") as store:
        root = open_compressed_consolidated(store, mode="r") if consolidated else zarr.open(store, mode="r")
        if not isinstance(root, zarr.Group):
            msg = f"root of {archive} is a {type(root).__name__}, expected a group"
            raise TypeError(msg)
        groups: JsonDict = {}
        arrays: JsonDict = {}
        _walk(root, groups, arrays)
    return {"groups": groups, "arrays": arrays}


def write_zarr(archive: Path) -> JsonDict:
    """Writes a small representative zarr v2 hierarchy with the reference.

    Contents: root and group attributes, nested groups, a blosc-compressed float32
    array with partial edge chunks in both dimensions, an uncompressed int array, a
    0-d ``|S`` blob array (with trailing NUL bytes), a bool array, an array with a
    NaN fill value and unwritten chunks, and the compressed consolidated metadata.

    Args:
        archive: Path of the ``.itar`` archive to create (truncated if present).

    Returns:
        The ``dump_zarr`` output of the written archive (consolidated read).
    """
    from numcodecs import Blosc  # only needed for writing

    rng = np.random.default_rng(20240519)
    with IndexedTarStore(str(archive), mode="w") as store:
        root = zarr.group(store=store)
        # IndexedTarStore refuses to overwrite a key, so every node's attributes must be
        # written exactly once (one update() call), never key by key.
        root.attrs.update({"sequence_id": "ref-tool-0001", "version": 4, "tags": ["a", "b"]})

        sensors = root.create_group("sensors")
        lidar = sensors.create_group("lidar")
        lidar.attrs.update({"frame": "lidar_top", "rate_hz": 10.0})
        points = lidar.create_dataset(
            "points",
            shape=(37, 5),
            chunks=(16, 2),  # partial edge chunks along both axes
            dtype="<f4",
            compressor=Blosc(cname="zstd", clevel=3, shuffle=Blosc.SHUFFLE),
        )
        points[...] = rng.standard_normal((37, 5)).astype("<f4")
        points.attrs.update({"units": "m"})

        ids = lidar.create_dataset("ids", shape=(23,), chunks=(10,), dtype="<i8", compressor=None)
        ids[...] = rng.integers(-(2**40), 2**40, size=23, dtype="<i8")

        valid = lidar.create_dataset("valid", shape=(7, 3), chunks=(4, 3), dtype="|b1")
        valid[...] = rng.random((7, 3)) > 0.5

        cameras = root.create_group("cameras")
        front = cameras.create_group("front")
        front.attrs.update({"model": "pinhole"})
        blob = rng.integers(0, 256, size=1500, dtype=np.uint8).tobytes() + b"\x00\x00"
        image = front.create_dataset("frame_0000", shape=(), dtype=f"|S{len(blob)}", compressor=None)
        image[...] = np.frombuffer(blob, dtype=f"|S{len(blob)}").reshape(())

        sparse = root.create_dataset(
            "sparse", shape=(30,), chunks=(8,), dtype="<f8", fill_value=np.nan, compressor=None
        )
        sparse[16:20] = np.arange(4, dtype="<f8")  # only chunk 2 is written

        consolidate_compressed_metadata(store)
    return dump_zarr(archive, consolidated=True)


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    """Runs one command and prints its JSON result to stdout.

    Args:
        argv: Command-line arguments without the program name (default: ``sys.argv``).

    Returns:
        The process exit code.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)

    dump_rec = commands.add_parser("dump-records", help="list an archive's records")
    dump_rec.add_argument("archive", type=Path)

    write_rec = commands.add_parser("write-records", help="write raw records")
    write_rec.add_argument("archive", type=Path)
    write_rec.add_argument("spec", help='JSON spec path, or "-" for stdin')

    dump_z = commands.add_parser("dump-zarr", help="describe the zarr v2 hierarchy")
    dump_z.add_argument("archive", type=Path)
    dump_z.add_argument("--consolidated", action="store_true")

    write_z = commands.add_parser("write-zarr", help="write a sample zarr v2 hierarchy")
    write_z.add_argument("archive", type=Path)

    args = parser.parse_args(argv)
    result: JsonDict
    if args.command == "dump-records":
        result = dump_records(args.archive)
    elif args.command == "write-records":
        result = write_records(args.archive, args.spec)
    elif args.command == "dump-zarr":
        result = dump_zarr(args.archive, consolidated=args.consolidated)
    else:
        result = write_zarr(args.archive)

    # allow_nan=False: anything non-JSON (NaN, Infinity) must fail loudly, not leak out.
    json.dump(result, sys.stdout, ensure_ascii=True, allow_nan=False, sort_keys=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
