"""Render the benchmark results kept in ``docs/data/`` for the documentation.

Reads the JSON files that the benchmark scripts write with ``--json``
(``bench_archive.json``, ``bench_read.json``, ``bench_write.json``,
``bench_integrity.json``, ``bench_ops.json``, ``bench_remote.json``, ``bench_cache.json``,
``bench_ecosystem.json``, ``bench_train.json``; whichever exist) and

* draws ``docs/img/performance-NAME.png``, one plot per benchmark, laid out for a phone's
  column as well as a desktop's (each row's full name above its bar, text no smaller than
  :data:`FONT_PT`): every measured ratio as a horizontal bar, coloured by the same verdict
  its table row states, with the target drawn as a tick where it is a ratio too;
* rewrites the sections of ``docs/performance.md`` between its marker comments
  (``<!-- benchmark-table: NAME -->`` ... ``<!-- end benchmark-table -->``): the plot, the
  run's versions and a table of four columns (measure, ratio, target, details), so the page
  always shows the figures of the JSON files next to it. A benchmark without a JSON file
  gets a placeholder saying how to produce it.

Run from the repository root after a benchmark run::

    .venv/bin/python -m scripts.bench_archive --json docs/data/bench_archive.json
    .venv/bin/python -m scripts.plot_performance            # plots + tables
    .venv/bin/python -m scripts.plot_performance --check    # exit 1 if the page is stale

``tests/test_docs.py`` runs the ``--check`` logic, so a JSON file refreshed without
re-rendering the page fails the tests; ``tests/test_docs_site.py`` looks at the result in a
browser at desktop and phone widths.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

import matplotlib
import numpy as np
from PIL import Image
from PIL.PngImagePlugin import PngInfo

matplotlib.use("Agg")  # files only, never a window (and no display needed)

from matplotlib.axes import Axes  # after choosing the backend
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from scripts._benchlib import Results, Row, ratio_text

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS: tuple[str, ...] = (
    "bench_archive", "bench_read", "bench_write", "bench_integrity", "bench_ops", "bench_remote", "bench_cache",
    "bench_ecosystem", "bench_train",
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
    "bench_train": "Training loaders on S3: TrainingDataset vs WebDataset, LitData, MosaicML Streaming",
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


def plotted_rows(results: Results) -> list[Row]:
    """The rows a plot shows: those with a ratio."""
    return [row for row in results.rows if row.ratio is not None and math.isfinite(row.ratio) and row.ratio > 0]


# -- tables ---------------------------------------------------------------------------------

#: The columns of a benchmark table. ``docs/stylesheets/extra.css`` lays the cells of a
#: ``.bench-table`` out by position on narrow screens: keep the two in step.
TABLE_COLUMNS: tuple[str, ...] = ("measure", "ratio", "target", "details")
#: The class of the ``<div>`` around each benchmark table, and of each plot's image.
TABLE_CLASS = "bench-table"
PLOT_CLASS = "bench-plot"
_VERDICTS: Mapping[bool | None, str] = {True: "met", False: "**missed**", None: ""}


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


def _row_cells(row: Row, details: str) -> list[str]:
    """The cells of one row: the ratio with what it compares under it, the target with the
    verdict under it (``>=`` written ``≥``)."""
    ratio = ratio_text(row.ratio) if row.ratio is None else f"**{ratio_text(row.ratio)}**"
    if row.best_ratio is not None:
        ratio += f" (best {ratio_text(row.best_ratio)})"
    if row.ratio_label.strip():
        ratio += f"<br>{_cell(row.ratio_label)}"
    target = _cell(row.target.replace(">=", "≥").replace("<=", "≤"))
    target = "<br>".join(part for part in (target, _VERDICTS[row.ok]) if part)
    return [_cell(row.measure), ratio, target, details]


def _table(rows: Sequence[Row]) -> list[str]:
    """The Markdown lines of a benchmark table: a bold row naming each workload, then its
    rows. Details that repeat the row above's (one measurement, several ratios) say so."""
    lines = ["| " + " | ".join(TABLE_COLUMNS) + " |", "|" + "---|" * len(TABLE_COLUMNS)]
    for workload, group in groupby(rows, key=lambda row: row.workload):
        if workload.strip():
            lines.append(f"| **{_cell(workload)}** |" + " |" * (len(TABLE_COLUMNS) - 1))
        previous = ""
        for row in group:
            details = "as above" if row.detail.strip() and row.detail == previous else _cell(row.detail)
            previous = row.detail
            lines.append("| " + " | ".join(_row_cells(row, details)) + " |")
    return lines


