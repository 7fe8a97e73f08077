"""Benchmark of the typed API's small operations against the I/O they do, as ratios
measured side by side in one run (page cache warm).

Workloads:

1. ``lookup``: ``root.group("frames").array(name).read()`` of a random ~800 KB frame (one
   uncompressed chunk) against one ``os.preadv`` of its bytes into a preallocated buffer.
   Target: <= 1.5 x. Also the lookup alone (``group.array(name)``), for scale.
2. ``row``: ``arr.read(i)`` and ``arr.read(i, out=row)`` of one random row of a
   ``[rows, 1024]`` float32 array chunked by row (Blosc, ~2-4 KB chunks) against
   ``os.pread`` of the chunk plus ``numcodecs.blosc.decompress`` into a preallocated buffer.
   Target: <= 1.5 x.
3. ``batch``: ``arr.read([i0, ..., i7], out=batch)`` of 8 random sweeps of a
   ``[sweeps, 50000, 4]`` float32 array chunked by sweep (Blosc) against the same 8 sweeps
   read one by one into the batch. Target: <= 1.2 x.

Run from the repository root::

    .venv/bin/python scripts/bench_ops.py            # full run
    .venv/bin/python scripts/bench_ops.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numcodecs.blosc
import numpy as np

from ncore_like import BloscCompression, IndexedTarZarrStore

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _benchlib lives beside this script
import _benchlib as bench
from _benchlib import Row, chunk_key, median_times, us


@dataclass(frozen=True)
class Config:
    frames: int = 300
    frame_bytes: int = 800_000
    lookups: int = 2000
    rows: int = 20_000
    row_reads: int = 4000
    sweeps: int = 200
    batches: int = 50
    repeats: int = 7
    seed: int = 0


def configure(args: argparse.Namespace) -> Config:
    if not args.quick:
        return Config(seed=args.seed)
    return Config(frames=40, lookups=300, rows=2000, row_reads=500, sweeps=40, batches=10, repeats=3, seed=args.seed)


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


def bench_lookup(run: bench.Run[Config]) -> list[Row]:
    config, rng = run.config, run.generator
    path = run.tmp / "frames.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        frames = store.create_root_group({}).create_group("frames")
        for index in range(config.frames):
            frame = rng.integers(0, 255, size=config.frame_bytes, dtype=np.uint8)
            frames.create_array(f"{index:05d}", frame, compression=None, attributes={"t": index})
        store.consolidate()
    bench.warm_page_cache(path)
    root = IndexedTarZarrStore(path).open_root_group()
    names = [f"{index:05d}" for index in rng.integers(0, config.frames, size=config.lookups)]
    group = root.group("frames")
    records = {name: store.archive.records[chunk_key(group.array(name))] for name in set(names)}
    fd = os.open(path, os.O_RDONLY)
    buffer = bytearray(config.frame_bytes)
    try:
        times = median_times(
            {
                "ours": lambda: bench.each(lambda name: root.group("frames").array(name).read(), names),
                "preadv": lambda: bench.each(lambda name: os.preadv(fd, [buffer], records[name].offset), names),
                "lookup": lambda: bench.each(group.array, names),
            },
            config.repeats,
        )
    finally:
        os.close(fd)
    pair = bench.Timings({name: [seconds] for name, seconds in times.items() if name != "lookup"})
    measure = f"root.group(...).array(name).read() of ~{config.frame_bytes // 1000} KB frames"
    row = time_row("1 lookup", measure, pair, "ours", "preadv", len(names), 1.5)
    row.detail += f"; group.array(name) alone {us(times['lookup'] / len(names))}"
    return [row]


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
    picks = [int(index) for index in rng.integers(0, config.rows, size=config.row_reads)]
    records = {index: store.archive.records[chunk_key(array, (index, 0))] for index in set(picks)}
    out = np.empty(1024, np.float32)
    scratch = np.empty(4096, np.uint8)
    fd = os.open(path, os.O_RDONLY)

    def limit(index: int) -> None:
        record = records[index]
        numcodecs.blosc.decompress(os.pread(fd, record.size, record.offset), scratch)

    try:
        times = median_times(
            {
                "read(i)": lambda: bench.each(array.read, picks),
                "read(i, out=)": lambda: bench.each(lambda index: array.read(index, out=out), picks),
                "pread+decode": lambda: bench.each(limit, picks),
            },
            config.repeats,
        )
    finally:
        os.close(fd)
    size = np.mean([record.size for record in records.values()])
    return [
        time_row("2 row", f"arr.read(i), {size:.0f}-byte Blosc chunks", times, "read(i)", "pread+decode",
                 len(picks), 1.5),
        time_row("2 row", "arr.read(i, out=row)", times, "read(i, out=)", "pread+decode", len(picks), 1.5),
    ]  # fmt: skip


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
    batches = [[int(index) for index in rng.integers(0, config.sweeps, size=8)] for _ in range(config.batches)]
    out = np.empty((8, 50_000, 4), np.float32)

    def one_by_one(batch: list[int]) -> None:
        for position, index in enumerate(batch):
            array.read(index, out=out[position])

    times = median_times(
        {
            "read(list, out=)": lambda: bench.each(lambda batch: array.read(batch, out=out), batches),
            "8 x read(i, out=)": lambda: bench.each(one_by_one, batches),
        },
        config.repeats,
    )
    return [
        time_row("3 batch", "arr.read([8 random sweeps], out=batch), 800 KB Blosc chunks", times, "read(list, out=)",
                 "8 x read(i, out=)", len(batches), 1.2),
    ]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    return bench.run_benchmark(
        "bench_ops", __doc__, {"lookup": bench_lookup, "row": bench_row, "batch": bench_batch}, configure,
        argv=argv, quick_help="small, fast run (smoke test)", seed_help="random seed (data, picks)",
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
