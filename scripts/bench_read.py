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
   ``IndexedTarArchive`` access by key for context (>= 0.8, SPEC's target with checksums).
Local reads verify checksums (the default); each of their rows says what that costs,
measured side by side with the same reads of a store opened with ``verify_checksums=False``.
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

    .venv/bin/python -m scripts.bench_read                # full run (~1 min)
    .venv/bin/python -m scripts.bench_read --quick        # small, fast run (smoke test, < 30 s)
    .venv/bin/python -m scripts.bench_read --json bench_read.json --skip-tensorstore

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
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numcodecs
import numcodecs.blosc
import numpy as np
import zarr
import zarr.storage
from upath import UPath
from zarr.core.buffer.cpu import NDBuffer

import scripts._benchlib as bench
from ncore_like import Array, BloscCompression, Group, IndexedTarZarrStore
from ncore_like._defaults import TAIL_READ_SIZE
from ncore_like.backend import Backend
from scripts._benchlib import (
    MB,
    MIB,
    Row,
    chunk_key,
    each,
    expect,
    gbs,
    median_times,
    ms,
    pread_all,
    verification_cost,
    warm_page_cache,
)

VOLUME = "volume"
NDArray = np.ndarray[Any, Any]
Selection = tuple[slice, ...]


@dataclass(frozen=True)
class Config:
    """Sizes of the workloads (defaults: the full run; :func:`configure` ``--quick``: the smoke run)."""

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--size-mb", type=int, default=None, help="size of the volume of workload 1 in MiB (default 256; quick 32)"
    )
    parser.add_argument("--skip-tensorstore", action="store_true", help="don't compare with tensorstore")


def configure(args: argparse.Namespace) -> Config:
    """The full run, or with ``--quick`` a small configuration that runs in well under 30 s."""
    if args.size_mb is not None and args.size_mb < 1:
        raise SystemExit("--size-mb must be >= 1")
    if not args.quick:
        return Config(size_mb=args.size_mb or 256, seed=args.seed)
    return Config(
        size_mb=args.size_mb or 32,
        full_repeats=3,
        frames=40,
        frame_repeats=3,
        remote_shape=(32, 128, 128),
        remote_frames=20,
        remote_repeats=1,
        memory_mb=64,
        seed=args.seed,
    )


#: The backends of the arrays this run reads through, by identity (for their statistics).
BACKENDS: dict[int, Backend] = {}


def tracked(array: Array) -> Array:
    """``array``, its backend's statistics counted in the run's."""
    BACKENDS[id(array.backend)] = array.backend
    return array


