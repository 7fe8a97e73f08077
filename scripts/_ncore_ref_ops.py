"""Per-operation timings of the reference implementation ``nvidia-ncore`` 19.8.3, for
``bench_ops.py`` and ``bench_remote.py`` to print beside their own numbers.

It runs with the reference's interpreter, ``.venv-ncore-ref/bin/python``: the reference
pins zarr-python 2, which cannot share a venv with ``ncore_like``. So it must never import
``ncore_like``. It uses the reference the way its own users do (see
``ncore/impl/data/v4/components.py``): zarr-python 2 groups and arrays over an
``IndexedTarStore``, read through ``open_compressed_consolidated`` and written with
``zarr.group`` / ``create_dataset`` / ``attrs.put`` and ``consolidate_compressed_metadata``.

Usage::

    .venv-ncore-ref/bin/python scripts/_ncore_ref_ops.py SPEC_JSON_PATH

The spec is a JSON object whose keys are optional operations; each present one runs after a
correctness check (failure: message on stderr, exit status 2), its repeats back to back, and
the script prints one JSON object: ``{"versions": {...}, op: {"seconds": median, ...}}``.

``lookup``: ``{"itar", "names", "repeats"}``; loop ``root["frames"][name][...]``.
    Reports ``{"seconds", "count"}``.
``row``: ``{"itar", "array", "picks", "repeats"}``; loop ``arr[i]``. Reports ``{"seconds", "count"}``.
``frames_write``: ``{"dir", "count", "nbytes", "seed", "repeats"}`` (and optionally
    ``"sizes"``, one per frame, instead of ``nbytes`` each); a group ``frames`` of
    uncompressed uint8 arrays with attributes, consolidated. Reports ``{"seconds", "count", "nbytes"}``.
``records_write``: ``{"dir", "count", "low", "high", "seed", "repeats"}``; ``store[key] = value``
    of ``count`` raw records of ``low``-``high`` random bytes. Reports ``{"seconds", "count"}``.
``volume_write``: ``{"dir", "npy", "chunks", "cname", "clevel", "shuffle", "repeats"}``; one
    Blosc array ``volume``. Reports ``{"seconds", "nbytes"}``.
``row_writes``: ``{"dir", "rows", "cols", "seed", "repeats"}``; ``arr[i] = data[i]`` into an
    empty ``(rows, cols)`` float32 array chunked by row (Blosc lz4, level 5, bitshuffle).
    Reports ``{"seconds", "count"}``.
``scan``: ``{"url", "storage_options", "keys", "sha256", "repeats"}``; ``store[key]`` for every
    key in turn of the archive at ``url`` (e.g. ``s3://``, the reference's default buffered
    reads through fsspec), each repeat on a newly opened store (the open untimed); the
    payloads must hash to ``sha256``. Reports ``{"seconds", "count", "nbytes"}``.

Write timings run from opening the store to closing it (``close()`` writes the index), or
for ``row_writes`` from the first row write to the close; data is made before timing and
archives are deleted after. The write check writes one untimed archive and reads it back.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import zarr
from ncore.impl.data.stores import IndexedTarStore, consolidate_compressed_metadata, open_compressed_consolidated
from upath import UPath

JsonDict = dict[str, Any]

OPERATIONS: dict[str, tuple[str, ...]] = {
    "lookup": ("itar", "names", "repeats"),
    "row": ("itar", "array", "picks", "repeats"),
    "frames_write": ("dir", "count", "nbytes", "seed", "repeats"),
    "volume_write": ("dir", "npy", "chunks", "cname", "clevel", "shuffle", "repeats"),
    "row_writes": ("dir", "rows", "cols", "seed", "repeats"),
    "records_write": ("dir", "count", "low", "high", "seed", "repeats"),
    "scan": ("url", "storage_options", "keys", "sha256", "repeats"),
}


class CheckFailed(Exception):
    """A malformed spec, or a reference result that is not what the benchmark expects."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def median_seconds(repeat: Callable[[int], float], repeats: int) -> float:
    """The median of ``repeat(k)`` for k in ``range(repeats)``; each call times its own span."""
    return statistics.median(repeat(k) for k in range(repeats))


