"""Benchmark of ``IndexedTarArchive`` / ``IndexedTarZarrStore`` against what the machine does
for the same bytes (SPEC section 5), as ratios measured side by side in one run.

Absolute times on a shared machine are noise, so every figure is a ratio of two medians
measured in the same process, with the repetitions of both sides interleaved. Workloads:

1. Random reads of ~1 MB records (0.8-1.2 MB) by key vs bare ``os.pread`` of the same byte
   ranges in the same random order (page cache warm), on 1 and 2 threads (target:
   pread time / archive time >= 0.8 with checksums verified, the default; >= 0.9 with
   ``verify_checksums=False``); small records (1-4 KB) by key vs one bare ``os.pread``
   each (target: archive time <= 2 x pread time). Each row says what verification costs.
2. Opening a 10,000-record archive vs decoding its index alone (``lzma.decompress`` +
   ``cbor2.loads`` of the index bytes); open + one record read; I/O calls of an open.
3. Remote, a local HTTP server adding 20 ms per request: (a) open + first record read
   (requests, round trips); (b) 100 gathered ``read_async`` reads (wall time in round trips,
   peak requests in flight, side by side with the same ranges gathered by bare fsspec); (c) the
   same reads one at a time; (d) one random 1 MB record on the default buffered path
   (requests, bytes moved vs bytes wanted). Also (a) and (d) on S3 (moto behind a proxy
   adding the same latency), where s3fs' read-ahead defaults must be overridden; and a
   sequential scan on S3: 100 ~1 MB records in key order with ``scan_records`` vs one range
   GET of the same bytes with bare s3fs (target: >= 0.8 x its throughput), and vs a read
   per record (context).
4. Time to first array read of a 200-array hierarchy (10,000 chunk records): open store +
   root group + read one array, ours (consolidated / not) vs zarr-python 3 on a ``ZipStore``
   and on a ``LocalStore`` of the same hierarchy (consolidated / not).
5. First open of a 20,000-record hierarchy (20 arrays of 1,000 row chunks of 1-4 KB) +
   consolidated root group + one row read, as the first open in the process (target <= 3 ms)
   and again (index cached, target < 1 ms), side by side with the same archive in the
   layout written before the record table (its xz index with the CRC32C list, read by
   decoding it); and the sizes of the two indices (target: at most 2 x).

Prints one table (ratio, target, raw medians); ``--json PATH`` also writes the results.

Run from the repository root::

    .venv/bin/python -m scripts.bench_archive              # full run (~35 s on 2 cores)
    .venv/bin/python -m scripts.bench_archive --quick      # small, fast run (~5 s, smoke test)
    .venv/bin/python -m scripts.bench_archive --json bench.json --only remote --only s3

Temporary files live in a temporary directory (``--tmpdir`` to choose where) removed at
the end; servers bind 127.0.0.1 only and are stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import lzma
import os
import random
import statistics
import sys
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cbor2
import numpy as np
import zarr
import zarr.storage
from upath import UPath

import scripts._benchlib as bench
from ncore_like import BloscCompression, IndexedTarArchive, IndexedTarZarrStore, Record, clear_caches
from ncore_like._defaults import TAIL_READ_SIZE
from ncore_like.archive import scan_records
from ncore_like.archive._format import BLOCK_SIZE, encode_index, pack_index_header, padding, unpack_index_header
from ncore_like.archive._table import decode_table, unpack_table_pointer
from scripts._benchlib import MB, Row, median_times, ms, pread_all, us, verification_cost, warm_page_cache

Trial = tuple[float, list[dict[str, Any]]]  # wall time, the server's request log


@dataclass(frozen=True)
class Config:
    """Sizes of the workloads (defaults: the full run; :func:`configure` ``--quick``: the smoke run)."""

    big_records: int = 400
    big_min: int = 800_000
    big_max: int = 1_200_000
    big_repeats: int = 9
    small_records: int = 10_000
    small_reads: int = 2_000
    small_repeats: int = 21
    metadata_records: int = 4
    open_repeats: int = 50
    remote_records: int = 100
    remote_reads: int = 100
    remote_repeats: int = 3
    latency: float = 0.02
    arrays: int = 200
    chunks_per_array: int = 50
    chunk_elements: int = 100
    store_repeats: int = 25
    first_arrays: int = 20
    first_rows: int = 1000
    seed: int = 0


def configure(args: argparse.Namespace) -> Config:
    """The full run, or with ``--quick`` a small configuration that runs in a few seconds."""
    if not args.quick:
        return Config(seed=args.seed)
    return Config(
        big_records=40,
        big_repeats=3,
        small_records=2_000,
        small_reads=500,
        small_repeats=5,
        open_repeats=10,
        remote_records=12,
        remote_reads=12,
        remote_repeats=1,
        arrays=12,
        store_repeats=5,
        first_arrays=4,
        first_rows=250,
        seed=args.seed,
    )


# -- archives -------------------------------------------------------------------------------


def write_big_archive(path: Path, config: Config, count: int, rng: random.Random) -> list[str]:
    """An archive of ``count`` records of 0.8-1.2 MB; returns the keys."""
    return bench.write_records_archive(path, count, config.big_min, config.big_max, rng)


def small_archive(run: bench.Run[Config]) -> tuple[Path, list[str]]:
    """The archive of small records (1-4 KB) plus a few node metadata records that workloads
    1 and 2 share, written on first use; its path and the keys of the small records."""
    if "small" not in run.shared:
        path, config = run.root / "small.itar", run.config
        keys = [f"chunks/{index // 100:03d}/{index % 100:02d}" for index in range(config.small_records)]
        with IndexedTarArchive(path, mode="w") as archive:
            for key, payload in zip(keys, bench.random_payloads(run.rng, len(keys), 1024, 4096), strict=True):
                archive[key] = payload
            archive[".zgroup"] = b'{"zarr_format": 2}'
            archive[".zattrs"] = json.dumps({"bench": "small records"}).encode()
            for index in range(max(0, config.metadata_records - 2)):
                archive[f"meta{index}/.zgroup"] = b'{"zarr_format": 2}'
        run.shared["small"] = path, keys
    return run.shared["small"]  # type: ignore[no-any-return]


def index_bytes(path: Path) -> bytes:
    """The compressed index of an archive, located through its header block."""
    with path.open("rb") as file:
        file.seek(-BLOCK_SIZE, os.SEEK_END)
        header = unpack_index_header(file.read(BLOCK_SIZE), str(path))
        file.seek(header.offset)
        return file.read(header.size)


def before_tail(records: Mapping[str, Record], keys: Sequence[str], file_size: int) -> list[str]:
    """The keys whose records lie before the tail read of an opening, so reading one takes its
    own I/O rather than the memory of the opening (all keys if none does)."""
    return [key for key in keys if sum(records[key]) <= file_size - TAIL_READ_SIZE] or list(keys)


def read_keys(archive: IndexedTarArchive, keys: Sequence[str]) -> None:
    for key in keys:
        archive[key]


# -- workload 1: random reads -----------------------------------------------------------------


def bench_reads(run: bench.Run[Config]) -> list[Row]:
    small_path, small_keys = small_archive(run)  # first: the random sequence of the run stays as it was
    config, rng = run.config, run.rng
    path = run.tmp / "frames.itar"
    keys = write_big_archive(path, config, config.big_records, rng)
    warm_page_cache(path)
    order = keys[:]
    rng.shuffle(order)
    rows = big_read_rows(path, order, config)
    path.unlink()  # free the page cache and disk early
    return [*rows, small_read_row(small_path, small_keys, config, rng)]


def big_read_rows(path: Path, order: list[str], config: Config) -> list[Row]:
    with (
        IndexedTarArchive(path) as archive,
        IndexedTarArchive(path, verify_checksums=False) as unverified,
        path.open("rb", buffering=0) as file,
    ):
        fd = file.fileno()
        ranges = [archive.records[key] for key in order]
        for key, (offset, size) in zip(order[:3], ranges[:3], strict=True):
            assert archive[key] == os.pread(fd, size, offset) == unverified[key]
        read_keys(archive, order)  # every record once through the archive too
        one = median_times(
            {
                "pread": lambda: pread_all(fd, ranges),
                "archive": lambda: read_keys(archive, order),
                "unverified": lambda: read_keys(unverified, order),
            },
            config.big_repeats,
        )
        with ThreadPoolExecutor(2) as pool:
            range_parts, key_parts = [ranges[0::2], ranges[1::2]], [order[0::2], order[1::2]]
            two = median_times(
                {
                    "pread": lambda: list(pool.map(pread_all, [fd, fd], range_parts)),
                    "archive": lambda: list(pool.map(read_keys, [archive, archive], key_parts)),
                    "unverified": lambda: list(pool.map(read_keys, [unverified, unverified], key_parts)),
                },
                config.big_repeats,
            )
    read_mb = sum(size for _, size in ranges) / MB
    rows = []
    for threads, times in (("1 thread", one), ("2 threads", two)):
        measure = f"~1 MB records, {threads} ({len(order)} reads)"
        rows += [pread_row(measure, times, read_mb), pread_row(measure, times, read_mb, verified=False)]
    return rows


def pread_row(measure: str, times: Mapping[str, float], read_mb: float, *, verified: bool = True) -> Row:
    """The archive's reads (checksums verified, the default: target >= 0.8 x pread; or not:
    >= 0.9 x) against bare ``pread`` of the same ranges."""
    pread, archive, unverified = times["pread"], times["archive"], times["unverified"]
    ours = archive if verified else unverified
    ratio = pread / ours
    target = 0.8 if verified else 0.9
    raw = {"pread_s": pread, "archive_s": archive, "unverified_s": unverified}
    if verified:
        detail = f"pread {ms(pread)}, archive {ms(archive)}; {verification_cost(archive, unverified)}"
        detail += f"; pread {read_mb / pread / 1e3:.2f} GB/s"
    else:
        measure += ", verify_checksums=False"
        detail = f"pread {ms(pread)}, archive {ms(unverified)}"
    label = "archive/pread throughput"
    return Row("1 random reads", measure, ratio, label, f">= {target:.2f}x", ratio >= target, raw, detail)


def small_read_row(path: Path, keys: list[str], config: Config, rng: random.Random) -> Row:
    warm_page_cache(path)
    with (
        IndexedTarArchive(path) as archive,
        IndexedTarArchive(path, verify_checksums=False) as unverified,
        path.open("rb", buffering=0) as file,
    ):
        candidates = before_tail(archive.records, keys, path.stat().st_size)
        chosen = [rng.choice(candidates) for _ in range(config.small_reads)]
        ranges = [archive.records[key] for key in chosen]
        assert archive[chosen[0]] == os.pread(file.fileno(), ranges[0].size, ranges[0].offset)
        functions = {
            "pread": lambda: pread_all(file.fileno(), ranges),
            "archive": lambda: read_keys(archive, chosen),
            "unverified": lambda: read_keys(unverified, chosen),
        }
        times = median_times(functions, config.small_repeats)
    count = len(chosen)
    pread, arch, plain = times["pread"] / count, times["archive"] / count, times["unverified"] / count
    ratio = arch / pread
    return Row(
        "1 random reads", f"small 1-4 KB records by key ({count} reads)", ratio, "time archive/pread", "<= 2.00x",
        ratio <= 2.0, {"pread_per_read_s": pread, "archive_per_read_s": arch, "unverified_per_read_s": plain},
        f"pread {us(pread)}, archive {us(arch)} per read; verify_checksums=False {us(plain)} "
        f"({plain / pread:.2f}x): verification +{(arch / plain - 1) * 100:.0f} % time",
    )  # fmt: skip


# -- workload 2: opening ----------------------------------------------------------------------


@contextmanager
def counting_io() -> Iterator[dict[str, int]]:
    """Counts ``os.pread``/``os.read``/``os.open`` calls made meanwhile (by anyone)."""
    counts = {"pread": 0, "read": 0, "open": 0}
    originals = {name: getattr(os, name) for name in counts}

    def counted(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return originals[name](*args, **kwargs)

        return call

    for name in counts:
        setattr(os, name, counted(name))
    try:
        yield counts
    finally:
        for name, original in originals.items():
            setattr(os, name, original)


def bench_open(run: bench.Run[Config]) -> list[Row]:
    path, keys = small_archive(run)
    warm_page_cache(path)
    data = index_bytes(path)
    size = path.stat().st_size
    with IndexedTarArchive(path) as archive:
        key = run.rng.choice(before_tail(archive.records, keys, size))
        total = len(archive)

    def open_read(read: bool = False, first: bool = True) -> None:
        if first:  # the first open of the archive in this process (else its index is cached)
            clear_caches()
        with IndexedTarArchive(path) as archive:
            if read:
                archive[key]

    with path.open("rb", buffering=0) as file:
        functions = {
            "decode": lambda: cbor2.loads(lzma.decompress(data)),
            "tail_pread": lambda: os.pread(file.fileno(), min(size, TAIL_READ_SIZE), max(0, size - TAIL_READ_SIZE)),
            "open": open_read,
            "open_read": lambda: open_read(read=True),
            "reopen": lambda: open_read(first=False),
        }
        times = median_times(functions, run.config.open_repeats)
    with counting_io() as counts:
        IndexedTarArchive(path).close()
    calls = f"{counts['pread']} pread, {counts['read']} read, {counts['open']} open"
    decode = times["decode"]
    raw = dict(times) | {f"io_{name}": float(value) for name, value in counts.items()}
    return [
        Row(
            "2 open", f"open {total}-record archive vs decoding its index ({len(data) / 1e3:.0f} kB xz)",
            times["open"] / decode, "time open/decode", "(close to 1x)", None, raw,
            f"decode {ms(decode)}, 1 MiB tail pread {ms(times['tail_pread'])}, open {ms(times['open'])}; "
            f"I/O calls of one open: {calls}",
        ),
        Row("2 open", "open + one record read vs decoding the index", times["open_read"] / decode,
            "time open+read/decode", "", None, {}, f"open + read {ms(times['open_read'])}"),
        Row("2 open", "reopen (index from the process-wide cache) vs decoding the index", times["reopen"] / decode,
            "time reopen/decode", "", None, {}, f"reopen {ms(times['reopen'])}"),
    ]  # fmt: skip


# -- workload 3: remote -------------------------------------------------------------------------


RequestLog = bench.RequestLog


def range_bytes(record: dict[str, Any], file_size: int) -> int:
    """Bytes a logged request moved, derived from its ``Range`` header."""
    if record["method"] == "HEAD":
        return 0
    header = record.get("range")
    if not header:
        return file_size
    first, _, last = header.strip().removeprefix("bytes=").partition("-")
    if first == "":
        return min(int(last), file_size)
    end = file_size - 1 if last == "" else min(int(last), file_size - 1)
    return max(0, end - int(first) + 1)


def describe_requests(log: list[dict[str, Any]]) -> str:
    return ", ".join(f"{r['method']} {r.get('range') or '(no range)'}" for r in log)


def remote_archive(run: bench.Run[Config], count: int) -> tuple[Path, list[str], dict[str, Record], list[str]]:
    """An archive of ``count`` ~1 MB records to serve: its path, its keys, their records and
    the keys before the tail read (reading one of them takes a request)."""
    path = run.tmp / "frames.itar"
    keys = write_big_archive(path, run.config, count, run.rng)
    with IndexedTarArchive(path) as local:
        records = {key: local.records[key] for key in keys}
    return path, keys, records, before_tail(records, keys, path.stat().st_size)


def open_and_read(open_archive: Callable[[], IndexedTarArchive], log: RequestLog, key: str) -> Trial:
    """Opens a remote archive and reads one record: wall time and requests."""
    log.clear_requests()
    start = time.perf_counter()
    with open_archive() as archive:
        archive[key]
    return time.perf_counter() - start, log.requests()


def open_first_read_row(
    measure: str, trials: Sequence[Trial], file_size: int, record: Record, latency: float,
    raw: dict[str, float] | None = None, detail: str = "",
) -> Row:  # fmt: skip
    """The row of opening a remote archive and reading its first record (target: 2 round
    trips; the requests of the last trial); ``raw`` and ``detail`` add to the row's own."""
    wall, log = statistics.median(t for t, _ in trials), trials[-1][1]
    moved = sum(range_bytes(r, file_size) for r in log)
    rounds = bench.request_rounds(log)
    return Row(
        "3 remote 20 ms", measure, float(rounds), "round trips in the request log", "<= 2 RTT", rounds <= 2,
        {"wall_s": wall, "requests": float(len(log)), "bytes_moved": float(moved)} | (raw or {}),
        f"{len(log)} requests [{describe_requests(log)}], {ms(wall)} = {wall / latency:.2f} x the latency, "
        f"moved {moved / MB:.2f} MB for a {record.size / MB:.2f} MB record{detail}",
    )  # fmt: skip


