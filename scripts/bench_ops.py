"""Benchmark of the typed API's small operations against the I/O they do, as ratios
measured side by side in one run (page cache warm).

Workloads:

1. ``lookup``: ``root.group("frames").array(name).read()`` of a random frame of 200 KB -
   1.4 MB (one uncompressed chunk; frames of different sizes, as compressed camera frames
   are) against one ``os.preadv`` of its bytes into a preallocated buffer.
   Target: <= 1.5 x. Also the lookup alone (``group.array(name)``), for scale.
2. ``row``: ``arr.read(i)`` and ``arr.read(i, out=row)`` of one random row of a
   ``[rows, 1024]`` float32 array chunked by row (Blosc, ~2-4 KB chunks) against
   ``os.pread`` of the chunk plus its decompression, the fastest of three ways:
   ``numcodecs.blosc.decompress`` into a preallocated buffer or into new bytes, and
   python-blosc's ``decompress``. Target: <= 1.5 x.
3. ``batch``: ``arr.read([i0, ..., i7], out=batch)`` of 8 random sweeps of a
   ``[sweeps, 50000, 4]`` float32 array chunked by sweep (Blosc) against the same 8 sweeps
   read one by one into the batch. Target: <= 1.2 x.
4. ``frames``: writing frames of different sizes (drawn uniformly in 200 KB - 2 MB) one
   array each (``create_array(..., chunks="single", compression=None, attributes=...)``,
   consolidate, close) against ``os.write`` of the same bytes and ``fsync`` of the file and
   its folder (closing an archive syncs both). Target: >= 0.8 x that throughput; with
   ``durable=False`` (no fsync) >= h5py's (which syncs nothing).
4b. ``small-arrays``: 2,000 arrays of 64 B - 4 KB (labels of a frame each), one
   ``create_array`` each with attributes, consolidate, close; durable and not, against h5py
   doing the same (context: what a node costs).
4c. ``blobs``: 1,000 encoded frames of 30-120 KB, ``create_bytes_array`` each (zarr format
   2, a fixed-length bytes dtype per length) with an attribute; durable and not, against
   h5py storing each as an opaque scalar (context).
5. ``volume``: ``create_array("volume", data, chunks=(1, 1024, 1024),
   compression=BloscCompression())`` of a 268 MB float32 volume in a new archive against the
   Blosc encode limit on 2 threads (``numcodecs.blosc.compress`` of the same chunks, nothing
   written). Target: >= 0.85 x the limit's throughput.
6a. ``row-array``: ``create_array`` of a ``[rows, 1024]`` float32 array chunked by row
   (Blosc), close included, against h5py's ``create_dataset`` of the same. Target: >= 1.0 x
   h5py's rows per second.
6. ``row-writes``: writing a ``[rows, 1024]`` float32 array (Blosc, chunked by row) row by
   row with ``arr.write(i, row)`` into an empty array, close included, against h5py writing
   the same rows into a dataset of the same chunks and Blosc settings (hdf5plugin). Target:
   >= 1.0 x h5py's rows per second.
7. ``records``: 20,000 raw records of 1-4 KB (``archive[key] = value``, close) against the
   reference's ``store[key] = value``. Target: >= 4 x its records per second.
8. ``pack``: ``ncore_like.pack`` of a zarr directory of ~500 MB (frames of different sizes,
   a row-chunked array, a Blosc volume, as zarr-python writes them; codecs kept) against
   reading every source file and writing the same bytes back to back with ``fsync``.
   Target: >= 0.7 x.
9. ``imports``: ``from ncore_like import Group, IndexedTarZarrStore, IndexedTarArchive``
   against ``import zarr`` (each in a fresh interpreter, bytecode compiled; target <= 1.1 x),
   and ``from ncore_like.archive import IndexedTarArchive`` alone (target <= 60 ms).
10. ``fresh``: a fresh interpreter imports, opens a consolidated archive of ~800 KB frames
   and reads one frame (as a new DataLoader worker does), timed from its first line, against
   h5py doing the same with an HDF5 file of the same frames in the same run (target <= 1 x)
   and the reference.
11. ``cli``: ``ncore-like --help``, ``ls``, ``info`` and ``tree`` of a 10,000-record archive,
   wall time of a fresh process each (median of 5; target <= 0.2 s).

The ``row`` workload also reads by ``numpy.int64`` (as indices from ``rng.integers``, a
sampler or ``np.arange`` come): the same target.

Peers in the same run, where installed: h5py (with hdf5plugin for Blosc) doing the same
operations on an HDF5 file, and the reference implementation nvidia-ncore 19.8.3 in its own
venv (``.venv-ncore-ref``, made by the interop tests), driven by ``scripts/_ncore_ref_ops.py``
on the same archives. Their rows have no target: they say where a user would be otherwise.

Run from the repository root::

    .venv/bin/python -m scripts.bench_ops            # full run (4-10 minutes)
    .venv/bin/python -m scripts.bench_ops --quick    # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import blosc
import numcodecs.blosc
import numpy as np

import scripts._benchlib as bench
from ncore_like import BloscCompression, IndexedTarArchive, IndexedTarZarrStore
from scripts._benchlib import MB, Row, Volume, chunk_key, gbs, make_volume, median_times, ms, unlink_all, us, write_raw

REF_PYTHON = bench.REF_PYTHON
COMPRESSION = BloscCompression()  # lz4, level 5, bit-shuffle: the library's default
NOTES: list[str] = []  # printed below the table (a peer that isn't installed...)


@dataclass(frozen=True)
class Config:
    frames: int = 300
    frame_bytes: int = 800_000  # lookups
    frame_low: int = 200_000  # writes: sizes drawn uniformly in [frame_low, frame_high]
    frame_high: int = 2_000_000
    records: int = 20_000
    pack_mb: int = 500
    lookups: int = 2000
    rows: int = 20_000
    row_reads: int = 4000
    sweeps: int = 200
    batches: int = 50
    repeats: int = 7
    write_repeats: int = 5
    volume_shape: tuple[int, int, int] = (64, 1024, 1024)
    row_writes: int = 20_000
    small_arrays: int = 2000
    blobs: int = 1000
    import_rounds: int = 15
    cli_records: int = 10_000
    seed: int = 0


def configure(args: argparse.Namespace) -> Config:
    if not args.quick:
        return Config(seed=args.seed)
    return Config(
        frames=40, frame_high=600_000, records=2000, pack_mb=40,
        lookups=300, rows=2000, row_reads=500, sweeps=40, batches=10, repeats=3, write_repeats=2,
        volume_shape=(8, 1024, 1024), row_writes=2000, small_arrays=200, blobs=100, import_rounds=3, cli_records=1000,
        seed=args.seed,
    )  # fmt: skip


# -- peers ------------------------------------------------------------------------------------


def h5py_modules() -> tuple[ModuleType, ModuleType] | None:
    """h5py and hdf5plugin (Blosc for HDF5), None (with a note) if not installed."""
    try:
        import h5py  # type: ignore[import-untyped]
        import hdf5plugin
    except ImportError:
        if "h5py" not in " ".join(NOTES):
            NOTES.append("h5py rows left out: install the bench extra (h5py, hdf5plugin)")
        return None
    return h5py, hdf5plugin


def h5py_blosc(hdf5plugin: ModuleType) -> Any:
    """HDF5's Blosc filter with the settings of :data:`COMPRESSION`."""
    return hdf5plugin.Blosc(cname=COMPRESSION.cname, clevel=COMPRESSION.clevel, shuffle=hdf5plugin.Blosc.BITSHUFFLE)


