"""Access to the reference implementation ``nvidia-ncore`` 19.8.3 for interop tests.

The reference needs zarr-python 2, which conflicts with this project's zarr 3, so it
lives in its own virtual environment at ``<repo>/.venv-ncore-ref``. That environment is
created on first use (``reference_venv``) and reused afterwards; a marker file inside it
records the install recipe, so changing ``RECIPE`` below rebuilds it. Creation is
serialised across processes with an ``fcntl`` file lock.

``run_reference`` runs ``tests/support/ncore_ref_tool.py`` with the reference
interpreter and returns its parsed JSON output; see that script for the commands.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = [
    "RECIPE",
    "RECIPE_VERSION",
    "REPO_ROOT",
    "TOOL_PATH",
    "VENV_DIR",
    "ReferenceToolError",
    "reference_python",
    "reference_venv",
    "run_reference",
]

#: Root of the repository (two levels above this file).
REPO_ROOT: Path = Path(__file__).resolve().parents[2]

#: Where the reference virtual environment lives.
VENV_DIR: Path = REPO_ROOT / ".venv-ncore-ref"

#: The command-line bridge run inside the reference environment.
TOOL_PATH: Path = Path(__file__).resolve().with_name("ncore_ref_tool.py")

#: Bump when the meaning of the recipe changes without its text changing.
RECIPE_VERSION = 1

#: ``pip install`` argument lists, run in order inside the new environment.
RECIPE: tuple[tuple[str, ...], ...] = (
    ("--no-deps", "nvidia-ncore==19.8.3"),
    ("zarr<3", "cbor2", "universal_pathlib", "numcodecs", "numpy"),
)

#: Upper bound for creating the environment (including waiting for the lock).
VENV_TIMEOUT_S = 900.0

#: Default upper bound for one run of the tool.
TOOL_TIMEOUT_S = 300.0

_MARKER_NAME = "ncore-ref-recipe.json"

# Imports proving the environment is usable; exits non-zero otherwise.
_HEALTH_CHECK = (
    "import sys, zarr, ncore.impl.data.stores as s; "
    "assert zarr.__version__.startswith('2.'), zarr.__version__; "
    "assert hasattr(s, 'IndexedTarStore'); "
    "sys.exit(0)"
)

# Set by reference_venv() once the environment was verified in this process.
_verified: Path | None = None


class ReferenceToolError(RuntimeError):
    """The reference environment or tool failed."""


def _python_in(venv: Path) -> Path:
    return venv / "bin" / "python"


def reference_python() -> Path:
    """Returns the reference environment's interpreter, creating the venv if needed.

    Returns:
        Path of ``<repo>/.venv-ncore-ref/bin/python``.
    """
    return _python_in(reference_venv())


def _expected_marker() -> dict[str, Any]:
    return {
        "recipe_version": RECIPE_VERSION,
        "recipe": [list(step) for step in RECIPE],
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    }


def _child_env() -> dict[str, str]:
    """Environment for child interpreters: nothing from this venv may leak in."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"}
    }
    env["PYTHONNOUSERSITE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    return env


def _remaining(deadline: float, what: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        msg = f"timed out after {VENV_TIMEOUT_S:.0f}s while {what} ({VENV_DIR})"
        raise ReferenceToolError(msg)
    return left


def _run_step(argv: list[str], deadline: float, what: str) -> str:
    """Runs one creation step and returns its combined output.

    Raises:
        ReferenceToolError: If the step fails or runs out of time.
    """
    try:
        proc = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_child_env(),
            timeout=_remaining(deadline, what),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.output.decode("utf-8", "replace") if isinstance(exc.output, bytes) else ""
        msg = f"timed out while {what}: {' '.join(argv)}\n{out}"
        raise ReferenceToolError(msg) from exc
    output = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        msg = f"failed while {what} (exit code {proc.returncode}): {' '.join(argv)}\n--- output ---\n{output}"
        raise ReferenceToolError(msg)
    return output


def _imports_ok(venv: Path, deadline: float) -> bool:
    python = _python_in(venv)
    if not python.exists():
        return False
    try:
        proc = subprocess.run(
            [str(python), "-I", "-c", _HEALTH_CHECK],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            env=_child_env(),
            timeout=min(120.0, _remaining(deadline, "checking the reference venv")),
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


def _is_healthy(venv: Path, deadline: float) -> bool:
    try:
        recorded = json.loads((venv / _MARKER_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(recorded, dict) or any(recorded.get(key) != value for key, value in _expected_marker().items()):
        return False
    return _imports_ok(venv, deadline)


def _build(venv: Path, deadline: float) -> None:
    """(Re)creates the environment from scratch; removes it again if anything fails."""
    if venv.exists():
        shutil.rmtree(venv)
    try:
        _run_step([sys.executable, "-m", "venv", str(venv)], deadline, "creating the reference venv")
        python = str(_python_in(venv))
        for step in RECIPE:
            _run_step(
                [python, "-m", "pip", "install", *step],
                deadline,
                f"installing {' '.join(step)} into the reference venv",
            )
        freeze = _run_step([python, "-m", "pip", "freeze", "--all"], deadline, "listing reference packages")
        if not _imports_ok(venv, deadline):
            msg = f"reference venv {venv} was installed but cannot import ncore / zarr 2"
            raise ReferenceToolError(msg)
        marker = {**_expected_marker(), "installed": freeze.split()}
        tmp = venv / (_MARKER_NAME + ".tmp")
        tmp.write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
        tmp.replace(venv / _MARKER_NAME)  # written last and atomically: marks completion
    except BaseException:
        shutil.rmtree(venv, ignore_errors=True)
        raise


def _lock_path(venv: Path) -> Path:
    # Kept outside the repository (nothing to ignore) but unique per venv location.
    digest = hashlib.sha256(str(venv).encode("utf-8")).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"ncore-ref-venv-{digest}.lock"


def _acquire(fd: int, deadline: float) -> None:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            _remaining(deadline, "waiting for another process creating the reference venv")
            time.sleep(0.25)
        else:
            return


def reference_venv() -> Path:
    """Returns the reference virtual environment, creating it on first use.

    The environment at ``<repo>/.venv-ncore-ref`` is created with
    ``sys.executable -m venv`` and populated with pip following ``RECIPE``. An existing
    environment is reused when its marker file matches the current recipe and it can
    import ``ncore.impl.data.stores`` with zarr 2; otherwise it is rebuilt. Concurrent
    callers (e.g. pytest-xdist workers) serialise on an ``fcntl`` lock. The whole
    operation, including waiting for the lock, is bounded by ``VENV_TIMEOUT_S``.

    Returns:
        Path of the environment's directory.

    Raises:
        ReferenceToolError: If creation fails (the message carries pip's output) or times
            out.
    """
    global _verified
    if _verified is not None:
        return _verified

    deadline = time.monotonic() + VENV_TIMEOUT_S
    lock_path = _lock_path(VENV_DIR)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        _acquire(fd, deadline)
        try:
            if not _is_healthy(VENV_DIR, deadline):
                _build(VENV_DIR, deadline)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)

    _verified = VENV_DIR
    return VENV_DIR


def run_reference(command: str, *args: str, stdin: bytes | None = None, timeout: float = TOOL_TIMEOUT_S) -> Any:
    """Runs one ``ncore_ref_tool.py`` command with the reference implementation.

    Args:
        command: The tool command, e.g. ``"dump-records"``.
        *args: Further command-line arguments (paths are passed as strings).
        stdin: Bytes fed to the tool's standard input (e.g. a ``write-records`` spec
            given as ``-``); ``None`` gives it an empty stdin.
        timeout: Seconds before the tool is killed.

    Returns:
        The tool's stdout parsed as JSON.

    Raises:
        ReferenceToolError: If the tool exits non-zero (the message carries its stderr),
            times out, or prints something that is not JSON.
    """
    python = reference_python()
    argv = [str(python), "-I", str(TOOL_PATH), command, *args]
    try:
        proc = subprocess.run(
            argv,
            input=stdin if stdin is not None else b"",
            capture_output=True,
            env=_child_env(),
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else ""
        msg = f"reference tool timed out after {timeout:.0f}s: {command} {' '.join(args)}\n{err}"
        raise ReferenceToolError(msg) from exc
    stderr = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0:
        msg = (
            f"reference tool failed (exit code {proc.returncode}): {command} {' '.join(args)}\n--- stderr ---\n{stderr}"
        )
        raise ReferenceToolError(msg)
    try:
        return json.loads(proc.stdout)
    except ValueError as exc:
        out = proc.stdout.decode("utf-8", "replace")
        msg = (
            f"reference tool printed no valid JSON: {command} {' '.join(args)}\n"
            f"--- stdout ---\n{out[:2000]}\n--- stderr ---\n{stderr}"
        )
        raise ReferenceToolError(msg) from exc
