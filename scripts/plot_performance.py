"""Render the benchmark results kept in ``docs/data/`` for the documentation.

Reads the JSON files that the benchmark scripts write with ``--json``
(``bench_archive.json``, ``bench_read.json``, ``bench_write.json``,
``bench_integrity.json``, ``bench_ops.json``, ``bench_remote.json``, ``bench_cache.json``,
``bench_ecosystem.json``; whichever exist) and

* draws ``docs/img/performance-NAME.png``, one plot per benchmark (readable at page width,
  every row's full name): every measured ratio as a horizontal bar, coloured by the same
  verdict its table row states, with the target drawn as a tick where it is a ratio too;
* rewrites the tables of ``docs/performance.md`` between its marker comments
  (``<!-- benchmark-table: NAME -->`` ... ``<!-- end benchmark-table -->``), so the page
  always shows the figures of the JSON files next to it. A benchmark without a JSON file
  gets a placeholder saying how to produce it.

Run from the repository root after a benchmark run::

    .venv/bin/python scripts/bench_archive.py --json docs/data/bench_archive.json
    .venv/bin/python scripts/plot_performance.py            # plot + tables
    .venv/bin/python scripts/plot_performance.py --check    # exit 1 if the page is stale

``tests/test_docs.py`` runs the ``--check`` logic, so a JSON file refreshed without
re-rendering the page fails the tests.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window (and no display needed)

from matplotlib.figure import Figure  # after choosing the backend
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _benchlib lives beside this script
from _benchlib import Results, Row, ratio_text

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS: tuple[str, ...] = (
    "bench_archive", "bench_read", "bench_write", "bench_integrity", "bench_ops", "bench_remote", "bench_cache",
    "bench_ecosystem",
)  # fmt: skip
TITLES: Mapping[str, str] = {
    "bench_archive": "Archive: records, opening, remote latency, store opening",
    "bench_read": "Typed read path: volumes, frames, remote reads, memory",
    "bench_write": "Writing: blobs, encoding on threads, storing",
    "bench_integrity": "Integrity: checksums written and verified, recovery, index check",
    "bench_ops": "Small operations: lookups, rows, batches, writes, imports (with h5py and the reference)",
    "bench_remote": "At scale: scans, faults and retries, packing on a cluster",
    "bench_cache": "Local cache: random frames across 100 S3 archives",
    "bench_ecosystem": "Ecosystem: xarray and numpy.asarray vs zarr-python",
}
_TABLE_START = re.compile(r"<!-- benchmark-table: (?P<name>[a-z_]+) -->\n")
_TABLE_END = "<!-- end benchmark-table -->"
#: A target a ratio can be drawn against: ">= 0.90x", "<= 2.00x", "<= 3 RTT", "~1x, ...".
#: Targets in other units (e.g. "<= 3 ms") are shown in the tables only.
_RATIO_TARGET = re.compile(r"^\s*(?P<op>>=|<=|~)\s*(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>x|RTT)\b")
_COLOURS: Mapping[bool | None, str] = {True: "#2e7d32", False: "#c62828", None: "#9e9e9e"}


def ratio_target(row: Row) -> float | None:
    """The row's target as a value on the ratio's own scale, if it is one."""
    match = _RATIO_TARGET.match(row.target)
    return float(match["value"]) if match else None


def load_benchmarks(folder: Path) -> dict[str, Results]:
    """The results present in ``folder``, by benchmark name, in :data:`BENCHMARKS` order."""
    return {name: Results.load(folder / f"{name}.json") for name in BENCHMARKS if (folder / f"{name}.json").is_file()}


# -- tables ---------------------------------------------------------------------------------


def _cell(text: str) -> str:
    """Markdown table cell text: what would start markup is escaped (``|``, ``*``, backticks,
    brackets (``x[i][j]`` would read as a reference link), underscores at word boundaries,
    ``<`` before a letter), the rest left readable."""
    text = " ".join(text.split())
    text = re.sub(r"([\\`*|\[\]])", r"\\\1", text)
    text = re.sub(r"(?<!\w)_|_(?!\w)", r"\\_", text)
    return re.sub(r"<(?=[A-Za-z/!?])", "&lt;", text)


def _run_line(name: str, benchmark: Results) -> str:
    parts = [f"{package} {version}" for package, version in benchmark.versions.items()]
    if benchmark.cpus is not None:
        parts.append(f"{benchmark.cpus} CPUs")
    if benchmark.load_average is not None:
        load = benchmark.load_average
        parts.append(f"load average {load['before']:.2f} before and {load['after']:.2f} after")
    kind = "quick run (smoke test, small sizes)" if benchmark.quick else "full run"
    if benchmark.elapsed_s is not None:
        kind += f" of {benchmark.elapsed_s:.0f} s"
    parts.append(kind)
    return f"Run of `scripts/{name}.py`: " + ", ".join(parts) + "."


def render_table(name: str, benchmark: Results | None) -> str:
    """The Markdown of one benchmark's section body (a table, or a placeholder). The "best"
    column (the ratio of the fastest runs) appears when the script reports it."""
    if benchmark is None:
        return (
            '!!! note "To be filled by the next benchmark run"\n'
            f"    `docs/data/{name}.json` is not there yet. Produce it with\n"
            f"    `.venv/bin/python scripts/{name}.py --json docs/data/{name}.json`, then run\n"
            "    `.venv/bin/python scripts/plot_performance.py` to fill in this table and the plot.\n"
        )
    best = any(row.best_ratio is not None for row in benchmark.rows)
    lines = [
        _run_line(name, benchmark),
        "",
        "| workload | measure | ratio |" + (" best |" if best else "") + " ratio of | target | met | details |",
        "|---|---|--:|" + ("--:|" if best else "") + "---|---|:-:|---|",
    ]
    for row in benchmark.rows:
        cells = [_cell(row.workload), _cell(row.measure), ratio_text(row.ratio)]
        if best:
            cells.append(ratio_text(row.best_ratio))
        met = {True: "yes", False: "**no**", None: ""}[row.ok]
        cells += [_cell(row.ratio_label), _cell(row.target), met, _cell(row.detail)]
        lines.append("| " + " | ".join(cells) + " |")
    if benchmark.notes:
        lines.append("")
        lines += [
            f"Note from the run: {_cell(note)}" if len(benchmark.notes) == 1 else f"- {_cell(note)}"
            for note in benchmark.notes
        ]
    return "\n".join(lines) + "\n"


def update_tables(page: str, benchmarks: Mapping[str, Results]) -> str:
    """``page`` with the body of every marked table section rendered from ``benchmarks``."""
    pieces: list[str] = []
    position = 0
    for match in _TABLE_START.finditer(page):
        if match.start() < position:
            continue  # a start marker inside a section being replaced
        end = page.find(_TABLE_END, match.end())
        if end < 0:
            raise ValueError(f"benchmark table {match['name']!r} has no {_TABLE_END!r} marker")
        name = match["name"]
        pieces += [page[position : match.end()], "\n", render_table(name, benchmarks.get(name)), "\n"]
        position = end
    pieces.append(page[position:])
    return "".join(pieces)


# -- plot -----------------------------------------------------------------------------------


def _label(row: Row, width: int = 56) -> str:
    """The row's full name, wrapped (never cut: a figure that hides what it measures misleads)."""
    return "\n".join(textwrap.wrap(f"{row.workload}: {row.measure}", width)) or "?"