def reference(run: bench.Run[Config], spec: dict[str, Any]) -> dict[str, Any] | None:
    """The reference implementation's measurements of ``spec`` (see ``_ncore_ref_ops.py``),
    None (with a note) if its venv doesn't exist."""
    return bench.reference_ops(spec, run.tmp, NOTES)


def peer_row(workload: str, measure: str, ratio: float, label: str, detail: str) -> Row:
    """A peer's ratio against the same limit as ours (no target: where a user would be otherwise)."""
    return Row(workload, measure, ratio, label, "peer", None, {}, detail)


def throughput_row(
    workload: str, measure: str, times: bench.Timings, ours: str, limit: str, nbytes: float, target: float
) -> Row:
    """``times[limit] / times[ours]``: the share of the limit's throughput ours reaches."""
    ratio = times[limit] / times[ours]
    return Row(
        workload, measure, ratio, f"throughput {ours}/{limit}", f">= {target:.2f}x", ratio >= target,
        {f"{name}_s": seconds for name, seconds in times.items()},
        ", ".join(f"{name} {ms(seconds)} ({gbs(nbytes, seconds)})" for name, seconds in times.items()),
    )  # fmt: skip


def fsync_file(path: Path) -> None:
    """Puts a file written by someone else on disk (as closing an archive does for its own)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def time_row(
    workload: str, measure: str, times: bench.Timings, ours: str, limit: str, count: int, target: float
) -> Row:
    """``times[ours] / times[limit]``: how many times the limit's time ours takes."""
    ratio = times[ours] / times[limit]
    return Row(
        workload, measure, ratio, f"time {ours}/{limit}", f"<= {target:.2f}x", ratio <= target,
        {f"{name}_s": seconds for name, seconds in times.items()},
        ", ".join(f"{name} {us(seconds / count)}" for name, seconds in times.items()) + " per operation",
    )  # fmt: skip


def unverified_note(verified: float, unverified: float, limit: float, count: int) -> str:
    """What checksum verification (on by default) costs an operation timed both ways."""
    return (
        f"verify_checksums=False {us(unverified / count)} per operation ({unverified / limit:.2f}x): "
        f"verification +{(verified / unverified - 1) * 100:.0f} % time"
    )


def bench_lookup(run: bench.Run[Config]) -> list[Row]:
    config, rng = run.config, run.generator
    path = run.tmp / "frames.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        frames = store.create_root_group({}).create_group("frames")
        # Frames of different sizes, as compressed camera frames are (the mean frame_bytes):
        # a loop over frames of one size is the case memory allocators handle best.
        low, high = config.frame_bytes // 4, config.frame_bytes * 7 // 4
        for index in range(config.frames):
            frame = rng.integers(0, 255, size=int(rng.integers(low, high + 1)), dtype=np.uint8)
            frames.create_array(f"{index:05d}", frame, compression=None, attributes={"t": index})
        store.consolidate()
    bench.warm_page_cache(path)
    root = IndexedTarZarrStore(path).open_root_group()
    plain = IndexedTarZarrStore(path, verify_checksums=False).open_root_group()  # what verification costs
    names = [f"{index:05d}" for index in rng.integers(0, config.frames, size=config.lookups)]
    group = root.group("frames")
    archive = IndexedTarZarrStore(path).archive
    records = {name: archive.records[chunk_key(group.array(name))] for name in set(names)}
    fd = os.open(path, os.O_RDONLY)
    buffer = memoryview(bytearray(high))  # the limit reads into memory it has already
    into = {name: ([buffer[: record.size]], record.offset) for name, record in records.items()}
    try:
        times = median_times(
            {
                "ours": lambda: bench.each(lambda name: root.group("frames").array(name).read(), names),
                "preadv": lambda: bench.each(lambda name: os.preadv(fd, *into[name]), names),
                "lookup": lambda: bench.each(group.array, names),
                "unverified": lambda: bench.each(lambda name: plain.group("frames").array(name).read(), names),
            },
            config.repeats,
        )
    finally:
        os.close(fd)
    pair = bench.Timings({name: [times[name]] for name in ("ours", "preadv")})
    measure = f"root.group(...).array(name).read() of {low // 1000}-{high // 1000} KB frames"
    row = time_row("1 lookup", measure, pair, "ours", "preadv", len(names), 1.5)
    row.detail += f"; group.array(name) alone {us(times['lookup'] / len(names))}"
    row.detail += f"; {unverified_note(times['ours'], times['unverified'], times['preadv'], len(names))}"
    row.raw["unverified_s"] = times["unverified"]
    rows = [row]
    modules = h5py_modules()
    if modules is not None:
        h5py = modules[0]
        h5_path = run.tmp / "frames.h5"
        with h5py.File(h5_path, "w") as h5:
            h5_frames = h5.create_group("frames")
            for name in sorted(set(names)):
                h5_frames.create_dataset(name, data=root.group("frames").array(name).read())
        bench.warm_page_cache(h5_path)
        with h5py.File(h5_path, "r") as h5:
            peer = median_times(
                {"h5py": lambda: bench.each(lambda name: h5["frames"][name][()], names)}, config.repeats
            )
        per_op = peer["h5py"] / len(names)
        rows.append(peer_row("1 lookup", 'h5py: file["frames"][name][()]', peer["h5py"] / times["preadv"],
                             "time h5py/preadv", f"h5py {us(per_op)} per operation"))  # fmt: skip
    measured = reference(run, {"lookup": {"itar": str(path), "names": names, "repeats": config.repeats}})
    if measured is not None:
        seconds = measured["lookup"]["seconds"]
        rows.append(peer_row("1 lookup", 'reference (nvidia-ncore): root["frames"][name][...]',
                             seconds / times["preadv"], "time reference/preadv",
                             f"reference {us(seconds / len(names))} per operation"))  # fmt: skip
    return rows


