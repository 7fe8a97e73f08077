"""Benchmarks of two git revisions side by side: each ``scripts/bench_*.py`` (quick mode by
default, or a chosen list) runs for revision A and revision B alternately -- A, B, then B, A,
and so on for ``--rounds`` -- so that the machine's drift and other processes' load fall on
both, and the table shows each row's ratio for both revisions and ``B / A``.

Each revision is checked out in a temporary ``git worktree`` and run with this repository's
interpreter (``.venv``), the worktree first on ``PYTHONPATH``, so it imports its own
``ncore_like`` and its own scripts. A row's ratio is the one its script computes (measured
side by side within the run, e.g. the archive against ``os.pread``); ``B / A`` above 1 means
that ratio grew (better for throughput ratios, worse for time ratios: see the row's label).
Figures taken on a busy machine say so much about the machine as about the code.

Run from the repository root::

    .venv/bin/python -m scripts.compare_revisions main HEAD                  # every benchmark, quick
    .venv/bin/python -m scripts.compare_revisions main HEAD --bench bench_archive --rounds 3
    .venv/bin/python -m scripts.compare_revisions v1 v2 --full --bench bench_read --args="--only volume"
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from scripts._benchlib import Results, ratio_text

REPO = Path(__file__).resolve().parents[1]
#: The benchmarks with a quick mode and JSON results (``scripts._benchlib.run_benchmark``).
BENCHMARKS: tuple[str, ...] = tuple(
    sorted(
        path.stem
        for path in (REPO / "scripts").glob("bench_*.py")
        if "run_benchmark(" in path.read_text(encoding="utf-8")
    )
)

RowKey = tuple[str, str]


@contextmanager
def checked_out(revision: str, folder: Path) -> Iterator[Path]:
    """``revision`` in a temporary worktree under ``folder`` (removed afterwards)."""
    commit = _git("rev-parse", "--verify", f"{revision}^{{commit}}").strip()
    path = folder / f"{revision.replace('/', '_')}-{commit[:10]}"
    _git("worktree", "add", "--detach", "--quiet", str(path), commit)
    try:
        yield path
    finally:
        _git("worktree", "remove", "--force", str(path))


def _git(*args: str) -> str:
    result = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"compare_revisions: git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def run_once(tree: Path, bench: str, extra: Sequence[str], output: Path) -> Results:
    """One run of ``bench`` in the worktree ``tree``, its results read back from JSON."""
    if (tree / "scripts" / "__init__.py").is_file():
        command = [sys.executable, "-m", f"scripts.{bench}"]
    else:  # revisions before the scripts ran as modules
        command = [sys.executable, str(tree / "scripts" / f"{bench}.py")]
    command += [*extra, "--json", str(output)]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(command, cwd=tree, env=environment, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"compare_revisions: {bench} failed in {tree}:\n{result.stderr[-3000:]}")
    return Results.load(output)


def ratios(results: Results) -> dict[RowKey, tuple[float, str]]:
    """Each row's ratio (and its label) by workload and measure."""
    return {(row.workload, row.measure): (row.ratio, row.ratio_label) for row in results.rows if row.ratio}


def table(before: list[Results], after: list[Results], names: tuple[str, str]) -> list[list[str]]:
    """Per row: the median ratio of each revision and the median of the rounds' B / A."""
    rows: list[list[str]] = []
    firsts = [ratios(run) for run in before]
    seconds = [ratios(run) for run in after]
    for key in firsts[0]:
        pairs = [(a[key][0], b[key][0]) for a, b in zip(firsts, seconds, strict=True) if key in a and key in b]
        if not pairs:
            continue
        change = statistics.median(b / a for a, b in pairs)
        label = firsts[0][key][1]
        a_median = statistics.median(a for a, _ in pairs)
        b_median = statistics.median(b for _, b in pairs)
        rows.append([*key, label, ratio_text(a_median), ratio_text(b_median), ratio_text(change)])
    return [["workload", "measure", "ratio of", names[0], names[1], f"{names[1]} / {names[0]}"], *rows]


def _print_table(rows: list[list[str]]) -> None:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("before", help="revision A (e.g. main)")
    parser.add_argument("after", help="revision B (e.g. HEAD)")
    parser.add_argument(
        "--bench", action="append", choices=BENCHMARKS, help="a benchmark to run (repeatable; default: all)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="runs of each revision, alternating (default 2)")
    parser.add_argument("--full", action="store_true", help="full runs instead of --quick")
    parser.add_argument("--args", default="", help="more arguments for every benchmark (one shell-quoted string)")
    parser.add_argument("--tmpdir", type=Path, default=None, help="where the worktrees and results go")
    options = parser.parse_args(argv)
    if options.rounds < 1:
        parser.error("--rounds must be at least 1")
    extra = ([] if options.full else ["--quick"]) + shlex.split(options.args)
    names = (options.before, options.after)
    with tempfile.TemporaryDirectory(dir=options.tmpdir, prefix="compare-revisions-") as temporary:
        folder = Path(temporary)
        with checked_out(options.before, folder) as tree_a, checked_out(options.after, folder) as tree_b:
            for bench in options.bench or BENCHMARKS:
                runs: dict[str, list[Results]] = {name: [] for name in names}
                for number in range(options.rounds):
                    # A, B, then B, A: neither revision always runs first (warm caches, drift).
                    order = [(names[0], tree_a), (names[1], tree_b)]
                    for label, tree in order if number % 2 == 0 else order[::-1]:
                        output = folder / f"{bench}-{number}-{label.replace('/', '_')}.json"
                        print(f"{bench}: round {number + 1} of {options.rounds}, {label}", file=sys.stderr)
                        runs[label].append(run_once(tree, bench, extra, output))
                print(f"\n{bench} ({'full' if options.full else 'quick'}, {options.rounds} rounds each)")
                _print_table(table(runs[names[0]], runs[names[1]], names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
