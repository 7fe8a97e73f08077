"""The command lines in ``scripts/`` start: each parses its arguments and prints its usage.

The benchmarks run for minutes and are not part of the suite, so an error at import (a
dataclass out of order, a name a refactoring moved) would otherwise first show when someone
measures. ``--help`` imports the whole script and builds its parser, and costs a second.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.zarr_version import ZARR_MAJOR

REPO = Path(__file__).resolve().parent.parent
#: Modules of ``scripts/`` that are libraries of the others, not command lines.
NOT_COMMANDS = {"__init__", "_benchlib", "_ncore_ref_ops", "docs_api_extension"}
#: Benchmarks that compare with zarr-python 3 itself and say so in their docstrings.
NEEDS_ZARR_3 = {"bench_read"}
COMMANDS = sorted(p.stem for p in (REPO / "scripts").glob("*.py") if p.stem not in NOT_COMMANDS)


def test_the_scripts_are_found() -> None:
    assert {"bench_archive", "bench_train", "fuzz_archive", "plot_performance"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_a_script_prints_its_usage(name: str) -> None:
    if name in NEEDS_ZARR_3 and ZARR_MAJOR < 3:
        pytest.skip(f"{name} measures against zarr-python 3")
    done = subprocess.run(
        [sys.executable, "-m", f"scripts.{name}", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:"), done.stdout
