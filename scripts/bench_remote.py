"""Benchmark of ncore_like at scale on remote storage: streaming scans, retries under injected
faults, and packing many sequences on a dask cluster, as ratios measured side by side in one run.

S3 is moto on loopback (its ranged GETs read only the range, as S3 does: see
``tests/support/moto_runner.py``) behind a proxy adding a fixed latency per request; HTTP is
the test server (``tests.support.servers``). Workloads:

1. ``scan``: a ~200 MB archive (200 records of 0.8-1.2 MB) read in key order with
   ``scan_records`` against one range GET of the same bytes with bare s3fs (the streaming
   limit; target >= 0.8 x its throughput), and against the reference nvidia-ncore 19.8.3
   reading the same keys with its default buffered reads (target: ahead of it), with 0 and
   20 ms per request. Every side's bytes are checked against the file.
2. Random frames across many archives with the local cache: ``scripts/bench_cache.py``.
3. ``faults``: 300 records of 100-300 KB read in random order with 1 % of the GETs answered
   503, 1 % reset and 1 % cut short under their Content-Length (one of each at random places
   in every 100 GETs), against the same reads from a server without faults, on S3 and HTTP
   with 20 ms per request; read with ``read_records`` (the bulk reader, its default threads)
   and with ``read_async`` (16 requests in flight). Every record is compared with the bytes
   written. Target: >= 0.9 x the throughput without faults.
4. ``pack``: 20 small sequences (zarr directories: 40 frames of 300 KB as blob arrays, a
   Blosc-compressed lidar array) packed with ``ncore-like pack SRC... DIR`` on a 2-worker dask
   ``LocalCluster`` against ``ncore-like pack SRC DEST`` of each in turn (both in this
   process). Target >= 1.6 x: once on a cluster already running (``--scheduler``), once with
   the command starting its own (``--cluster-workers 2``, the cluster's start included); and
   as context on a running cluster whose workers keep glibc's malloc defaults (dask's
   nannies set ``MALLOC_TRIM_THRESHOLD_``, which makes every large payload an mmap).

Prints one table (ratio, target, raw medians); ``--json PATH`` also writes the results.

Run from the repository root::

    .venv/bin/python -m scripts.bench_remote              # full run (~1.5-2 min on 2 cores)
    .venv/bin/python -m scripts.bench_remote --quick      # small, fast run (smoke test)
    .venv/bin/python -m scripts.bench_remote --json docs/data/bench_remote.json --only scan

Temporary files live in a temporary directory (``--tmpdir`` to choose where) removed at the
end; servers bind 127.0.0.1 only and are stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import importlib.util
import io
import os
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from upath import UPath

import scripts._benchlib as bench
from ncore_like import BloscCompression, IndexedTarArchive, IndexedTarZarrStore
from ncore_like.archive import read_records, scan_records
from ncore_like.cli import main as cli
from ncore_like.errors import RemoteStorageError
from scripts._benchlib import MB, Row, ms

NOTES: list[str] = []  # printed below the table (a peer left out, a loaded machine...)
#: Versions of the peers, filled as the workloads meet them (the banner is printed after them).
VERSIONS: dict[str, str] = {
    name: bench.package_version(name) for name in ("s3fs", "moto", "distributed") if importlib.util.find_spec(name)
}
FAULT_KINDS = ("503", "reset", "cut")


@dataclass(frozen=True)
class Config:
    """Sizes of the workloads (defaults: the full run; :func:`configure` ``--quick``: the smoke run)."""

    scan_records: int = 200
    scan_min: int = 800_000
    scan_max: int = 1_200_000
    scan_latencies: tuple[float, ...] = (0.0, 0.02)
    scan_repeats: int = 3
    fault_records: int = 300
    fault_min: int = 100_000
    fault_max: int = 300_000
    fault_rate: float = 0.01
    """Share of the GETs failed with each kind of fault."""
    fault_latency: float = 0.02
    fault_in_flight: int = 16
    fault_repeats: int = 2
    sequences: int = 20
    frames: int = 40
    frame_bytes: int = 300_000
    lidar_points: int = 30_000
    cluster_workers: int = 2
    pack_repeats: int = 2
    seed: int = 0


def configure(args: argparse.Namespace) -> Config:
    """The full run, or with ``--quick`` a small configuration that runs in seconds."""
    if not args.quick:
        return Config(seed=args.seed)
    return Config(
        scan_records=24, scan_latencies=(0.02,), scan_repeats=1, fault_records=60, fault_repeats=1, sequences=4,
        frames=5, frame_bytes=50_000, lidar_points=2_000, pack_repeats=1, seed=args.seed,
    )  # fmt: skip


def sha256(payloads: Sequence[bytes]) -> str:
    digest = hashlib.sha256()
    for payload in payloads:
        digest.update(payload)
    return digest.hexdigest()


def note_load(what: str) -> None:
    """Notes that other processes compete for the cores if the load average says so."""
    load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    if load > cpus:
        NOTES.append(
            f"{what}: 1-minute load average {load:.1f} on {cpus} CPUs before the rows were measured: other "
            "processes competed for the cores, so these ratios are partly contention-bound"
        )


# -- workload 1: scan ----------------------------------------------------------------------------


def reference_reads_s3() -> bool:
    """Whether the reference's venv exists and can read S3 (it needs s3fs); a note if not."""
    if not bench.REF_PYTHON.exists():
        NOTES.append(bench.REF_MISSING)
        return False
    if subprocess.run([str(bench.REF_PYTHON), "-c", "import s3fs"], capture_output=True).returncode != 0:
        NOTES.append(
            "reference rows left out: s3fs isn't installed in .venv-ncore-ref "
            f"(.venv-ncore-ref/bin/pip install s3fs=={bench.package_version('s3fs')})"
        )
        return False
    return True


