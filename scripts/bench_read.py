"""Benchmark of the typed read path (``Array.read`` / ``read_async`` / ``read_bytes``) against
what the machine does for the same bytes and against peers (SPEC section 5), as ratios
measured side by side in one run.

Absolute times on a shared machine are noise, so every figure is a ratio of two medians
measured in the same process, the repetitions of all contenders interleaved (the order
rotates each round). Workloads:

1. Full read of a blosc-lz4 (bit-shuffle) float32 volume (``--size-mb``, default 256 MB in
   16 chunks of 16 MB) into a preallocated ``out=`` array, against
   (a) the decode limit: ``numcodecs.blosc.decompress`` of the same chunk records (read
   into memory first) into a preallocated array on ``os.cpu_count()`` threads, no I/O;
   (b) zarr-python 3 reading the same archive (``arr.zarr[...]``, and with ``out=``);
   (c) zarr-python 3 on a ``LocalStore`` directory copy written by zarr-python;
   (d) tensorstore on that directory copy. Also a chunk-aligned and an unaligned partial
   read, ours vs zarr-python. Targets: >= 0.85 x the decode limit, >= 2 x zarr-python.
2. Random reads of ~1 MB frames (``create_bytes_array``): ``read_bytes()`` / ``read()`` of
   opened arrays vs bare ``os.pread`` of the same chunk records in the same random order
   (target: pread time / our time >= 0.7); also with the ``group.array(name)`` lookup, and
   ``IndexedTarArchive`` access by key for context.
3. Remote, a local HTTP server adding 20 ms per request, on the default buffered path and
   with ``remote_range_reads=True``: (a) one ``Array.read(out=)`` touching 32 chunks;
   (b) 100 gathered ``read_async`` frame reads (and ``read_bytes_async`` for context);
   (c) open + first read. Wall time in round trips (target <= 3; SPEC: <= 2 for open +
   first read), requests, their peak overlap and the sequential rounds they imply from the
   server log, and the same requests issued bare with fsspec, all at once, for comparison.
   A row is ok when the log shows at most the target's rounds and the wall time is within
   the target or within 1.25 x the bare time (moving ~100 MB through the local Python
   server takes a few RTT by itself).
4. Peak memory of reading a 1 GB float32 array into ``out=`` (512 MB if less than 5 GB of
   disk are free), measured in a fresh subprocess with ``ru_maxrss`` after allocating
   ``out`` and after the read (``VmHWM`` as a cross-check); zarr-python's ``arr.zarr[...]``
   and ``out=NDBuffer`` for contrast. Target: the growth stays within the bytes in flight,
   taken here as 2 chunks per CPU (a record and a decode buffer per worker, generously).

Prints one table (ratio, target, raw medians); ``--json PATH`` also writes the results.

Run from the repository root::

    .venv/bin/python scripts/bench_read.py                # full run (~1 min)
    .venv/bin/python scripts/bench_read.py --quick        # small, fast run (smoke test, < 30 s)
    .venv/bin/python scripts/bench_read.py --json bench_read.json --skip-tensorstore

Temporary files live in a temporary directory (``--tmpdir`` to choose where) removed at
the end; servers bind 127.0.0.1 only and are stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import fsspec.asyn
import numcodecs
import numcodecs.blosc
import numpy as np
import zarr
import zarr.storage
from upath import UPath
from zarr.core.buffer.cpu import NDBuffer

import ncore_like
from ncore_like import BloscCompression, Group, IndexedTarZarrStore
from ncore_like.backend import default_backend

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _benchlib lives beside this script
import _benchlib as bench
from _benchlib import MB, MIB, TAIL_READ_SIZE, Row, gbs, median_times, ms, warm_page_cache

VOLUME = "volume"
NDArray = np.ndarray[Any, Any]
Selection = tuple[slice, ...]


# -- configuration and results ------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """Sizes of the workloads (defaults: the full run; :func:`quick_config`: the smoke run)."""

    size_mb: int = 256
    full_repeats: int = 9
    frames: int = 300
    frame_min: int = 800_000
    frame_max: int = 1_200_000
    frame_repeats: int = 11
    remote_shape: tuple[int, int, int] = (32, 512, 512)
    remote_frames: int = 100
    remote_repeats: int = 3
    latency: float = 0.02
    memory_mb: int = 1024
    seed: int = 0


def quick_config(seed: int, size_mb: int | None) -> Config:
    """A small configuration that runs in well under 30 s."""
    return Config(
        size_mb=size_mb or 32,
        full_repeats=3,
        frames=40,
        frame_repeats=3,
        remote_shape=(32, 128, 128),
        remote_frames=20,
        remote_repeats=1,
        memory_mb=64,
        seed=seed,
    )


def backend_stats() -> str:
    """``default_backend().stats`` if the backend has such an attribute (empty otherwise)."""
    stats = getattr(default_backend(), "stats", None)
    return "" if stats is None else repr(stats)


def touched(shape: tuple[int, ...], dtype: np.dtype[Any]) -> NDArray:
    """A preallocated array whose pages are already mapped (so no contender pays the page
    faults of a fresh buffer)."""
    out = np.empty(shape, dtype)
    out.fill(0)
    return out


# -- data ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Geometry:
    """Shape and chunks of a float32 volume whose chunks are whole z-slabs (so each chunk is a
    contiguous region of a C-ordered output)."""

    shape: tuple[int, int, int]
    chunks: tuple[int, int, int]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * 4

    @property
    def nchunks(self) -> int:
        return math.ceil(self.shape[0] / self.chunks[0])

    def describe(self) -> str:
        return (
            f"{self.nbytes / MIB:.0f} MiB {self.shape} float32, {self.nchunks} chunks {self.chunks} "
            f"of {math.prod(self.chunks) * 4 / MIB:g} MiB"
        )


def volume_geometry(size_mb: int) -> Geometry:
    """The largest square planes (1024 down to 64) giving >= 16 z-slices for ``size_mb`` MiB,
    with up to 4 slices per chunk and >= 16 chunks: 256 MiB -> (64, 1024, 1024) in chunks of
    (4, 1024, 1024)."""
    size = max(1, size_mb) * MIB
    side = 64
    for candidate in (1024, 512, 256, 128):
        if size // (candidate * candidate * 4) >= 16:
            side = candidate
            break
    depth = max(16, size // (side * side * 4))
    per_chunk = max(1, min(4, depth // 16))
    depth -= depth % per_chunk
    return Geometry((depth, side, side), (per_chunk, side, side))


def fill_volume(out: NDArray, seed: int, z_offset: int = 0) -> None:
    """Smooth-ish data that compresses (~3x with lz4 + bit-shuffle): sinusoids plus small
    noise, quantised to 1/16 (as sensor data often is), generated slab by slab."""
    rng = np.random.default_rng(seed)
    _, ny, nx = out.shape
    yy = np.cos(np.arange(ny, dtype=np.float32) * np.float32(0.015))[None, :, None]
    xx = np.arange(nx, dtype=np.float32)[None, None, :]
    step = 8
    for z0 in range(0, out.shape[0], step):
        slab = out[z0 : z0 + step]
        zz = np.arange(z0 + z_offset, z0 + z_offset + slab.shape[0], dtype=np.float32)[:, None, None]
        slab[...] = np.sin(xx * np.float32(0.02) + zz * np.float32(0.1)) * yy * np.float32(100.0)
        slab += rng.standard_normal(slab.shape, dtype=np.float32) * np.float32(0.5)
        np.multiply(slab, 16, out=slab)
        np.round(slab, out=slab)
        np.divide(slab, 16, out=slab)


def write_volume_archive(path: Path, name: str, data: NDArray, chunks: tuple[int, ...]) -> None:
    """An archive (zarr format 2, consolidated) holding ``data`` as a Blosc (lz4, bit-shuffle)
    array."""
    store = IndexedTarZarrStore(path, mode="w")
    try:
        root = store.create_root_group({"bench": "bench_read"}, zarr_format=2)
        root.create_array(name, data, chunks=chunks, compression=BloscCompression())
        store.consolidate()
    finally:
        store.close()


def write_zarr_directory(directory: Path, data: NDArray, chunks: tuple[int, ...]) -> None:
    """A zarr format 2 directory copy written by zarr-python (same chunks and compressor)."""
    compressor = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.BITSHUFFLE)
    array = zarr.create_array(
        store=zarr.storage.LocalStore(directory),
        shape=data.shape,
        dtype=data.dtype,
        chunks=chunks,
        compressors=compressor,
        fill_value=0,
        zarr_format=2,
    )
    array[...] = data


def chunk_key(name: str, coords: Sequence[int]) -> str:
    """Key of a chunk record of a zarr format 2 array (``"name/0"`` for 0-d arrays)."""
    return f"{name}/{'.'.join(str(c) for c in coords) or '0'}"


def random_blobs(rng: random.Random, count: int, low: int, high: int) -> list[bytes]:
    """``count`` random blobs of random sizes in ``[low, high]`` (copies of slices of one
    random buffer at varying starts)."""
    return [bytes(payload) for payload in bench.random_payloads(rng, count, low, high)]


def frame_names(count: int) -> list[str]:
    return [f"frames/{index:05d}" for index in range(count)]


def write_frames(root: Group, names: Sequence[str], blobs: Sequence[bytes]) -> None:
    frames = root.create_group("frames")
    for name, blob in zip(names, blobs, strict=True):
        frames.create_bytes_array(name.split("/", 1)[1], blob)


# -- workload 1: full and partial volume reads -------------------------------------------------


def _tensorstore(skip: bool) -> tuple[ModuleType | None, str]:
    if skip:
        return None, "tensorstore: skipped (--skip-tensorstore)"
    try:
        import tensorstore
    except ImportError as error:
        return None, f"tensorstore: skipped, not importable ({error}); `pip install tensorstore` into the venv"
    return tensorstore, ""


def bench_volume(tmp: Path, config: Config, skip_tensorstore: bool) -> list[Row]:
    geometry = volume_geometry(config.size_mb)
    data = np.empty(geometry.shape, np.float32)
    fill_volume(data, config.seed)
    path = tmp / "volume.itar"
    directory = tmp / "volume.zarr"
    start = time.perf_counter()
    write_volume_archive(path, VOLUME, data, geometry.chunks)
    written = time.perf_counter() - start
    write_zarr_directory(directory, data, geometry.chunks)
    warm_page_cache(path)
    warm_page_cache(directory)

    group = IndexedTarZarrStore(path).open_root_group()
    array = group.array(VOLUME)
    archive = group.store.archive  # type: ignore[union-attr]
    zarr_local = zarr.open_array(zarr.storage.LocalStore(directory, read_only=True), mode="r")
    nchunks = geometry.nchunks
    keys = [chunk_key(VOLUME, (index, 0, 0)) for index in range(nchunks)]
    fd = os.open(path, os.O_RDONLY)
    try:
        records = [os.pread(fd, archive.records[key].size, archive.records[key].offset) for key in keys]
    finally:
        os.close(fd)
    compressed = sum(len(record) for record in records)
    local_compressed = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and p.name[0] != ".")

    numcodecs.blosc.use_threads = False  # blosc's global context serialises threads otherwise
    workers = os.cpu_count() or 1
    pool = ThreadPoolExecutor(workers)
    slab = geometry.chunks[0]
    out_full = touched(geometry.shape, data.dtype)
    out_limit = touched(geometry.shape, data.dtype)

    def decode_limit(indices: Sequence[int], target: NDArray, first: int = 0) -> None:
        def one(index: int) -> None:
            begin = (index - first) * slab
            numcodecs.blosc.decompress(records[index], target[begin : begin + slab])

        list(pool.map(one, indices))

    all_chunks = range(nchunks)
    tensorstore, ts_note = _tensorstore(skip_tensorstore)
    ts_store: Any = None
    if tensorstore is not None:
        spec = {"driver": "zarr", "kvstore": {"driver": "file", "path": str(directory)}}
        ts_store = tensorstore.open(spec, read=True).result()

    full: dict[str, Callable[[], object]] = {
        "decode limit": lambda: decode_limit(all_chunks, out_limit),
        "ours": lambda: array.read(out=out_full),
        "zarr itar": lambda: array.zarr[...],
        "zarr itar out=": lambda: array.zarr.get_basic_selection(..., out=NDBuffer.from_numpy_array(out_full)),
        "zarr LocalStore": lambda: zarr_local[...],
    }
    if ts_store is not None:
        full["tensorstore"] = lambda: ts_store.read().result()

    def decoded() -> NDArray:
        decode_limit(all_chunks, out_limit)
        return out_limit

    def zarr_into_out() -> NDArray:
        array.zarr.get_basic_selection(..., out=NDBuffer.from_numpy_array(out_full))
        return out_full

    # correctness first (also warms every path: thread pools, zarr's loop, tensorstore)
    checks: dict[str, Callable[[], NDArray]] = {
        "decode limit": decoded,
        "ours": lambda: array.read(out=out_full),
        "zarr itar out=": zarr_into_out,
        "zarr itar": lambda: np.asarray(array.zarr[...]),
        "zarr LocalStore": lambda: np.asarray(zarr_local[...]),
    }
    if ts_store is not None:
        checks["tensorstore"] = lambda: np.asarray(ts_store.read().result())
    for name, check in checks.items():
        if not np.array_equal(check(), data):
            raise AssertionError(f"full read: {name} differs from the written data")
        out_full.fill(0)

    times = median_times(full, config.full_repeats)
    ours = times["ours"]
    nbytes = geometry.nbytes
    rows = [
        Row(
            "1 volume",
            f"full read into out=, {geometry.describe()}",
            times["decode limit"] / ours,
            "ours/decode-limit throughput",
            ">= 0.85x",
            times["decode limit"] / ours >= 0.85,
            {"ours_s": ours, "decode_limit_s": times["decode limit"]},
            f"ours {ms(ours)} ({gbs(nbytes, ours)}), decode limit {ms(times['decode limit'])} "
            f"({gbs(nbytes, times['decode limit'])}, {workers} threads); compression "
            f"{nbytes / compressed:.2f}x; archive written in {written:.1f} s",
        ),
        Row(
            "1 volume",
            "full read: ours vs zarr-python on the same archive (arr.zarr[...])",
            times["zarr itar"] / ours,
            "speedup (time zarr/ours)",
            ">= 2.00x",
            times["zarr itar"] / ours >= 2.0,
            {"zarr_itar_s": times["zarr itar"]},
            f"zarr-python {ms(times['zarr itar'])} ({gbs(nbytes, times['zarr itar'])}); a reader at the decode "
            f"limit would be {times['zarr itar'] / times['decode limit']:.2f}x",
        ),
        Row(
            "1 volume",
            "full read: ours vs zarr-python on the same archive, out=NDBuffer",
            times["zarr itar out="] / ours,
            "speedup (time zarr/ours)",
            "",
            None,
            {"zarr_itar_out_s": times["zarr itar out="]},
            f"zarr-python get_basic_selection(out=) {ms(times['zarr itar out='])}",
        ),
        Row(
            "1 volume",
            "full read: ours vs zarr-python on a LocalStore directory copy",
            times["zarr LocalStore"] / ours,
            "speedup (time zarr/ours)",
            "",
            None,
            {"zarr_local_s": times["zarr LocalStore"]},
            f"zarr-python LocalStore {ms(times['zarr LocalStore'])} ({gbs(nbytes, times['zarr LocalStore'])}); "
            f"its chunks {local_compressed / MB:.1f} MB vs ours {compressed / MB:.1f} MB",
        ),
    ]
    if ts_store is not None:
        ts = times["tensorstore"]
        rows.append(
            Row(
                "1 volume",
                "full read: ours vs tensorstore on the LocalStore copy",
                ts / ours,
                "speedup (time ts/ours)",
                "",
                None,
                {"tensorstore_s": ts},
                f"tensorstore {bench.package_version('tensorstore')} {ms(ts)} ({gbs(nbytes, ts)}; "
                "allocates its result, no out=)",
            )
        )
    else:
        rows.append(Row("1 volume", ts_note, None, "", "", None))

    rows += bench_partial(geometry, array, data, decode_limit, config)
    pool.shutdown()
    group.store.close()  # type: ignore[union-attr]
    return rows


def partial_selections(geometry: Geometry) -> tuple[Selection, Selection]:
    """A chunk-aligned selection of 4 chunks (``[8:24]`` at 256 MiB) and an unaligned one
    (``[5:27, 100:900, 50:1000]`` at 256 MiB)."""
    depth, ny, nx = geometry.shape
    slab = geometry.chunks[0]
    aligned = (slice(min(depth, 2 * slab), min(depth, 6 * slab)), slice(None), slice(None))
    unaligned = (
        slice(min(depth - 1, slab + 1), min(depth, 7 * slab - 1)),
        slice(round(ny * 100 / 1024), round(ny * 900 / 1024)),
        slice(round(nx * 50 / 1024), round(nx * 1000 / 1024)),
    )
    return aligned, unaligned


def bench_partial(
    geometry: Geometry,
    array: ncore_like.Array,
    data: NDArray,
    decode_limit: Callable[[Sequence[int], NDArray, int], None],
    config: Config,
) -> list[Row]:
    aligned, unaligned = partial_selections(geometry)
    rows = []
    for label, selection in (("chunk-aligned", aligned), ("unaligned", unaligned)):
        expected = data[selection]
        out = touched(expected.shape, data.dtype)
        functions: dict[str, Callable[[], object]] = {
            "ours": lambda out=out, selection=selection: array.read(selection, out=out),  # type: ignore[misc]
            "zarr": lambda selection=selection: array.zarr[selection],  # type: ignore[misc]
        }
        slab = geometry.chunks[0]
        first, stop = selection[0].start // slab, math.ceil(selection[0].stop / slab)
        if label == "chunk-aligned":
            scratch = touched(expected.shape, data.dtype)
            functions["decode limit"] = lambda scratch=scratch, first=first, stop=stop: decode_limit(  # type: ignore[misc]
                range(first, stop), scratch, first
            )
        if not np.array_equal(array.read(selection, out=out), expected):
            raise AssertionError(f"{label} read: ours differs from the written data")
        if not np.array_equal(np.asarray(array.zarr[selection]), expected):
            raise AssertionError(f"{label} read: zarr-python differs from the written data")
        times = median_times(functions, config.full_repeats)
        text = ", ".join(f"{s.start}:{s.stop}" if s != slice(None) else ":" for s in selection)
        detail = f"[{text}] = {expected.nbytes / MIB:.0f} MiB from {stop - first} chunks; ours {ms(times['ours'])}, "
        detail += f"zarr-python {ms(times['zarr'])}"
        raw = {"ours_s": times["ours"], "zarr_s": times["zarr"]}
        if "decode limit" in times:
            detail += f"; ours/decode-limit throughput {times['decode limit'] / times['ours']:.2f}x"
            raw["decode_limit_s"] = times["decode limit"]
        rows.append(
            Row(
                "1 volume",
                f"{label} partial read into out=: ours vs zarr-python",
                times["zarr"] / times["ours"],
                "speedup (time zarr/ours)",
                "(>= 2x as full)",
                None,
                raw,
                detail,
            )
        )
    return rows


# -- workload 2: random frame reads ----------------------------------------------------------


def bench_frames(tmp: Path, config: Config, rng: random.Random) -> list[Row]:
    path = tmp / "frames.itar"
    names = frame_names(config.frames)
    blobs = random_blobs(rng, len(names), config.frame_min, config.frame_max)
    store = IndexedTarZarrStore(path, mode="w")
    try:
        root = store.create_root_group({"bench": "frames"}, zarr_format=2)
        write_frames(root, names, blobs)
        store.consolidate()
    finally:
        store.close()
    warm_page_cache(path)
    order = names[:]
    rng.shuffle(order)
    wanted = dict(zip(names, blobs, strict=True))
    group = IndexedTarZarrStore(path).open_root_group()
    archive = group.store.archive  # type: ignore[union-attr]
    keys = [chunk_key(name, ()) for name in order]
    ranges = [(archive.records[key].offset, archive.records[key].size) for key in keys]
    arrays = [group.array(name) for name in order]  # opened beforehand: the loops time reads only
    fd = os.open(path, os.O_RDONLY)
    try:
        for name, arr, (offset, size) in zip(order, arrays, ranges, strict=True):
            blob = os.pread(fd, size, offset)
            # tobytes(): numpy's bytes scalars (``[()]``) drop trailing NUL bytes
            if blob != wanted[name] or arr.read_bytes() != blob or arr.read().tobytes() != blob:
                raise AssertionError(f"frame {name}: read differs from the written blob")

        def pread_all() -> None:
            for offset, size in ranges:
                os.pread(fd, size, offset)

        def read_bytes_all() -> None:
            for arr in arrays:
                arr.read_bytes()

        def read_all() -> None:
            for arr in arrays:
                arr.read()

        def lookup_read_bytes_all() -> None:
            for name in order:
                group.array(name).read_bytes()

        def archive_all() -> None:
            for key in keys:
                archive[key]

        times = median_times(
            {
                "pread": pread_all,
                "read_bytes": read_bytes_all,
                "read": read_all,
                "lookup+read_bytes": lookup_read_bytes_all,
                "archive": archive_all,
            },
            config.frame_repeats,
        )
    finally:
        os.close(fd)
        group.store.close()  # type: ignore[union-attr]
    pread = times["pread"]
    read_mb = sum(size for _, size in ranges) / MB
    count = len(order)
    rows = []
    for name, measure, target in (
        ("read_bytes", "arr.read_bytes() of opened arrays", 0.7),
        ("read", "arr.read() of opened arrays", 0.7),
        ("lookup+read_bytes", "group.array(name).read_bytes() (lookup included)", None),
        ("archive", "archive[key] (IndexedTarArchive, context)", 0.9),
    ):
        seconds = times[name]
        ratio = pread / seconds
        rows.append(
            Row(
                "2 frames",
                f"{measure}, {count} random ~1 MB frames",
                ratio,
                "pread time/ours",
                "" if target is None else f">= {target:.2f}x",
                None if target is None else ratio >= target,
                {f"{name}_s": seconds, "pread_s": pread},
                f"ours {ms(seconds)} ({seconds / count * 1e6:.0f} us/frame), pread {ms(pread)} "
                f"({pread / count * 1e6:.0f} us/frame, {read_mb / pread / 1e3:.2f} GB/s)",
            )
        )
    return rows


# -- workload 3: remote -----------------------------------------------------------------------


def summarize_requests(records: list[dict[str, Any]]) -> str:
    methods: dict[str, int] = {}
    for record in records:
        method = record["method"] if record.get("range") else f"{record['method']} (no range)"
        methods[method] = methods.get(method, 0) + 1
    moved = sum(int(record.get("bytes") or 0) for record in records)
    parts = ", ".join(f"{count} {method}" for method, count in methods.items())
    return f"{parts or 'no requests'}; {moved / MB:.1f} MB moved"


def request_rounds(records: list[dict[str, Any]]) -> int:
    """Round trips the request log implies: the most requests that ran one after another
    (pairwise disjoint ``[start, end]`` intervals, by the greedy earliest-end rule)."""
    rounds, last_end = 0, -math.inf
    for record in sorted(records, key=lambda r: float(r["end"])):
        if float(record["start"]) >= last_end:
            rounds += 1
            last_end = float(record["end"])
    return rounds


@dataclass
class Trial:
    wall: float
    requests: list[dict[str, Any]]


def median_trial(trials: list[Trial]) -> Trial:
    return sorted(trials, key=lambda trial: trial.wall)[len(trials) // 2]


def bench_remote(tmp: Path, config: Config, rng: random.Random) -> list[Row]:
    servers = bench.import_servers()
    directory = tmp / "remote"
    directory.mkdir()
    path = directory / "remote.itar"
    shape = config.remote_shape
    volume = np.empty(shape, np.float32)
    fill_volume(volume, config.seed + 1)
    names = frame_names(config.remote_frames)
    blobs = random_blobs(rng, len(names), config.frame_min, config.frame_max)
    store = IndexedTarZarrStore(path, mode="w")
    try:
        root = store.create_root_group({"bench": "remote"}, zarr_format=2)
        root.create_array(VOLUME, volume, chunks=(1, *shape[1:]), compression=BloscCompression())
        write_frames(root, names, blobs)
        store.consolidate()
    finally:
        store.close()
    file_size = path.stat().st_size
    local = IndexedTarZarrStore(path)
    records = dict(local.archive.records.items())
    local.close()
    volume_ranges = [records[chunk_key(VOLUME, (index, 0, 0))] for index in range(shape[0])]
    frame_ranges = [records[chunk_key(name, ())] for name in names]
    # the first frame record lies before the tail read, so "first read" needs its own request
    first_frame = next(
        (name for name in names if sum(records[chunk_key(name, ())]) <= file_size - TAIL_READ_SIZE), names[0]
    )
    latency = config.latency
    rows: list[Row] = []
    with servers.start_http(directory, latency=latency) as server:
        url = f"{server.endpoint}/{path.name}"
        fs = UPath(url).fs

        def bare(ranges: Sequence[tuple[int, int]]) -> Trial:
            """The same byte ranges fetched with fsspec alone, all at once (the limit here)."""

            async def gather() -> list[bytes]:
                return list(await asyncio.gather(*(fs._cat_file(url, start=o, end=o + s) for o, s in ranges)))

            server.clear_requests()
            start = time.perf_counter()
            fsspec.asyn.sync(fs.loop, gather)
            return Trial(time.perf_counter() - start, server.requests())

        def open_store(range_reads: bool) -> IndexedTarZarrStore:
            return IndexedTarZarrStore(UPath(url), remote_range_reads=range_reads)

        def volume_read(range_reads: bool) -> Trial:
            store = open_store(range_reads)
            try:
                arr = store.open_root_group().array(VOLUME)
                out = touched(shape, np.dtype(np.float32))
                server.clear_requests()
                start = time.perf_counter()
                arr.read(out=out)
                wall = time.perf_counter() - start
                log = server.requests()
            finally:
                store.close()
            if not np.array_equal(out, volume):
                raise AssertionError("remote volume read differs from the written data")
            return Trial(wall, log)

        def frame_reads(range_reads: bool, as_bytes: bool = False) -> Trial:
            """(b) every frame read with ``read_async``, gathered; with ``as_bytes``, with
            ``read_bytes_async`` (tells the array read path from the archive's)."""
            store = open_store(range_reads)
            try:
                group = store.open_root_group()
                arrays = [group.array(name) for name in names]

                async def gather() -> tuple[float, list[Any]]:
                    # Timed inside the loop: leaving asyncio.run on Python 3.11 formats the
                    # repr of the main task's result (here ~100 MB of frames) while it
                    # restores the SIGINT handler, which costs tens of milliseconds.
                    start = time.perf_counter()
                    reads = (arr.read_bytes_async() if as_bytes else arr.read_async() for arr in arrays)
                    results = list(await asyncio.gather(*reads))
                    return time.perf_counter() - start, results

                server.clear_requests()
                wall, results = asyncio.run(gather())
                log = server.requests()
            finally:
                store.close()
            if [result if as_bytes else result.tobytes() for result in results] != blobs:
                raise AssertionError("remote frame reads differ from the written blobs")
            return Trial(wall, log)

        def open_first_read(range_reads: bool) -> Trial:
            server.clear_requests()
            start = time.perf_counter()
            store = open_store(range_reads)
            try:
                value = store.open_root_group().array(first_frame).read()
                wall = time.perf_counter() - start
                log = server.requests()
            finally:
                store.close()
            if value.tobytes() != blobs[names.index(first_frame)]:
                raise AssertionError("remote first read differs from the written blob")
            return Trial(wall, log)

        first_record = records[chunk_key(first_frame, ())]

        def bare_open_first() -> Trial:
            server.clear_requests()
            start = time.perf_counter()
            fs.cat_file(url, start=-TAIL_READ_SIZE)
            fs.cat_file(url, start=first_record.offset, end=sum(first_record))
            return Trial(time.perf_counter() - start, server.requests())

        workloads: list[tuple[str, Callable[[bool], Trial], Callable[[], Trial], float, str]] = [
            (
                f"(a) one arr.read(out=) touching {shape[0]} chunks",
                volume_read,
                lambda: bare([tuple(r) for r in volume_ranges]),  # type: ignore[misc]
                3.0,
                "<= 3 RTT",
            ),
            (
                f"(b) {len(names)} gathered read_async frame reads",
                frame_reads,
                lambda: bare([tuple(r) for r in frame_ranges]),  # type: ignore[misc]
                3.0,
                "<= 3 RTT",
            ),
            (
                f"(b') {len(names)} gathered read_bytes_async (context for b)",
                lambda range_reads: frame_reads(range_reads, as_bytes=True),
                lambda: bare([tuple(r) for r in frame_ranges]),  # type: ignore[misc]
                3.0,
                "<= 3 RTT",
            ),
            ("(c) open + first read (one frame)", open_first_read, bare_open_first, 2.0, "<= 2 RTT (SPEC)"),
        ]
        # warm-up: fsspec's HTTP session and our code paths
        open_first_read(False)
        bare_open_first()
        for measure, run, run_bare, target, target_text in workloads:
            bare_trial = median_trial([run_bare() for _ in range(config.remote_repeats)])
            for range_reads in (False, True):
                trial = median_trial([run(range_reads) for _ in range(config.remote_repeats)])
                rtt = trial.wall / latency
                rounds = request_rounds(trial.requests)
                overlap = servers.max_in_flight(trial.requests)
                # the transfer itself takes time through the local Python server: within
                # 1.25 x the bare fsspec time of the same requests counts as the limit
                ok = rounds <= target and (rtt <= target or trial.wall <= 1.25 * bare_trial.wall)
                mode = "remote_range_reads=True" if range_reads else "default buffered path"
                rows.append(
                    Row(
                        "3 remote 20 ms",
                        f"{measure}, {mode}",
                        rtt,
                        "wall in round trips",
                        target_text,
                        ok,
                        {
                            "wall_s": trial.wall,
                            "requests": float(len(trial.requests)),
                            "request_rounds": float(rounds),
                            "max_in_flight": float(overlap),
                            "bare_wall_s": bare_trial.wall,
                        },
                        f"{ms(trial.wall)}; {summarize_requests(trial.requests)}, max overlap {overlap}, "
                        f"{rounds} sequential round(s) in the log; bare fsspec, same ranges at once: "
                        f"{bare_trial.wall / latency:.1f} RTT, {len(bare_trial.requests)} requests, "
                        f"{request_rounds(bare_trial.requests)} round(s)",
                    )
                )
    return rows


# -- workload 4: peak memory ------------------------------------------------------------------


def _proc_status_kib(field_name: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in KiB, None if unknown."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(f"{field_name}:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def memory_child(mode: str, path: str) -> None:
    """Runs in a fresh interpreter (started through :data:`LAUNCHER`): open the archive, warm
    up, allocate and touch ``out``, read, and report ``ru_maxrss`` (and ``VmHWM``) before and
    after the read as one JSON line.

    The warm-up reads the first few chunks into a temporary buffer freed before ``out`` is
    allocated, so the peak so far is the current RSS when the read starts: thread pools
    (and their malloc arenas), zarr's loop and lazily loaded code are one-time costs, no
    part of a read's peak.
    """
    group = IndexedTarZarrStore(path).open_root_group()
    arr = group.array(VOLUME)
    depth = min(arr.shape[0], 4 * arr.chunks[0])
    first = (slice(0, depth),)
    small = touched((depth, *arr.shape[1:]), arr.dtype)
    if mode == "ours":
        arr.read(first, out=small)
    elif mode == "zarr":
        np.asarray(arr.zarr[first])
    else:
        arr.zarr.get_basic_selection(first, out=NDBuffer.from_numpy_array(small))
    del small
    out = touched(arr.shape, arr.dtype)
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    hwm_before = _proc_status_kib("VmHWM")
    rss_before = _proc_status_kib("VmRSS")
    start = time.perf_counter()
    if mode == "ours":
        result = arr.read(out=out)
    elif mode == "zarr":
        result = np.asarray(arr.zarr[...])
    elif mode == "zarr-out":
        arr.zarr.get_basic_selection(..., out=NDBuffer.from_numpy_array(out))
        result = out
    else:
        raise ValueError(f"unknown memory mode {mode!r}")
    elapsed = time.perf_counter() - start
    maxrss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    hwm_after = _proc_status_kib("VmHWM")
    sample = result[::7, ::97, ::89]

    def to_bytes(kib: int | None) -> int | None:
        return None if kib is None else kib * 1024

    print(
        json.dumps(
            {
                "maxrss_before": maxrss_before,
                "maxrss_after": maxrss_after,
                "hwm_before": to_bytes(hwm_before),
                "hwm_after": to_bytes(hwm_after),
                "rss_before": to_bytes(rss_before),
                "out_bytes": out.nbytes,
                "seconds": elapsed,
                "checksum": float(sample.astype(np.float64).sum()),
                "stats": backend_stats(),
            }
        )
    )


#: Starts the memory child from a small intermediate process: Linux carries the peak RSS of
#: the address space that ``exec`` replaces into the new program's ``ru_maxrss``, so a
#: child forked from this (big) process would start with this process' peak, and the read
#: might not move ``ru_maxrss`` at all. The intermediate interpreter is small.
LAUNCHER = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"


def bench_memory(tmp: Path, config: Config) -> list[Row]:
    free = shutil.disk_usage(tmp).free
    size_mb = config.memory_mb
    note = ""
    if size_mb >= 1024 and free < 5 * (1 << 30):
        size_mb = 512
        note = f"; {free / (1 << 30):.1f} GiB free on {tmp}, so 512 MiB instead of 1 GiB"
    geometry = volume_geometry(size_mb)
    path = tmp / "memory.itar"
    try:
        data = np.empty(geometry.shape, np.float32)
        fill_volume(data, config.seed + 2)
        write_volume_archive(path, VOLUME, data, geometry.chunks)
        expected = float(data[::7, ::97, ::89].astype(np.float64).sum())
        del data
        warm_page_cache(path)
        slab_bytes = math.prod(geometry.chunks) * 4
        workers = os.cpu_count() or 1
        bound = 2 * workers * slab_bytes  # a compressed record + a decode buffer per worker, generously
        rows = []
        for mode, measure, target in (
            ("ours", "ours arr.read(out=)", f"<= {bound / MIB:.0f} MiB extra"),
            ("zarr", "zarr-python arr.zarr[...] (allocates its result)", ""),
            ("zarr-out", "zarr-python get_basic_selection(out=NDBuffer)", ""),
        ):
            command = [
                *(sys.executable, "-c", LAUNCHER),
                *(sys.executable, str(Path(__file__).resolve()), "--memory-child", mode, str(path)),
            ]
            completed = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
            if completed.returncode != 0:
                raise RuntimeError(f"memory child {mode} failed:\n{completed.stderr[-4000:]}")
            result = json.loads(completed.stdout.strip().splitlines()[-1])
            if not math.isclose(result["checksum"], expected, rel_tol=1e-9, abs_tol=1e-6):
                raise AssertionError(f"memory child {mode}: values differ from the written data")
            out_bytes = result["out_bytes"]
            extra = result["maxrss_after"] - result["maxrss_before"]
            check = ""
            if result["hwm_before"] is not None and result["hwm_after"] is not None:
                check = f"; VmHWM grew by {(result['hwm_after'] - result['hwm_before']) / MIB:.0f} MiB"
            hidden = result["maxrss_before"] - (result["rss_before"] or result["maxrss_before"])
            if hidden > 16 * MIB:  # a peak before the read could hide part of the read's peak
                check += f" (but the peak before the read exceeded the RSS by {hidden / MIB:.0f} MiB)"
            stats = f"; backend stats {result['stats']}" if result["stats"] else ""
            rows.append(
                Row(
                    "4 memory",
                    f"{measure}, {geometry.describe()}",
                    (out_bytes + extra) / out_bytes,
                    "peak/size of out",
                    "" if not target else f"{target} (2 chunks/CPU)",
                    None if not target else extra <= bound,
                    {"extra_bytes": float(extra), "out_bytes": float(out_bytes), "read_s": result["seconds"]},
                    f"ru_maxrss grew by {extra / MIB:.0f} MiB ({extra / out_bytes:.2f} x out){check}; read "
                    f"{ms(result['seconds'])}{stats}{note if mode == 'ours' else ''}",
                )
            )
        return rows
    finally:
        path.unlink(missing_ok=True)


# -- driver -----------------------------------------------------------------------------------


WORKLOADS = ("volume", "frames", "remote", "memory")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = bench.bench_parser(__doc__, "small, fast run (smoke test, < 30 s)")
    parser.add_argument(
        "--size-mb", type=int, default=None, help="size of the volume of workload 1 in MiB (default 256; quick 32)"
    )
    parser.add_argument("--skip-tensorstore", action="store_true", help="don't compare with tensorstore")
    bench.add_run_arguments(parser, "random seed (data, frame sizes, read order)", WORKLOADS)
    parser.add_argument("--memory-child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.memory_child:
        memory_child(*args.memory_child)
        return 0
    if args.size_mb is not None and args.size_mb < 1:
        raise SystemExit("--size-mb must be >= 1")
    config = (
        quick_config(args.seed, args.size_mb) if args.quick else Config(size_mb=args.size_mb or 256, seed=args.seed)
    )
    only = set(args.only or WORKLOADS)
    rng = random.Random(config.seed)
    rows: list[Row] = []
    started = time.perf_counter()
    with bench.temporary_directory("bench-read-", args.tmpdir) as tmp:
        if "volume" in only:
            rows += bench_volume(tmp, config, args.skip_tensorstore)
            for path in tmp.iterdir():  # free the disk (and its page cache) early
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        if "frames" in only:
            rows += bench_frames(tmp, config, rng)
            (tmp / "frames.itar").unlink()
        if "remote" in only:
            rows += bench_remote(tmp, config, rng)
        if "memory" in only:
            rows += bench_memory(tmp, config)
    elapsed = time.perf_counter() - started
    stats = backend_stats()
    run = bench.versions(numcodecs=numcodecs.__version__, numpy=np.__version__)
    backend = type(default_backend()).__name__
    print(bench.banner("bench_read", run, quick=args.quick, elapsed=elapsed, backend=backend))
    print(bench.format_table(rows))
    if stats:
        print(f"backend stats: {stats}")
    if args.json is not None:
        bench.write_json(
            args.json, config, quick=args.quick, elapsed=elapsed, versions=run, rows=rows, backend_stats=stats
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
