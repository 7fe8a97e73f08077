"""Benchmark of ``IndexedTarArchive`` / ``IndexedTarZarrStore`` against what the machine does
for the same bytes (SPEC section 5), as ratios measured side by side in one run.

Absolute times on a shared machine are noise, so every figure is a ratio of two medians
measured in the same process, with the repetitions of both sides interleaved. Workloads:

1. Random reads of ~1 MB records (0.8-1.2 MB) by key vs bare ``os.pread`` of the same byte
   ranges in the same random order (page cache warm), on 1 and 2 threads (target:
   pread time / archive time >= 0.9); small records (1-4 KB) by key vs one bare
   ``os.pread`` each (target: archive time <= 2 x pread time).
2. Opening a 10,000-record archive vs decoding its index alone (``lzma.decompress`` +
   ``cbor2.loads`` of the index bytes); open + one record read; I/O calls of an open.
3. Remote, a local HTTP server adding 20 ms per request: (a) open + first record read
   (requests, round trips); (b) 100 gathered ``read_async`` reads (wall time in round trips,
   peak requests in flight, side by side with the same ranges gathered by bare fsspec); (c) the
   same reads one at a time; (d) one random 1 MB record on the default buffered path
   (requests, bytes moved vs bytes wanted). Also (a) and (d) on S3 (moto behind a proxy
   adding the same latency), where s3fs' read-ahead defaults must be overridden.
4. Time to first array read of a 200-array hierarchy (10,000 chunk records): open store +
   root group + read one array, ours (consolidated / not) vs zarr-python 3 on a ``ZipStore``
   and on a ``LocalStore`` of the same hierarchy (consolidated / not).

Prints one table (ratio, target, raw medians); ``--json PATH`` also writes the results.

Run from the repository root::

    .venv/bin/python scripts/bench_archive.py              # full run (~35 s on 2 cores)
    .venv/bin/python scripts/bench_archive.py --quick      # small, fast run (~5 s, smoke test)
    .venv/bin/python scripts/bench_archive.py --json bench.json --only remote --only s3

Temporary files live in a temporary directory (``--tmpdir`` to choose where) removed at
the end; servers bind 127.0.0.1 only and are stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import lzma
import os
import random
import statistics
import struct
import sys
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import cbor2
import fsspec.asyn
import numpy as np
import zarr
import zarr.storage
from upath import UPath
from zarr.abc.store import Store as ZarrStore

from ncore_like import IndexedTarArchive, IndexedTarZarrStore, Record, clear_caches

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _benchlib lives beside this script
import _benchlib as bench
from _benchlib import MB, TAIL_READ_SIZE, Row, median_times, ms, us, warm_page_cache

INDEX_HEADER_FORMAT = "<4sIQI"  # magic, index type, index offset, index size


# -- configuration and results ------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """Sizes of the workloads (defaults: the full run; :func:`quick_config`: the smoke run)."""

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
    seed: int = 0


def quick_config(seed: int) -> Config:
    """A small configuration that runs in a few seconds."""
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
        seed=seed,
    )


# -- archives -------------------------------------------------------------------------------


def write_big_archive(path: Path, config: Config, count: int, rng: random.Random) -> list[str]:
    """An archive of ``count`` records of 0.8-1.2 MB; returns the keys."""
    keys = [f"frames/{index:06d}" for index in range(count)]
    with IndexedTarArchive(path, mode="w") as archive:
        for key, payload in zip(keys, bench.random_payloads(rng, count, config.big_min, config.big_max), strict=True):
            archive[key] = payload
    return keys


def write_small_archive(path: Path, config: Config, rng: random.Random) -> list[str]:
    """An archive of small records (1-4 KB) plus a few node metadata records; returns the
    keys of the small records."""
    keys = [f"chunks/{index // 100:03d}/{index % 100:02d}" for index in range(config.small_records)]
    with IndexedTarArchive(path, mode="w") as archive:
        for key, payload in zip(keys, bench.random_payloads(rng, len(keys), 1024, 4096), strict=True):
            archive[key] = payload
        archive[".zgroup"] = b'{"zarr_format": 2}'
        archive[".zattrs"] = json.dumps({"bench": "small records"}).encode()
        for index in range(max(0, config.metadata_records - 2)):
            archive[f"meta{index}/.zgroup"] = b'{"zarr_format": 2}'
    return keys


def index_bytes(path: Path) -> bytes:
    """The compressed index of an archive, located through its header block."""
    with path.open("rb") as file:
        file.seek(-512, os.SEEK_END)
        magic, _type, offset, size = struct.unpack_from(INDEX_HEADER_FORMAT, file.read(512))
        assert magic == b"itar", magic
        file.seek(offset)
        return file.read(size)


def outside_tail(archive: IndexedTarArchive, keys: Sequence[str], path: Path) -> list[str]:
    """The keys whose records lie before the tail read (so they are read from the file, not
    served from the memory of the opening)."""
    tail_start = path.stat().st_size - TAIL_READ_SIZE
    records = archive.records
    return [key for key in keys if records[key].offset + records[key].size <= tail_start]


# -- workload 1: random reads -----------------------------------------------------------------


def bench_random_reads(tmp: Path, config: Config, rng: random.Random) -> tuple[list[Row], Path]:
    path = tmp / "big" / "frames.itar"
    path.parent.mkdir()
    keys = write_big_archive(path, config, config.big_records, rng)
    warm_page_cache(path)
    rows: list[Row] = []
    order = keys[:]
    rng.shuffle(order)
    with IndexedTarArchive(path) as archive:
        ranges = [(archive.records[key].offset, archive.records[key].size) for key in order]
        fd = os.open(path, os.O_RDONLY)
        try:
            for key, (offset, size) in zip(order[:3], ranges[:3], strict=True):
                assert archive[key] == os.pread(fd, size, offset)
            for key in order:  # every record once through the archive too
                archive[key]

            def pread_all(part: Sequence[tuple[int, int]]) -> None:
                for offset, size in part:
                    os.pread(fd, size, offset)

            def archive_all(part: Sequence[str]) -> None:
                for key in part:
                    archive[key]

            read_mb = sum(size for _, size in ranges) / MB
            times = median_times(
                {"pread": lambda: pread_all(ranges), "archive": lambda: archive_all(order)}, config.big_repeats
            )
            rows.append(_ratio_row("1 random reads", f"~1 MB records, 1 thread ({len(order)} reads)", times, read_mb))
            with ThreadPoolExecutor(2) as pool:
                range_parts = [ranges[0::2], ranges[1::2]]
                key_parts = [order[0::2], order[1::2]]
                times = median_times(
                    {
                        "pread": lambda: list(pool.map(pread_all, range_parts)),
                        "archive": lambda: list(pool.map(archive_all, key_parts)),
                    },
                    config.big_repeats,
                )
            rows.append(_ratio_row("1 random reads", f"~1 MB records, 2 threads ({len(order)} reads)", times, read_mb))
        finally:
            os.close(fd)
    return rows, path


def _ratio_row(workload: str, measure: str, times: dict[str, float], read_mb: float) -> Row:
    pread, archive = times["pread"], times["archive"]
    ratio = pread / archive
    return Row(
        workload,
        measure,
        ratio,
        "archive/pread throughput",
        ">= 0.90x",
        ratio >= 0.9,
        {"pread_s": pread, "archive_s": archive},
        f"pread {ms(pread)}, archive {ms(archive)}; pread {read_mb / pread / 1e3:.2f} GB/s",
    )


def bench_small_reads(path: Path, keys: list[str], config: Config, rng: random.Random) -> Row:
    warm_page_cache(path)
    with IndexedTarArchive(path) as archive:
        candidates = outside_tail(archive, keys, path)
        chosen = [rng.choice(candidates) for _ in range(config.small_reads)]
        ranges = [(archive.records[key].offset, archive.records[key].size) for key in chosen]
        fd = os.open(path, os.O_RDONLY)
        try:
            assert archive[chosen[0]] == os.pread(fd, ranges[0][1], ranges[0][0])

            def pread_all() -> None:
                for offset, size in ranges:
                    os.pread(fd, size, offset)

            def archive_all() -> None:
                for key in chosen:
                    archive[key]

            times = median_times({"pread": pread_all, "archive": archive_all}, config.small_repeats)
        finally:
            os.close(fd)
    count = len(chosen)
    pread, arch = times["pread"] / count, times["archive"] / count
    ratio = arch / pread
    return Row(
        "1 random reads",
        f"small 1-4 KB records by key ({count} reads)",
        ratio,
        "time archive/pread",
        "<= 2.00x",
        ratio <= 2.0,
        {"pread_per_read_s": pread, "archive_per_read_s": arch},
        f"pread {us(pread)}, archive {us(arch)} per read",
    )


# -- workload 2: opening ----------------------------------------------------------------------


@contextmanager
def counting_io() -> Iterator[dict[str, int]]:
    """Counts ``os.pread``/``os.read``/``os.open`` calls made meanwhile (by anyone)."""
    counts = {"pread": 0, "read": 0, "open": 0}
    originals = {name: getattr(os, name) for name in counts}

    def wrap(name: str) -> Callable[..., Any]:
        original = originals[name]

        def counted(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return original(*args, **kwargs)

        return counted

    for name in counts:
        setattr(os, name, wrap(name))
    try:
        yield counts
    finally:
        for name, original in originals.items():
            setattr(os, name, original)


def bench_open(path: Path, keys: list[str], config: Config, rng: random.Random) -> list[Row]:
    warm_page_cache(path)
    data = index_bytes(path)
    with IndexedTarArchive(path) as archive:
        key = rng.choice(outside_tail(archive, keys, path))
        total = len(archive)
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:

        def decode() -> None:
            cbor2.loads(lzma.decompress(data))

        def tail_pread() -> None:
            os.pread(fd, min(size, TAIL_READ_SIZE), max(0, size - TAIL_READ_SIZE))

        def open_close() -> None:
            clear_caches()  # the first open of the archive in this process
            IndexedTarArchive(path).close()

        def open_read() -> None:
            clear_caches()
            with IndexedTarArchive(path) as archive:
                archive[key]

        def reopen() -> None:  # the index is in the process-wide cache
            IndexedTarArchive(path).close()

        times = median_times(
            {
                "decode": decode,
                "tail_pread": tail_pread,
                "open": open_close,
                "open_read": open_read,
                "reopen": reopen,
            },
            config.open_repeats,
        )
    finally:
        os.close(fd)
    with counting_io() as counts:
        IndexedTarArchive(path).close()
    calls = f"{counts['pread']} pread, {counts['read']} read, {counts['open']} open"
    decode_s = times["decode"]
    raw = {name: value for name, value in times.items()}
    raw.update({f"io_{name}": float(value) for name, value in counts.items()})
    return [
        Row(
            "2 open",
            f"open {total}-record archive vs decoding its index ({len(data) / 1e3:.0f} kB xz)",
            times["open"] / decode_s,
            "time open/decode",
            "(close to 1x)",
            None,
            raw,
            f"decode {ms(decode_s)}, 1 MiB tail pread {ms(times['tail_pread'])}, open {ms(times['open'])}; "
            f"I/O calls of one open: {calls}",
        ),
        Row(
            "2 open",
            "open + one record read vs decoding the index",
            times["open_read"] / decode_s,
            "time open+read/decode",
            "",
            None,
            {},
            f"open + read {ms(times['open_read'])}",
        ),
        Row(
            "2 open",
            "reopen (index from the process-wide cache) vs decoding the index",
            times["reopen"] / decode_s,
            "time reopen/decode",
            "",
            None,
            {},
            f"reopen {ms(times['reopen'])}",
        ),
    ]


# -- workload 3: remote -------------------------------------------------------------------------


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


def describe_requests(records: list[dict[str, Any]]) -> str:
    return ", ".join(f"{r['method']} {r.get('range') or '(no range)'}" for r in records)


class RequestLog(Protocol):
    """A test server's request log (``tests.support.servers``: the HTTP server, the proxy)."""

    def clear_requests(self) -> None: ...

    def requests(self) -> list[dict[str, Any]]: ...