def median_write_seconds(write: Callable[[Path], float], directory: Path, stem: str, repeats: int) -> float:
    """The median of ``write(path)`` (which times its own span) over ``repeats`` new files
    ``directory/stem-k.itar``, each deleted after its write."""

    def repeat(k: int) -> float:
        path = directory / f"{stem}-{k}.itar"
        try:
            return write(path)
        finally:
            path.unlink(missing_ok=True)

    return median_seconds(repeat, repeats)


def open_root(store: IndexedTarStore) -> zarr.Group:
    """The hierarchy's root, opened the reference's way: through the compressed consolidated metadata."""
    check(".zmetadata.cbor.xz" in store, f"{store.itar_upath} has no compressed consolidated metadata record")
    root = open_compressed_consolidated(store, mode="r")
    check(isinstance(root, zarr.Group), f"root of {store.itar_upath} is not a group")
    return root


def member(group: zarr.Group, name: str, kind: type[zarr.Group] | type[zarr.Array]) -> Any:
    """``group[name]``, checked to exist and to be a ``kind``."""
    check(name in group, f"group {group.name!r} has no member {name!r}")
    node = group[name]
    check(isinstance(node, kind), f"{node.name!r} is a {type(node).__name__}, expected {kind.__name__}")
    return node


# -- reads --------------------------------------------------------------------------------------


def run_lookup(spec: JsonDict) -> JsonDict:
    names: list[str] = spec["names"]
    check(len(names) > 0, "lookup: names is empty")
    with IndexedTarStore(spec["itar"], mode="r") as store:
        root = open_root(store)
        frames = member(root, "frames", zarr.Group)
        missing = sorted(set(names) - set(frames.array_keys()))
        check(not missing, f"lookup: frames not in the archive: {missing[:5]}")
        # The frames are uncompressed single chunks, so the read must equal the chunk record's bytes verbatim.
        array = frames[names[0]]
        value = array[...]
        prefix = f"{array.path}/"
        chunks = [key for key in store if key.startswith(prefix) and not key[len(prefix) :].startswith(".")]
        check(len(chunks) == 1, f"lookup: {array.path} has {len(chunks)} chunk records, expected 1")
        check(value.dtype == np.uint8, f"lookup: {array.path} has dtype {value.dtype}, expected uint8")
        chunk = store[chunks[0]]
        check(
            value.nbytes == len(chunk), f"lookup: read {value.nbytes} bytes of {array.path}, its chunk has {len(chunk)}"
        )
        check(value.tobytes() == chunk, f"lookup: {array.path} reads back bytes unlike its chunk record")

        def repeat(_: int) -> float:
            start = time.perf_counter()
            for name in names:
                root["frames"][name][...]
            return time.perf_counter() - start

        seconds = median_seconds(repeat, spec["repeats"])
    return {"seconds": seconds, "count": len(names)}


def run_row(spec: JsonDict) -> JsonDict:
    picks: list[int] = spec["picks"]
    check(len(picks) > 0, "row: picks is empty")
    with IndexedTarStore(spec["itar"], mode="r") as store:
        array = member(open_root(store), spec["array"], zarr.Array)
        check(array.ndim == 2, f"row: {array.path} has shape {array.shape}, expected 2 dimensions")
        rows, cols = array.shape
        check(all(0 <= i < rows for i in picks), f"row: picks outside [0, {rows})")
        value = array[picks[0]]
        check(value.shape == (cols,), f"row: arr[i] has shape {value.shape}, expected ({cols},)")
        check(value.dtype == np.float32, f"row: arr[i] has dtype {value.dtype}, expected float32")
        # Rows of random normals: an all-zero row would mean the chunk was missing (read as fill value).
        check(bool(np.any(value != 0)), f"row: row {picks[0]} reads as all zeros")

        def repeat(_: int) -> float:
            start = time.perf_counter()
            for i in picks:
                array[i]
            return time.perf_counter() - start

        seconds = median_seconds(repeat, spec["repeats"])
    return {"seconds": seconds, "count": len(picks)}


