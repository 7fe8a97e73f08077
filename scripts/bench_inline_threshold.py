"""Where reading on the calling thread beats handing chunks to the worker pool.

Reads a 4-chunk float32 array (blosc lz4) into ``out=`` with two backends side by side:
one that always decodes on the calling thread, one that always uses the shared worker
pool; for chunk sizes from 1 KiB to 4 MiB. ``ncore_like._defaults.INLINE_BYTES`` is set
from where the pool starts to win. Run: ``.venv/bin/python -m scripts.bench_inline_threshold``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from ncore_like import Array, IndexedTarZarrStore
from ncore_like.backend import Backend
from scripts._benchlib import chunk_key


def median_read_us(array: Array, out: np.ndarray, repeats: int = 200) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        array.read(out=out)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    rng = np.random.default_rng(0)
    print("chunk KiB  stored KiB  inline us  pool us  pool/inline")
    with tempfile.TemporaryDirectory() as folder:
        for side in (16, 32, 64, 128, 256, 512, 1024):
            path = Path(folder) / f"a{side}.itar"
            values = np.sin(np.arange(4 * side * side, dtype=np.float32) / 50)
            values += rng.standard_normal(values.size).astype(np.float32) * 0.01
            data = values.reshape(4, side, side)
            with IndexedTarZarrStore(path, "w") as store:
                store.create_root_group({}).create_array("x", data, chunks=(1, side, side))
                store.consolidate()
            store = IndexedTarZarrStore(path)
            zarray = store.open_root_group().array("x").zarr
            inline = Array(zarray, Backend(inline_bytes=1 << 40))
            pool = Array(zarray, Backend(inline_bytes=0))
            out = np.empty_like(data)
            median_read_us(inline, out, 20), median_read_us(pool, out, 20)  # warm up
            inline_us, pool_us = median_read_us(inline, out), median_read_us(pool, out)
            records = store.archive.records
            stored = sum(records[chunk_key(inline, (i, 0, 0))].size for i in range(4))
            print(
                f"{side * side * 4 / 1024:9.0f}  {stored / 1024:10.0f}  {inline_us:9.0f}  {pool_us:7.0f}"
                f"  {pool_us / inline_us:11.2f}"
            )


if __name__ == "__main__":
    main()