def remote_records(path: Path, keys: Sequence[str]) -> tuple[dict[str, Record], list[str]]:
    """The records of ``keys`` in the archive at ``path``, and those of the keys whose records
    lie before the tail read (all keys if none does): reading one of them takes a request."""
    with IndexedTarArchive(path) as local:
        records = {key: local.records[key] for key in keys}
    tail_start = path.stat().st_size - TAIL_READ_SIZE
    return records, [key for key in keys if sum(records[key]) <= tail_start] or list(keys)


def open_first_read_row(
    measure: str,
    wall: float,
    log: list[dict[str, Any]],
    file_size: int,
    record: Record,
    latency: float,
    raw: dict[str, float] | None = None,
    detail: str = "",
) -> Row:
    """The row of opening a remote archive and reading its first record (target: 2 round
    trips); ``raw`` and ``detail`` add to the row's own."""
    moved = sum(range_bytes(r, file_size) for r in log)
    return Row(
        "3 remote 20 ms",
        measure,
        wall / latency,
        "wall in round trips",
        "<= 2 RTT",
        wall / latency <= 2.5 and len(log) <= 2,
        {"wall_s": wall, "requests": float(len(log)), "bytes_moved": float(moved)} | (raw or {}),
        f"{len(log)} requests [{describe_requests(log)}], {ms(wall)}, "
        f"moved {moved / MB:.2f} MB for a {record.size / MB:.2f} MB record{detail}",
    )


