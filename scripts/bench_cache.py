"""Benchmark of the local record cache of remote archives (``cache=``): random frames across
many small archives on S3, a first pass that fills the cache and a second pass served by it,
against the same reads from local files, as ratios measured side by side in one run.

S3 is moto behind a proxy adding 20 ms per request (``tests.support.servers``), on loopback.
A pass reads every frame once, in one random order across the archives:

1. pass 1 (empty cache, each archive opened on its first read): wall time and requests,
   against the local reads (context);
2. pass 2 (within the time-to-live: no request at all) against the local reads, with the
   same checksum verification on both sides (the default; target >= 0.8x), and with none
   on either: opening every archive afresh (as a new job or DataLoader worker would), and
   over archives kept open (as later epochs of one job);
3. reopening every archive after the time-to-live (one small version check each) against
   within it: what the time-to-live saves.

Prints one table (ratio, target, raw medians); ``--json PATH`` also writes the results.

Run from the repository root::

    .venv/bin/python -m scripts.bench_cache              # full run: 1,000 frames, 100 archives
    .venv/bin/python -m scripts.bench_cache --quick      # small, fast run (smoke test)
    .venv/bin/python -m scripts.bench_cache --json bench_cache.json

Temporary files (archives, the cache) live in a temporary directory (``--tmpdir`` to choose
where) removed at the end; servers bind 127.0.0.1 only and are stopped on exit.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from upath import UPath

import scripts._benchlib as bench
from ncore_like import IndexedTarArchive, RecordCache
from scripts._benchlib import MB, Row, median_times, ms, us

WORKLOAD = "cache: S3"


@dataclass(frozen=True)
class Config:
    """Sizes of the run (defaults: the full run; :func:`configure` ``--quick``: the smoke run)."""

    archives: int = 100
    frames: int = 10
    """Frames per archive: every pass reads archives x frames frames."""
    frame_min: int = 300_000
    frame_max: int = 700_000
    latency: float = 0.02
    repeats: int = 9
    seed: int = 0


def configure(args: argparse.Namespace) -> Config:
    if not args.quick:
        return Config(latency=args.latency, seed=args.seed)
    return Config(archives=12, frames=5, latency=args.latency, repeats=3, seed=args.seed)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--latency", type=float, default=0.02, help="seconds the proxy adds to every S3 request")


Reads = list[tuple[int, str]]  # (archive number, key), in reading order
Opener = Callable[[int], IndexedTarArchive]  # an archive by number


def write_archives(run: bench.Run[Config]) -> tuple[list[Path], Reads]:
    """The small archives of frames (random bytes), and every frame in one random order."""
    config = run.config
    paths, reads = [], []
    payloads = bench.random_payloads(run.rng, config.archives * config.frames, config.frame_min, config.frame_max)
    for number in range(config.archives):
        path = run.tmp / f"seq-{number:03d}.itar"
        with IndexedTarArchive(path, mode="w") as archive:
            for frame in range(config.frames):
                key = f"cameras/front/{frame:05d}"
                archive[key] = next(payloads)
                reads.append((number, key))
        paths.append(path)
    run.rng.shuffle(reads)
    return paths, reads


def read_open(archives: Sequence[IndexedTarArchive], reads: Reads) -> None:
    """One pass over archives kept open."""
    for number, key in reads:
        archives[number].read(key)


def read_pass(open_archive: Opener, reads: Reads) -> list[bytes]:
    """One pass: each archive opened on its first read, every frame read once."""
    opened: dict[int, IndexedTarArchive] = {}
    frames = []
    for number, key in reads:
        archive = opened.get(number)
        if archive is None:
            archive = opened[number] = open_archive(number)
        frames.append(archive.read(key))
    return frames


def bench_cache(run: bench.Run[Config]) -> list[Row]:
    servers = bench.import_servers()
    try:
        import s3fs
    except ImportError:
        return [Row(WORKLOAD, "skipped: s3fs is not installed", None, "", "", None)]
    config = run.config
    paths, reads = write_archives(run)
    wanted = sum(IndexedTarArchive(paths[number]).records[key].size for number, key in reads)
    cache_dir = run.tmp / "cache"
    with servers.start_moto() as moto, servers.start_proxy(moto.endpoint, latency=config.latency) as proxy:
        direct = s3fs.S3FileSystem(**servers.s3_storage_options(moto.endpoint))
        direct.call_s3("create_bucket", Bucket="fleet")
        for path in paths:
            direct.put_file(str(path), f"fleet/{path.name}")
        options = servers.s3_storage_options(proxy.endpoint)
        urls = [UPath(f"s3://fleet/{path.name}", **options) for path in paths]
        cache = RecordCache(cache_dir)

        def remote(verify: bool | None = None, cached: RecordCache = cache) -> Opener:
            return lambda number: IndexedTarArchive(urls[number], verify_checksums=verify, cache=cached)

        def local(verify: bool | None = None) -> Opener:
            return lambda number: IndexedTarArchive(paths[number], verify_checksums=verify)

        expected = read_pass(local(), reads)
        IndexedTarArchive(urls[0])  # the S3 client's creation is no part of pass 1
        proxy.clear_requests()
        start = time.perf_counter()
        first = read_pass(remote(), reads)
        first_s = time.perf_counter() - start
        first_log = proxy.requests()
        bench.expect(first == expected, "pass 1")
        bench.expect(read_pass(remote(), reads) == expected, "pass 2")
        del first, expected
        proxy.clear_requests()
        passes: dict[str, Callable[[], object]] = {}
        for verify, kind in ((True, "verified"), (False, "unverified")):
            passes[f"pass 2 {kind}"] = functools.partial(read_pass, remote(verify), reads)
            passes[f"local {kind}"] = functools.partial(read_pass, local(verify), reads)
        times = median_times(passes, config.repeats, isolate=True)
        numbers = range(config.archives)
        for verify, kind in ((True, "verified"), (False, "unverified")):  # afterwards: they hold their tails
            kept = [remote(verify)(number) for number in numbers], [local(verify)(number) for number in numbers]
            kept_open = {
                f"pass 2 {kind} kept open": functools.partial(read_open, kept[0], reads),
                f"local {kind} kept open": functools.partial(read_open, kept[1], reads),
            }
            measured = median_times(kept_open, config.repeats, isolate=True)
            for name in kept_open:
                times[name], times.minima[name] = measured[name], measured.minima[name]
            del kept, kept_open
        second_log = proxy.requests()
        # Reopening every archive within the time-to-live, and after it (a version check each).
        checking = RecordCache(cache_dir, ttl=0)
        reopen = median_times(
            {
                "within": lambda: [remote()(n) for n in numbers],
                "after": lambda: [remote(None, checking)(n) for n in numbers],
            },
            max(3, config.repeats // 2),
        )
        proxy.clear_requests()
        [remote(None, checking)(number) for number in numbers]
        check_log = proxy.requests()
        cached_bytes = cache.total_bytes()
    count = len(reads)
    heads = sum(r["method"] == "HEAD" for r in first_log)
    rows = [
        Row(WORKLOAD, "pass 1 (empty cache) vs local reads", times["local verified"] / first_s, "time local/pass 1", "",
            None, {"pass1_s": first_s, "requests": float(len(first_log))},
            f"{count} frames ({wanted / MB:.0f} MB) across {config.archives} archives: pass 1 {ms(first_s)}, "
            f"{len(first_log)} requests ({heads} HEAD); local {ms(times['local verified'])}"),
        Row(WORKLOAD, "pass 2 vs pass 1", first_s / times["pass 2 verified"], "time pass 1/pass 2", "", None,
            {"pass2_s": times["pass 2 verified"]},
            f"pass 2 {ms(times['pass 2 verified'])}, {len(second_log)} requests in all its {config.repeats * 5} runs; "
            f"the cache holds {cached_bytes / MB:.0f} MB"),
    ]  # fmt: skip
    for kind, label, target, how in (
        ("verified", "both verify CRC32C (the default)", ">= 0.80x", ""),
        ("unverified", "neither verifies", ">= 0.80x", ""),
        ("verified", "both verify CRC32C (the default)", "", " kept open"),  # the cost of a hit alone
        ("unverified", "neither verifies", "", " kept open"),
    ):
        ours, theirs = times[f"pass 2 {kind}{how}"], times[f"local {kind}{how}"]
        opening = "archives kept open" if how else "opening every archive"
        rows.append(
            Row(WORKLOAD, f"pass 2 vs local reads, {opening}, {label}", theirs / ours, "time local/pass 2", target,
                theirs / ours >= 0.8 if target else None, {"pass2_s": ours, "local_s": theirs},
                f"pass 2 {ms(ours)}, local {ms(theirs)} ({us(ours / count)} vs {us(theirs / count)} a frame)",
                best_ratio=times.minima[f"local {kind}{how}"] / times.minima[f"pass 2 {kind}{how}"])
        )  # fmt: skip
    methods = ", ".join(sorted({r["method"] for r in check_log}))
    rows.append(
        Row(WORKLOAD, f"reopen {config.archives} archives: after the TTL vs within it",
            reopen["after"] / reopen["within"], "time after/within", "", None,
            {"within_s": reopen["within"], "after_s": reopen["after"]},
            f"within {ms(reopen['within'])} (no request), after {ms(reopen['after'])} ({len(check_log)} requests: "
            f"{methods}), {ms(reopen['after'] / config.archives)} per archive")
    )  # fmt: skip
    return rows


WORKLOADS = {"cache": bench_cache}


def main(argv: Sequence[str] | None = None) -> int:
    return bench.run_benchmark(
        "bench_cache", __doc__, WORKLOADS, configure, argv=argv,
        quick_help="small, fast run (smoke test)", seed_help="random seed (frame sizes and reading order)",
        add_arguments=add_arguments,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