@dataclass
class Side:
    """One contender of a comparison: its wall times and the requests of its last run."""

    name: str
    run: Callable[[], float]
    """Runs once and returns the seconds it took (measured by the side itself)."""
    seconds: list[float]
    requests: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def interleaved(sides: Sequence[Side], repeats: int, log: bench.RequestLog) -> None:
    """Runs every side ``repeats`` times, the order rotating each round (no side always
    first), counting the requests of each in ``log``."""
    for round_ in range(repeats):
        shift = round_ % len(sides)
        for side in [*sides[shift:], *sides[:shift]]:
            log.clear_requests()
            side.seconds.append(side.run())
            side.requests = len(log.requests())


@dataclass(frozen=True)
class Written:
    """The archive a scan reads, as written: its keys and what the bytes must hash to."""

    url: str
    keys: list[str]
    digest: str
    """SHA-256 of the payloads in key order."""
    span: tuple[int, int]
    """The file's bytes from the first payload to the end of the last."""
    span_digest: str
    wanted: int
    """Bytes of the payloads."""


def bench_scan(run: bench.Run[Config]) -> list[Row]:
    if importlib.util.find_spec("s3fs") is None:
        return [Row("1 scan", "skipped: s3fs is not installed", None, "", "", None)]
    servers, config = bench.import_servers(), run.config
    path = run.tmp / "sequence.itar"
    keys = bench.write_records_archive(path, config.scan_records, config.scan_min, config.scan_max, run.rng)
    with IndexedTarArchive(path) as local:
        records = [local.records[key] for key in keys]
        digest = sha256([local[key] for key in keys])
    start, end = records[0].offset, sum(records[-1])
    with path.open("rb") as file:
        file.seek(start)
        span_digest = sha256([file.read(end - start)])
    with_reference = reference_reads_s3()
    rows: list[Row] = []
    with servers.start_moto() as moto:
        url = bench.put_on_moto(moto.endpoint, path, "scan", path.name)
        written = Written(url, keys, digest, (start, end), span_digest, sum(record.size for record in records))
        for latency in config.scan_latencies:
            with servers.start_proxy(moto.endpoint, latency=latency) as proxy:
                sides = scan_sides(run, written, servers.s3_storage_options(proxy.endpoint), with_reference)
                for side in sides[:2]:  # warm-up (sessions, connections) and checks
                    side.run()
                interleaved(sides, config.scan_repeats, proxy)
                rows += scan_rows(latency, sides, written)
    return rows