def one_record_row(
    measure: str,
    open_archive: Callable[[], IndexedTarArchive],
    server: RequestLog,
    candidates: Sequence[str],
    records: Mapping[str, Record],
    file_size: int,
    config: Config,
    rng: random.Random,
) -> Row:
    """One random record read from a freshly opened remote archive, a few times: the bytes
    moved for the bytes wanted (target ~1, in one request)."""
    samples: list[tuple[float, int, float, str]] = []
    for _ in range(max(3, config.remote_repeats * 2)):
        key = rng.choice(candidates)
        with open_archive() as archive:
            server.clear_requests()
            start = time.perf_counter()
            archive[key]
            elapsed = time.perf_counter() - start
            log = server.requests()
        moved = sum(range_bytes(r, file_size) for r in log)
        samples.append((elapsed, len(log), moved / records[key].size, describe_requests(log)))
    wall = statistics.median(s[0] for s in samples)
    requests = statistics.median(s[1] for s in samples)
    ratio = statistics.median(s[2] for s in samples)
    return Row(
        "3 remote 20 ms",
        measure,
        ratio,
        "bytes moved/wanted",
        "~1x, 1 request",
        ratio <= 1.25 and requests <= 1,
        {"wall_s": wall, "requests": float(requests), "moved_per_wanted": ratio},
        f"{requests:g} request(s) [{samples[-1][3]}], {wall / config.latency:.1f} RTT ({ms(wall)})",
    )