def one_record_row(
    measure: str, open_archive: Callable[[], IndexedTarArchive], server: RequestLog, keys: Sequence[str],
    records: Mapping[str, Record], file_size: int, config: Config, rng: random.Random,
) -> Row:  # fmt: skip
    """One random record read from a freshly opened remote archive, a few times: the bytes
    moved for the bytes wanted (target ~1, in one request)."""
    samples: list[tuple[float, int, float, str]] = []
    for _ in range(max(3, config.remote_repeats * 2)):
        key = rng.choice(keys)
        with open_archive() as archive:
            server.clear_requests()
            start = time.perf_counter()
            archive[key]
            elapsed = time.perf_counter() - start
            log = server.requests()
        moved = sum(range_bytes(r, file_size) for r in log)
        samples.append((elapsed, len(log), moved / records[key].size, describe_requests(log)))
    wall, requests, ratio = (statistics.median(column) for column in list(zip(*samples, strict=True))[:3])
    return Row(
        "3 remote 20 ms", measure, ratio, "bytes moved/wanted", "~1x, 1 request", ratio <= 1.25 and requests <= 1,
        {"wall_s": wall, "requests": float(requests), "moved_per_wanted": ratio},
        f"{requests:g} request(s) [{samples[-1][3]}], {wall / config.latency:.1f} RTT ({ms(wall)})",
    )  # fmt: skip