def scan_sides(run: bench.Run[Config], written: Written, options: dict[str, Any], reference: bool) -> list[Side]:
    """Our scan, one range GET of the same bytes with bare s3fs and (if ``reference``) the
    reference's, each checking what it read."""
    s3 = UPath(written.url, **options)
    archive = IndexedTarArchive(s3)
    start, end = written.span

    def ours() -> float:
        begin = time.perf_counter()
        payloads = [payload for _, payload in scan_records(archive, written.keys)]
        seconds = time.perf_counter() - begin
        bench.expect(sha256(payloads) == written.digest, "scan_records")
        return seconds

    def limit() -> float:
        begin = time.perf_counter()
        data = s3.fs.cat_file(s3.path, start=start, end=end)
        seconds = time.perf_counter() - begin
        bench.expect(sha256([data]) == written.span_digest, "the range GET")
        return seconds

    def theirs() -> float:
        spec = {"url": written.url, "storage_options": options, "keys": written.keys, "sha256": written.digest}
        env = bench.import_servers().loopback_env()
        measured = bench.reference_ops({"scan": spec | {"repeats": 1}}, run.tmp, NOTES, env=env)
        assert measured is not None
        VERSIONS["nvidia-ncore"] = measured["versions"]["nvidia-ncore"]
        return float(measured["scan"]["seconds"])

    sides = [Side("ours", ours, []), Side("range GET", limit, [])]
    return [*sides, Side("reference", theirs, [])] if reference else sides


def scan_rows(latency: float, sides: Sequence[Side], written: Written) -> list[Row]:
    wanted, count = written.wanted, len(written.keys)
    times = {side.name: side.median for side in sides}
    detail = ", ".join(
        f"{side.name} {ms(side.median)} ({wanted / side.median / MB:.0f} MB/s, {side.requests} requests"
        + (" with its open" if side.name == "reference" else "")
        + ")"
        for side in sides
    )
    raw = {f"{name.replace(' ', '_')}_s": seconds for name, seconds in times.items()}
    workload = f"1 scan {latency * 1e3:g} ms"
    what = f"scan_records of {count} ~1 MB records in key order ({wanted / MB:.0f} MB)"
    ratio = times["range GET"] / times["ours"]
    rows = [
        Row(workload, f"{what} vs one range GET of the same bytes", ratio, "throughput ours/one range GET",
            ">= 0.80x", ratio >= 0.8, raw, detail),
    ]  # fmt: skip
    if "reference" in times:
        speedup = times["reference"] / times["ours"]
        rows.append(
            Row(workload, "the same scan vs the reference (nvidia-ncore 19.8.3, its default buffered reads)", speedup,
                "speedup (time reference/ours)", ">= 1.00x", speedup >= 1.0, raw, detail)
        )  # fmt: skip
        rows.append(
            Row(workload, "the reference's scan vs one range GET (context)", times["range GET"] / times["reference"],
                "throughput reference/one range GET", "peer", None, raw, detail)
        )  # fmt: skip
    return rows


# -- workload 3: faults --------------------------------------------------------------------------


def fault_plan(run: bench.Run[Config], gets: int) -> dict[int, str]:
    """Faults for the first ``gets`` GETs of a server: in every block of ``1 / fault_rate``
    GETs, one of each kind at random places."""
    block = round(1 / run.config.fault_rate)
    plan: dict[int, str] = {}
    for first in range(1, gets + 1, block):
        places = run.rng.sample(range(first, first + block), len(FAULT_KINDS))
        plan.update(zip(places, FAULT_KINDS, strict=True))
    return plan


def read_bulk(archive: IndexedTarArchive, keys: Sequence[str], _: int) -> dict[str, bytes]:
    return dict(read_records(archive, keys))


def read_streamed(archive: IndexedTarArchive, keys: Sequence[str], in_flight: int) -> dict[str, bytes]:
    """The records read with ``read_async`` by ``in_flight`` readers taking the next key as
    each finishes (a data loader's prefetching)."""
    results: dict[str, bytes] = {}
    pending = iter(keys)

    async def reader() -> None:
        for key in pending:  # one iterator shared by the readers: each key is read once
            results[key] = await archive.read_async(key)

    async def read_all() -> None:
        await asyncio.gather(*(reader() for _ in range(in_flight)))

    asyncio.run(read_all())
    return results