def run_scan(spec: JsonDict) -> JsonDict:
    keys: list[str] = spec["keys"]
    check(len(keys) > 0, "scan: keys is empty")
    location = UPath(spec["url"], **spec["storage_options"])
    nbytes = 0

    def repeat(_: int) -> float:
        nonlocal nbytes
        with IndexedTarStore(location, mode="r") as store:  # a new file object: nothing buffered yet
            start = time.perf_counter()
            payloads = [store[key] for key in keys]
            seconds = time.perf_counter() - start
        digest = hashlib.sha256()
        for payload in payloads:
            digest.update(payload)
        check(digest.hexdigest() == spec["sha256"], "scan: the records read differ from the archive's")
        nbytes = sum(map(len, payloads))
        return seconds

    seconds = median_seconds(repeat, spec["repeats"])
    return {"seconds": seconds, "count": len(keys), "nbytes": nbytes}


# -- writes -------------------------------------------------------------------------------------


def write_frames(path: Path, frames: np.ndarray | list[np.ndarray]) -> float:
    """Writes the frames archive and returns the seconds from opening the store to closing it."""
    start = time.perf_counter()
    store = IndexedTarStore(path, mode="w")
    group = zarr.group(store=store).create_group("frames")
    for i, frame in enumerate(frames):
        # attrs.put: the store refuses to overwrite a key, so each node's .zattrs is written once.
        group.create_dataset(f"{i:05d}", data=frame, chunks=frame.shape, compressor=None).attrs.put({"t": i})
    consolidate_compressed_metadata(store)
    store.close()
    return time.perf_counter() - start


def run_frames_write(spec: JsonDict) -> JsonDict:
    count, nbytes = spec["count"], spec["nbytes"]
    check(count > 0 and nbytes > 0, "frames_write: count and nbytes must be positive")
    rng = np.random.default_rng(spec["seed"])
    sizes = spec.get("sizes") or [nbytes] * count
    check(len(sizes) == count, "frames_write: one size per frame")
    frames = [rng.integers(0, 255, size=size, dtype=np.uint8) for size in sizes]
    directory = Path(spec["dir"])
    directory.mkdir(parents=True, exist_ok=True)

    path = directory / "ref-frames-check.itar"
    try:
        write_frames(path, frames)
        with IndexedTarStore(path, mode="r") as store:
            group = member(open_root(store), "frames", zarr.Group)
            last = f"{count - 1:05d}"
            check(len(group) == count, f"frames_write: wrote {len(group)} frames, expected {count}")
            check(group[last].attrs.asdict() == {"t": count - 1}, f"frames_write: wrong attributes on {last}")
            check(np.array_equal(group[last][...], frames[-1]), f"frames_write: frame {last} read back differs")
    finally:
        path.unlink(missing_ok=True)

    seconds = median_write_seconds(lambda path: write_frames(path, frames), directory, "ref-frames", spec["repeats"])
    return {"seconds": seconds, "count": count, "nbytes": sum(sizes)}


def run_records_write(spec: JsonDict) -> JsonDict:
    count, low, high = spec["count"], spec["low"], spec["high"]
    check(count > 0 and 0 < low <= high, "records_write: count > 0 and 0 < low <= high")
    rng = np.random.default_rng(spec["seed"])
    payloads = [rng.bytes(int(size)) for size in rng.integers(low, high + 1, size=count)]
    keys = [f"records/{index:06d}" for index in range(count)]
    directory = Path(spec["dir"])
    directory.mkdir(parents=True, exist_ok=True)

    def write(path: Path) -> float:
        start = time.perf_counter()
        store = IndexedTarStore(path, mode="w")
        for index, key in enumerate(keys):
            store[key] = payloads[index]
        store.close()
        return time.perf_counter() - start

    path = directory / "ref-records-check.itar"
    try:
        write(path)
        with IndexedTarStore(path, mode="r") as store:
            check(bytes(store[keys[-1]]) == payloads[-1], "records_write: record read back differs")
    finally:
        path.unlink(missing_ok=True)

    seconds = median_write_seconds(write, directory, "ref-records", spec["repeats"])
    return {"seconds": seconds, "count": count}