def backend_summary() -> tuple[str, str]:
    """The name(s) of the backends the run read through (the default class if none) and
    their statistics, summed."""
    names = ", ".join(sorted({type(backend).__name__ for backend in BACKENDS.values()}))
    return names or Backend.__name__, repr(sum((backend.stats for backend in BACKENDS.values()), Counter[str]()))


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
    side = next((side for side in (1024, 512, 256, 128) if size // (side * side * 4) >= 16), 64)
    depth = max(16, size // (side * side * 4))
    per_chunk = max(1, min(4, depth // 16))
    depth -= depth % per_chunk
    return Geometry((depth, side, side), (per_chunk, side, side))


def fill_volume(out: NDArray, seed: int) -> None:
    """Smooth-ish data that compresses (~3x with lz4 + bit-shuffle): sinusoids plus small
    noise, quantised to 1/16 (as sensor data often is), generated slab by slab."""
    rng = np.random.default_rng(seed)
    _, ny, nx = out.shape
    yy = np.cos(np.arange(ny, dtype=np.float32) * np.float32(0.015))[None, :, None]
    xx = np.arange(nx, dtype=np.float32)[None, None, :]
    step = 8
    for z0 in range(0, out.shape[0], step):
        slab = out[z0 : z0 + step]
        zz = np.arange(z0, z0 + slab.shape[0], dtype=np.float32)[:, None, None]
        slab[...] = np.sin(xx * np.float32(0.02) + zz * np.float32(0.1)) * yy * np.float32(100.0)
        slab += rng.standard_normal(slab.shape, dtype=np.float32) * np.float32(0.5)
        np.multiply(slab, 16, out=slab)
        np.round(slab, out=slab)
        np.divide(slab, 16, out=slab)


def write_volume_archive(path: Path, data: NDArray, chunks: tuple[int, ...]) -> None:
    """An archive (zarr format 2, consolidated) holding ``data`` as a Blosc (lz4, bit-shuffle)
    array named :data:`VOLUME`."""
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({"bench": "bench_read"}, zarr_format=2)
        root.create_array(VOLUME, data, chunks=chunks, compression=BloscCompression())
        store.consolidate()


def write_zarr_directory(directory: Path, data: NDArray, chunks: tuple[int, ...]) -> None:
    """A zarr format 2 directory copy written by zarr-python (same chunks and compressor)."""
    array = zarr.create_array(
        store=zarr.storage.LocalStore(directory),
        shape=data.shape,
        dtype=data.dtype,
        chunks=chunks,
        compressors=BloscCompression().to_numcodecs(),
        fill_value=0,
        zarr_format=2,
    )
    array[...] = data


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


def bench_volume(run: bench.Run[Config]) -> list[Row]:
    geometry = volume_geometry(run.config.size_mb)
    data = np.empty(geometry.shape, np.float32)
    fill_volume(data, run.config.seed)
    path, directory = run.tmp / "volume.itar", run.tmp / "volume.zarr"
    start = time.perf_counter()
    write_volume_archive(path, data, geometry.chunks)
    written = time.perf_counter() - start
    write_zarr_directory(directory, data, geometry.chunks)
    warm_page_cache(path, directory)
    numcodecs.blosc.use_threads = False  # blosc's global context serialises threads otherwise
    workers = os.cpu_count() or 1
    store = IndexedTarZarrStore(path)  # (not opened in the with statement: mypy would see a Store)
    plain = IndexedTarZarrStore(path, verify_checksums=False)  # what checksum verification costs
    with store, plain, ThreadPoolExecutor(workers) as pool:
        array = tracked(store.open_root_group().array(VOLUME))
        unverified = plain.open_root_group().array(VOLUME)
        with path.open("rb", buffering=0) as file:
            ranges = [store.archive.records[chunk_key(array, (index, 0, 0))] for index in range(geometry.nchunks)]
            records = [os.pread(file.fileno(), size, offset) for offset, size in ranges]
        slab = geometry.chunks[0]

        def decode_limit(indices: Sequence[int], target: NDArray, first: int = 0) -> NDArray:
            def one(index: int) -> None:
                begin = (index - first) * slab
                numcodecs.blosc.decompress(records[index], target[begin : begin + slab])

            list(pool.map(one, indices))
            return target

        rows = volume_rows(run, geometry, (array, unverified), data, decode_limit, sum(map(len, records)), written)
        aligned, unaligned = partial_selections(geometry)
        repeats = run.config.full_repeats
        arrays = array, unverified
        rows.append(partial_row("chunk-aligned", aligned, geometry, arrays, data, decode_limit, repeats))
        rows.append(partial_row("unaligned", unaligned, geometry, arrays, data, None, repeats))
        return rows


def volume_rows(
    run: bench.Run[Config],
    geometry: Geometry,
    arrays: tuple[Array, Array],
    data: NDArray,
    decode_limit: Callable[[Sequence[int], NDArray], NDArray],
    compressed: int,
    written: float,
) -> list[Row]:
    """Full reads of the volume: ours (checksums verified, and not), the decode limit,
    zarr-python (and tensorstore); ``compressed``: bytes of our chunk records, ``written``:
    seconds writing the archive took."""
    array, unverified = arrays
    out_full, out_limit = touched(geometry.shape, data.dtype), touched(geometry.shape, data.dtype)
    directory = run.tmp / "volume.zarr"
    zarr_local = zarr.open_array(zarr.storage.LocalStore(directory, read_only=True), mode="r")
    local_compressed = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and p.name[0] != ".")

    def zarr_into_out() -> NDArray:
        array.zarr.get_basic_selection(..., out=NDBuffer.from_numpy_array(out_full))
        return out_full

    full: dict[str, Callable[[], Any]] = {
        "decode limit": lambda: decode_limit(range(geometry.nchunks), out_limit),
        "ours": lambda: array.read(out=out_full),
        "ours unverified": lambda: unverified.read(out=out_full),
        "zarr itar": lambda: array.zarr[...],
        "zarr itar out=": zarr_into_out,
        "zarr LocalStore": lambda: zarr_local[...],
    }
    tensorstore, ts_note = _tensorstore(run.args.skip_tensorstore)
    if tensorstore is not None:
        spec = {"driver": "zarr", "kvstore": {"driver": "file", "path": str(directory)}}
        ts_store = tensorstore.open(spec, read=True).result()
        full["tensorstore"] = lambda: ts_store.read().result()
    for name, function in full.items():  # correctness first (also warms every path up)
        expect(np.array_equal(np.asarray(function()), data), f"full read: {name}")
        out_full.fill(0)
    times = median_times(full, run.config.full_repeats)
    ours, limit, nbytes, workers = times["ours"], times["decode limit"], geometry.nbytes, os.cpu_count() or 1

    def speedup(name: str, measure: str, key: str, detail: str, minimum: float | None = None) -> Row:
        label = f"speedup (time {'ts' if name == 'tensorstore' else 'zarr'}/ours)"
        ratio = times[name] / ours
        target, ok = ("", None) if minimum is None else (f">= {minimum:.2f}x", ratio >= minimum)
        return Row("1 volume", f"full read: ours vs {measure}", ratio, label, target, ok, {key: times[name]}, detail)

    rows = [
        Row(
            "1 volume", f"full read into out=, {geometry.describe()}", limit / ours, "ours/decode-limit throughput",
            ">= 0.85x", limit / ours >= 0.85,
            {"ours_s": ours, "decode_limit_s": limit, "ours_unverified_s": times["ours unverified"]},
            f"ours {ms(ours)} ({gbs(nbytes, ours)}), decode limit {ms(limit)} ({gbs(nbytes, limit)}, "
            f"{workers} threads); {verification_cost(ours, times['ours unverified'])}; "
            f"compression {nbytes / compressed:.2f}x; archive written in {written:.1f} s",
        ),
        speedup("zarr itar", "zarr-python on the same archive (arr.zarr[...])", "zarr_itar_s",
                f"zarr-python {ms(times['zarr itar'])} ({gbs(nbytes, times['zarr itar'])}); a reader at the decode "
                f"limit would be {times['zarr itar'] / limit:.2f}x", 2.0),
        speedup("zarr itar out=", "zarr-python on the same archive, out=NDBuffer", "zarr_itar_out_s",
                f"zarr-python get_basic_selection(out=) {ms(times['zarr itar out='])}"),
        speedup("zarr LocalStore", "zarr-python on a LocalStore directory copy", "zarr_local_s",
                f"zarr-python LocalStore {ms(times['zarr LocalStore'])} ({gbs(nbytes, times['zarr LocalStore'])}); "
                f"its chunks {local_compressed / MB:.1f} MB vs ours {compressed / MB:.1f} MB"),
    ]  # fmt: skip
    if tensorstore is None:
        return [*rows, Row("1 volume", ts_note, None, "", "", None)]
    ts = times["tensorstore"]
    version = bench.package_version("tensorstore")
    detail = f"tensorstore {version} {ms(ts)} ({gbs(nbytes, ts)}; allocates its result, no out=)"
    return [*rows, speedup("tensorstore", "tensorstore on the LocalStore copy", "tensorstore_s", detail)]


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


def partial_row(
    label: str,
    selection: Selection,
    geometry: Geometry,
    arrays: tuple[Array, Array],
    data: NDArray,
    decode_limit: Callable[[Sequence[int], NDArray, int], NDArray] | None,
    repeats: int,
) -> Row:
    """A partial read of the volume, ours (checksums verified; and not, for the cost) vs
    zarr-python (and the decode limit if given)."""
    array, unverified = arrays
    expected = data[selection]
    out = touched(expected.shape, data.dtype)
    functions: dict[str, Callable[[], object]] = {
        "ours": lambda: array.read(selection, out=out),
        "ours unverified": lambda: unverified.read(selection, out=out),
        "zarr": lambda: array.zarr[selection],
    }
    slab = geometry.chunks[0]
    first, stop = selection[0].start // slab, math.ceil(selection[0].stop / slab)
    if decode_limit is not None:
        scratch = touched(expected.shape, data.dtype)
        functions["decode limit"] = lambda: decode_limit(range(first, stop), scratch, first)
    expect(np.array_equal(array.read(selection, out=out), expected), f"{label} read: ours")
    expect(np.array_equal(np.asarray(array.zarr[selection]), expected), f"{label} read: zarr-python")
    times = median_times(functions, repeats)
    text = ", ".join(f"{s.start}:{s.stop}" if s != slice(None) else ":" for s in selection)
    detail = f"[{text}] = {expected.nbytes / MIB:.0f} MiB from {stop - first} chunks; ours {ms(times['ours'])}, "
    detail += f"zarr-python {ms(times['zarr'])}; {verification_cost(times['ours'], times['ours unverified'])}"
    raw = {"ours_s": times["ours"], "zarr_s": times["zarr"], "ours_unverified_s": times["ours unverified"]}
    if "decode limit" in times:
        detail += f"; ours/decode-limit throughput {times['decode limit'] / times['ours']:.2f}x"
        raw["decode_limit_s"] = times["decode limit"]
    measure = f"{label} partial read into out=: ours vs zarr-python"
    ratio = times["zarr"] / times["ours"]
    return Row("1 volume", measure, ratio, "speedup (time zarr/ours)", "(>= 2x as full)", None, raw, detail)


# -- workload 2: random frame reads ----------------------------------------------------------


def bench_frames(run: bench.Run[Config]) -> list[Row]:
    config, rng, path = run.config, run.rng, run.tmp / "frames.itar"
    names = frame_names(config.frames)
    blobs = random_blobs(rng, len(names), config.frame_min, config.frame_max)
    with IndexedTarZarrStore(path, mode="w") as store:
        write_frames(store.create_root_group({"bench": "frames"}, zarr_format=2), names, blobs)
        store.consolidate()
    warm_page_cache(path)
    order = names[:]
    rng.shuffle(order)
    wanted = dict(zip(names, blobs, strict=True))
    store = IndexedTarZarrStore(path)
    plain = IndexedTarZarrStore(path, verify_checksums=False)  # what checksum verification costs
    with store, plain, path.open("rb", buffering=0) as file:
        group, archive, fd = store.open_root_group(), store.archive, file.fileno()
        arrays = [tracked(group.array(name)) for name in order]  # opened beforehand: the loops time reads only
        plain_group = plain.open_root_group()
        plain_arrays = [plain_group.array(name) for name in order]
        keys = [chunk_key(arr) for arr in arrays]
        ranges = [archive.records[key] for key in keys]
        for name, arr, (offset, size) in zip(order, arrays, ranges, strict=True):
            blob = os.pread(fd, size, offset)
            # tobytes(): numpy's bytes scalars (``[()]``) drop trailing NUL bytes
            expect(blob == wanted[name] and arr.read_bytes() == blob and arr.read().tobytes() == blob, f"frame {name}")
        functions: dict[str, Callable[[], object]] = {
            "pread": lambda: pread_all(fd, ranges),
            "read_bytes": lambda: each(Array.read_bytes, arrays),
            "read": lambda: each(Array.read, arrays),
            "lookup+read_bytes": lambda: each(lambda name: group.array(name).read_bytes(), order),
            "archive": lambda: each(archive.__getitem__, keys),
            "read_bytes unverified": lambda: each(Array.read_bytes, plain_arrays),
            "read unverified": lambda: each(Array.read, plain_arrays),
            "lookup+read_bytes unverified": lambda: each(lambda name: plain_group.array(name).read_bytes(), order),
            "archive unverified": lambda: each(plain.archive.__getitem__, keys),
        }
        times = median_times(functions, config.frame_repeats)
    pread, count = times["pread"], len(order)
    read_mb = sum(size for _, size in ranges) / MB
    rows = []
    for name, measure, target in (
        ("read_bytes", "arr.read_bytes() of opened arrays", 0.7),
        ("read", "arr.read() of opened arrays", 0.7),
        ("lookup+read_bytes", "group.array(name).read_bytes() (lookup included)", None),
        ("archive", "archive[key] (IndexedTarArchive, context)", 0.8),
    ):
        seconds, unverified = times[name], times[f"{name} unverified"]
        ratio = pread / seconds
        rows.append(
            Row(
                "2 frames", f"{measure}, {count} random ~1 MB frames", ratio, "pread time/ours",
                "" if target is None else f">= {target:.2f}x", None if target is None else ratio >= target,
                {f"{name}_s": seconds, "pread_s": pread, f"{name}_unverified_s": unverified},
                f"ours {ms(seconds)} ({seconds / count * 1e6:.0f} us/frame), pread {ms(pread)} "
                f"({pread / count * 1e6:.0f} us/frame, {read_mb / pread / 1e3:.2f} GB/s); "
                f"{verification_cost(seconds, unverified)} ({pread / unverified:.2f}x pread)",
            )
        )  # fmt: skip
    return rows


# -- workload 3: remote -----------------------------------------------------------------------


def summarize_requests(records: list[dict[str, Any]]) -> str:
    methods = Counter(r["method"] if r.get("range") else f"{r['method']} (no range)" for r in records)
    moved = sum(int(record.get("bytes") or 0) for record in records)
    parts = ", ".join(f"{count} {method}" for method, count in methods.items())
    return f"{parts or 'no requests'}; {moved / MB:.1f} MB moved"


@dataclass
class Trial:
    wall: float
    requests: list[dict[str, Any]]


def median_trial(trials: list[Trial]) -> Trial:
    return sorted(trials, key=lambda trial: trial.wall)[len(trials) // 2]


def timed(server: Any, action: Callable[[], object]) -> Trial:
    """The wall time of ``action`` and the requests the server saw meanwhile."""
    server.clear_requests()
    start = time.perf_counter()
    action()
    return Trial(time.perf_counter() - start, server.requests())


def bench_remote(run: bench.Run[Config]) -> list[Row]:
    servers = bench.import_servers()
    config, path = run.config, run.tmp / "remote.itar"
    shape = config.remote_shape
    volume = np.empty(shape, np.float32)
    fill_volume(volume, config.seed + 1)
    names = frame_names(config.remote_frames)
    blobs = random_blobs(run.rng, len(names), config.frame_min, config.frame_max)
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({"bench": "remote"}, zarr_format=2)
        root.create_array(VOLUME, volume, chunks=(1, *shape[1:]), compression=BloscCompression())
        write_frames(root, names, blobs)
        store.consolidate()
    file_size = path.stat().st_size
    local = IndexedTarZarrStore(path)
    with local:
        group, records = local.open_root_group(), local.archive.records
        volume_ranges = [records[chunk_key(group.array(VOLUME), (index, 0, 0))] for index in range(shape[0])]
        frame_ranges = [records[chunk_key(group.array(name))] for name in names]
    # the first frame record lies before the tail read, so "first read" needs its own request
    first_frame, first_record = next(
        ((n, r) for n, r in zip(names, frame_ranges, strict=True) if sum(r) <= file_size - TAIL_READ_SIZE),
        (names[0], frame_ranges[0]),
    )
    latency = config.latency
    rows: list[Row] = []
    with servers.start_http(path.parent, latency=latency) as server:
        url = f"{server.endpoint}/{path.name}"
        fs = UPath(url).fs

        def open_store(range_reads: bool) -> IndexedTarZarrStore:
            return IndexedTarZarrStore(UPath(url), remote_range_reads=range_reads)

        def volume_read(range_reads: bool) -> Trial:
            with open_store(range_reads) as store:
                arr = tracked(store.open_root_group().array(VOLUME))
                out = touched(shape, np.dtype(np.float32))
                trial = timed(server, lambda: arr.read(out=out))
            expect(np.array_equal(out, volume), "remote volume read")
            return trial

        def frame_reads(range_reads: bool, as_bytes: bool = False) -> Trial:
            """(b) every frame read with ``read_async``, gathered; with ``as_bytes``, with
            ``read_bytes_async`` (tells the array read path from the archive's)."""
            with open_store(range_reads) as store:
                group = store.open_root_group()
                arrays = [tracked(group.array(name)) for name in names]

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
            expect([r if as_bytes else r.tobytes() for r in results] == blobs, "remote frame reads")
            return Trial(wall, log)

        def open_first_read(range_reads: bool) -> Trial:
            server.clear_requests()
            start = time.perf_counter()
            with open_store(range_reads) as store:
                arr = store.open_root_group().array(first_frame)
                value = arr.read()
                trial = Trial(time.perf_counter() - start, server.requests())
            tracked(arr)
            expect(value.tobytes() == blobs[names.index(first_frame)], "remote first read")
            return trial

        def bare_open_first() -> Trial:
            def action() -> None:
                fs.cat_file(url, start=-TAIL_READ_SIZE)
                fs.cat_file(url, start=first_record.offset, end=sum(first_record))

            return timed(server, action)

        def bare(ranges: list[Any]) -> Callable[[], Trial]:
            """The same byte ranges fetched with fsspec alone, all at once (the limit here)."""
            return lambda: timed(server, lambda: bench.fsspec_gather(fs, url, ranges))

        cases: list[tuple[str, Callable[[bool], Trial], Callable[[], Trial], float, str]] = [
            (f"(a) one arr.read(out=) touching {shape[0]} chunks", volume_read, bare(volume_ranges), 3.0, "<= 3 RTT"),
            (f"(b) {len(names)} gathered read_async frame reads", frame_reads, bare(frame_ranges), 3.0, "<= 3 RTT"),
            (
                f"(b') {len(names)} gathered read_bytes_async (context for b)",
                lambda range_reads: frame_reads(range_reads, as_bytes=True),
                bare(frame_ranges),
                3.0,
                "<= 3 RTT",
            ),
            ("(c) open + first read (one frame)", open_first_read, bare_open_first, 2.0, "<= 2 RTT (SPEC)"),
        ]
        # warm-up: fsspec's HTTP session and our code paths
        open_first_read(False)
        bare_open_first()
        for measure, read, read_bare, target, target_text in cases:
            bare_trial = median_trial([read_bare() for _ in range(config.remote_repeats)])
            for range_reads in (False, True):
                trial = median_trial([read(range_reads) for _ in range(config.remote_repeats)])
                mode = "remote_range_reads=True" if range_reads else "default buffered path"
                rows.extend(remote_rows(f"{measure}, {mode}", trial, bare_trial, target, target_text, latency))
    return rows


def remote_rows(measure: str, trial: Trial, bare: Trial, target: float, target_text: str, latency: float) -> list[Row]:
    """Two rows: the round trips the request log shows against the target (a round trip is
    requests that overlap in time), and the wall time against bare fsspec issuing the same
    requests at once (this machine's limit: moving the bytes through the local Python server
    takes time of its own). Each row's verdict is its own ratio against its own target."""
    rounds = bench.request_rounds(trial.requests)
    overlap = bench.import_servers().max_in_flight(trial.requests)
    raw = {
        "wall_s": trial.wall,
        "requests": float(len(trial.requests)),
        "request_rounds": float(rounds),
        "max_in_flight": float(overlap),
        "bare_wall_s": bare.wall,
    }
    detail = (
        f"{ms(trial.wall)} = {trial.wall / latency:.2f} x the latency; {summarize_requests(trial.requests)}, "
        f"max overlap {overlap}; bare fsspec, same ranges at once: {bare.wall / latency:.1f} x the latency, "
        f"{len(bare.requests)} requests, {bench.request_rounds(bare.requests)} round(s)"
    )
    wall = trial.wall / bare.wall
    return [
        Row("3 remote 20 ms", measure, float(rounds), "round trips in the request log", target_text,
            rounds <= target, raw, detail),
        Row("3 remote 20 ms", f"{measure}: wall vs bare fsspec", wall, "wall ours/bare fsspec, same requests",
            "<= 1.25x", wall <= 1.25, raw, detail),
    ]  # fmt: skip


# -- workload 4: peak memory ------------------------------------------------------------------


def _proc_status_bytes(field_name: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in bytes, None if unknown."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(f"{field_name}:"):
                    return int(line.split()[1]) * 1024
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
    arr = IndexedTarZarrStore(path).open_root_group().array(VOLUME)

    def zarr_out(selection: Any, out: NDArray) -> NDArray:
        arr.zarr.get_basic_selection(selection, out=NDBuffer.from_numpy_array(out))
        return out

    reads: dict[str, Callable[[Any, NDArray], NDArray]] = {
        "ours": lambda selection, out: arr.read(selection, out=out),
        "zarr": lambda selection, out: np.asarray(arr.zarr[selection]),
        "zarr-out": zarr_out,
    }
    if mode not in reads:
        raise ValueError(f"unknown memory mode {mode!r}")
    depth = min(arr.shape[0], 4 * arr.chunks[0])
    reads[mode]((slice(0, depth),), touched((depth, *arr.shape[1:]), arr.dtype))  # warm-up, its buffer freed
    out = touched(arr.shape, arr.dtype)
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    hwm_before, rss_before = _proc_status_bytes("VmHWM"), _proc_status_bytes("VmRSS")
    start = time.perf_counter()
    result = reads[mode](..., out)
    elapsed = time.perf_counter() - start
    maxrss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    hwm_after = _proc_status_bytes("VmHWM")
    report = {
        "maxrss_before": maxrss_before,
        "maxrss_after": maxrss_after,
        "hwm_before": hwm_before,
        "hwm_after": hwm_after,
        "rss_before": rss_before,
        "out_bytes": out.nbytes,
        "seconds": elapsed,
        "checksum": float(result[::7, ::97, ::89].astype(np.float64).sum()),
        "stats": repr(arr.backend.stats),
    }
    print(json.dumps(report))


#: Starts the memory child from a small intermediate process: Linux carries the peak RSS of
#: the address space that ``exec`` replaces into the new program's ``ru_maxrss``, so a
#: child forked from this (big) process would start with this process' peak, and the read
#: might not move ``ru_maxrss`` at all. The intermediate interpreter is small.
LAUNCHER = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"


def run_memory_child(mode: str, path: Path) -> dict[str, Any]:
    """What :func:`memory_child` reports, run through :data:`LAUNCHER`."""
    command = [
        *(sys.executable, "-c", LAUNCHER),
        *(sys.executable, "-m", "scripts.bench_read", "--memory-child", mode, str(path)),
    ]
    # From the repository root, where ``scripts`` is a package.
    completed = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600, cwd=bench.REPO_ROOT)
    if completed.returncode != 0:
        raise RuntimeError(f"memory child {mode} failed:\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def bench_memory(run: bench.Run[Config]) -> list[Row]:
    free = shutil.disk_usage(run.tmp).free
    size_mb, note = run.config.memory_mb, ""
    if size_mb >= 1024 and free < 5 * (1 << 30):
        size_mb = 512
        note = f"; {free / (1 << 30):.1f} GiB free on {run.tmp}, so 512 MiB instead of 1 GiB"
    geometry = volume_geometry(size_mb)
    path = run.tmp / "memory.itar"
    data = np.empty(geometry.shape, np.float32)
    fill_volume(data, run.config.seed + 2)
    write_volume_archive(path, data, geometry.chunks)
    expected = float(data[::7, ::97, ::89].astype(np.float64).sum())
    del data
    warm_page_cache(path)
    bound = 2 * (os.cpu_count() or 1) * math.prod(geometry.chunks) * 4  # a record + a decode buffer per worker
    rows = []
    for mode, measure, target in (
        ("ours", "ours arr.read(out=)", f"<= {bound / MIB:.0f} MiB extra"),
        ("zarr", "zarr-python arr.zarr[...] (allocates its result)", ""),
        ("zarr-out", "zarr-python get_basic_selection(out=NDBuffer)", ""),
    ):
        result = run_memory_child(mode, path)
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
                "4 memory", f"{measure}, {geometry.describe()}", (out_bytes + extra) / out_bytes, "peak/size of out",
                f"{target} (2 chunks/CPU)" if target else "", extra <= bound if target else None,
                {"extra_bytes": float(extra), "out_bytes": float(out_bytes), "read_s": result["seconds"]},
                f"ru_maxrss grew by {extra / MIB:.0f} MiB ({extra / out_bytes:.2f} x out){check}; read "
                f"{ms(result['seconds'])}{stats}{note if mode == 'ours' else ''}",
            )
        )  # fmt: skip
    return rows


WORKLOADS = {"volume": bench_volume, "frames": bench_frames, "remote": bench_remote, "memory": bench_memory}


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--memory-child"]:  # started by bench_memory
        memory_child(*argv[1:3])
        return 0
    return bench.run_benchmark(
        "bench_read", __doc__, WORKLOADS, configure, argv=argv, add_arguments=add_arguments,
        quick_help="small, fast run (smoke test, < 30 s)", seed_help="random seed (data, frame sizes, read order)",
        other_versions={"numcodecs": numcodecs.__version__, "numpy": np.__version__}, backend=backend_summary,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
