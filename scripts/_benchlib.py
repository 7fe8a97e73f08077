"""What the benchmark scripts (``bench_archive.py``, ``bench_read.py``, ``bench_write.py``)
share: the result rows and their table, interleaved median timing, the command line every
script accepts, the run banner and the JSON results that ``plot_performance.py`` reads.

The scripts run as ``python scripts/bench_X.py``; each puts its own folder on ``sys.path``
and imports this module as ``_benchlib``. It is no part of the ``ncore_like`` package.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import zarr

import ncore_like

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

REPO_ROOT = Path(__file__).resolve().parents[1]
MB = 1_000_000
MIB = 1 << 20
TAIL_READ_SIZE = 1 << 20  # IndexedTarArchive's default index_tail_read_size
#: What the ratios of a run are, in the banner's closing parenthesis.
SIDE_BY_SIDE = "ratios of medians measured side by side in this run"


# -- results ----------------------------------------------------------------------------------


def ratio_text(value: float | None) -> str:
    """A ratio as the table shows it (``1.23x``, ``-`` where there is none)."""
    return "-" if value is None else f"{value:.2f}x"


#: The columns of :func:`format_table`, one per :meth:`Row.cells`.
TABLE_HEADER: tuple[str, ...] = ("workload", "measure", "ratio", "of", "target", "ok", "raw medians / details")


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

    def cells(self) -> tuple[str, ...]:
        """The row's cells under :data:`TABLE_HEADER`."""
        ok = "" if self.ok is None else ("ok" if self.ok else "MISS")
        return (self.workload, self.measure, ratio_text(self.ratio), self.ratio_label, self.target, ok, self.detail)


def format_table(rows: Sequence[Row], header: Sequence[str] = TABLE_HEADER) -> str:
    """The rows as a plain-text table: columns padded to their widest cell but the last (the
    details), a rule of dashes (at most 160) under the header."""
    table = [tuple(header), *(row.cells() for row in rows)]
    widths = [max(len(line[column]) for line in table) for column in range(len(header) - 1)]
    lines = []
    for line in table:
        cells = [cell.ljust(width) for cell, width in zip(line[:-1], widths, strict=True)]
        lines.append("  ".join([*cells, line[-1]]).rstrip())
    lines.insert(1, "-" * min(160, max(len(line) for line in lines)))
    return "\n".join(lines)


def ms(seconds: float, *, fine: bool = True) -> str:
    """Milliseconds, with three decimals below 10 ms if ``fine``, else always one."""
    return f"{seconds * 1e3:.3f} ms" if fine and seconds < 0.01 else f"{seconds * 1e3:.1f} ms"


def us(seconds: float) -> str:
    """Microseconds, two decimals."""
    return f"{seconds * 1e6:.2f} us"


def gbs(nbytes: float, seconds: float) -> str:
    """A throughput in GB/s (10^9 bytes), two decimals."""
    return f"{nbytes / seconds / 1e9:.2f} GB/s"


def package_version(distribution: str) -> str:
    """The installed version of a distribution, ``?`` if it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


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
    for round_ in range(repeats):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(_time_call(functions[name], isolate))
            if after is not None:
                after()
    return Timings(samples)


# -- data and files -------------------------------------------------------------------------


def random_payloads(rng: random.Random, count: int, low: int, high: int) -> Iterator[memoryview]:
    """``count`` payloads of random sizes in ``[low, high]``, slices of one random buffer at
    varying starts (contents don't matter for uncompressed reads)."""
    base = memoryview(os.urandom(high + 4096))
    for _ in range(count):
        size = rng.randint(low, high)
        start = rng.randrange(0, 4096)
        yield base[start : start + size]


def warm_page_cache(path: Path) -> None:
    """Reads a file (or every file below a directory) once, so later reads hit the page cache."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file_path in files:
        with file_path.open("rb", buffering=0) as file:
            while file.read(16 << 20):
                pass


@contextmanager
def temporary_directory(prefix: str, parent: Path | None) -> Iterator[Path]:
    """A new temporary directory (below ``parent`` if given), removed with all it holds on exit."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def import_servers() -> ModuleType:
    """``tests.support.servers`` (the repository root is put on ``sys.path``)."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    import tests.support.servers as servers

    return servers


# -- command line and results ------------------------------------------------------------------


def bench_parser(doc: str | None, quick_help: str) -> argparse.ArgumentParser:
    """A parser described by the first paragraph of ``doc``, with ``--quick`` and ``--json``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0] if doc else None)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON to PATH")
    return parser


def add_run_arguments(
    parser: argparse.ArgumentParser, seed_help: str, only: Sequence[str], only_note: str = ""
) -> None:
    """``--seed``, ``--tmpdir`` and ``--only`` (choices ``only``, repeatable; ``only_note`` ends
    its help)."""
    parser.add_argument("--seed", type=int, default=0, help=seed_help)
    parser.add_argument("--tmpdir", type=Path, default=None, help="where to create the temporary directory")
    parser.add_argument(
        "--only",
        choices=tuple(only),
        action="append",
        help=f"run only these workloads (repeatable; default: all{only_note})",
    )


def versions(**others: str) -> dict[str, str]:
    """The versions a run reports: ``ncore_like``, ``zarr``, ``others`` in order, ``python``."""
    return {
        "ncore_like": ncore_like.__version__,
        "zarr": zarr.__version__,
        **others,
        "python": platform.python_version(),
    }


def banner(
    script: str,
    versions: Mapping[str, str],
    *,
    quick: bool,
    elapsed: float,
    backend: str | None = None,
    load: tuple[float, float] | None = None,
    legend: str = SIDE_BY_SIDE,
) -> str:
    """The line printed above the table: versions (``backend`` named after ncore_like's),
    CPUs, the 1-minute load average before and after (if given), the kind and length of the
    run and, in parentheses, ``legend``."""
    parts = []
    for name, version in versions.items():
        note = f" (backend {backend})" if name == "ncore_like" and backend is not None else ""
        parts.append(f"{'Python' if name == 'python' else name} {version}{note}")
    parts.append(f"{os.cpu_count()} CPUs")
    if load is not None:
        parts.append(f"load avg {load[0]:.2f} -> {load[1]:.2f}")
    parts.append(f"{'quick' if quick else 'full'} run in {elapsed:.1f} s")
    return f"{script}: {', '.join(parts)} ({legend})"


def write_json(
    path: Path,
    config: DataclassInstance,
    *,
    quick: bool,
    elapsed: float,
    versions: Mapping[str, str],
    rows: Sequence[Row],
    load: tuple[float, float] | None = None,
    backend_stats: str | None = None,
    notes: Sequence[str] | None = None,
) -> None:
    """The results as JSON (read by ``plot_performance.py``): ``config``, ``quick``,
    ``elapsed_s``, ``load_average`` (if ``load``), ``versions``, ``cpus``, ``backend_stats``
    (if given), ``rows``, ``notes`` (if given)."""
    result: dict[str, Any] = {"config": asdict(config), "quick": quick, "elapsed_s": elapsed}
    if load is not None:
        result["load_average"] = {"before": load[0], "after": load[1]}
    result["versions"] = dict(versions)
    result["cpus"] = os.cpu_count()
    if backend_stats is not None:
        result["backend_stats"] = backend_stats
    result["rows"] = [asdict(row) for row in rows]
    if notes is not None:
        result["notes"] = list(notes)
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
