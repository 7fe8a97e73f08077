"""The test command itself: what its summary tells whoever runs the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_skipped_tests_print_their_reason(tmp_path: Path) -> None:
    # The project's pytest configuration (pyproject.toml) on a test that skips: the default
    # run's summary names the test and says why, so skips (e.g. of zarr-python 3's tests
    # under zarr-python 2) are never silent.
    test = tmp_path / "test_skipping.py"
    test.write_text(
        "import pytest\n\n\n"
        "@pytest.mark.skip(reason='needs something this machine lacks')\n"
        "def test_skipped() -> None: ...\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path),
         "-p", "no:cacheprovider", str(test)],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SKIPPED [1] test_skipping.py:4: needs something this machine lacks" in run.stdout, run.stdout
