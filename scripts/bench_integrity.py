"""Benchmark of what integrity costs: CRC32C checksums written and verified, recovery of an
unfinished archive and the index check at open, as ratios measured side by side in one run.

Workloads:

1. ``checksum``: the CRC32C packages considered (``crc32c-rs``, the one used where it works;
   ``crc32c``, its fallback; ``google-crc32c`` if installed) and zlib's CRC-32 for scale,
   on 4 KiB and 1 MiB buffers (info).
2. ``write``: writing ~1 MB blobs into an archive, and storing a Blosc-compressed volume
   through the typed API, with checksums against without: durably (close included, which
   syncs the file to disk before publishing it) and the write calls alone (where the
   checksums are computed; info). Target: checksums cost <= 3 % (ratio >= 0.97).
3. ``read``: random reads of ~1 MB and 1-4 KB records from the page cache with
   ``verify_checksums=True`` (the default) against ``False`` (what verification costs
   locally; target for ~1 MB: verified >= 0.8 x unverified), also with the ``crc32c``
   package computing the checksums (info: what the package used gains), and
   ~1 MB records over HTTP on loopback with 20 ms of latency per request, gathered
   ``read_async`` and sequential exact range reads, verified against not. Target: verified
   remote reads cost <= 2 % (ratio >= 0.98).
4. ``recover``: ``ncore_like.recover`` of an unfinished archive (its writer never closed it)
   against reading the same file sequentially in 16 MiB pieces. Target: >= 0.5 x.
5. ``index``: the check of every index entry at open (vectorised) against decoding the
   index, for 20,000 records (info).

Run from the repository root::

    .venv/bin/python -m scripts.bench_integrity            # full run (about a minute)
    .venv/bin/python -m scripts.bench_integrity --quick    # smoke run (a few seconds)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import crc32c
import numpy as np
from upath import UPath

import scripts._benchlib as bench
from ncore_like import BloscCompression, IndexedTarArchive, IndexedTarZarrStore, recover
from ncore_like.archive import _reading, _records
from ncore_like.archive._checksum import checksum, hardware_checksums, implementation
from ncore_like.archive._format import decode_index, unpack_index_header
from scripts._benchlib import MB, Row, gbs, median_times, ms, us


@dataclass(frozen=True)
class Config:
    """Sizes of the workloads (defaults: the full run; ``--quick``: the smoke run)."""

    blobs: int = 200
    blob_size: int = 1_000_000
    volume_shape: tuple[int, int, int] = (32, 1024, 1024)
    write_repeats: int = 7
    reads: int = 400
    small_reads: int = 4000
    read_repeats: int = 7
    remote_reads: int = 40
    remote_repeats: int = 5
    latency: float = 0.02
    recover_mb: int = 256
    recover_repeats: int = 5
    index_records: int = 20_000
    seed: int = 0


def configure(args: argparse.Namespace) -> Config:
    if not args.quick:
        return Config(seed=args.seed)
    return Config(
        blobs=40, volume_shape=(8, 1024, 1024), write_repeats=3, reads=100, small_reads=500, read_repeats=3,
        remote_reads=10, remote_repeats=3, recover_mb=48, recover_repeats=3, index_records=20_000, seed=args.seed,
    )  # fmt: skip


def ratio_row(workload: str, measure: str, times: bench.Timings, ours: str, base: str, target: float | None) -> Row:
    """``times[base] / times[ours]``: the throughput of ``ours`` relative to ``base``."""
    ratio = times[base] / times[ours]
    return Row(
        workload, measure, ratio, f"{ours}/{base} throughput", "info" if target is None else f">= {target:.2f}x",
        None if target is None else ratio >= target,
        {f"{name}_s": seconds for name, seconds in times.items()},
        f"{base} {ms(times[base])}, {ours} {ms(times[ours])}",
    )  # fmt: skip


# -- 1. checksum packages ---------------------------------------------------------------------


def bench_checksum(run: bench.Run[Config]) -> list[Row]:
    candidates: dict[str, Callable[[bytes], int]] = {f"{implementation()} (used)": checksum}
    if implementation() != "crc32c":
        candidates["crc32c"] = crc32c.crc32c
    candidates["zlib.crc32"] = zlib.crc32
    try:
        import google_crc32c

        candidates["google-crc32c"] = google_crc32c.value
    except ImportError:
        pass
    rows = []
    for size in (4096, 1 << 20):
        data = os.urandom(size)
        count = max(10, (256 << 20) // size)
        batch = [data] * count
        times = median_times({name: (lambda f=f, b=batch: bench.each(f, b)) for name, f in candidates.items()}, 5)
        for name in candidates:
            rows.append(
                Row(
                    "1 checksum", f"{name}, {size // 1024} KiB buffers", times["zlib.crc32"] / times[name],
                    "speed vs zlib.crc32", "info", None, {f"{name}_s": times[name]},
                    f"{gbs(size * count, times[name])}; hardware CRC32C: {hardware_checksums()}",
                )
            )  # fmt: skip
    return rows


# -- 2. writing -------------------------------------------------------------------------------


def write_blobs(path: Path, blobs: Sequence[bytes], checksums: bool, phases: list[float]) -> None:
    archive = IndexedTarArchive(path, mode="w", checksums=checksums)
    started = time.perf_counter()
    for index, blob in enumerate(blobs):
        archive[f"frames/{index:06d}"] = blob
    phases.append(time.perf_counter() - started)  # the writes, where the checksums are computed
    archive.close()  # index, fsync, rename, fsync of the folder


def write_volume(path: Path, volume: np.ndarray, checksums: bool, phases: list[float]) -> None:  # type: ignore[type-arg]
    store = IndexedTarZarrStore(path, mode="w", checksums=checksums)
    started = time.perf_counter()
    root = store.create_root_group({})
    root.create_array("volume", volume, chunks=(4, 1024, 1024), compression=BloscCompression())
    store.consolidate()
    phases.append(time.perf_counter() - started)
    store.close()


def bench_write(run: bench.Run[Config]) -> list[Row]:
    config, rng = run.config, run.generator
    blobs = [rng.bytes(int(size)) for size in rng.integers(800_000, 1_200_000, size=config.blobs)]
    volume = rng.standard_normal(config.volume_shape, dtype=np.float32)
    volume[:, :, ::2] = 0  # compressible
    paths = {"on": run.tmp / "on.itar", "off": run.tmp / "off.itar"}

    def unlink() -> None:
        for path in paths.values():
            path.unlink(missing_ok=True)

    rows = []
    size = sum(map(len, blobs))
    # The same bytes as written right after they were produced: 8 blobs, hot in the CPU's cache.
    hot = blobs[:8] * (len(blobs) // 8)
    for label, write, data in (
        (f"{len(blobs)} blobs of ~1 MB ({size / MB:.0f} MB), cold in cache", write_blobs, blobs),
        (f"{len(hot)} blobs of ~1 MB, 8 distinct, hot in cache", write_blobs, hot),
        (f"blosc volume {volume.nbytes / MB:.0f} MB, create_array", write_volume, volume),
    ):
        phases: dict[str, list[float]] = {"on": [], "off": []}
        times = median_times(
            {name: (lambda n=name, w=write, d=data, p=phases: w(paths[n], d, n == "on", p[n])) for name in paths},  # type: ignore[misc]
            config.write_repeats, after=unlink, isolate=True,
        )  # fmt: skip
        rows.append(ratio_row("2 write", f"{label}, durable (close: fsync)", times, "on", "off", 0.97))
        calls = bench.Timings(phases)
        row = ratio_row("2 write", f"{label}, the writes alone (no close)", calls, "on", "off", None)
        rows.append(row)
    return rows


# -- 3. reading -------------------------------------------------------------------------------


def with_crc32c_package(call: Callable[[], None]) -> None:
    """``call()`` with checksums computed by the ``crc32c`` package (the one used before
    ``crc32c-rs``, and the fallback), for the side-by-side comparison."""
    readers = (_reading, _records)  # the modules whose reads call ``checksum``
    saved = [module.checksum for module in readers]
    for module in readers:
        module.checksum = crc32c.crc32c
    try:
        call()
    finally:
        for module, function in zip(readers, saved, strict=True):
            module.checksum = function


def bench_read(run: bench.Run[Config]) -> list[Row]:
    config, rng = run.config, run.rng
    big = {f"big/{i:05d}": os.urandom(rng.randint(800_000, 1_200_000)) for i in range(64)}
    small = {f"small/{i:05d}": os.urandom(rng.randint(1024, 4096)) for i in range(2000)}
    path = run.tmp / "read.itar"
    with IndexedTarArchive(path, mode="w") as archive:
        for key, value in {**big, **small}.items():
            archive[key] = value
    bench.warm_page_cache(path)
    rows = []
    for label, keys, count in (("~1 MB", list(big), config.reads), ("1-4 KB", list(small), config.small_reads)):
        rows += local_read_rows(path, label, [rng.choice(keys) for _ in range(count)])
    rows += remote_rows(run, path, list(big))
    return rows


def local_read_rows(path: Path, label: str, picks: list[str]) -> list[Row]:
    """Reads of ``picks`` verified (by the package used, and by the crc32c package) against
    unverified."""
    verified, plain = IndexedTarArchive(path), IndexedTarArchive(path, verify_checksums=False)
    times = median_times(
        {
            "verified": lambda: bench.each(verified.read, picks),
            "plain": lambda: bench.each(plain.read, picks),
            "crc32c": lambda: with_crc32c_package(lambda: bench.each(verified.read, picks)),
        },
        7,
    )
    count = len(picks)
    measure = f"{count} random {label} records, page cache"
    row = ratio_row("3 read local", measure, times, "verified", "plain", 0.8 if label == "~1 MB" else None)
    row.detail += f" ({us(times['verified'] / count)} vs {us(times['plain'] / count)} per record; "
    row.detail += f"checksums by {implementation()})"
    package = ratio_row("3 read local", f"{measure}, checksums by the crc32c package", times, "crc32c", "plain", None)
    package.detail += f" ({us(times['crc32c'] / count)} vs {us(times['plain'] / count)} per record)"
    return [row, package]


def remote_rows(run: bench.Run[Config], path: Path, keys: list[str]) -> list[Row]:
    config, rng = run.config, run.rng
    servers = bench.import_servers()
    picks = rng.sample(keys, config.remote_reads)
    rows = []
    with servers.start_http(path.parent, latency=config.latency) as server:
        url = UPath(f"{server.endpoint}/{path.name}")
        readers = {
            name: IndexedTarArchive(url, remote_range_reads=True, verify_checksums=name == "verified")
            for name in ("verified", "plain")
        }

        def gathered(archive: IndexedTarArchive) -> None:
            async def main() -> None:
                await asyncio.gather(*(archive.read_async(key) for key in picks))

            asyncio.run(main())

        gather_times = median_times(
            {name: (lambda a=a: gathered(a)) for name, a in readers.items()}, config.remote_repeats
        )
        sequential = median_times(
            {name: (lambda a=a: bench.each(a.read, picks[:10])) for name, a in readers.items()}, config.remote_repeats
        )
    rows.append(ratio_row("3 read remote 20 ms", f"{len(picks)} gathered read_async of ~1 MB", gather_times,
                          "verified", "plain", 0.98))  # fmt: skip
    rows.append(ratio_row("3 read remote 20 ms", "10 sequential range reads of ~1 MB", sequential,
                          "verified", "plain", 0.98))  # fmt: skip
    return rows


# -- 4. recovery ------------------------------------------------------------------------------


def unfinished_archive(path: Path, megabytes: int, rng: np.random.Generator) -> None:
    """An archive whose writer flushed and then died (never closed): its partial file."""
    archive = IndexedTarArchive(path, mode="w")
    for index in range(megabytes):
        archive[f"frames/{index:06d}"] = rng.bytes(1 << 20)
    archive.flush()
    archive.__exit__(RuntimeError, None, None)  # a failed block: the partial file stays, as a killed writer leaves it


def read_sequentially(path: Path) -> None:
    with open(path, "rb", buffering=0) as file:
        while file.read(16 << 20):
            pass


def bench_recover(run: bench.Run[Config]) -> list[Row]:
    config = run.config
    source = run.tmp / "source.itar"
    unfinished_archive(source, config.recover_mb, run.generator)
    partial = Path(f"{source}.partial")
    work = run.tmp / "work.itar"

    def fresh_copy() -> None:  # untimed: recover finishes the partial file in place
        work.unlink(missing_ok=True)
        shutil.copyfile(partial, f"{work}.partial")
        # On disk and in the page cache, as the file of a writer that flushed before it died:
        # recover's fsync then writes only what recovery wrote.
        os.sync()
        bench.warm_page_cache(Path(f"{work}.partial"))

    fresh_copy()
    times = median_times(
        {"recover": lambda: recover(work), "sequential read": lambda: read_sequentially(Path(f"{work}.partial"))},
        config.recover_repeats,
        after=fresh_copy,
    )
    recover(work)
    checked = IndexedTarArchive(work, verify_checksums=True)
    size = partial.stat().st_size
    row = ratio_row("4 recover", f"unfinished archive of {size / MB:.0f} MB, page cache", times, "recover",
                    "sequential read", 0.5)  # fmt: skip
    row.detail += f"; {gbs(size, times['recover'])} vs {gbs(size, times['sequential read'])}, {len(checked)} records"
    return [row]


# -- 5. the index check -----------------------------------------------------------------------


def bench_index(run: bench.Run[Config]) -> list[Row]:
    path = run.tmp / "index.itar"
    with IndexedTarArchive(path, mode="w") as archive:
        for index in range(run.config.index_records):
            archive[f"frames/{index:06d}/0"] = b"x" * (index % 700)
    data = path.read_bytes()
    header = unpack_index_header(data[-512:], str(path))
    index_bytes = data[header.offset : header.offset + header.size]

    def decode() -> None:
        decode_index(index_bytes, header, str(path))

    from ncore_like.archive import _format

    check = _format._check_entries
    try:
        _format._check_entries = lambda *args: None  # type: ignore[assignment]
        unchecked = median_times({"decode without the check": decode}, 9)
    finally:
        _format._check_entries = check
    times = median_times({"decode with the check": decode}, 9)
    times.update(unchecked)
    IndexedTarArchive(path)
    started = time.perf_counter()
    IndexedTarArchive(path)  # the decoded index now comes from the process-wide cache
    return [
        Row("5 index", f"decode + check {run.config.index_records} entries", times["decode without the check"]
            / times["decode with the check"], "unchecked/checked speed", "info", None, dict(times),
            f"check {ms(times['decode with the check'] - times['decode without the check'])} of "
            f"{ms(times['decode with the check'])}; a reopen (cached index) {ms(time.perf_counter() - started)}"),
    ]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    return bench.run_benchmark(
        "bench_integrity", __doc__,
        {"checksum": bench_checksum, "write": bench_write, "read": bench_read, "recover": bench_recover,
         "index": bench_index},
        configure, argv=argv, quick_help="small, fast run (smoke test)", seed_help="random seed (data, picks)",
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