def render_table(name: str, benchmark: Results | None) -> str:
    """The Markdown of one benchmark's section body: its plot, the run line, its table and
    the run's notes (or a placeholder). The ``<div>`` around the table lets the site's style
    sheet lay it out for narrow screens (``md_in_html``)."""
    if benchmark is None:
        return (
            '!!! note "To be filled by the next benchmark run"\n'
            f"    `docs/data/{name}.json` is not there yet. Produce it with\n"
            f"    `.venv/bin/python -m scripts.{name} --json docs/data/{name}.json`, then run\n"
            "    `.venv/bin/python -m scripts.plot_performance` to fill in this table and the plot.\n"
        )
    lines: list[str] = []
    if plotted_rows(benchmark):
        alt = f"Bar chart of the ratios measured by scripts/{name}.py against their targets"
        lines += [f"![{alt}](img/{image_path(Path(), name).name}){{ .{PLOT_CLASS} }}", ""]
    lines += [_run_line(name, benchmark), ""]
    if benchmark.rows:
        lines += [f'<div class="{TABLE_CLASS}" markdown>', "", *_table(benchmark.rows), "", "</div>"]
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


# -- plots ----------------------------------------------------------------------------------

#: The plots are drawn for the column they are shown in: ``docs/stylesheets/extra.css``
#: shows them at most 25rem (500 CSS px) wide, and a phone (390 px) gives them 358 px. An
#: image :data:`WIDTH_IN` wide whose smallest text is :data:`FONT_PT` then shows that text
#: 14 CSS px high on a desktop and 10.6 px on the phone (``tests/test_docs_site.py`` checks
#: it, with the smallest text size each PNG records under :data:`SMALLEST_TEXT_KEY`).
WIDTH_IN = 4.2
FONT_PT = 9.0
TITLE_PT = 10.5
DPI = 200  # twice the pixels shown on a desktop: sharp on high-density screens
SMALLEST_TEXT_KEY = "Smallest text px"
_MARGIN_IN = 0.1
_LINE_IN = 1.3 * FONT_PT / 72  # one line of text
_BAR_IN = 0.13
_ROW_GAP_IN = 0.1
_GROUP_GAP_IN = 0.08
_BOTTOM_IN = 0.62  # tick labels and the axis label under the bars
#: The width text may take: the axes' (the image's less its margins), less a little air.
_TEXT_WIDTH_IN = WIDTH_IN - 2 * _MARGIN_IN - 0.05


def wrap(text: str, points: float, *, weight: str = "normal", width_in: float | None = None) -> list[str]:
    """``text`` in lines no wider than ``width_in`` inches (default: the axes' width) in
    DejaVu Sans of ``points``, as measured by matplotlib's renderer (estimating a mean
    character width cuts long names short or lets them run off the image); words wider
    than a line are split."""
    renderer = RendererAgg(1, 1, DPI)
    font = FontProperties(size=points, weight=weight)
    limit = (_TEXT_WIDTH_IN if width_in is None else width_in) * DPI

    def fits(line: str) -> bool:
        return renderer.get_text_width_height_descent(line, font, ismath=False)[0] <= limit

    lines: list[str] = []
    line = ""
    for word in text.split():
        candidate = f"{line} {word}" if line else word
        if fits(candidate):
            line = candidate
            continue
        if line:
            lines.append(line)
        while not fits(word):  # a word wider than a line: split it where it still fits
            cut = max((n for n in range(1, len(word)) if fits(word[:n])), default=1)
            lines.append(word[:cut])
            word = word[cut:]
        line = word
    if line:
        lines.append(line)
    return lines


def image_path(folder: Path, name: str) -> Path:
    """Where the plot of benchmark ``name`` goes."""
    return folder / f"performance-{name}.png"