READERS: Mapping[str, Callable[[IndexedTarArchive, Sequence[str], int], dict[str, bytes]]] = {
    "read_records": read_bulk, "read_async": read_streamed,
}  # fmt: skip


def bench_faults(run: bench.Run[Config]) -> list[Row]:
    servers, config = bench.import_servers(), run.config
    path = run.tmp / "frames.itar"
    keys = bench.write_records_archive(path, config.fault_records, config.fault_min, config.fault_max, run.rng)
    with IndexedTarArchive(path) as local:
        expected = {key: local[key] for key in keys}
    order = keys[:]
    run.rng.shuffle(order)
    # GETs through the faulty server: every read of every trial, retries and warm-ups included.
    gets = int(1.3 * len(keys) * len(READERS) * (config.fault_repeats + 1)) + 200
    latency = config.fault_latency
    rows: list[Row] = []
    if importlib.util.find_spec("s3fs") is None:
        rows.append(Row("3 faults", "S3: skipped, s3fs is not installed", None, "", "", None))
    else:
        with servers.start_moto() as moto:
            url = bench.put_on_moto(moto.endpoint, path, "faults", path.name)
            with (
                servers.start_proxy(moto.endpoint, latency=latency) as clean,
                servers.start_proxy(moto.endpoint, latency=latency, faults=fault_plan(run, gets)) as faulty,
            ):
                rows += fault_rows(
                    run, "S3", [UPath(url, **servers.s3_storage_options(s.endpoint)) for s in (clean, faulty)],
                    [clean, faulty], order, expected,
                )  # fmt: skip
    with (
        servers.start_http(path.parent, latency=latency) as clean,
        servers.start_http(path.parent, latency=latency, faults=fault_plan(run, gets)) as faulty,
    ):
        locations = [UPath(f"{server.endpoint}/{path.name}") for server in (clean, faulty)]
        rows += fault_rows(run, "HTTP", locations, [clean, faulty], order, expected)
    return rows


def fault_rows(
    run: bench.Run[Config], protocol: str, locations: Sequence[UPath], logs: Sequence[bench.RequestLog],
    order: list[str], expected: dict[str, bytes],
) -> list[Row]:  # fmt: skip
    """Each reader's throughput through the faulty server (``locations[1]``) against the clean
    one (``locations[0]``), the trials interleaved."""
    config = run.config
    archives = [IndexedTarArchive(location) for location in locations]
    wanted = sum(map(len, expected.values()))
    rows = []
    for name, read in READERS.items():
        for archive in archives:  # warm-up: sessions and connections
            read(archive, order[: config.fault_in_flight], config.fault_in_flight)
        samples: list[list[float]] = [[], []]
        hits: Counter[str] = Counter()
        failure = ""
        for round_ in range(config.fault_repeats):
            for side in (0, 1) if round_ % 2 == 0 else (1, 0):
                logs[side].clear_requests()
                begin = time.perf_counter()
                try:
                    got = read(archives[side], order, config.fault_in_flight)
                except RemoteStorageError as error:  # retries gave up: a failure of the row, not of the run
                    failure = f"; gave up: {error}"
                    continue
                samples[side].append(time.perf_counter() - begin)
                bench.expect(got == expected, f"{protocol} {name} ({'with' if side else 'without'} faults)")
                if side:
                    hits.update(str(record["status"]) for record in logs[side].requests())
        trials = max(1, len(samples[1]))
        faults = ", ".join(f"{hits[kind] / trials:g} x {kind}" for kind in FAULT_KINDS)
        requests = sum(hits.values()) / trials
        what = f"{protocol}: {name} of {len(order)} records ({config.fault_min // 1000}-{config.fault_max // 1000} KB)"
        if name == "read_async":
            what += f", {config.fault_in_flight} in flight"
        measure = f"{what}, 1 % each 503/reset/cut vs no faults"
        if failure or not samples[0] or not samples[1]:
            rows.append(Row("3 faults 20 ms", measure, None, "", ">= 0.90x", False, {}, failure.lstrip("; ")))
            continue
        clean, faulty = statistics.median(samples[0]), statistics.median(samples[1])
        ratio = clean / faulty
        detail = (
            f"no faults {ms(clean)} ({wanted / clean / MB:.0f} MB/s), faults {ms(faulty)} "
            f"({wanted / faulty / MB:.0f} MB/s); per trial {requests:g} GETs, {faults}; every record exact"
        )
        rows.append(Row("3 faults 20 ms", measure, ratio, "throughput faults/none", ">= 0.90x", ratio >= 0.9,
                        {"none_s": clean, "faults_s": faulty, "gets": requests}, detail))  # fmt: skip
    for archive in archives:
        archive.close()
    return rows


