"""What the benchmark scripts (``bench_archive.py``, ``bench_read.py``, ``bench_write.py``)
share: the result rows and their table, interleaved median timing, the driver every script
runs (:func:`run_benchmark`: command line, temporary directory, banner, table, JSON) and the
JSON results, which ``plot_performance.py`` reads back with :meth:`Results.load`.

The scripts run as modules from the repository root (``python -m scripts.bench_X``) and
import this one as ``scripts._benchlib``. It is no part of the ``ncore_like`` package, and
imports it (and zarr) only when a benchmark runs, not when ``plot_performance.py`` loads.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.metadata
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from ncore_like import Array

REPO_ROOT = Path(__file__).resolve().parents[1]
MB = 1_000_000
MIB = 1 << 20
#: What the ratios of a run are, in the banner's closing parenthesis.
SIDE_BY_SIDE = "ratios of medians measured side by side in this run"
#: The columns of :func:`format_table` (with "best" after "ratio" where rows have a best ratio).
TABLE_HEADER: tuple[str, ...] = ("workload", "measure", "ratio", "of", "target", "ok", "raw medians / details")
T = TypeVar("T")


# -- results ----------------------------------------------------------------------------------


def ratio_text(value: float | None) -> str:
    """A ratio as the table shows it (``1.23x``, ``-`` where there is none)."""
    return "-" if value is None else f"{value:.2f}x"


@dataclass
class Row:
    """One line of the result table (and one entry of the JSON's ``rows``)."""

    workload: str
    measure: str
    ratio: float | None
    ratio_label: str
    target: str
    ok: bool | None
    raw: dict[str, float] = field(default_factory=dict)
    detail: str = ""
    best_ratio: float | None = None
    """The same ratio of the fastest runs (``bench_write.py``: interference from other
    processes only adds time, so this is what each side can do on this machine)."""

    def cells(self, best: bool = False) -> tuple[str, ...]:
        """The row's cells under :data:`TABLE_HEADER` (with the best ratio if ``best``)."""
        ok = "" if self.ok is None else ("ok" if self.ok else "MISS")
        ratios = (self.ratio, self.best_ratio) if best else (self.ratio,)
        return (self.workload, self.measure, *map(ratio_text, ratios), self.ratio_label, self.target, ok, self.detail)

    def to_json(self) -> dict[str, Any]:
        """The row as the JSON holds it (``best_ratio`` only where there is one)."""
        data = asdict(self)
        if self.best_ratio is None:
            del data["best_ratio"]
        return data


def format_table(rows: Sequence[Row]) -> str:
    """The rows as a plain-text table: columns padded to their widest cell but the last (the
    details), a rule of dashes (at most 160) under the header."""
    best = any(row.best_ratio is not None for row in rows)
    header = (*TABLE_HEADER[:3], "best", *TABLE_HEADER[3:]) if best else TABLE_HEADER
    table = [header, *(row.cells(best) for row in rows)]
    widths = [max(len(line[column]) for line in table) for column in range(len(header) - 1)]
    lines = []
    for line in table:
        cells = [cell.ljust(width) for cell, width in zip(line[:-1], widths, strict=True)]
        lines.append("  ".join([*cells, line[-1]]).rstrip())
    lines.insert(1, "-" * min(160, max(len(line) for line in lines)))
    return "\n".join(lines)


@dataclass(kw_only=True)
class Results:
    """One run of a benchmark script as its JSON file holds it (``--json``): the fields in
    order, those that are None left out."""

    config: dict[str, Any]
    quick: bool
    elapsed_s: float
    load_average: dict[str, float] | None = None
    """1-minute load average ``before`` and ``after`` the run (``bench_write.py``)."""
    versions: dict[str, str]
    cpus: int | None = field(default_factory=os.cpu_count)
    backend_stats: str | None = None
    rows: list[Row]
    notes: list[str] | None = None
    """Caveats the script printed about this run (``bench_write.py``)."""

    def write(self, path: Path) -> None:
        """Writes the JSON file that ``plot_performance.py`` reads with :meth:`load`."""
        data = {name: value for name, value in vars(self).items() if value is not None}
        data["rows"] = [row.to_json() for row in self.rows]
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> Results:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            raise ValueError(f"{path}: not a benchmark result (no list of rows)")
        return cls(**data | {"rows": [Row(**row) for row in data["rows"]]})


def ms(seconds: float, *, fine: bool = True) -> str:
    """Milliseconds, with three decimals below 10 ms if ``fine``, else always one."""
    return f"{seconds * 1e3:.3f} ms" if fine and seconds < 0.01 else f"{seconds * 1e3:.1f} ms"


def us(seconds: float) -> str:
    """Microseconds, two decimals."""
    return f"{seconds * 1e6:.2f} us"


def gbs(nbytes: float, seconds: float) -> str:
    """A throughput in GB/s (10^9 bytes), two decimals."""
    return f"{nbytes / seconds / 1e9:.2f} GB/s"


def verification_cost(verified: float, unverified: float) -> str:
    """What checksum verification (on by default) adds to a read timed both ways side by
    side, for a row's details."""
    return f"verify_checksums=False {ms(unverified)}: verification +{(verified / unverified - 1) * 100:.0f} % time"


def package_version(distribution: str) -> str:
    """The installed version of a distribution, ``?`` if it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def expect(condition: bool, what: str) -> None:
    """Stops the run if ``what`` (a contender's result) is wrong; unlike ``assert``, also
    under ``python -O``."""
    if not condition:
        raise AssertionError(f"{what} differs from the written data")


# -- data and raw I/O -------------------------------------------------------------------------

Volume = np.ndarray[Any, np.dtype[np.float32]]


def make_volume(shape: tuple[int, int, int], rng: np.random.Generator) -> Volume:
    """A smooth-ish float32 volume: a sum of sinusoids plus small noise."""
    depth, height, width = shape
    volume: Volume = rng.standard_normal(shape, dtype=np.float32)
    volume *= np.float32(0.002)
    y = np.linspace(0.0, 6 * math.pi, height, dtype=np.float32)[:, None]
    x = np.linspace(0.0, 10 * math.pi, width, dtype=np.float32)[None, :]
    plane = (np.sin(y) * np.cos(x) + 0.5 * np.sin(0.3 * x + 0.7 * y)).astype(np.float32)
    for index in range(depth):
        volume[index] += plane * np.float32(1.0 + 0.1 * math.sin(0.2 * index))
    return volume


def write_raw(path: Path, buffers: Sequence[bytes | np.ndarray[Any, Any]], *, sync: bool = True) -> None:
    """The buffers back to back into a new file with ``os.write``, then (``sync``) ``fsync``:
    closing an archive puts it on disk before it publishes it, so the raw side compared with
    a closed archive is made durable too."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        for buffer in buffers:
            view = memoryview(buffer)  # type: ignore[arg-type]
            while view:
                view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def unlink_all(*paths: Path) -> Callable[[], None]:
    """A function deleting the files (e.g. ``median_times(after=...)`` between runs), then
    waiting until the disk has written whatever is still pending (``os.sync``). Each timed
    write then starts with an idle disk: an ``fsync`` commits the filesystem's journal, which
    can wait for other files' data, so a durable writer timed after a side that left a few
    hundred MB in the page cache (or after an earlier workload) would pay for its write-back."""

    def unlink() -> None:
        for path in paths:
            path.unlink(missing_ok=True)
        os.sync()

    return unlink


def request_rounds(records: list[dict[str, Any]]) -> int:
    """Round trips the request log implies: the most requests that ran one after another
    (pairwise disjoint ``[start, end]`` intervals, by the greedy earliest-end rule)."""
    rounds, last_end = 0, -math.inf
    for record in sorted(records, key=lambda r: float(r["end"])):
        if float(record["start"]) >= last_end:
            rounds += 1
            last_end = float(record["end"])
    return rounds


def blosc_limit(chunk: Volume, compression: Any) -> bytes:
    """Blosc's encode limit for one chunk: numcodecs compressing it directly with the settings
    of ``compression`` (a :class:`ncore_like.BloscCompression`), nothing else around it."""
    import numcodecs.blosc

    c = compression
    return numcodecs.blosc.compress(chunk, c.cname.encode(), c.clevel, c.shuffle_id, c.blocksize, chunk.dtype.itemsize)  # type: ignore[no-any-return]


# -- timing ---------------------------------------------------------------------------------


class Timings(dict[str, float]):
    """Median wall times by name; :attr:`minima` holds the fastest run of each."""

    def __init__(self, samples: Mapping[str, Sequence[float]]) -> None:
        super().__init__({name: statistics.median(values) for name, values in samples.items()})
        self.minima = {name: min(values) for name, values in samples.items()}

    def add(self, name: str, values: Sequence[float]) -> None:
        self[name] = statistics.median(values)
        self.minima[name] = min(values)


def _time_call(function: Callable[[], object], isolate: bool) -> float:
    if not isolate:
        start = time.perf_counter()
        function()  # the result is released inside the timed span
        return time.perf_counter() - start
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        result = function()
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    del result  # released after the clock stopped
    return elapsed


def median_times(
    functions: Mapping[str, Callable[[], object]],
    repeats: int,
    *,
    after: Callable[[], None] | None = None,
    isolate: bool = False,
) -> Timings:
    """Median wall time of each function, the repetitions of all functions interleaved
    (the order rotates each round, so no side always runs first). ``after`` runs untimed
    after every call (e.g. deleting the file written). With ``isolate``, garbage is collected
    untimed before every call, the collector is off while timing and the call's result is
    released after the clock stopped."""
    names = list(functions)
    samples: dict[str, list[float]] = {name: [] for name in names}
    if after is not None:
        after()  # what a warm-up call left, as after every timed call
    for round_ in range(repeats):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(_time_call(functions[name], isolate))
            if after is not None:
                after()
    return Timings(samples)


def pread_all(fd: int, ranges: Iterable[tuple[int, int]]) -> None:
    """Bare ``os.pread`` of each ``(offset, size)`` range (e.g. :class:`ncore_like.Record`)."""
    for offset, size in ranges:
        os.pread(fd, size, offset)


def each(function: Callable[[T], object], items: Iterable[T]) -> None:
    """Calls ``function`` on every item as a loop that keeps each result in a variable does
    (``for name in names: frame = read(name)``): a result is dropped once the next call has
    returned. What an allocator does with memory freed only then is part of what users meet
    (glibc hands large blocks back to the system and faults new pages in for the next one)."""
    result: object = None
    for item in items:
        result = function(item)  # held until the next call returns, as in users' loops
    del result


def fsspec_gather(filesystem: Any, path: str, ranges: Iterable[tuple[int, int]]) -> list[bytes]:
    """The ``(offset, size)`` ranges of a remote file fetched with fsspec alone, all at once
    on fsspec's own loop (the limit of a remote read)."""
    import fsspec.asyn

    async def gather() -> list[bytes]:
        requests = (filesystem._cat_file(path, start=offset, end=offset + size) for offset, size in ranges)
        return list(await asyncio.gather(*requests))

    return fsspec.asyn.sync(filesystem.loop, gather)  # type: ignore[no-any-return]


# -- data and files -------------------------------------------------------------------------


def random_payloads(rng: random.Random, count: int, low: int, high: int) -> Iterator[memoryview]:
    """``count`` payloads of random sizes in ``[low, high]``, slices of one random buffer at
    varying starts (contents don't matter for uncompressed reads)."""
    base = memoryview(os.urandom(high + 4096))
    for _ in range(count):
        size = rng.randint(low, high)
        start = rng.randrange(0, 4096)
        yield base[start : start + size]


def warm_page_cache(*paths: Path) -> None:
    """Reads files (or every file below directories) once, so later reads hit the page cache."""
    for path in paths:
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file_path in files:
            with file_path.open("rb", buffering=0) as file:
                while file.read(16 << 20):
                    pass


def chunk_key(array: Array, coords: Sequence[int] = ()) -> str:
    """The archive key of a chunk record of ``array`` (of its only chunk by default), as its
    zarr metadata names it."""
    node = array.zarr
    return (f"{node.path}/" if node.path else "") + node.metadata.encode_chunk_key(tuple(coords))


def import_servers() -> ModuleType:
    """``tests.support.servers`` (importable: the scripts run as modules from the
    repository root)."""
    import tests.support.servers as servers

    return servers


# -- remote storage and the reference implementation ---------------------------------------

#: The reference implementation's interpreter (its venv is made by the interop tests) and the
#: script that runs its operations (see ``_ncore_ref_ops.py``).
REF_PYTHON = REPO_ROOT / ".venv-ncore-ref" / "bin" / "python"
REF_SCRIPT = Path(__file__).resolve().parent / "_ncore_ref_ops.py"
REF_MISSING = "reference rows left out: .venv-ncore-ref doesn't exist (the interop tests create it)"


class RequestLog(Protocol):
    """A test server's request log (``tests.support.servers``: the HTTP server, the proxy)."""

    def clear_requests(self) -> None: ...

    def requests(self) -> list[dict[str, Any]]: ...


def reference_ops(
    spec: Mapping[str, Any], workdir: Path, notes: list[str], *, env: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """The reference implementation's measurements of ``spec`` (``_ncore_ref_ops.py`` run with
    :data:`REF_PYTHON`, the spec written to ``workdir``); None, with a note added to
    ``notes`` once, if its venv doesn't exist."""
    if not REF_PYTHON.exists():
        if REF_MISSING not in notes:
            notes.append(REF_MISSING)
        return None
    spec_path = workdir / "reference-spec.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    command = [str(REF_PYTHON), str(REF_SCRIPT), str(spec_path)]
    result = subprocess.run(command, capture_output=True, text=True, env=None if env is None else dict(env))
    if result.returncode != 0:
        raise RuntimeError(f"{REF_SCRIPT.name} failed: {result.stderr.strip()}")
    measured: dict[str, Any] = json.loads(result.stdout)
    return measured


def write_records_archive(path: Path, count: int, low: int, high: int, rng: random.Random) -> list[str]:
    """An archive of ``count`` records of ``low``-``high`` random bytes, keys
    ``frames/000000``... in file order; returns the keys."""
    from ncore_like import IndexedTarArchive

    keys = [f"frames/{index:06d}" for index in range(count)]
    with IndexedTarArchive(path, mode="w") as archive:
        for key, payload in zip(keys, random_payloads(rng, count, low, high), strict=True):
            archive[key] = payload
    return keys


def put_on_moto(endpoint: str, path: Path, bucket: str, name: str) -> str:
    """Uploads the file ``path`` to a new ``bucket`` of the moto server at ``endpoint``
    (directly, not through a proxy); returns its ``s3://`` URL."""
    import s3fs

    filesystem = s3fs.S3FileSystem(**import_servers().s3_storage_options(endpoint))
    filesystem.call_s3("create_bucket", Bucket=bucket)
    filesystem.put_file(str(path), f"{bucket}/{name}")
    return f"s3://{bucket}/{name}"


# -- driver -----------------------------------------------------------------------------------


ConfigT = TypeVar("ConfigT", bound="DataclassInstance")


@dataclass(eq=False)
class Run(Generic[ConfigT]):
    """What :func:`run_benchmark` hands each workload."""

    args: argparse.Namespace
    config: ConfigT
    root: Path
    """The run's temporary directory (for files that workloads share)."""
    tmp: Path = Path()
    """The running workload's own directory below :attr:`root`, removed when it returns
    (freeing the disk and its page cache before the next workload)."""
    shared: dict[str, Any] = field(default_factory=dict)
    """What one workload prepared that the next may reuse."""

    @cached_property
    def rng(self) -> random.Random:
        """The run's random generator (``--seed``), shared by the workloads in their order."""
        return random.Random(self.args.seed)

    @cached_property
    def generator(self) -> np.random.Generator:
        """The run's numpy random generator (``--seed``), shared like :attr:`rng`."""
        return np.random.default_rng(self.args.seed)


def run_benchmark(
    script: str,
    doc: str | None,
    workloads: Mapping[str, Callable[[Run[ConfigT]], Sequence[Row]]],
    configure: Callable[[argparse.Namespace], ConfigT],
    *,
    quick_help: str,
    seed_help: str,
    only_note: str = "",
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    other_versions: Mapping[str, str] | None = None,
    legend: str = SIDE_BY_SIDE,
    load_average: bool = False,
    notes: list[str] | None = None,
    backend: Callable[[], tuple[str, str]] | None = None,
    argv: Sequence[str] | None = None,
) -> int:
    """The ``main()`` of a benchmark script: parses the command line (``--quick``, ``--json``,
    the script's own ``add_arguments``, ``--seed``, ``--tmpdir``, ``--only``; the description
    is the first paragraph of ``doc``), makes the configuration, runs the chosen workloads in
    their order in a temporary directory, prints a banner and the table, writes the JSON.

    The banner names the versions (ncore_like, zarr, ``other_versions``, Python), the CPUs,
    the kind and length of the run and, in parentheses, ``legend``. ``load_average`` records
    the 1-minute load average before and after the run; ``notes`` (filled by the workloads)
    are printed below the table and written to the JSON; ``backend`` tells, after the run,
    the name and statistics of the backend(s) the arrays read through.
    """
    import zarr  # here, not at the top: plot_performance.py imports this module without them

    import ncore_like

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0] if doc else None)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON to PATH")
    if add_arguments is not None:
        add_arguments(parser)
    parser.add_argument("--seed", type=int, default=0, help=seed_help)
    parser.add_argument("--tmpdir", type=Path, default=None, help="where to create the temporary directory")
    only_help = f"run only these workloads (repeatable; default: all{only_note})"
    parser.add_argument("--only", choices=tuple(workloads), action="append", help=only_help)
    args = parser.parse_args(argv)
    config = configure(args)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    rows: list[Row] = []
    root = Path(tempfile.mkdtemp(prefix=f"{script.replace('_', '-')}-", dir=args.tmpdir))
    try:
        run = Run(args, config, root)
        for name, workload in workloads.items():
            if args.only is None or name in args.only:
                run.tmp = root / name
                run.tmp.mkdir()
                rows += workload(run)
                shutil.rmtree(run.tmp)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    elapsed = time.perf_counter() - started
    load = {"before": load_before, "after": os.getloadavg()[0]} if load_average else None
    versions = {"ncore_like": ncore_like.__version__, "zarr": zarr.__version__, **(other_versions or {})}
    versions["python"] = platform.python_version()
    backend_name, stats = backend() if backend is not None else (None, None)
    parts = [f"{'Python' if name == 'python' else name} {version}" for name, version in versions.items()]
    if backend_name is not None:
        parts[0] += f" (backend {backend_name})"
    parts.append(f"{os.cpu_count()} CPUs")
    if load is not None:
        parts.append(f"load avg {load['before']:.2f} -> {load['after']:.2f}")
    parts.append(f"{'quick' if args.quick else 'full'} run in {elapsed:.1f} s")
    print(f"{script}: {', '.join(parts)} ({legend})")
    print(format_table(rows))
    if stats is not None:
        print(f"backend stats: {stats}")
    for note in notes or ():
        print(f"note: {note}")
    if args.json is not None:
        Results(
            config=asdict(config), quick=args.quick, elapsed_s=elapsed, load_average=load, versions=versions,
            backend_stats=stats, rows=rows, notes=notes,
        ).write(args.json)  # fmt: skip
    return 0