def plot(benchmarks: Mapping[str, Results], folder: Path) -> list[Path]:
    """Draws the ratios of each benchmark against their targets, one PNG per benchmark in
    ``folder``; returns the files written. Raises ``ValueError`` (and writes nothing more)
    for a plot whose text would be cut or overlap (:func:`check_layout`)."""
    written = []
    for name, results in benchmarks.items():
        if not plotted_rows(results):
            continue
        figure = draw(name, results)
        problems = check_layout(figure)
        if problems:
            raise ValueError(f"the plot of {name} would be unreadable: " + "; ".join(problems))
        path = image_path(folder, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        _save(figure, path)
        written.append(path)
    return written


def _save(figure: Figure, path: Path) -> None:
    """Writes ``figure`` as a PNG of 64 colours (a third of the bytes of full colour, the
    same to the eye for flat bars and text) that records its smallest text's height in
    pixels under :data:`SMALLEST_TEXT_KEY`."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    image = Image.fromarray(np.asarray(canvas.buffer_rgba())).convert("RGB").quantize(colors=64)
    info = PngInfo()
    smallest = min(text.get_fontsize() for text in _texts(figure)) * DPI / 72
    info.add_text(SMALLEST_TEXT_KEY, f"{smallest:.1f}")
    image.save(path, format="PNG", pnginfo=info, optimize=True)


@dataclass(frozen=True)
class _Slot:
    """Where one row goes, in inches from the top of the axes."""

    row: Row
    label: str
    label_top: float
    bar: float


def _layout(rows: Sequence[Row]) -> tuple[list[tuple[str, float]], list[_Slot], float]:
    """The workload headings (text, top), the rows' slots and the total height: each row's
    full name above its bar (never cut: a figure that hides what it measures misleads)."""
    headings: list[tuple[str, float]] = []
    slots: list[_Slot] = []
    y = 0.04
    for workload, group in groupby(rows, key=lambda row: row.workload):
        if workload.strip():
            headings.append((workload, y))
            y += _LINE_IN + 0.02
        for row in group:
            label = "\n".join(wrap(row.measure, FONT_PT)) or "?"
            top = y
            y += _LINE_IN * (label.count("\n") + 1) + 0.02
            slots.append(_Slot(row, label, top, y + _BAR_IN / 2))
            y += _BAR_IN + _ROW_GAP_IN
        y += _GROUP_GAP_IN
    return headings, slots, y


def _x_limits(slots: Sequence[_Slot], axes_in: float) -> tuple[float, float]:
    """The log-scale limits: room left of the smallest bar, and right of every bar for its
    value (a ratio like ``259.56x`` must not run off the image)."""
    ends = [max(slot.row.ratio or 0.0, ratio_target(slot.row) or 0.0) for slot in slots]
    low = min(0.5, min(slot.row.ratio or 1.0 for slot in slots) / 1.5)
    log_low = math.log10(low)
    log_high = math.log10(max(2.0, *ends))
    for end, slot in zip(ends, slots, strict=True):
        # The value's text takes this fraction of the axes' width right of its bar.
        share = (len(f"{slot.row.ratio:.2f}x") * 0.62 * FONT_PT / 72 + 0.12) / axes_in
        log_high = max(log_high, log_low + (math.log10(end) - log_low) / (1 - share))
    return low, 10**log_high


def draw(name: str, results: Results) -> Figure:
    """The plot of one benchmark's ratios (see the module's docstring)."""
    rows = plotted_rows(results)
    headings, slots, content_in = _layout(rows)
    title = wrap(TITLES.get(name, name), TITLE_PT, weight="bold")
    cpus = f", {results.cpus} CPUs" if results.cpus is not None else ""
    header_in = _MARGIN_IN + len(title) * TITLE_PT * 1.3 / 72 + _LINE_IN + 0.1 + 2 * _LINE_IN + 0.12
    height_in = header_in + content_in + _BOTTOM_IN
    figure = Figure(figsize=(WIDTH_IN, height_in), dpi=DPI)

    def from_top(inches: float) -> float:
        return 1 - inches / height_in

    left = _MARGIN_IN / WIDTH_IN
    y = _MARGIN_IN
    figure.text(left, from_top(y), "\n".join(title), fontsize=TITLE_PT, weight="bold", va="top")
    y += len(title) * TITLE_PT * 1.3 / 72
    figure.text(left, from_top(y), f"scripts/{name}.py{cpus}", fontsize=FONT_PT, color="#616161", va="top")
    y += _LINE_IN + 0.1
    figure.legend(
        handles=[
            Patch(color=_COLOURS[True], label="meets its target"),
            Patch(color=_COLOURS[False], label="misses its target"),
            Patch(color=_COLOURS[None], label="context (no target)"),
            Line2D([], [], color="black", marker="|", linestyle="", markersize=9, label="target"),
        ],
        loc="upper left",
        bbox_to_anchor=(left, from_top(y)),
        borderaxespad=0,
        borderpad=0,
        ncols=2,
        fontsize=FONT_PT,
        frameon=False,
        handlelength=1.2,
        columnspacing=1.2,
        labelspacing=0.3,
    )
    axes_in = WIDTH_IN - 2 * _MARGIN_IN
    axes = figure.add_axes((left, _BOTTOM_IN / height_in, axes_in / WIDTH_IN, content_in / height_in))
    _draw_rows(axes, headings, slots, content_in, _x_limits(slots, axes_in))
    return figure


def _draw_rows(
    axes: Axes,
    headings: Sequence[tuple[str, float]],
    slots: Sequence[_Slot],
    content_in: float,
    limits: tuple[float, float],
) -> None:
    axes.set_xscale("log")
    axes.set_xlim(*limits)
    axes.set_ylim(content_in, 0)  # inches from the top
    label_box = {"boxstyle": "square,pad=0.05", "facecolor": "white", "edgecolor": "none"}
    at_left = axes.get_yaxis_transform()  # x in axes fraction, y in data (inches)
    for workload, top in headings:
        axes.text(0, top, workload, transform=at_left, fontsize=FONT_PT, weight="bold", va="top", bbox=label_box)
    bars = [slot.bar for slot in slots]
    ratios = [slot.row.ratio or 0.0 for slot in slots]
    axes.barh(bars, ratios, height=_BAR_IN, color=[_COLOURS[slot.row.ok] for slot in slots])
    for slot, ratio in zip(slots, ratios, strict=True):
        axes.text(0, slot.label_top, slot.label, transform=at_left, fontsize=FONT_PT, va="top", bbox=label_box)
        target = ratio_target(slot.row)
        if target is not None:
            axes.plot([target], [slot.bar], marker="|", markersize=10, markeredgewidth=2, color="black")
        axes.annotate(
            f"{ratio:.2f}x", (max(ratio, target or 0.0), slot.bar), xytext=(4, 0), textcoords="offset points",
            va="center", fontsize=FONT_PT,
        )  # fmt: skip
    axes.axvline(1.0, color="#616161", linewidth=0.8, linestyle=":", zorder=0)
    decades = math.log10(limits[1] / limits[0])
    axes.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0) if decades <= 2.5 else (1.0,)))
    log_low, log_high = math.log10(limits[0]), math.log10(limits[1])

    def tick_label(value: float, _position: object) -> str:
        at = (math.log10(value) - log_low) / (log_high - log_low)
        return f"{value:g}x" if 0.05 <= at <= 0.95 else ""  # half a label off the image at the edges

    axes.xaxis.set_major_formatter(FuncFormatter(tick_label))
    axes.xaxis.set_minor_formatter(NullFormatter())
    axes.tick_params(axis="x", labelsize=FONT_PT)
    axes.set_yticks([])
    axes.set_xlabel("ratio, log scale (the table says what each compares)", fontsize=FONT_PT)
    axes.grid(axis="x", which="both", alpha=0.25, zorder=0)
    axes.set_axisbelow(True)
    for side in ("left", "right", "top"):
        axes.spines[side].set_visible(False)


def _texts(figure: Figure) -> list[Text]:
    """The texts a figure shows (not the labels of ticks beyond the axes' limits, which
    matplotlib keeps but doesn't draw)."""
    undrawn = set()
    for axes in figure.axes:
        for axis in (axes.xaxis, axes.yaxis):
            low, high = sorted(axis.get_view_interval())
            ticks = [*axis.get_major_ticks(), *axis.get_minor_ticks()]
            undrawn |= {id(tick.label1) for tick in ticks if not low <= tick.get_loc() <= high}
    return [
        text
        for text in figure.findobj(Text)
        if text.get_visible() and text.get_text().strip() and id(text) not in undrawn
    ]


def check_layout(figure: Figure) -> list[str]:
    """What is wrong with a drawn plot: text running off the image (cut when saved) or text
    over other text. Empty when the layout is sound."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()  # places the legend's and the axis' texts
    renderer = canvas.get_renderer()
    page = figure.bbox
    boxes = [(text.get_text(), text.get_window_extent(renderer)) for text in _texts(figure)]
    problems = [
        f"{content!r} runs off the image"
        for content, box in boxes
        if box.x0 < page.x0 - 0.5 or box.y0 < page.y0 - 0.5 or box.x1 > page.x1 + 0.5 or box.y1 > page.y1 + 0.5
    ]
    for index, (content, box) in enumerate(boxes):
        problems += [
            f"{content!r} overlaps {other!r}"
            for other, other_box in boxes[index + 1 :]
            if box.overlaps(other_box) and min(box.x1, other_box.x1) - max(box.x0, other_box.x0) > 1
            and min(box.y1, other_box.y1) - max(box.y0, other_box.y0) > 1
        ]  # fmt: skip
    return problems


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
    try:
        written = plot(benchmarks, args.images)
    except ValueError as error:
        print(f"plot_performance: {error}", file=sys.stderr)
        return 1
    if updated != page:
        args.page.write_text(updated, encoding="utf-8")
    found = ", ".join(benchmarks) or "none"
    print(f"results found: {found}; wrote {', '.join(map(str, written)) or 'no plot'} and the tables of {args.page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