def image_path(folder: Path, name: str) -> Path:
    """Where the plot of benchmark ``name`` goes."""
    return folder / f"performance-{name}.png"


def plot(benchmarks: Mapping[str, Results], folder: Path) -> list[Path]:
    """Draws the ratios of each benchmark against their targets, one PNG per benchmark in
    ``folder`` (readable at page width); returns the files written."""
    written = []
    for name, results in benchmarks.items():
        rows = [row for row in results.rows if row.ratio is not None]
        if rows:
            path = image_path(folder, name)
            _plot_one(name, results, rows, path)
            written.append(path)
    return written


def _plot_one(name: str, results: Results, rows: list[Row], path: Path) -> None:
    labels = [_label(row) for row in rows]
    heights = [0.22 + 0.16 * label.count("\n") for label in labels]
    figure = Figure(figsize=(9, 1.5 + sum(heights) + 0.12 * len(rows)), layout="constrained")
    axes = figure.add_subplot()
    positions: list[float] = []
    position = 0.0
    for height in heights:  # taller rows for labels of several lines
        positions.append(position + height / 2)
        position += height + 0.12
    ratios = [row.ratio for row in rows if row.ratio is not None]
    axes.barh(positions, ratios, color=[_COLOURS[row.ok] for row in rows], height=0.2)
    targets = []
    for at, row in zip(positions, rows, strict=True):
        target = ratio_target(row)
        if target is not None:
            targets.append(target)
            axes.plot([target], [at], marker="|", markersize=12, markeredgewidth=2.2, color="black")
        assert row.ratio is not None
        axes.annotate(
            f"{row.ratio:.2f}", (max(row.ratio, target or 0.0), at), xytext=(4, 0), textcoords="offset points",
            va="center", fontsize=7,
        )  # fmt: skip
    axes.set_yticks(positions, labels, fontsize=7)
    axes.invert_yaxis()
    axes.set_xscale("log")
    low, high = min([*ratios, *targets]), max([*ratios, *targets])
    axes.set_xlim(min(0.5, low / 1.5), high * 2.5)  # room for the values right of the bars
    axes.axvline(1.0, color="#616161", linewidth=0.8, linestyle=":")
    cpus = f", {results.cpus} CPUs" if results.cpus is not None else ""
    axes.set_title(f"{TITLES.get(name, name)}  (scripts/{name}.py{cpus})", fontsize=9, loc="left")
    axes.set_xlabel("ratio (see each row's table for what it compares; log scale)", fontsize=7)
    axes.tick_params(axis="x", labelsize=7)
    axes.grid(axis="x", which="both", alpha=0.25)
    figure.legend(
        handles=[
            Patch(color=_COLOURS[True], label="meets its target"),
            Patch(color=_COLOURS[False], label="misses its target"),
            Patch(color=_COLOURS[None], label="context (no target)"),
            Line2D([], [], color="black", marker="|", linestyle="", markersize=10, label="target"),
        ],
        loc="outside lower center",
        ncols=4,
        fontsize=7,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, metadata={"Software": None})


# -- command line ---------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=REPO / "docs" / "data", help="folder of the JSON results")
    parser.add_argument("--page", type=Path, default=REPO / "docs" / "performance.md", help="page with the tables")
    parser.add_argument("--images", type=Path, default=REPO / "docs" / "img", help="folder of the plots to write")
    parser.add_argument("--check", action="store_true", help="only check that the page's tables are up to date")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    benchmarks = load_benchmarks(args.data)
    page = args.page.read_text(encoding="utf-8")
    updated = update_tables(page, benchmarks)
    if args.check:
        if updated != page:
            print(f"{args.page} is out of date with {args.data}: run scripts/plot_performance.py", file=sys.stderr)
            return 1
        return 0
    if updated != page:
        args.page.write_text(updated, encoding="utf-8")
    written = plot(benchmarks, args.images)
    found = ", ".join(benchmarks) or "none"
    print(f"results found: {found}; wrote {', '.join(map(str, written)) or 'no plot'} and the tables of {args.page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
