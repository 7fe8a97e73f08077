"""Benchmark of the ecosystem paths against zarr-python's own: xarray on an archive against
xarray on zarr-python's directory copy of the same dataset, and ``numpy.asarray(array)``
against ``array.read()``, as ratios measured side by side in one run.

Workloads:

1. ``xarray``: a dataset of ~100 MB (a Blosc-compressed float32 variable in 20 chunks, two
   small ones and a time coordinate) written with ``Dataset.to_zarr`` into an archive and
   into a local directory (zarr-python's own store, consolidated). Opening it
   (``xr.open_dataset(path, engine="ncore_like")`` against ``xr.open_zarr(directory)``, and
   ``xr.open_zarr(store.zarr)``), and opening plus loading every value, from the page cache.
   Target: no slower than the directory: the engine (whose values come through ncore_like's
   fast backend) >= 1.0; ``open_zarr(store.zarr)`` (zarr-python reads the values from either
   store) >= 0.97, parity within the run-to-run noise.
2. ``asarray``: ``numpy.asarray(array)`` against ``array.read()`` of the same ~100 MB
   array of an archive. Target: no slower (>= 0.97, the run-to-run noise of a read).

Both zarr-python majors: run it in ``.venv`` (zarr-python 3) or ``.venv-zarr2``.

Run from the repository root::

    .venv/bin/python -m scripts.bench_ecosystem            # full run (about 30 s)
    .venv/bin/python -m scripts.bench_ecosystem --quick    # smoke run (a few seconds)
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import ncore_like
import scripts._benchlib as bench
from ncore_like import IndexedTarZarrStore
from scripts._benchlib import MB, Row, median_times, ms


@dataclass(frozen=True)
class Config:
    """Sizes of the workloads (defaults: the full run; ``--quick``: the smoke run)."""

    points_shape: tuple[int, int, int] = (400, 20_000, 3)
    points_chunks: tuple[int, int, int] = (20, 20_000, 3)
    repeats: int = 7


QUICK = Config(points_shape=(40, 2_000, 3), points_chunks=(4, 2_000, 3), repeats=3)


def configure(args: Any) -> Config:
    return QUICK if args.quick else Config()


def _dataset(config: Config, generator: np.random.Generator) -> Any:
    import xarray as xr

    steps = config.points_shape[0]
    times = np.datetime64("2026-01-01T00:00:00", "ms") + np.arange(steps) * np.timedelta64(100, "ms")
    # Values that compress like sensor data (smooth, with noise), not like zeros.
    points = np.cumsum(generator.standard_normal(config.points_shape, dtype=np.float32) * 0.01, axis=1)
    return xr.Dataset(
        {
            "points": (("time", "point", "xyz"), points.astype(np.float32)),
            "speed": (("time",), np.linspace(0, 30, steps)),
            "pose": (("time", "row", "col"), generator.standard_normal((steps, 4, 4))),
        },
        coords={"time": times},
        attrs={"sequence": "drive-0001"},
    )


def bench_xarray(run: bench.Run[Config]) -> list[Row]:
    import xarray as xr

    config = run.config
    dataset = _dataset(config, run.generator)
    encoding = {"points": {"chunks": config.points_chunks}}
    archive, directory = run.tmp / "seq.itar", run.tmp / "seq.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. zarr-python's notes on v3 dtypes
        with IndexedTarZarrStore(archive, mode="w") as store:
            dataset.to_zarr(store.zarr, encoding=encoding, consolidated=False, zarr_format=2)
            store.consolidate()
        dataset.to_zarr(directory, encoding=encoding, consolidated=True, zarr_format=2)
    bench.warm_page_cache(archive, *directory.rglob("*"))

    def fresh(opener: Callable[[], Any]) -> Callable[[], Any]:
        def open_() -> Any:
            ncore_like.clear_caches()  # each open starts cold in the process, as the directory's does
            return opener()

        return open_

    openers = {
        "engine": fresh(lambda: xr.open_dataset(archive, engine="ncore_like")),
        "open_zarr": fresh(lambda: xr.open_zarr(IndexedTarZarrStore(archive).zarr)),
        "directory": fresh(lambda: xr.open_zarr(directory)),
    }
    for name, opener in openers.items():  # every path gives the dataset written
        bench.expect(opener().load().identical(dataset), f"xarray {name}")
    opened = median_times(openers, config.repeats)
    loaded = median_times({name: (lambda o=opener: o().load()) for name, opener in openers.items()}, config.repeats)
    nbytes = dataset.nbytes
    rows = []
    paths = (("engine", 'open_dataset(engine="ncore_like")', 1.0), ("open_zarr", "open_zarr(store.zarr)", 0.97))
    for name, label, target in paths:
        detail = (
            f"open: ours {ms(opened[name])}, directory {ms(opened['directory'])}; "
            f"open + load of {nbytes / MB:.0f} MB: ours {ms(loaded[name])}, directory {ms(loaded['directory'])}"
        )
        raw = {"open_s": opened[name], "directory_open_s": opened["directory"], "load_s": loaded[name],
               "directory_load_s": loaded["directory"]}  # fmt: skip
        for what, times in (("open", opened), ("open + full read", loaded)):
            ratio = times["directory"] / times[name]
            measure = f"{label}: {what} vs zarr-python's directory"
            rows.append(Row("1 xarray", measure, ratio, "speedup (time directory/ours)", f">= {target:.2f}x",
                            ratio >= target, raw, detail))  # fmt: skip
    return rows


def bench_asarray(run: bench.Run[Config]) -> list[Row]:
    config = run.config
    values = np.cumsum(run.generator.standard_normal(config.points_shape, dtype=np.float32), axis=1)
    path = run.tmp / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        store.create_root_group().create_array("points", values, chunks=config.points_chunks)
        store.consolidate()
    bench.warm_page_cache(path)
    array = IndexedTarZarrStore(path).open_root_group().array("points")
    bench.expect(np.array_equal(np.asarray(array), values) and np.array_equal(array.read(), values), "asarray")
    times = median_times({"asarray": lambda: np.asarray(array), "read": array.read}, config.repeats, isolate=True)
    ratio = times["read"] / times["asarray"]
    detail = f"{values.nbytes / MB:.0f} MB: asarray {ms(times['asarray'])}, read {ms(times['read'])}"
    return [
        Row("2 asarray", "numpy.asarray(array) vs array.read()", ratio, "speedup (time read/asarray)", ">= 0.97x",
            ratio >= 0.97, dict(times), detail),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    import xarray

    return bench.run_benchmark(
        "bench_ecosystem", __doc__, {"xarray": bench_xarray, "asarray": bench_asarray},
        configure, argv=argv, quick_help="small, fast run (smoke test)", seed_help="random seed (data)",
        other_versions={"xarray": xarray.__version__},
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