def bench_remote(run: bench.Run[Config]) -> list[Row]:
    servers = bench.import_servers()
    config = run.config
    path, keys, records, outside = remote_archive(run, config.remote_records)
    file_size = path.stat().st_size
    with servers.start_http(path.parent, latency=config.latency) as server:
        url = f"{server.endpoint}/{path.name}"

        def open_archive() -> IndexedTarArchive:
            return IndexedTarArchive(UPath(url))

        # (a) open + first record read on the default (buffered) path; the first trial also
        # creates the HTTP session
        trials = [open_and_read(open_archive, server, keys[0]) for _ in range(max(2, config.remote_repeats))]
        measure = "(a) open + first record read (buffered)"
        rows = [open_first_read_row(measure, trials[1:], file_size, records[keys[0]], config.latency)]
        # (b) gathered read_async, (c) the same reads one at a time
        chosen = [run.rng.choice(outside) for _ in range(config.remote_reads)]  # none served from the tail
        rows += read_async_rows(url, server, [records[key] for key in chosen], chosen, file_size, config)
        # (d) one random 1 MB record on the default buffered path (fresh archive each time)
        measure = "(d) one random ~1 MB record, buffered path"
        rows.append(one_record_row(measure, open_archive, server, outside, records, file_size, config, run.rng))
    return rows