def bench_remote(tmp: Path, config: Config, rng: random.Random) -> list[Row]:
    servers = bench.import_servers()
    directory = tmp / "remote"
    directory.mkdir()
    path = directory / "frames.itar"
    keys = write_big_archive(path, config, config.remote_records, rng)
    file_size = path.stat().st_size
    latency = config.latency
    rows: list[Row] = []
    records, outside = remote_records(path, keys)
    with servers.start_http(directory, latency=latency) as server:
        url = f"{server.endpoint}/{path.name}"

        # (a) open + first record read on the default (buffered) path
        trials: list[tuple[float, list[dict[str, Any]]]] = []
        for _ in range(max(2, config.remote_repeats)):
            server.clear_requests()
            start = time.perf_counter()
            with IndexedTarArchive(UPath(url)) as archive:
                archive[keys[0]]
            elapsed = time.perf_counter() - start
            trials.append((elapsed, server.requests()))
        trials = trials[1:]  # the first one also creates the HTTP session
        wall = statistics.median(t for t, _ in trials)
        measure = "(a) open + first record read (buffered)"
        rows.append(open_first_read_row(measure, wall, trials[-1][1], file_size, records[keys[0]], latency))

        # (b) gathered read_async, (c) the same reads one at a time
        chosen = [rng.choice(outside) for _ in range(config.remote_reads)]  # none served from the tail
        wanted = sum(records[key].size for key in chosen)

        async def run_reads(gathered: bool) -> tuple[float, list[dict[str, Any]]]:
            archive = await IndexedTarArchive.open_async(UPath(url))
            try:
                server.clear_requests()
                start = time.perf_counter()
                if gathered:
                    results = await asyncio.gather(*(archive.read_async(key) for key in chosen))
                else:
                    results = [await archive.read_async(key) for key in chosen]
                elapsed = time.perf_counter() - start
                assert sum(map(len, results)) == wanted
                return elapsed, server.requests()
            finally:
                archive.close()

        remote = UPath(url)
        filesystem, remote_path = remote.fs, remote.path

        def fsspec_gather() -> float:
            """The limit: the same ranges gathered with fsspec alone, on its own loop."""

            async def gather() -> list[bytes]:
                return list(
                    await asyncio.gather(
                        *(
                            filesystem._cat_file(remote_path, start=records[key].offset, end=sum(records[key]))
                            for key in chosen
                        )
                    )
                )

            start = time.perf_counter()
            results = fsspec.asyn.sync(filesystem.loop, gather)
            elapsed = time.perf_counter() - start
            assert sum(map(len, results)) == wanted
            return elapsed

        asyncio.run(run_reads(True))  # warm-up (session, loop)
        fsspec_gather()
        runs: list[tuple[float, list[dict[str, Any]]]] = []
        limits: list[float] = []
        for _ in range(config.remote_repeats):  # side by side
            runs.append(asyncio.run(run_reads(True)))
            server.clear_requests()
            limits.append(fsspec_gather())
        for gathered in (True, False):
            if not gathered:
                runs = [asyncio.run(run_reads(False)) for _ in range(max(1, config.remote_repeats - 1))]
            wall = statistics.median(t for t, _ in runs)
            log = runs[-1][1]
            peak = servers.max_in_flight(log)
            moved = sum(range_bytes(r, file_size) for r in log)
            label = "(b) gathered" if gathered else "(c) sequential"
            limit = statistics.median(limits)
            rows.append(
                Row(
                    "3 remote 20 ms",
                    f"{label} read_async of {len(chosen)} ~1 MB records",
                    wall / latency,
                    "wall in round trips",
                    "<= 3 RTT" if gathered else "(contrast)",
                    wall / latency <= 3 if gathered else None,
                    {"wall_s": wall, "requests": float(len(log)), "max_in_flight": float(peak)}
                    | ({"fsspec_gather_s": limit} if gathered else {}),
                    f"{ms(wall)}, {len(log)} requests, max {peak} in flight, "
                    f"moved {moved / MB:.1f} MB for {wanted / MB:.1f} MB wanted"
                    + (
                        f"; same ranges gathered with bare fsspec: {ms(limit)} = {limit / latency:.2f} RTT "
                        f"(ours/fsspec {wall / limit:.2f}x)"
                        if gathered
                        else ""
                    ),
                )
            )

        # (d) one random 1 MB record on the default buffered path (fresh archive each time)
        measure = "(d) one random ~1 MB record, buffered path"
        rows.append(
            one_record_row(
                measure, lambda: IndexedTarArchive(UPath(url)), server, outside, records, file_size, config, rng
            )
        )
    return rows