def run_volume_write(spec: JsonDict) -> JsonDict:
    data = np.load(spec["npy"])
    chunks = tuple(spec["chunks"])
    check(len(chunks) == data.ndim, f"volume_write: chunks {chunks} do not match the volume's shape {data.shape}")
    compressor = numcodecs.Blosc(cname=spec["cname"], clevel=spec["clevel"], shuffle=spec["shuffle"])
    directory = Path(spec["dir"])
    directory.mkdir(parents=True, exist_ok=True)

    def write(path: Path) -> float:
        start = time.perf_counter()
        store = IndexedTarStore(path, mode="w")
        zarr.group(store=store).create_dataset("volume", data=data, chunks=chunks, compressor=compressor)
        store.close()
        return time.perf_counter() - start

    path = directory / "ref-volume-check.itar"
    try:
        write(path)
        with IndexedTarStore(path, mode="r") as store:
            # Not consolidated (the spec asks for none), so opened from the per-node metadata.
            array = zarr.open_group(store, mode="r")["volume"]
            check(array.chunks == chunks, f"volume_write: chunks {array.chunks}, expected {chunks}")
            check(array.compressor == compressor, f"volume_write: compressor {array.compressor}, expected {compressor}")
            check(np.array_equal(array[...], data), "volume_write: volume read back differs")
    finally:
        path.unlink(missing_ok=True)

    seconds = median_write_seconds(write, directory, "ref-volume", spec["repeats"])
    return {"seconds": seconds, "nbytes": int(data.nbytes)}


def run_row_writes(spec: JsonDict) -> JsonDict:
    rows, cols = spec["rows"], spec["cols"]
    check(rows > 0 and cols > 0, "row_writes: rows and cols must be positive")
    data = np.random.default_rng(spec["seed"]).standard_normal((rows, cols)).astype(np.float32)
    data[:, ::2] = 0  # compressible, like the rows bench_ops.py reads
    directory = Path(spec["dir"])
    directory.mkdir(parents=True, exist_ok=True)

    def write(path: Path) -> float:
        """Creates the empty array untimed, then times the row writes and the close."""
        store = IndexedTarStore(path, mode="w")
        array = zarr.group(store=store).create_dataset(
            "rows",
            shape=(rows, cols),
            chunks=(1, cols),
            dtype=np.float32,
            compressor=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.BITSHUFFLE),
            fill_value=0,
        )
        start = time.perf_counter()
        for i in range(rows):
            array[i] = data[i]
        store.close()
        return time.perf_counter() - start

    path = directory / "ref-rows-check.itar"
    try:
        write(path)
        with IndexedTarStore(path, mode="r") as store:
            array = zarr.open_group(store, mode="r")["rows"]
            check(np.array_equal(array[...], data), "row_writes: rows read back differ")
    finally:
        path.unlink(missing_ok=True)

    seconds = median_write_seconds(write, directory, "ref-rows", spec["repeats"])
    return {"seconds": seconds, "count": rows}


RUNNERS: dict[str, Callable[[JsonDict], JsonDict]] = {
    "lookup": run_lookup,
    "row": run_row,
    "frames_write": run_frames_write,
    "volume_write": run_volume_write,
    "row_writes": run_row_writes,
    "records_write": run_records_write,
    "scan": run_scan,
}


# -- driver -------------------------------------------------------------------------------------


def load_spec(path: str) -> JsonDict:
    spec = json.loads(Path(path).read_text(encoding="utf-8"))
    check(isinstance(spec, dict), "spec must be a JSON object")
    unknown = sorted(set(spec) - set(OPERATIONS))
    check(not unknown, f"unknown operations {unknown}; known: {sorted(OPERATIONS)}")
    for op, value in spec.items():
        check(isinstance(value, dict), f"{op}: must be a JSON object")
        missing = [key for key in OPERATIONS[op] if key not in value]
        check(not missing, f"{op}: missing keys {missing}")
        check(isinstance(value["repeats"], int) and value["repeats"] > 0, f"{op}: repeats must be a positive int")
    return spec


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(f"usage: {Path(__file__).name} SPEC_JSON_PATH", file=sys.stderr)
        return 2
    try:
        spec = load_spec(argv[0])
        result: JsonDict = {
            "versions": {
                "nvidia-ncore": importlib.metadata.version("nvidia-ncore"),
                "zarr": zarr.__version__,
                "numcodecs": numcodecs.__version__,
            }
        }
        for op in OPERATIONS:  # a fixed order, whatever the spec's
            if op in spec:
                result[op] = RUNNERS[op](spec[op])
    except CheckFailed as error:
        print(f"{Path(__file__).name}: {error}", file=sys.stderr)
        return 2
    json.dump(result, sys.stdout, allow_nan=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