def read_async_rows(
    url: str, server: RequestLog, ranges: list[Record], keys: list[str], file_size: int, config: Config
) -> list[Row]:
    """(b) the records of ``keys`` read with ``read_async`` all at once, side by side with bare
    fsspec gathering the same ranges; (c) the same reads one at a time."""
    wanted = sum(size for _, size in ranges)
    remote = UPath(url)

    async def read_all(gathered: bool) -> Trial:
        archive = await IndexedTarArchive.open_async(UPath(url))
        try:
            server.clear_requests()
            start = time.perf_counter()
            if gathered:
                results = await asyncio.gather(*(archive.read_async(key) for key in keys))
            else:
                results = [await archive.read_async(key) for key in keys]
            elapsed = time.perf_counter() - start
            assert sum(map(len, results)) == wanted
            return elapsed, server.requests()
        finally:
            archive.close()

    def bare_gather() -> float:
        start = time.perf_counter()
        results = bench.fsspec_gather(remote.fs, remote.path, ranges)
        elapsed = time.perf_counter() - start
        assert sum(map(len, results)) == wanted
        return elapsed

    asyncio.run(read_all(True))  # warm-up (session, loop)
    bare_gather()
    gathered: list[Trial] = []
    limits: list[float] = []
    for _ in range(config.remote_repeats):  # side by side
        gathered.append(asyncio.run(read_all(True)))
        server.clear_requests()
        limits.append(bare_gather())
    sequential = [asyncio.run(read_all(False)) for _ in range(max(1, config.remote_repeats - 1))]
    limit, latency = statistics.median(limits), config.latency
    rows = []
    for trials in (gathered, sequential):
        wall, log = statistics.median(t for t, _ in trials), trials[-1][1]
        peak = bench.import_servers().max_in_flight(log)
        moved = sum(range_bytes(r, file_size) for r in log)
        raw = {"wall_s": wall, "requests": float(len(log)), "max_in_flight": float(peak)}
        detail = (
            f"{ms(wall)}, {len(log)} requests, max {peak} in flight, "
            f"moved {moved / MB:.1f} MB for {wanted / MB:.1f} MB wanted"
        )
        measure = f"read_async of {len(keys)} ~1 MB records"
        if trials is gathered:
            detail += (
                f"; same ranges gathered with bare fsspec: {ms(limit)} = {limit / latency:.2f} RTT "
                f"(ours/fsspec {wall / limit:.2f}x)"
            )
            rounds = bench.request_rounds(log)
            rows.append(Row("3 remote 20 ms", f"(b) gathered {measure}", float(rounds),
                            "round trips in the request log", "<= 3 RTT", rounds <= 3,
                            raw | {"fsspec_gather_s": limit}, detail))  # fmt: skip
            rows.append(Row("3 remote 20 ms", f"(b) gathered {measure}: wall vs bare fsspec", wall / limit,
                            "wall ours/bare fsspec, same requests", "<= 1.25x", wall / limit <= 1.25,
                            raw | {"fsspec_gather_s": limit}, detail))  # fmt: skip
        else:
            rows.append(Row("3 remote 20 ms", f"(c) sequential {measure}", wall / latency, "wall in round trips",
                            "(contrast)", None, raw, detail))  # fmt: skip
    return rows