def bench_s3(tmp: Path, config: Config, rng: random.Random) -> list[Row]:
    """Open + first read and one random record on the default buffered path of an archive
    on S3 (moto behind a proxy adding the latency): s3fs' own read-ahead defaults are what
    the archive must override."""
    servers = bench.import_servers()
    try:
        import s3fs
    except ImportError:
        return [Row("3 remote 20 ms", "S3 (moto): skipped, s3fs is not installed", None, "", "", None)]
    path = tmp / "s3-frames.itar"
    count = max(8, config.remote_records // 5)
    keys = write_big_archive(path, config, count, rng)
    file_size = path.stat().st_size
    latency = config.latency
    records, outside = remote_records(path, keys)
    rows: list[Row] = []
    with servers.start_moto() as moto, servers.start_proxy(moto.endpoint, latency=latency) as proxy:
        direct = s3fs.S3FileSystem(**servers.s3_storage_options(moto.endpoint))
        direct.call_s3("create_bucket", Bucket="bench")
        direct.put_file(str(path), "bench/frames.itar")
        options = servers.s3_storage_options(proxy.endpoint)
        url = "s3://bench/frames.itar"
        with IndexedTarArchive(UPath(url, **options)) as archive:  # warm-up: client creation
            archive[keys[0]]
        s3 = UPath(url, **options)
        first = records[keys[0]]
        trials: list[tuple[float, list[dict[str, Any]]]] = []
        bare: list[float] = []
        for _ in range(max(2, config.remote_repeats)):
            proxy.clear_requests()
            start = time.perf_counter()
            with IndexedTarArchive(UPath(url, **options)) as archive:
                archive[keys[0]]
            trials.append((time.perf_counter() - start, proxy.requests()))
            start = time.perf_counter()  # the limit: the same two requests with bare s3fs
            s3.fs.cat_file(s3.path, start=-TAIL_READ_SIZE)
            s3.fs.cat_file(s3.path, start=first.offset, end=sum(first))
            bare.append(time.perf_counter() - start)
        wall = statistics.median(t for t, _ in trials)
        bare_wall = statistics.median(bare)
        rows.append(
            open_first_read_row(
                "S3 (moto): open + first record read (buffered)",
                wall,
                trials[-1][1],
                file_size,
                first,
                latency,
                {"bare_s3fs_s": bare_wall},
                "; the same 2 requests with bare s3fs: "
                f"{ms(bare_wall)} = {bare_wall / latency:.1f} RTT (moto's own service time)",
            )
        )
        measure = "S3 (moto): one random ~1 MB record, buffered path"
        rows.append(
            one_record_row(
                measure,
                lambda: IndexedTarArchive(UPath(url, **options)),
                proxy,
                outside,
                records,
                file_size,
                config,
                rng,
            )
        )
    return rows


# -- workload 4: store opening ------------------------------------------------------------------


def hierarchy_arrays(config: Config) -> dict[str, np.ndarray[Any, np.dtype[np.float32]]]:
    size = config.chunks_per_array * config.chunk_elements
    return {f"a{index:03d}": np.arange(size, dtype=np.float32) + index for index in range(config.arrays)}


def write_ours(path: Path, arrays: dict[str, np.ndarray[Any, Any]], config: Config) -> None:
    with IndexedTarZarrStore(path, "w") as store:
        root = store.create_root_group({"bench": "store opening"})
        for name, data in arrays.items():
            root.create_array(name, data, chunks=(config.chunk_elements,), compression=None)
        store.consolidate()


def write_zarr(store: ZarrStore, arrays: dict[str, np.ndarray[Any, Any]], config: Config) -> None:
    root = zarr.open_group(store=store, mode="w", zarr_format=2, attributes={"bench": "store opening"})
    for name, data in arrays.items():
        array = root.create_array(
            name, shape=data.shape, dtype=data.dtype, chunks=(config.chunk_elements,), compressors=None, fill_value=0
        )
        array[:] = data
    zarr.consolidate_metadata(store)


def zip_directory(directory: Path, zip_path: Path) -> None:
    """A zip (stored, uncompressed) of a directory's files, as zarr-python's docs suggest for
    building a ``ZipStore`` (writing one through zarr-python rewrites keys, which leaves
    duplicate zip entries)."""
    with zipfile.ZipFile(zip_path, "w", compression=zipfile.ZIP_STORED) as archive:
        for file in sorted(directory.rglob("*")):
            if file.is_file():
                archive.write(file, file.relative_to(directory).as_posix())


def bench_store_open(tmp: Path, config: Config) -> list[Row]:
    arrays = hierarchy_arrays(config)
    names = list(arrays)
    target = names[len(names) // 2]
    expected = arrays[target]
    ours = tmp / "hierarchy.itar"
    zip_path = tmp / "hierarchy.zip"
    directory = tmp / "hierarchy.zarr"
    start = time.perf_counter()
    write_ours(ours, arrays, config)
    written_ours = time.perf_counter() - start
    start = time.perf_counter()
    write_zarr(zarr.storage.LocalStore(directory), arrays, config)
    written_dir = time.perf_counter() - start
    zip_directory(directory, zip_path)
    for path in (ours, zip_path):
        warm_page_cache(path)
    with IndexedTarArchive(ours) as archive:
        records = len(archive)

    def ours_run(consolidated: bool, read: bool, cold: bool = False) -> Callable[[], object]:
        def run() -> object:
            if cold:  # as the first open of the archive in this process
                clear_caches()
            store = IndexedTarZarrStore(ours)
            try:
                array = store.open_root_group(consolidated=consolidated).array(target)
                return array.read() if read else array
            finally:
                store.close()

        return run

    def zarr_run(make_store: Callable[[], Any], consolidated: bool, read: bool) -> Callable[[], object]:
        def run() -> object:
            store = make_store()
            try:
                array = zarr.open_group(store=store, mode="r", use_consolidated=consolidated)[target]
                assert isinstance(array, zarr.Array)
                return array[:] if read else array
            finally:
                store.close()

        return run

    def zip_store() -> Any:
        return zarr.storage.ZipStore(zip_path, mode="r")

    def local_store() -> Any:
        return zarr.storage.LocalStore(directory, read_only=True)

    makers: dict[str, Callable[[bool], Callable[[], object]]] = {
        "ours consolidated": lambda read: ours_run(True, read),
        "ours consolidated, first open": lambda read: ours_run(True, read, cold=True),
        "ours unconsolidated": lambda read: ours_run(False, read),
        "zarr ZipStore consolidated": lambda read: zarr_run(zip_store, True, read),
        "zarr ZipStore unconsolidated": lambda read: zarr_run(zip_store, False, read),
        "zarr LocalStore consolidated": lambda read: zarr_run(local_store, True, read),
        "zarr LocalStore unconsolidated": lambda read: zarr_run(local_store, False, read),
    }
    functions: dict[str, Callable[[], object]] = {}
    for name, make in makers.items():
        functions[f"{name}|read"] = make(True)
        functions[f"{name}|open"] = make(False)
        values = functions[f"{name}|read"]()  # warm-up and check
        assert np.array_equal(np.asarray(values), expected), name
    times = median_times(functions, config.store_repeats)
    base = times["ours consolidated|read"]
    rows: list[Row] = []
    for name in makers:
        seconds, opened = times[f"{name}|read"], times[f"{name}|open"]
        detail = f"{ms(seconds)} (open + root group + array node {ms(opened)})"
        if name == "ours consolidated":
            detail += (
                f"; {config.arrays} arrays, {records} records; written in {written_ours:.1f} s, "
                f"the zarr LocalStore copy in {written_dir:.1f} s"
            )
        rows.append(
            Row(
                "4 store open",
                f"{name}: first read of a {config.chunks_per_array}-chunk array",
                seconds / base,
                "time vs ours consolidated",
                "<= 3 ms" if name.startswith("ours consolidated") else "",
                seconds <= 0.003 if name.startswith("ours consolidated") else None,
                {"time_s": seconds, "open_s": opened},
                detail,
            )
        )
    return rows


# -- driver ---------------------------------------------------------------------------------------


WORKLOADS = ("reads", "open", "remote", "s3", "store")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = bench.bench_parser(__doc__, "small, fast run (smoke test, a few seconds)")
    bench.add_run_arguments(parser, "random seed (record sizes and read order)", WORKLOADS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    config = quick_config(args.seed) if args.quick else Config(seed=args.seed)
    only = set(args.only or WORKLOADS)
    rng = random.Random(config.seed)
    rows: list[Row] = []
    started = time.perf_counter()
    with bench.temporary_directory("bench-archive-", args.tmpdir) as tmp:
        small_path = tmp / "small.itar"
        small_keys: list[str] = []
        if only & {"reads", "open"}:
            small_keys = write_small_archive(small_path, config, rng)
        if "reads" in only:
            big_rows, big_path = bench_random_reads(tmp, config, rng)
            rows += big_rows
            big_path.unlink()  # free the page cache and disk early
            rows.append(bench_small_reads(small_path, small_keys, config, rng))
        if "open" in only:
            rows += bench_open(small_path, small_keys, config, rng)
        if "remote" in only:
            rows += bench_remote(tmp, config, rng)
        if "s3" in only:
            rows += bench_s3(tmp, config, rng)
        if "store" in only:
            rows += bench_store_open(tmp, config)
    elapsed = time.perf_counter() - started
    run = bench.versions()
    print(bench.banner("bench_archive", run, quick=args.quick, elapsed=elapsed))
    print(bench.format_table(rows))
    if args.json is not None:
        bench.write_json(args.json, config, quick=args.quick, elapsed=elapsed, versions=run, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