def bench_row(run: bench.Run[Config]) -> list[Row]:
    config, rng = run.config, run.generator
    path = run.tmp / "rows.itar"
    values = rng.standard_normal((config.rows, 1024)).astype(np.float32)
    values[:, ::2] = 0  # compressible
    with IndexedTarZarrStore(path, mode="w") as store:
        store.create_root_group({}).create_array("rows", values, chunks=(1, 1024), compression=BloscCompression())
        store.consolidate()
    bench.warm_page_cache(path)
    store = IndexedTarZarrStore(path)
    array = store.open_root_group().array("rows")
    plain = IndexedTarZarrStore(path, verify_checksums=False).open_root_group().array("rows")
    picks = [int(index) for index in rng.integers(0, config.rows, size=config.row_reads)]
    picks64 = [np.int64(index) for index in picks]  # indices as numpy hands them out
    records = {index: store.archive.records[chunk_key(array, (index, 0))] for index in set(picks)}
    out = np.empty(1024, np.float32)
    scratch = np.empty(4096, np.uint8)
    fd = os.open(path, os.O_RDONLY)

    def limit(index: int) -> None:
        record = records[index]
        numcodecs.blosc.decompress(os.pread(fd, record.size, record.offset), scratch)

    def limit_new(index: int) -> None:  # without a destination: numcodecs checks none (~1.5 us less)
        record = records[index]
        numcodecs.blosc.decompress(os.pread(fd, record.size, record.offset))

    def limit_python_blosc(index: int) -> None:  # python-blosc: no per-call checks (~0.9 us less)
        record = records[index]
        blosc.decompress(os.pread(fd, record.size, record.offset))

    try:
        times = median_times(
            {
                "read(i)": lambda: bench.each(array.read, picks),
                "read(i, out=)": lambda: bench.each(lambda index: array.read(index, out=out), picks),
                "read(int64)": lambda: bench.each(array.read, picks64),
                "read(int64, out=)": lambda: bench.each(lambda index: array.read(index, out=out), picks64),
                "pread+decode into": lambda: bench.each(limit, picks),
                "pread+decode new": lambda: bench.each(limit_new, picks),
                "pread+decode python-blosc": lambda: bench.each(limit_python_blosc, picks),
                "read(i) unverified": lambda: bench.each(plain.read, picks),
                "read(i, out=) unverified": lambda: bench.each(lambda index: plain.read(index, out=out), picks),
                "read(int64) unverified": lambda: bench.each(plain.read, picks64),
                "read(int64, out=) unverified": lambda: bench.each(lambda index: plain.read(index, out=out), picks64),
            },
            config.repeats,
        )
    finally:
        os.close(fd)
    # The limit is the fastest way: numcodecs decoding into a buffer or into new bytes, or
    # python-blosc (which the library uses for rows of one Blosc block).
    times["pread+decode"] = min(times[f"pread+decode {way}"] for way in ("into", "new", "python-blosc"))
    size = np.mean([record.size for record in records.values()])
    rows = []
    for name, measure in (
        ("read(i)", f"arr.read(i), {size:.0f}-byte Blosc chunks"),
        ("read(i, out=)", "arr.read(i, out=row)"),
        ("read(int64)", "arr.read(i), i a numpy.int64"),
        ("read(int64, out=)", "arr.read(i, out=row), i a numpy.int64"),
    ):
        pair = bench.Timings({key: [times[key]] for key in (name, "pread+decode")})
        row = time_row("2 row", measure, pair, name, "pread+decode", len(picks), 1.5)
        row.detail += (
            f"; {unverified_note(times[name], times[f'{name} unverified'], times['pread+decode'], len(picks))}"
        )
        row.raw["unverified_s"] = times[f"{name} unverified"]
        rows.append(row)
    modules = h5py_modules()
    if modules is not None:
        h5py, hdf5plugin = modules
        h5_path = run.tmp / "rows.h5"
        with h5py.File(h5_path, "w") as h5:
            h5.create_dataset("rows", data=values, chunks=(1, 1024), **h5py_blosc(hdf5plugin))
        bench.warm_page_cache(h5_path)
        with h5py.File(h5_path, "r") as h5:
            dataset = h5["rows"]
            np.testing.assert_array_equal(dataset[picks[0]], array.read(picks[0]))
            peer = median_times(
                {
                    "h5py": lambda: bench.each(dataset.__getitem__, picks),
                    "h5py out=": lambda: bench.each(lambda index: dataset.read_direct(out, np.s_[index]), picks),
                },
                config.repeats,
            )
        for name, measure in (("h5py", "h5py: dataset[i]"), ("h5py out=", "h5py: dataset.read_direct(row, i)")):
            rows.append(peer_row("2 row", measure, peer[name] / times["pread+decode"], f"time {name}/pread+decode",
                                 f"{name} {us(peer[name] / len(picks))} per operation"))  # fmt: skip
    rows.extend(index_form_rows(array, picks, rng, config, times))
    rows.extend(single_chunk_loop_rows(run))
    measured = reference(run, {"row": {"itar": str(path), "array": "rows", "picks": picks, "repeats": config.repeats}})
    if measured is not None:
        seconds = measured["row"]["seconds"]
        detail = f"reference {us(seconds / len(picks))} per operation"
        rows.append(peer_row("2 row", "reference (nvidia-ncore): arr[i]", seconds / times["pread+decode"],
                             "time reference/pread+decode", detail))  # fmt: skip
    return rows