# -- workload 4: packing on a cluster --------------------------------------------------------------


def make_sequences(run: bench.Run[Config]) -> list[Path]:
    """The sources: one sequence written with the typed API (frames as blob arrays, a
    Blosc-compressed lidar array), extracted as a zarr directory once per source."""
    config = run.config
    template = run.tmp / "template.itar"
    with IndexedTarZarrStore(template, "w") as store:
        root = store.create_root_group({"sequence": "bench_remote"})
        front = root.create_group("cameras").create_group("front")
        for index, payload in enumerate(bench.random_payloads(run.rng, config.frames, *(config.frame_bytes,) * 2)):
            front.create_bytes_array(f"{index:05d}", bytes(payload), attributes={"t": index})
        points = run.generator.standard_normal((config.frames, config.lidar_points, 4), dtype=np.float32)
        root.create_array("lidar", points.round(2), chunks=(1, config.lidar_points, 4), compression=BloscCompression())
        store.consolidate()
    sources = []
    for index in range(config.sequences):
        source = run.tmp / "sources" / f"seq{index:03d}.zarr"
        quiet_cli(["extract", "-q", str(template), "-C", str(source)])
        sources.append(source)
    template.unlink()
    return sources


def quiet_cli(argv: list[str]) -> str:
    """Runs the command line in this process; its output (what it printed), or an error."""
    output = io.StringIO()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        code = cli(argv)
    if code != 0:
        raise RuntimeError(f"ncore-like {' '.join(argv[:2])}... failed ({code}): {output.getvalue()}")
    return output.getvalue()


#: Dask's nannies start workers with ``MALLOC_TRIM_THRESHOLD_=65536``, which also fixes glibc's
#: mmap threshold: every payload of more than 128 KB is then mapped and unmapped anew (the
#: context row shows what that costs packing). They set it in this process's environment too,
#: so every process started later inherits it.
_MALLOC_TRIM = "MALLOC_TRIM_THRESHOLD_"


@contextlib.contextmanager
def environment_kept() -> Iterator[None]:
    """Restores ``MALLOC_TRIM_THRESHOLD_`` of this process's environment as it was."""
    before = os.environ.get(_MALLOC_TRIM)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_MALLOC_TRIM, None)
        else:
            os.environ[_MALLOC_TRIM] = before


def start_cluster(workers: int, *, malloc_defaults: bool = False) -> tuple[Any, float]:
    """A local cluster of ``workers`` processes (with glibc's own malloc settings if
    ``malloc_defaults``) and the seconds it took to start."""
    import dask
    from distributed import LocalCluster

    begin = time.perf_counter()
    unset = {f"distributed.nanny.pre-spawn-environ.{_MALLOC_TRIM}": None} if malloc_defaults else {}
    with environment_kept(), dask.config.set(unset), warnings.catch_warnings():
        if malloc_defaults:
            os.environ.pop(_MALLOC_TRIM, None)
        warnings.simplefilter("ignore")  # "port 8787 in use": the scheduler's HTTP server found another one
        cluster = LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
    return cluster, time.perf_counter() - begin


