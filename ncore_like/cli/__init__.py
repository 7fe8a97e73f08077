"""The ``ncore-like`` command line: inspect, extract, pack and verify indexed tar archives.

Run ``ncore-like --help`` (or ``python -m ncore_like --help``) for the commands, and
``ncore-like COMMAND --help`` for each. Exit codes: 0 success, 1 failure or problems found
(reported as ``ncore-like: error: <message>`` on stderr), 2 usage errors, 130 interrupted
(Ctrl-C), 143 terminated (SIGTERM); both signals let writers discard what they started.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .. import __version__
from .._signals import Terminated, handling_signals
from ._common import (
    EXPECTED_ERRORS,
    CommandError,
    UsageError,
    describe_error,
    storage_option_parser,
    warn_unused_storage_options,
)

if TYPE_CHECKING:
    from ._tree import render_tree as render_tree

__all__ = ["COMMANDS", "build_parser", "main", "render_tree"]

PROG = "ncore-like"

#: The commands in the order ``--help`` lists them: the module defining each (imported only
#: when the command runs, so that ``ls`` never imports what ``pack`` needs) and its summary
#: (the same as the module's, which a test checks).
COMMANDS: dict[str, tuple[str, str]] = {
    "ls": ("_ls", "list the records of an archive"),
    "tree": ("_tree", "show the zarr hierarchy of an archive"),
    "info": ("_info", "show the format, index and hierarchy of an archive"),
    "cat": ("_cat", "write the payload of a record (or a blob array) to standard output"),
    "extract": ("_extract", "extract records as files"),
    "pack": ("_pack", "pack a zarr hierarchy into a new archive"),
    "verify": ("_verify", "check an archive"),
    "recover": ("_recover", "finish the archive of a writer that died"),
    "refs": ("_refs", "describe the archive as a reference set (JSON) for fsspec's reference:// filesystem"),
    "view": ("_view", "look at an archive in the browser (a local web viewer)"),
}


def __getattr__(name: str) -> Any:
    if name == "render_tree":  # the tree command's module, on first use
        return importlib.import_module("._tree", __name__).render_tree
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of all commands; with ``command``, of that command only (the
    others are listed by name and summary, and their modules not imported)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect, extract, pack and verify indexed tar archives (.itar) of zarr hierarchies. "
        "Archives and sources are local paths or URLs of any fsspec filesystem (s3://, http(s)://, "
        "memory://...); pass storage options of remote locations with -o/--storage-option KEY=VALUE.",
        epilog=f"Run '{PROG} COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show the library's log records on stderr: retries, cache entries dropped, recovery "
        "decisions, reads that fall back from the fast path to zarr-python (before COMMAND)",
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    parents = [storage_option_parser()]
    for name, (module_name, summary) in COMMANDS.items():
        if command is None or command == name:
            importlib.import_module(f".{module_name}", __name__).register(commands, parents)
        else:
            commands.add_parser(name, help=summary)
    return parser


def _command(argv: Sequence[str]) -> str:
    """The command ``argv`` runs: its first argument that is no option (the top level's
    options take no values); "" if none (``--help``, ``--version``: no command's module is
    needed)."""
    return next((argument for argument in argv if not argument.startswith("-")), "")


@contextlib.contextmanager
def _logging(verbose: bool) -> Iterator[None]:
    """With ``-v``, the library's log records (every level) on stderr while a command runs;
    without it, the library stays quiet (its loggers have no handler but a null one)."""
    if not verbose:
        yield
        return
    import logging  # here: a command without -v needs none of it (~12 ms of its start-up)

    library = logging.getLogger("ncore_like")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(name)s: %(message)s"))
    level = library.level
    library.addHandler(handler)
    library.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        library.removeHandler(handler)
        library.setLevel(level)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _stdout_closed() -> int:
    # The reader went away (``ncore-like ls big.itar | head``): it had what it wanted, so the
    # command succeeded. Later flushes at exit would fail again: stdout goes to /dev/null.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a descriptor (e.g. captured in tests)
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line with ``argv`` (default: ``sys.argv[1:]``).

    Returns:
        The exit code: 0 success, 1 failure or problems found, 2 usage error.
    """
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(_command(argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version and usage errors: argparse printed why
        return _exit_code(exit_.code)
    warn_unused_storage_options(args)
    try:
        with handling_signals(), _logging(args.verbose):
            code: int = args.run(args)
    except BrokenPipeError:
        return _stdout_closed()
    except CommandError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2 if isinstance(error, UsageError) else 1
    except EXPECTED_ERRORS as error:
        print(f"{PROG}: error: {describe_error(error)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print(f"{PROG}: terminated", file=sys.stderr)
        return 143
    return code