def single_chunk_loop_rows(run: bench.Run[Config]) -> list[Row]:
    """A loop over the rows of an array written with the default chunking (one chunk, as
    poses or labels are), ``poses[t]`` for each ``t``, against h5py's ``dataset[t]`` of the
    same chunk."""
    modules = h5py_modules()
    if modules is None:
        return []
    h5py, hdf5plugin = modules
    config = run.config
    poses = run.generator.standard_normal((config.rows * 5, 7))  # 100,000 rows: 5.6 MB
    path = run.tmp / "poses.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        store.create_root_group({}).create_array("poses", poses, compression=BloscCompression())
        store.consolidate()
    bench.warm_page_cache(path)
    array = IndexedTarZarrStore(path).open_root_group().array("poses")
    steps = range(0, len(poses), max(1, len(poses) // config.row_reads))
    functions: dict[str, Callable[[], object]] = {"ours": lambda: bench.each(array.__getitem__, steps)}
    h5_path = run.tmp / "poses.h5"
    with h5py.File(h5_path, "w") as h5:
        h5.create_dataset("poses", data=poses, chunks=poses.shape, **h5py_blosc(hdf5plugin))
    with h5py.File(h5_path, "r") as h5:
        dataset = h5["poses"]
        functions["h5py"] = lambda: bench.each(dataset.__getitem__, steps)
        times = median_times(functions, config.repeats)
    pair = bench.Timings({name: [times[name]] for name in ("ours", "h5py")})
    measure = f"poses[t] over the rows of one {poses.nbytes / MB:.1f} MB Blosc chunk (the default chunking)"
    row = time_row("2 row", measure, pair, "ours", "h5py", len(steps), 1.5)
    row.target, row.ok = "info", None  # context: the decoded chunk kept between reads
    return [row]


def index_form_rows(
    array: Any, picks: list[int], rng: np.random.Generator, config: Config, times: dict[str, float]
) -> list[Row]:
    """Every common form of a row index against ``read(i)`` of the same rows, and 8 rows by
    an index array and by a slice against ``numpy.stack`` of their ``read(i)``: no form may
    fall off the fast path. ``times`` has the row workload's ``pread+decode``, to which the
    details relate each form."""
    size = array.shape[0]
    count = len(picks) // 8
    batches = [rng.integers(0, size, size=8) for _ in range(count)]  # as a sampler hands them out
    starts = [int(start) for start in rng.integers(0, size - 8, size=count)]
    windows = [range(start, start + 8) for start in starts]

    def rows_one_by_one(rows: Any) -> Any:  # the same result as a loop makes it
        return np.stack([array.read(index) for index in rows])

    # name: (what it is, the function, its items, what it is compared with)
    forms: dict[str, tuple[str, Callable[[Any], object], list[Any], str]] = {
        "arr[i]": ("arr[i]", array.__getitem__, picks, "read(i)"),
        "arr[i, :]": ("arr[i, :]", lambda index: array[index, :], picks, "read(i)"),
        "arr[i, ...]": ("arr[i, ...]", lambda index: array[index, ...], picks, "read(i)"),
        "read(i - rows)": ("arr.read(i - rows), a negative index", array.read, [i - size for i in picks], "read(i)"),
        "read(uint32)": ("arr.read(i), i a numpy.uint32", array.read, [np.uint32(i) for i in picks], "read(i)"),
        "read(0-d)": ("arr.read(i), i a 0-d integer array", array.read, [np.array(i) for i in picks], "read(i)"),
        "arr[i, :3]": ("arr[i, :3], part of a row", lambda index: array[index, :3], picks, "read(i)"),
        "read(8 indices)": ("arr.read(rows), rows 8 numpy indices", array.read, batches, "stack(8 x read(i)), indices"),
        "arr[t:t+8]": (
            "arr[t:t+8], a window of 8 rows",
            lambda t: array[t : t + 8],
            starts,
            "stack(8 x read(i)), window",
        ),
    }
    functions: dict[str, Callable[[], object]] = {
        name: (lambda function=function, items=items: bench.each(function, items))
        for name, (_, function, items, _) in forms.items()
    }
    functions["read(i)"] = lambda: bench.each(array.read, picks)

    async def awaited() -> None:  # one by one, as an async loader awaits its rows
        for index in picks:
            await array.read_async(index)

    functions["await read_async(i)"] = lambda: asyncio.run(awaited())
    functions["stack(8 x read(i)), indices"] = lambda: bench.each(rows_one_by_one, batches)
    functions["stack(8 x read(i)), window"] = lambda: bench.each(rows_one_by_one, windows)
    measured = median_times(functions, config.repeats)
    per_row = times["pread+decode"] / len(picks)
    pair = bench.Timings({key: [measured[key]] for key in ("await read_async(i)", "read(i)")})
    rows = [
        time_row(
            "2 row", "await arr.read_async(i), one by one", pair, "await read_async(i)", "read(i)", len(picks), 1.5
        )
    ]
    rows[0].target, rows[0].ok = "info", None  # context: the price of a coroutine and its event loop
    for name, (measure, _, items, against) in forms.items():
        pair = bench.Timings({key: [measured[key]] for key in (name, against)})
        row = time_row("2 row", measure, pair, name, against, len(items), 1.2)
        if name == "arr[i, :3]":  # the row read whole and the part taken: context, no target
            row.target, row.ok = "info", None
        each_rows = 8 if against != "read(i)" else 1
        row.detail += f"; {measured[name] / len(items) / (each_rows * per_row):.2f}x pread+decode per row"
        rows.append(row)
    return rows


def bench_batch(run: bench.Run[Config]) -> list[Row]:
    config, rng = run.config, run.generator
    path = run.tmp / "sweeps.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        points = rng.standard_normal((config.sweeps, 50_000, 4)).astype(np.float32)
        store.create_root_group({}).create_array(
            "points", points, chunks=(1, 50_000, 4), compression=BloscCompression()
        )
        store.consolidate()
    bench.warm_page_cache(path)
    array = IndexedTarZarrStore(path).open_root_group().array("points")
    plain = IndexedTarZarrStore(path, verify_checksums=False).open_root_group().array("points")
    batches = [[int(index) for index in rng.integers(0, config.sweeps, size=8)] for _ in range(config.batches)]
    out = np.empty((8, 50_000, 4), np.float32)

    def one_by_one(batch: list[int]) -> None:
        for position, index in enumerate(batch):
            array.read(index, out=out[position])

    times = median_times(
        {
            "read(list, out=)": lambda: bench.each(lambda batch: array.read(batch, out=out), batches),
            "8 x read(i, out=)": lambda: bench.each(one_by_one, batches),
            "unverified": lambda: bench.each(lambda batch: plain.read(batch, out=out), batches),
        },
        config.repeats,
    )
    pair = bench.Timings({name: [times[name]] for name in ("read(list, out=)", "8 x read(i, out=)")})
    row = time_row("3 batch", "arr.read([8 random sweeps], out=batch), 800 KB Blosc chunks", pair, "read(list, out=)",
                   "8 x read(i, out=)", len(batches), 1.2)  # fmt: skip
    row.detail += f"; verify_checksums=False {us(times['unverified'] / len(batches))} per operation: verification "
    row.detail += f"+{(times['read(list, out=)'] / times['unverified'] - 1) * 100:.0f} % time"
    row.raw["unverified_s"] = times["unverified"]
    return [row]


def fsync_folder(path: Path) -> None:
    """Puts a folder's entries on disk (as closing an archive does after its rename)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def h5py_arrays(path: Path, name: str, arrays: Sequence[np.ndarray[Any, Any]]) -> None:
    """h5py's side of writing arrays one by one: a dataset each, with an attribute ``t``, in
    group ``name`` of a new file; no fsync (h5py's users don't get one)."""
    modules = h5py_modules()
    assert modules is not None
    with modules[0].File(path, "w") as file:
        group = file.create_group(name)
        for index, values in enumerate(arrays):
            group.create_dataset(f"{index:05d}", data=values).attrs["t"] = index


def bench_frames(run: bench.Run[Config]) -> list[Row]:
    config, rng = run.config, run.generator
    sizes = rng.integers(config.frame_low, config.frame_high + 1, size=config.frames)
    frames = [rng.integers(0, 255, size=int(size), dtype=np.uint8) for size in sizes]
    nbytes = sum(frame.nbytes for frame in frames)
    ours_path, raw_path, h5_path = run.tmp / "frames.itar", run.tmp / "frames.bin", run.tmp / "frames.h5"

    phases: dict[str, list[float]] = {}

    def ours(durable: bool = True) -> None:
        # The phases of a durable write, timed inside it: the writes (their CPU time and
        # the slowest create_array too: wall time far above CPU time is waiting), then the
        # close (the index, the fsyncs), to show where a slow run lost its time.
        start, cpu, slowest = time.perf_counter(), time.thread_time(), 0.0
        store = IndexedTarZarrStore(ours_path, mode="w", durable=durable)
        with store:
            group = store.create_root_group({}).create_group("frames")
            for index, frame in enumerate(frames):
                before = time.perf_counter()
                group.create_array(f"{index:05d}", frame, chunks="single", compression=None, attributes={"t": index})
                slowest = max(slowest, time.perf_counter() - before)
            store.consolidate()
            written = time.perf_counter()
            cpu = time.thread_time() - cpu
        if durable:
            for phase, seconds in (("writes", written - start), ("close", time.perf_counter() - written),
                                   ("cpu", cpu), ("slowest", slowest)):  # fmt: skip
                phases.setdefault(phase, []).append(seconds)

    def raw_durable() -> None:
        write_raw(raw_path, frames)  # and fsync
        fsync_folder(run.tmp)

    functions: dict[str, Callable[[], object]] = {
        "ours": ours,
        "ours_not_durable": lambda: ours(durable=False),
        "write_fsync": raw_durable,
        "write": lambda: write_raw(raw_path, frames, sync=False),
    }
    if h5py_modules() is not None:
        functions["h5py"] = lambda: h5py_arrays(h5_path, "frames", frames)
    ours()  # warm-up, and a check of what was written
    check = IndexedTarZarrStore(ours_path).open_root_group().group("frames")
    np.testing.assert_array_equal(check.array(f"{len(frames) - 1:05d}").read(), frames[-1])
    phases.clear()
    times = median_times(functions, config.write_repeats, after=unlink_all(ours_path, raw_path, h5_path), isolate=True)
    low, high = config.frame_low / 1e3, config.frame_high / 1e3
    what = f"{len(frames)} frames of {low:.0f}-{high:.0f} KB, {nbytes / MB:.0f} MB"
    measure = f"create_array(frame, chunks='single', compression=None, attributes=...) x {what}"
    timings = bench.Timings({name: [seconds] for name, seconds in times.items()})
    durable = throughput_row("4 frames", measure + " vs write + fsync", timings, "ours", "write_fsync", nbytes, 0.8)
    each = zip(phases["writes"], phases["cpu"], phases["slowest"], phases["close"], strict=True)
    runs = ", ".join(f"{w * 1e3:.0f} ({c * 1e3:.0f}, {s * 1e3:.0f}) + {z * 1e3:.0f}" for w, c, s, z in each)
    durable.detail += (
        f"; durable: writes {ms(statistics.median(phases['writes']))} + close "
        f"{ms(statistics.median(phases['close']))} (medians; each run in ms: writes (their CPU, the slowest "
        f"array) + close: {runs})"
    )
    rows = [
        durable,
        peer_row("4 frames", "plain os.write, no fsync", times["write_fsync"] / times["write"],
                 "throughput write/write_fsync", f"write {ms(times['write'])} ({gbs(nbytes, times['write'])})"),
    ]  # fmt: skip
    if "h5py" in times:
        rows.append(throughput_row("4 frames", "durable=False vs h5py create_dataset(frame) + attrs (no fsync)",
                                   timings, "ours_not_durable", "h5py", nbytes, 1.0))  # fmt: skip
    spec = {"dir": str(run.tmp), "count": config.frames, "nbytes": config.frame_low, "seed": 1,
            "sizes": [int(size) for size in sizes], "repeats": config.write_repeats}  # fmt: skip
    measured = reference(run, {"frames_write": spec})
    if measured is not None:
        seconds = measured["frames_write"]["seconds"]
        rows.append(peer_row("4 frames", "reference (nvidia-ncore): create_dataset per frame, consolidate, close",
                             times["write_fsync"] / seconds, "throughput reference/write_fsync",
                             f"reference {ms(seconds)} ({gbs(nbytes, seconds)})"))  # fmt: skip
    return rows


def node_rows(workload: str, measure: str, times: Mapping[str, float], count: int, unit: str) -> list[Row]:
    """The context rows of nodes created one by one (``times`` of ``ours``,
    ``ours_not_durable`` and, where installed, ``h5py``): each of ours against h5py's rate."""
    rates = ", ".join(f"{name} {us(seconds / count)} per {unit}" for name, seconds in times.items())
    if "h5py" not in times:
        return [Row(workload, measure, None, f"{unit}s/s", "(needs h5py)", None, {}, rates)]
    raw = {f"{name}_s": seconds for name, seconds in times.items()}
    return [
        Row(workload, measure + ", durable=False vs h5py (no fsync)", times["h5py"] / times["ours_not_durable"],
            f"{unit}s/s ours_not_durable/h5py", "info", None, raw, rates),
        Row(workload, "the same, durable close (fsync) vs h5py (no fsync)", times["h5py"] / times["ours"],
            f"{unit}s/s ours/h5py", "info", None, raw, rates),
    ]  # fmt: skip


def bench_small_arrays(run: bench.Run[Config]) -> list[Row]:
    """Many small arrays, one per frame (labels, boxes, a few hundred bytes to a few KB),
    each ``create_array(...)`` with attributes: what it costs a node, not a byte."""
    config, rng = run.config, run.generator
    lengths = rng.integers(32, 2049, size=config.small_arrays)
    arrays = [rng.integers(-1, 80, size=int(length)).astype(np.int16) for length in lengths]
    path, h5_path = run.tmp / "labels.itar", run.tmp / "labels.h5"

    def ours(durable: bool = True) -> None:
        with IndexedTarZarrStore(path, mode="w", durable=durable) as store:
            group = store.create_root_group({}).create_group("labels")
            for index, values in enumerate(arrays):
                group.create_array(f"{index:05d}", values, compression=None, attributes={"t": index})
            store.consolidate()

    functions: dict[str, Callable[[], object]] = {"ours": ours, "ours_not_durable": lambda: ours(durable=False)}
    if h5py_modules() is not None:
        functions["h5py"] = lambda: h5py_arrays(h5_path, "labels", arrays)
    ours()  # warm-up, and a check of what was written
    check = IndexedTarZarrStore(path).open_root_group().group("labels")
    np.testing.assert_array_equal(check.array(f"{len(arrays) - 1:05d}").read(), arrays[-1])
    times = median_times(functions, config.write_repeats, after=unlink_all(path, h5_path), isolate=True)
    measure = f"create_array(labels, compression=None, attributes=...) x {len(arrays)} arrays of 64 B - 4 KB"
    return node_rows("4b small arrays", measure, times, len(arrays), "array")


def bench_blobs(run: bench.Run[Config]) -> list[Row]:
    """Encoded camera frames (JPEG-like blobs of 30-120 KB) stored as the API's docs store
    them, ``create_bytes_array`` each (zarr format 2, the default: a fixed-length bytes
    dtype per length), with an attribute."""
    config, rng = run.config, run.generator
    lengths = rng.integers(30_000, 120_001, size=config.blobs)
    blobs = [b"\xff\xd8" + rng.bytes(int(length) - 4) + b"\xff\xd9" for length in lengths]
    path, h5_path = run.tmp / "blobs.itar", run.tmp / "blobs.h5"

    def ours(durable: bool = True) -> None:
        with IndexedTarZarrStore(path, mode="w", durable=durable) as store:
            group = store.create_root_group({}).create_group("front")
            for index, blob in enumerate(blobs):
                group.create_bytes_array(f"{index:05d}", blob, attributes={"t": index})
            store.consolidate()

    functions: dict[str, Callable[[], object]] = {"ours": ours, "ours_not_durable": lambda: ours(durable=False)}
    if h5py_modules() is not None:  # an opaque scalar each, as h5py stores bytes
        functions["h5py"] = lambda: h5py_arrays(h5_path, "front", [np.void(blob) for blob in blobs])
    ours()  # warm-up, and a check of what was written
    check = IndexedTarZarrStore(path).open_root_group().group("front")
    assert check.array(f"{len(blobs) - 1:05d}").read_bytes() == blobs[-1]
    times = median_times(functions, config.write_repeats, after=unlink_all(path, h5_path), isolate=True)
    measure = f"create_bytes_array(blob, attributes=...) x {len(blobs)} blobs of 30-120 KB (zarr format 2)"
    return node_rows("4c blobs", measure, times, len(blobs), "blob")


def bench_row_array(run: bench.Run[Config]) -> list[Row]:
    config, rng = run.config, run.generator
    values = rng.standard_normal((config.rows, 1024)).astype(np.float32)
    values[:, ::2] = 0  # compressible, as in workload 2
    path, h5_path = run.tmp / "rowarray.itar", run.tmp / "rowarray.h5"

    def ours(durable: bool = True) -> None:
        with IndexedTarZarrStore(path, mode="w", durable=durable) as store:
            store.create_root_group({}).create_array("rows", values, chunks=(1, 1024), compression=COMPRESSION)

    functions: dict[str, Callable[[], object]] = {"ours": ours, "ours_not_durable": lambda: ours(durable=False)}
    modules = h5py_modules()
    if modules is not None:
        h5py, hdf5plugin = modules

        def h5() -> None:
            with h5py.File(h5_path, "w") as file:
                file.create_dataset("rows", data=values, chunks=(1, 1024), **h5py_blosc(hdf5plugin))

        functions["h5py"] = h5
    ours()
    np.testing.assert_array_equal(
        IndexedTarZarrStore(path).open_root_group(consolidated=False).array("rows").read(), values
    )
    times = median_times(functions, config.write_repeats, after=unlink_all(path, h5_path), isolate=True)
    count = len(values)
    rates = ", ".join(f"{name} {count / seconds / 1000:.1f} k rows/s" for name, seconds in times.items())
    rows = []
    if "h5py" in times:
        ratio = times["h5py"] / times["ours"]
        rows.append(Row("6a row array", f"create_array([{count}, 1024] f4, chunks=(1, 1024), Blosc), durable close",
                        ratio, "rows/s ours/h5py", ">= 1.00x", ratio >= 1.0,
                        {f"{name}_s": seconds for name, seconds in times.items()}, rates))  # fmt: skip
    npy = run.tmp / "rows.npy"
    np.save(npy, values)
    c = COMPRESSION
    spec = {"dir": str(run.tmp), "npy": str(npy), "chunks": [1, 1024], "cname": c.cname, "clevel": c.clevel,
            "shuffle": c.shuffle_id, "repeats": config.write_repeats}  # fmt: skip
    measured = reference(run, {"volume_write": spec})
    if measured is not None:
        seconds = measured["volume_write"]["seconds"]
        rows.append(peer_row("6a row array", "reference (nvidia-ncore): create_dataset(rows, chunks=(1, 1024))",
                             seconds / times["ours"], "rows/s ours/reference",
                             f"reference {count / seconds / 1000:.1f} k rows/s"))  # fmt: skip
    return rows


def bench_records(run: bench.Run[Config]) -> list[Row]:
    config = run.config
    rng = np.random.default_rng(config.seed + 7)
    payloads = [rng.bytes(int(size)) for size in rng.integers(1024, 4097, size=config.records)]
    keys = [f"records/{index:06d}" for index in range(config.records)]
    path = run.tmp / "records.itar"

    def ours(durable: bool = True) -> None:
        with IndexedTarArchive(path, mode="w", durable=durable) as archive:
            for key, payload in zip(keys, payloads, strict=True):
                archive[key] = payload

    functions: dict[str, Callable[[], object]] = {"ours": ours, "ours_not_durable": lambda: ours(durable=False)}
    ours()
    assert IndexedTarArchive(path)[keys[-1]] == payloads[-1]
    times = median_times(functions, config.write_repeats, after=unlink_all(path), isolate=True)
    count = len(keys)
    rates = ", ".join(f"{name} {count / seconds / 1000:.1f} k/s" for name, seconds in times.items())
    spec = {"dir": str(run.tmp), "count": count, "low": 1024, "high": 4096, "seed": 3, "repeats": config.write_repeats}
    measured = reference(run, {"records_write": spec})
    if measured is None:
        return [Row("7 records", f"archive[key] = 1-4 KB record x {count}", None, "records/s", "(needs reference)",
                    None, {}, rates)]  # fmt: skip
    seconds = measured["records_write"]["seconds"]
    ratio = seconds / times["ours"]
    return [Row("7 records", f"archive[key] = 1-4 KB record x {count}, close (fsync) vs reference store[key] = ...",
                ratio, "records/s ours/reference", ">= 4.00x", ratio >= 4.0,
                {**{f"{name}_s": value for name, value in times.items()}, "reference_s": seconds},
                rates + f", reference {count / seconds / 1000:.1f} k/s")]  # fmt: skip


def write_pack_source(directory: Path, config: Config, rng: np.random.Generator) -> int:
    """A zarr directory as zarr-python writes it (format 2): frames of different sizes, a
    row-chunked array and a Blosc volume, about ``config.pack_mb`` MB; returns its bytes."""
    import zarr

    root = zarr.open_group(zarr.storage.LocalStore(directory), mode="w", zarr_format=2)
    budget = config.pack_mb * MB
    frames = root.create_group("frames")
    share, index = budget // 2, 0
    while share > 0:
        frame = rng.integers(0, 255, size=int(rng.integers(200_000, 2_000_001)), dtype=np.uint8)
        frames.create_array(f"{index:05d}", shape=frame.shape, dtype=frame.dtype, chunks=frame.shape,
                            compressors=None, attributes={"t": index})[...] = frame  # fmt: skip
        share -= frame.nbytes
        index += 1
    rows = rng.standard_normal((max(1, budget // 4 // 4096), 1024)).astype(np.float32)
    rows[:, ::2] = 0
    compressor = numcodecs.blosc.Blosc(cname="lz4", clevel=5, shuffle=2)
    root.create_array("rows", shape=rows.shape, dtype=rows.dtype, chunks=(1, 1024), compressors=compressor)[...] = rows
    volume = make_volume((max(1, budget // 4 // (4 << 20)), 1024, 1024), rng)
    root.create_array("volume", shape=volume.shape, dtype=volume.dtype, chunks=(1, 1024, 1024),
                      compressors=compressor)[...] = volume  # fmt: skip
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def bench_pack(run: bench.Run[Config]) -> list[Row]:
    import ncore_like

    source = run.tmp / "source.zarr"
    nbytes = write_pack_source(source, run.config, run.generator)
    files = sorted(path for path in source.rglob("*") if path.is_file())
    dest, raw_path = run.tmp / "packed.itar", run.tmp / "packed.bin"

    def read_and_write() -> None:
        # What packing can't avoid: every source file read, the same bytes written durably.
        write_raw(raw_path, [path.read_bytes() for path in files])
        fsync_folder(run.tmp)

    functions: dict[str, Callable[[], object]] = {
        "pack": lambda: ncore_like.pack(source, dest, overwrite=True),
        "read_write_fsync": read_and_write,
    }
    ncore_like.pack(source, dest)
    assert IndexedTarZarrStore(dest).open_root_group(consolidated=False).array("volume").shape[1:] == (1024, 1024)
    times = median_times(functions, run.config.write_repeats, after=unlink_all(dest, raw_path), isolate=True)
    what = f"ncore_like.pack of a {nbytes / MB:.0f} MB zarr directory ({len(files)} files: frames, row chunks, volume)"
    timings = bench.Timings({name: [seconds] for name, seconds in times.items()})
    return [throughput_row("8 pack", what, timings, "pack", "read_write_fsync", nbytes, 0.7)]


def blosc_limit(chunk: Volume) -> bytes:
    """Blosc's encode limit for one chunk, with the settings of :data:`COMPRESSION`."""
    return bench.blosc_limit(chunk, COMPRESSION)


def bench_volume(run: bench.Run[Config]) -> list[Row]:
    config = run.config
    volume = make_volume(config.volume_shape, run.generator)
    chunks = (1, *config.volume_shape[1:])
    views = [volume[index : index + 1] for index in range(volume.shape[0])]
    path, h5_path = run.tmp / "volume.itar", run.tmp / "volume.h5"
    phases: dict[str, list[float]] = {}

    def ours(durable: bool = True) -> None:
        with IndexedTarZarrStore(path, mode="w", durable=durable) as store:
            root = store.create_root_group({})
            start = time.perf_counter()
            root.create_array("volume", volume, chunks=chunks, compression=COMPRESSION)
            phase = "create_array" if durable else "create_array_not_durable"
            phases.setdefault(phase, []).append(time.perf_counter() - start)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(blosc_limit, views[:2]))  # warm both threads
        functions: dict[str, Callable[[], object]] = {
            "ours": ours,
            # A durable writer starts the disk's write-back as it goes: that I/O then runs
            # during create_array instead of in the fsync at close. Without it, the encode
            # path alone.
            "ours_not_durable": lambda: ours(durable=False),
            "limit_2": lambda: list(pool.map(blosc_limit, views)),
        }
        modules = h5py_modules()
        if modules is not None:
            h5py, hdf5plugin = modules

            def h5() -> None:
                with h5py.File(h5_path, "w") as file:
                    file.create_dataset("volume", data=volume, chunks=chunks, **h5py_blosc(hdf5plugin))

            functions["h5py"] = h5
        ours()
        stored = IndexedTarZarrStore(path)
        first = chunk_key(stored.open_root_group(consolidated=False).array("volume"), (0, 0, 0))
        assert stored.archive[first] == blosc_limit(views[0])  # byte-identical to Blosc's own
        phases.clear()
        times = median_times(functions, config.write_repeats, after=unlink_all(path, h5_path), isolate=True)
    times.add("create_array", phases["create_array"])
    times.add("create_array_not_durable", phases["create_array_not_durable"])
    nbytes = volume.nbytes
    what = f"{nbytes / MB:.0f} MB float32, {len(views)} chunks"
    two = bench.Timings({name: [times[name]] for name in ("create_array", "limit_2")})
    rows = [
        throughput_row("5 volume", f"create_array(volume, compression=Blosc) ({what})", two, "create_array",
                       "limit_2", nbytes, 0.85),
        peer_row("5 volume", "open + create_array + close (fsync)", times["limit_2"] / times["ours"],
                 "throughput ours/limit_2", f"ours {ms(times['ours'])} ({gbs(nbytes, times['ours'])})"),
        peer_row("5 volume", "create_array in a store with durable=False (no write-back during it)",
                 times["limit_2"] / times["create_array_not_durable"], "throughput create_array/limit_2",
                 f"create_array {ms(times['create_array_not_durable'])}"),
    ]  # fmt: skip
    if "h5py" in times:
        rows.append(peer_row("5 volume", "h5py: create_dataset(volume, chunks, Blosc via hdf5plugin)",
                             times["limit_2"] / times["h5py"], "throughput h5py/limit_2",
                             f"h5py {ms(times['h5py'])} ({gbs(nbytes, times['h5py'])})"))  # fmt: skip
    npy = run.tmp / "volume.npy"
    np.save(npy, volume)
    c = COMPRESSION
    spec = {"dir": str(run.tmp), "npy": str(npy), "chunks": list(chunks), "cname": c.cname, "clevel": c.clevel,
            "shuffle": c.shuffle_id, "repeats": config.write_repeats}  # fmt: skip
    measured = reference(run, {"volume_write": spec})
    if measured is not None:
        seconds = measured["volume_write"]["seconds"]
        rows.append(peer_row("5 volume", "reference (nvidia-ncore): create_dataset(volume, Blosc), close",
                             times["limit_2"] / seconds, "throughput reference/limit_2",
                             f"reference {ms(seconds)} ({gbs(nbytes, seconds)})"))  # fmt: skip
    return rows


def bench_row_writes(run: bench.Run[Config]) -> list[Row]:
    config, rng = run.config, run.generator
    values = rng.standard_normal((config.row_writes, 1024)).astype(np.float32)
    values[:, ::2] = 0  # compressible, as in workload 2
    path, h5_path = run.tmp / "rows.itar", run.tmp / "rows.h5"

    def ours() -> None:
        with IndexedTarZarrStore(path, mode="w") as store:
            array = store.create_root_group({}).create_empty_array(
                "rows", shape=values.shape, dtype=np.float32, chunks=(1, 1024), compression=COMPRESSION
            )
            for index in range(len(values)):
                array.write(index, values[index])

    functions: dict[str, Callable[[], object]] = {"ours": ours}
    modules = h5py_modules()
    if modules is not None:
        h5py, hdf5plugin = modules

        def h5() -> None:
            with h5py.File(h5_path, "w") as file:
                dataset = file.create_dataset(
                    "rows", shape=values.shape, dtype=np.float32, chunks=(1, 1024), **h5py_blosc(hdf5plugin)
                )
                for index in range(len(values)):
                    dataset[index] = values[index]
            fsync_file(h5_path)

        functions["h5py"] = h5
    ours()
    written = IndexedTarZarrStore(path).open_root_group(consolidated=False).array("rows")
    np.testing.assert_array_equal(written.read(), values)
    times = median_times(functions, config.write_repeats, after=unlink_all(path, h5_path), isolate=True)
    count = len(values)
    rates = ", ".join(f"{name} {count / seconds / 1000:.1f} k rows/s" for name, seconds in times.items())
    rows = []
    if "h5py" in times:
        ratio = times["h5py"] / times["ours"]
        rows.append(Row("6 row writes", f"arr.write(i, row) x {count}, Blosc chunks of one row, close included",
                        ratio, "rows/s ours/h5py", ">= 1.00x", ratio >= 1.0,
                        {f"{name}_s": seconds for name, seconds in times.items()}, rates))  # fmt: skip
    else:
        rows.append(Row("6 row writes", f"arr.write(i, row) x {count}", None, "rows/s", "(needs h5py)", None, {},
                        rates))  # fmt: skip
    spec = {"dir": str(run.tmp), "rows": count, "cols": 1024, "seed": 2, "repeats": config.write_repeats}
    measured = reference(run, {"row_writes": spec})
    if measured is not None:
        seconds = measured["row_writes"]["seconds"]
        rows.append(peer_row("6 row writes", "reference (nvidia-ncore): arr[i] = row, close",
                             seconds / times["ours"], "rows/s ours/reference",
                             f"reference {count / seconds / 1000:.1f} k rows/s"))  # fmt: skip
    return rows


IMPORTS = {
    "zarr": "import zarr",
    "ncore_like": "from ncore_like import Group, IndexedTarArchive, IndexedTarZarrStore",
    "archive": "from ncore_like.archive import IndexedTarArchive",
    "h5py": "import h5py",
}


def import_seconds(python: Path | str, statement: str, env: dict[str, str]) -> float:
    """Seconds ``statement`` takes in a fresh interpreter (the interpreter's own start excluded)."""
    code = f"import time; start = time.perf_counter(); {statement}; print(time.perf_counter() - start)"
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(result.stdout)


def bench_imports(run: bench.Run[Config]) -> list[Row]:
    # Installed packages have their bytecode compiled; this checkout's is compiled here (and
    # the environment may say not to write bytecode, which would measure compiling instead).
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(bench.REPO_ROOT / "ncore_like")], env=env,
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    statements = dict(IMPORTS)
    if h5py_modules() is None:
        del statements["h5py"]
    samples: dict[str, list[float]] = {name: [] for name in statements}
    with_reference = REF_PYTHON.exists()
    if with_reference:
        samples["reference"] = []
    for _ in range(config_rounds(run)):
        for name, statement in statements.items():
            samples[name].append(import_seconds(sys.executable, statement, env))
        if with_reference:
            statement = "from ncore.impl.data.stores import IndexedTarStore"
            samples["reference"].append(import_seconds(REF_PYTHON, statement, env))
    times = {name: statistics.median(values) for name, values in samples.items()}
    detail = ", ".join(f"{name} {ms(seconds, fine=False)}" for name, seconds in times.items())
    raw = {f"{name}_s": seconds for name, seconds in times.items()}
    ratio = times["ncore_like"] / times["zarr"]
    archive = times["archive"]
    rows = [
        Row("9 imports", "from ncore_like import Group, IndexedTarArchive, IndexedTarZarrStore", ratio,
            "time ncore_like/import zarr", "<= 1.10x", ratio <= 1.1, raw, detail),
        Row("9 imports", "from ncore_like.archive import IndexedTarArchive (no zarr)", archive / times["zarr"],
            "time archive/import zarr", "<= 60 ms", archive <= 0.060, raw, f"archive {ms(archive, fine=False)}"),
    ]  # fmt: skip
    for name, measure in (("h5py", "import h5py"), ("reference", "reference: from ncore.impl.data.stores import ...")):
        if name in times:
            rows.append(peer_row("9 imports", measure, times[name] / times["zarr"], f"time {name}/import zarr",
                                 f"{name} {ms(times[name], fine=False)}"))  # fmt: skip
    NOTES.append(
        "import ncore_like alone imports nothing heavy (names are imported on first use); the imports rows import "
        "what the typed API needs"
    )
    return rows


# -- 8: a fresh process's first frame -----------------------------------------------------------

FRESH_OURS = """
import time
start = time.perf_counter()
from ncore_like import IndexedTarZarrStore
with IndexedTarZarrStore({path!r}) as store:
    frame = store.open_root_group().group("frames").array({name!r}).read()
print(time.perf_counter() - start, int(frame.sum()))
"""
FRESH_H5PY = """
import time
start = time.perf_counter()
import h5py
with h5py.File({path!r}, "r") as file:
    frame = file["frames"][{name!r}][()]
print(time.perf_counter() - start, int(frame.sum()))
"""
FRESH_REFERENCE = """
import time
start = time.perf_counter()
from ncore.impl.data.stores import IndexedTarStore, open_compressed_consolidated
store = IndexedTarStore({path!r}, mode="r")
frame = open_compressed_consolidated(store, mode="r")["frames"][{name!r}][...]
print(time.perf_counter() - start, int(frame.sum()))
"""


def fresh_seconds(python: Path | str, code: str, env: dict[str, str]) -> tuple[float, int]:
    """Seconds a fresh interpreter takes from its first line through ``code``, and its checksum."""
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, check=True)
    seconds, total = result.stdout.split()
    return float(seconds), int(total)


def bench_fresh(run: bench.Run[Config]) -> list[Row]:
    config, rng = run.config, run.generator
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(bench.REPO_ROOT / "ncore_like")], env=env,
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    path = run.tmp / "fresh.itar"
    frames = [rng.integers(0, 255, size=config.frame_bytes, dtype=np.uint8) for _ in range(20)]
    with IndexedTarZarrStore(path, mode="w") as store:
        group = store.create_root_group({}).create_group("frames")
        for index, frame in enumerate(frames):
            group.create_array(f"{index:05d}", frame, compression=None, attributes={"t": index})
        store.consolidate()
    name, expected = "00007", int(frames[7].sum())
    codes: dict[str, tuple[Path | str, str]] = {"ours": (sys.executable, FRESH_OURS.format(path=str(path), name=name))}
    modules = h5py_modules()
    if modules is not None:
        h5_path = run.tmp / "fresh.h5"
        with modules[0].File(h5_path, "w") as file:
            h5_group = file.create_group("frames")
            for index, frame in enumerate(frames):
                h5_group.create_dataset(f"{index:05d}", data=frame).attrs["t"] = index
        codes["h5py"] = (sys.executable, FRESH_H5PY.format(path=str(h5_path), name=name))
    if REF_PYTHON.exists():
        codes["reference"] = (REF_PYTHON, FRESH_REFERENCE.format(path=str(path), name=name))
    bench.warm_page_cache(run.tmp)
    samples: dict[str, list[float]] = {contender: [] for contender in codes}
    for _ in range(config.import_rounds):
        for contender, (python, code) in codes.items():
            seconds, total = fresh_seconds(python, code, env)
            bench.expect(total == expected, f"{contender}'s first frame")
            samples[contender].append(seconds)
    times = {contender: statistics.median(values) for contender, values in samples.items()}
    detail = ", ".join(f"{contender} {ms(seconds, fine=False)}" for contender, seconds in times.items())
    raw = {f"{contender}_s": seconds for contender, seconds in times.items()}
    measure = "fresh process: import, open a consolidated archive, read one ~800 KB frame"
    if "h5py" not in times:
        return [Row("8 fresh", measure, None, "", "(needs h5py)", None, raw, detail)]
    ratio = times["ours"] / times["h5py"]
    rows = [Row("8 fresh", measure, ratio, "time ours/h5py", "<= 1.00x", ratio <= 1.0, raw, detail)]
    if "reference" in times:
        rows.append(peer_row("8 fresh", "reference (nvidia-ncore): the same", times["reference"] / times["h5py"],
                             "time reference/h5py", f"reference {ms(times['reference'], fine=False)}"))  # fmt: skip
    return rows


# -- 9: the command line ---------------------------------------------------------------------------


def bench_cli(run: bench.Run[Config]) -> list[Row]:
    config = run.config
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    path = run.tmp / "cli.itar"
    arrays, chunks = 100, config.cli_records // 100
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({"bench": "cli"})
        for index in range(arrays):
            values = np.arange(chunks * 16, dtype=np.float32).reshape(chunks, 16)
            root.create_array(f"a{index:03d}", values, chunks=(1, 16), compression=None)
        store.consolidate()
    bench.warm_page_cache(path)
    command = [str(Path(sys.executable).with_name("ncore-like"))]
    runs = {"--help": ["--help"], "ls": ["ls", str(path)], "info": ["info", str(path)], "tree": ["tree", str(path)]}
    for arguments in runs.values():  # bytecode compiled, caches warm
        subprocess.run(command + arguments, env=env, check=True, stdout=subprocess.DEVNULL)
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(5):
        for name, arguments in runs.items():
            start = time.perf_counter()
            subprocess.run(command + arguments, env=env, check=True, stdout=subprocess.DEVNULL)
            samples[name].append(time.perf_counter() - start)
    times = {name: statistics.median(values) for name, values in samples.items()}
    python = statistics.median(_wall([sys.executable, "-c", "pass"], env) for _ in range(5))
    with IndexedTarZarrStore(path) as store:
        records = len(store.archive)
    return [
        Row("9 cli", f"ncore-like {name}" + ("" if name == "--help" else f" of a {records}-record archive"),
            seconds / python, "time/python -c pass", "<= 0.2 s", seconds <= 0.2,
            {"seconds": seconds, "python_s": python},
            f"{ms(seconds, fine=False)} wall (median of 5 fresh processes); python -c pass {ms(python, fine=False)}")
        for name, seconds in times.items()
    ]  # fmt: skip


def _wall(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def config_rounds(run: bench.Run[Config]) -> int:
    return run.config.import_rounds


def peer_versions() -> dict[str, str]:
    """Versions of the peers measured (those installed)."""
    versions = {}
    for distribution in ("h5py", "hdf5plugin"):
        version = bench.package_version(distribution)
        if version != "?":
            versions[distribution] = version
    return versions


def main(argv: Sequence[str] | None = None) -> int:
    return bench.run_benchmark(
        "bench_ops", __doc__,
        {"lookup": bench_lookup, "row": bench_row, "batch": bench_batch, "frames": bench_frames,
         "small-arrays": bench_small_arrays, "blobs": bench_blobs, "volume": bench_volume, "row-array": bench_row_array,
         "row-writes": bench_row_writes, "records": bench_records, "pack": bench_pack, "imports": bench_imports,
         "fresh": bench_fresh, "cli": bench_cli},
        configure, argv=argv, quick_help="small, fast run (smoke test)", seed_help="random seed (data, picks)",
        notes=NOTES, other_versions=peer_versions(),
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