def bench_pack(run: bench.Run[Config]) -> list[Row]:
    if importlib.util.find_spec("distributed") is None:
        return [Row("4 pack", "skipped: dask.distributed is not installed", None, "", "", None)]
    config = run.config
    sources = make_sequences(run)
    nbytes = sum(file.stat().st_size for file in (run.tmp / "sources").rglob("*") if file.is_file())
    out = run.tmp / "out"
    note_load("4 pack")
    with contextlib.ExitStack() as stack:
        stack.enter_context(environment_kept())
        cluster, started = start_cluster(config.cluster_workers)
        stack.callback(cluster.close)
        plain, _ = start_cluster(config.cluster_workers, malloc_defaults=True)
        stack.callback(plain.close)

        def one_by_one() -> None:
            out.mkdir()
            for source in sources:
                quiet_cli(["pack", "-q", str(source), str(out / f"{source.stem}.itar")])

        def on_cluster(*how: str) -> Callable[[], None]:
            def pack() -> None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the port of the scheduler's HTTP server, as above
                    printed = quiet_cli(["pack", "-q", *how, *map(str, sources), str(out)])
                bench.expect(f"{len(sources)} packed" in printed, "packing on the cluster")

            return pack

        functions = {
            "one by one": one_by_one,
            "running cluster": on_cluster("--scheduler", cluster.scheduler_address),
            "own cluster": on_cluster("--cluster-workers", str(config.cluster_workers)),
            "malloc defaults": on_cluster("--scheduler", plain.scheduler_address),
        }
        packed: list[dict[str, list[tuple[str, int]]]] = []

        def check_and_remove() -> None:  # untimed, after every run
            listing = {}
            for path in sorted(out.glob("*.itar")):
                with IndexedTarArchive(path) as archive:
                    listing[path.name] = sorted((key, size) for key, (_, size) in archive.records.items())
            packed.append(listing)
            shutil.rmtree(out)

        for name in ("one by one", "running cluster", "malloc defaults"):  # warm-up: workers import ncore_like
            functions[name]()
            check_and_remove()
        times = bench.median_times(functions, config.pack_repeats, after=check_and_remove)
    bench.expect(len(packed[0]) == len(sources) and all(listing == packed[0] for listing in packed), "packing")
    sequential = times["one by one"]
    detail = (
        f"{len(sources)} sequences of {config.frames} frames + lidar, {nbytes / MB:.0f} MB in "
        f"{sum(map(len, packed[0].values()))} records; one by one {ms(sequential)}; on a running "
        f"{config.cluster_workers}-worker cluster {ms(times['running cluster'])}, starting its own "
        f"{ms(times['own cluster'])} (a LocalCluster starts in ~{started:.1f} s here), on a running cluster with "
        f"glibc's malloc defaults {ms(times['malloc defaults'])}"
    )
    raw = dict(times) | {"cluster_start_s": started}
    workers = f"{config.cluster_workers}-worker LocalCluster"
    rows = []
    for name, what in (("running cluster", "a running (--scheduler)"), ("own cluster", "its own (--cluster-workers)")):
        ratio = sequential / times[name]
        rows.append(
            Row("4 pack", f"ncore-like pack of {len(sources)} sequences on {what} {workers} vs one after another",
                ratio, "speedup (time one by one/cluster)", ">= 1.60x", ratio >= 1.6, raw, detail)
        )  # fmt: skip
    rows.append(
        Row("4 pack", f"the same on a running {workers} whose workers keep glibc's malloc defaults (dask sets "
            "MALLOC_TRIM_THRESHOLD_=65536; context)", sequential / times["malloc defaults"],
            "speedup (time one by one/cluster)", "(context)", None, raw, detail)
    )  # fmt: skip
    return rows


# Workload 2 (random frames across many archives with the cache) is scripts/bench_cache.py.
WORKLOADS = {"scan": bench_scan, "faults": bench_faults, "pack": bench_pack}


def main(argv: Sequence[str] | None = None) -> int:
    return bench.run_benchmark(
        "bench_remote", __doc__, WORKLOADS, configure, argv=argv, other_versions=VERSIONS, load_average=True,
        notes=NOTES, quick_help="small, fast run (smoke test, ~20 s)",
        seed_help="random seed (record sizes, read order, fault places)",
    )  # fmt: skip


if __name__ == "__main__":  # the guard matters: dask's worker processes import this module
    sys.exit(main())