def bench_s3(run: bench.Run[Config]) -> list[Row]:
    """Open + first read and one random record on the default buffered path of an archive
    on S3 (moto behind a proxy adding the latency): s3fs' own read-ahead defaults are what
    the archive must override."""
    servers = bench.import_servers()
    if importlib.util.find_spec("s3fs") is None:
        return [Row("3 remote 20 ms", "S3 (moto): skipped, s3fs is not installed", None, "", "", None)]
    config = run.config
    path, keys, records, outside = remote_archive(run, max(8, config.remote_records // 5))
    file_size = path.stat().st_size
    with servers.start_moto() as moto, servers.start_proxy(moto.endpoint, latency=config.latency) as proxy:
        url = bench.put_on_moto(moto.endpoint, path, "bench", "frames.itar")
        options = servers.s3_storage_options(proxy.endpoint)

        def open_archive() -> IndexedTarArchive:
            return IndexedTarArchive(UPath(url, **options))

        with open_archive() as archive:  # warm-up: client creation
            archive[keys[0]]
        s3 = UPath(url, **options)
        first = records[keys[0]]
        trials: list[Trial] = []
        bare: list[float] = []
        for _ in range(max(2, config.remote_repeats)):
            trials.append(open_and_read(open_archive, proxy, keys[0]))
            start = time.perf_counter()  # the limit: the same two requests with bare s3fs
            s3.fs.cat_file(s3.path, start=-TAIL_READ_SIZE)
            s3.fs.cat_file(s3.path, start=first.offset, end=sum(first))
            bare.append(time.perf_counter() - start)
        bare_wall = statistics.median(bare)
        detail = (
            f"; the same 2 requests with bare s3fs: {ms(bare_wall)} = {bare_wall / config.latency:.1f} RTT "
            "(moto's own service time)"
        )
        measure = "S3 (moto): open + first record read (buffered)"
        raw = {"bare_s3fs_s": bare_wall}
        rows = [open_first_read_row(measure, trials, file_size, first, config.latency, raw, detail)]
        measure = "S3 (moto): one random ~1 MB record, buffered path"
        rows.append(one_record_row(measure, open_archive, proxy, outside, records, file_size, config, run.rng))
    return rows


def bench_scan(run: bench.Run[Config]) -> list[Row]:
    """A sequential scan of an archive on S3 (moto behind a proxy adding the latency): its
    records in key order with ``scan_records`` (spans of adjacent records, one request
    each) against one range GET of the same bytes with bare s3fs, and against a read per
    record (context)."""
    servers = bench.import_servers()
    if importlib.util.find_spec("s3fs") is None:
        return [Row("3 remote 20 ms", "S3 (moto) scan: skipped, s3fs is not installed", None, "", "", None)]
    config = run.config
    path, keys, records, _ = remote_archive(run, config.remote_records)
    start, end = records[keys[0]].offset, sum(records[keys[-1]])
    wanted = sum(records[key].size for key in keys)
    with servers.start_moto() as moto, servers.start_proxy(moto.endpoint, latency=config.latency) as proxy:
        url = bench.put_on_moto(moto.endpoint, path, "scan", "frames.itar")
        s3 = UPath(url, **servers.s3_storage_options(proxy.endpoint))
        archive = IndexedTarArchive(s3)
        expected = [IndexedTarArchive(path)[keys[-1]]]
        assert [payload for _, payload in scan_records(archive, keys)][-1:] == expected  # warm-up and check
        samples: dict[str, list[float]] = {"scan": [], "range GET": [], "per record": []}
        requests: dict[str, int] = {}
        functions: dict[str, Callable[[], object]] = {
            "scan": lambda: list(scan_records(archive, keys)),
            "range GET": lambda: s3.fs.cat_file(s3.path, start=start, end=end),
            "per record": lambda: [archive[key] for key in keys],
        }
        for round_ in range(max(2, config.remote_repeats)):
            for name, function in functions.items():
                if name == "per record" and round_:
                    continue  # a request per record: once is enough to see it
                proxy.clear_requests()
                begin = time.perf_counter()
                function()
                samples[name].append(time.perf_counter() - begin)
                requests[name] = len(proxy.requests())
    times = {name: statistics.median(values) for name, values in samples.items()}
    detail = ", ".join(
        f"{name} {ms(seconds)} ({wanted / seconds / MB:.0f} MB/s, {requests[name]} requests)"
        for name, seconds in times.items()
    )
    ratio = times["range GET"] / times["scan"]
    what = f"S3 (moto): scan of {len(keys)} ~1 MB records in key order ({wanted / MB:.0f} MB)"
    raw = {f"{name}_s": seconds for name, seconds in times.items()}
    return [
        Row("3 remote 20 ms", what, ratio, "throughput scan/one range GET", ">= 0.80x", ratio >= 0.8, raw, detail),
        Row("3 remote 20 ms", "S3 (moto): the same records read one by one (context)",
            times["range GET"] / times["per record"], "throughput per record/one range GET", "(contrast)", None,
            raw, detail),
    ]  # fmt: skip


# -- workload 4: store opening ------------------------------------------------------------------


def write_hierarchies(tmp: Path, config: Config) -> tuple[dict[str, np.ndarray[Any, Any]], str]:
    """The same hierarchy of arrays in an archive (``hierarchy.itar``), in a zarr-python
    ``LocalStore`` directory (``hierarchy.zarr``) and in a stored zip of that directory, as
    zarr-python's docs suggest for building a ``ZipStore`` (writing one through zarr-python
    rewrites keys, which leaves duplicate zip entries); the arrays and how long writing took."""
    size = config.chunks_per_array * config.chunk_elements
    arrays = {f"a{index:03d}": np.arange(size, dtype=np.float32) + index for index in range(config.arrays)}
    attributes: dict[str, Any] = {"bench": "store opening"}
    chunks = (config.chunk_elements,)
    start = time.perf_counter()
    with IndexedTarZarrStore(tmp / "hierarchy.itar", "w") as store:
        root = store.create_root_group(attributes)
        for name, data in arrays.items():
            root.create_array(name, data, chunks=chunks, compression=None)
        store.consolidate()
    written_ours = time.perf_counter() - start
    start = time.perf_counter()
    directory = zarr.storage.LocalStore(tmp / "hierarchy.zarr")
    group = zarr.open_group(store=directory, mode="w", zarr_format=2, attributes=attributes)
    for name, data in arrays.items():
        array = group.create_array(
            name, shape=data.shape, dtype=data.dtype, chunks=chunks, compressors=None, fill_value=0
        )
        array[:] = data
    zarr.consolidate_metadata(directory)
    written_dir = time.perf_counter() - start
    with zipfile.ZipFile(tmp / "hierarchy.zip", "w", compression=zipfile.ZIP_STORED) as archive:
        for file in sorted((tmp / "hierarchy.zarr").rglob("*")):
            if file.is_file():
                archive.write(file, file.relative_to(tmp / "hierarchy.zarr").as_posix())
    return arrays, f"written in {written_ours:.1f} s, the zarr LocalStore copy in {written_dir:.1f} s"


def bench_store(run: bench.Run[Config]) -> list[Row]:
    tmp, config = run.tmp, run.config
    arrays, written = write_hierarchies(tmp, config)
    target = list(arrays)[len(arrays) // 2]
    warm_page_cache(tmp / "hierarchy.itar", tmp / "hierarchy.zip")
    with IndexedTarArchive(tmp / "hierarchy.itar") as archive:
        records = len(archive)

    def ours(consolidated: bool, read: bool, first_open: bool = False) -> Callable[[], object]:
        def run() -> object:
            if first_open:  # as the first open of the archive in this process
                clear_caches()
            with IndexedTarZarrStore(tmp / "hierarchy.itar") as store:
                array = store.open_root_group(consolidated=consolidated).array(target)
                return array.read() if read else array

        return run

    def theirs(store: Callable[[], Any], consolidated: bool, read: bool) -> Callable[[], object]:
        def run() -> object:
            with store() as opened:
                array = zarr.open_group(store=opened, mode="r", use_consolidated=consolidated)[target]
                assert isinstance(array, zarr.Array)
                return array[:] if read else array

        return run

    def zip_store() -> Any:
        return zarr.storage.ZipStore(tmp / "hierarchy.zip", mode="r")

    def local_store() -> Any:
        return zarr.storage.LocalStore(tmp / "hierarchy.zarr", read_only=True)

    makers: dict[str, Callable[[bool], Callable[[], object]]] = {
        "ours consolidated": lambda read: ours(True, read),
        "ours consolidated, first open": lambda read: ours(True, read, first_open=True),
        "ours unconsolidated": lambda read: ours(False, read),
        "zarr ZipStore consolidated": lambda read: theirs(zip_store, True, read),
        "zarr ZipStore unconsolidated": lambda read: theirs(zip_store, False, read),
        "zarr LocalStore consolidated": lambda read: theirs(local_store, True, read),
        "zarr LocalStore unconsolidated": lambda read: theirs(local_store, False, read),
    }
    functions: dict[str, Callable[[], object]] = {}
    for name, make in makers.items():
        functions[f"{name}|read"], functions[f"{name}|open"] = make(True), make(False)
        bench.expect(np.array_equal(np.asarray(functions[f"{name}|read"]()), arrays[target]), name)  # and warm up
    times = median_times(functions, config.store_repeats)
    rows: list[Row] = []
    for name in makers:
        seconds, opened = times[f"{name}|read"], times[f"{name}|open"]
        detail = f"{ms(seconds)} (open + root group + array node {ms(opened)})"
        if name == "ours consolidated":
            detail += f"; {config.arrays} arrays, {records} records; {written}"
        ours_consolidated = name.startswith("ours consolidated")
        rows.append(
            Row(
                "4 store open", f"{name}: first read of a {config.chunks_per_array}-chunk array",
                seconds / times["ours consolidated|read"], "time vs ours consolidated",
                "<= 3 ms" if ours_consolidated else "", seconds <= 0.003 if ours_consolidated else None,
                {"time_s": seconds, "open_s": opened}, detail,
            )
        )  # fmt: skip
    return rows


# -- workload 5: first open of a 20,000-record archive --------------------------------------------


def as_previous_layout(path: Path, target: Path) -> int:
    """Writes ``path`` as versions before the record table wrote it (the CRC32C list in the xz
    index, no table) to ``target``; returns the size of that index."""
    data = path.read_bytes()
    header = unpack_index_header(data[-BLOCK_SIZE:], str(path))
    pointer = unpack_table_pointer(data, header.offset)
    assert pointer is not None, "written with checksums: it has a record table"
    table = decode_table(data[pointer.offset : pointer.offset + pointer.size], pointer, str(path))
    index = encode_index(table.keys, table.offsets, table.sizes, table.checksums)
    target.write_bytes(
        data[: pointer.offset] + index + bytes(padding(len(index))) + pack_index_header(pointer.offset, len(index))
    )
    return len(index)


def bench_first_open(run: bench.Run[Config]) -> list[Row]:
    config, rng = run.config, run.generator
    path = run.tmp / "first.itar"
    arrays, rows = config.first_arrays, config.first_rows
    with IndexedTarZarrStore(path, "w") as store:
        root = store.create_root_group({"bench": "first open"})
        for index in range(arrays):
            # Rows of 1-4 KB once compressed: half of each row's values random, half zeros.
            values = np.zeros((rows, 512), np.float32)
            values[:, : int(rng.integers(128, 512))] = rng.standard_normal((rows, 1)).astype(np.float32)
            root.create_array(f"a{index:02d}", values, chunks=(1, 512), compression=BloscCompression())
        store.consolidate()
    previous = run.tmp / "previous.itar"
    previous_size = as_previous_layout(path, previous)
    data = path.read_bytes()
    header = unpack_index_header(data[-BLOCK_SIZE:], str(path))
    pointer = unpack_table_pointer(data, header.offset)
    assert pointer is not None
    now_size = len(data) - BLOCK_SIZE - pointer.offset  # table, xz index and their padding
    warm_page_cache(path, previous)
    target, row = f"a{arrays // 2:02d}", rows // 3
    expected = IndexedTarZarrStore(path).open_root_group().array(target).read(row)

    def first(archive: Path) -> Callable[[], object]:
        def go() -> object:
            with IndexedTarZarrStore(archive) as store:
                return store.open_root_group().array(target).read(row)

        return go

    functions = {"table": first(path), "previous": first(previous)}
    for function in functions.values():
        clear_caches()
        bench.expect(np.array_equal(np.asarray(function()), expected), "first open reads the row")
    # The caches are emptied untimed after each call: a first open has none to empty (freeing
    # the last call's index took ~1 ms of the time measured before).
    clear_caches()
    times = median_times(functions, config.open_repeats, after=clear_caches)
    # Apart: interleaved with the first opens, whose caches are emptied, it would measure a
    # first open.
    first(path)()
    times.update(median_times({"table again": first(path)}, config.open_repeats))
    with IndexedTarArchive(path) as archive:
        records = len(archive)
    detail = (
        f"record table {ms(times['table'])}, xz index with CRC32C list (before) {ms(times['previous'])}; "
        f"{records} records"
    )
    return [
        Row("5 first open", f"first open + consolidated root + one row, {records} records",
            times["table"] / times["previous"], "time table/before", "<= 3 ms", times["table"] <= 0.003,
            dict(times), detail),
        Row("5 first open", "open again (index cached) + root + one row", times["table again"] / times["table"],
            "time again/first", "< 1 ms", times["table again"] < 0.001, {}, f"again {ms(times['table again'])}"),
        Row("5 first open", "index bytes: record table + xz index vs xz index with CRC32C list",
            now_size / previous_size, "size now/before", "<= 2.00x", now_size <= 2 * previous_size,
            {"now_bytes": now_size, "before_bytes": previous_size},
            f"now {now_size / 1e3:.0f} kB (table {pointer.size / 1e3:.0f} kB), before {previous_size / 1e3:.0f} kB"),
    ]  # fmt: skip


WORKLOADS = {
    "reads": bench_reads, "open": bench_open, "remote": bench_remote, "s3": bench_s3, "scan": bench_scan,
    "store": bench_store, "first-open": bench_first_open,
}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    return bench.run_benchmark(
        "bench_archive", __doc__, WORKLOADS, configure, argv=argv,
        quick_help="small, fast run (smoke test, a few seconds)", seed_help="random seed (record sizes and read order)",
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
