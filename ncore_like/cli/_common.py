"""What the commands share: locations and storage options, error reporting, output
formatting and progress bars. A location on the command line is the archive layer's
:class:`~ncore_like.archive.Location` (``Location.parse`` gives storage options to URLs only)."""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..archive._location import Location, is_url  # not the package: --help needs no archive layer
from ..errors import NcoreLikeError

if TYPE_CHECKING:
    from ..nodes import IndexedTarZarrStore
    from ..store._itar_store import IndexedTarZarrStore as DocumentStore

__all__ = [
    "EXPECTED_ERRORS",
    "CommandError",
    "Location",
    "Progress",
    "UsageError",
    "add_json_option",
    "add_quiet_option",
    "archive_documents",
    "archive_store",
    "close_matches",
    "describe_error",
    "format_bytes",
    "non_negative_int",
    "open_store",
    "parse_storage_option",
    "positive_int",
    "print_json",
    "progress",
    "reporting",
    "select_keys",
    "step_progress",
    "storage_option_parser",
    "warn_unused_storage_options",
]

#: Errors that mean "this input is bad", reported as one line without a traceback. Library
#: errors (ArchiveFormatError, RecordExistsError, zarr's errors...) are ValueErrors, missing
#: files and failed requests OSErrors, missing records KeyErrors.
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (NcoreLikeError, OSError, ValueError, KeyError)


class CommandError(Exception):
    """A failure a command reports as ``ncore-like: error: <message>`` (exit code 1)."""


class UsageError(CommandError):
    """Arguments that can't go together or can't be read, found after argparse: reported
    the same way, with argparse's exit code for usage errors (2)."""


# -- locations ---------------------------------------------------------------------------


def parse_storage_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` as a storage option; the value is parsed as JSON when it is JSON
    (``anon=true``, ``block_size=1048576``, ``client_kwargs={"region_name": "x"}``), else
    kept as a string (``endpoint_url=http://127.0.0.1:9000``).

    Raises:
        argparse.ArgumentTypeError: Without ``=`` or with an empty key (a usage error).
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return key, value


def storage_option_parser() -> argparse.ArgumentParser:
    """A parent parser with the ``--storage-option`` option every command takes."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(
        "-o",
        "--storage-option",
        dest="storage_options",
        metavar="KEY=VALUE",
        type=parse_storage_option,
        action="append",
        default=[],
        help="fsspec storage option for remote locations (s3://, http(s)://, memory://...), repeatable; "
        "VALUE is parsed as JSON when possible, e.g. -o endpoint_url=http://127.0.0.1:9000 -o anon=true",
    )
    return parser


def positive_int(text: str) -> int:
    """An argument that must be a positive integer (argparse ``type=``)."""
    return _bounded_int(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    """An argument that must be 0 or a positive integer (argparse ``type=``)."""
    return _bounded_int(text, 0, "0 or a positive integer")


def _bounded_int(text: str, low: int, expected: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """Adds ``--json`` (machine-readable output)."""
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def add_quiet_option(parser: argparse.ArgumentParser) -> None:
    """Adds ``-q/--quiet`` (no progress bar, no summary)."""
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bar (shown only when stderr is a terminal)"
    )


def warn_unused_storage_options(args: argparse.Namespace) -> None:
    """Warns when storage options were given but no location of the command is a URL: they
    apply to remote locations only, and would be silently ignored."""
    options = getattr(args, "storage_options", None)
    if not options:
        return
    values = [
        item
        for value in vars(args).values()
        for item in (value if isinstance(value, list) else [value])  # e.g. several SRC of pack
        if isinstance(item, str)
    ]
    if not any(is_url(value) for value in values):
        names = ", ".join(sorted({name for name, _ in options}))
        print(
            f"ncore-like: warning: storage options apply to URLs only, ignored for local paths ({names})",
            file=sys.stderr,
        )


def close_matches(name: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'a', 'b'?)`` for the candidates nearest to ``name``, or nothing."""
    import difflib  # here: only a name not found needs it

    matches = difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(map(repr, matches))}?)" if matches else ""


def select_keys(keys: Sequence[str], patterns: Sequence[str], name: str) -> list[str]:
    """The keys that ``patterns`` name, in archive order: a key itself, a prefix (every key
    below ``cameras/front``), or a glob (``cameras/*/00*``). CommandError naming each
    pattern that matches nothing, with the nearest keys."""
    chosen: set[str] = set()
    unmatched = []
    for pattern in patterns:
        prefix = pattern.rstrip("/") + "/"
        if pattern in keys:
            found = [pattern]
        elif any(key.startswith(prefix) for key in keys):
            found = [key for key in keys if key.startswith(prefix)]
        else:
            found = fnmatch.filter(keys, pattern) if any(char in pattern for char in "*?[") else []
        if not found:
            unmatched.append(f"{pattern!r}{close_matches(pattern, keys)}")
        chosen.update(found)
    if unmatched:
        raise CommandError(f"{name}: no record matches {'; '.join(unmatched)}")
    return [key for key in keys if key in chosen]


@contextlib.contextmanager
def archive_store(args: argparse.Namespace, *, range_reads: bool = False) -> Iterator[IndexedTarZarrStore]:
    """The command's ``ARCHIVE`` opened for reading as a store, with its errors reported as
    one line naming it (see :func:`reporting`); closed at the end."""
    location = Location.parse(args.archive, args.storage_options)
    with reporting(location.name):
        store = open_store(location, range_reads=range_reads)
        with store:
            yield store


@contextlib.contextmanager
def archive_documents(args: argparse.Namespace) -> Iterator[DocumentStore]:
    """:func:`archive_store` as the store layer's store, which serves the node metadata
    documents without the typed layer (and numpy): for commands that describe them."""
    from ..store._itar_store import IndexedTarZarrStore as DocumentStore

    location = Location.parse(args.archive, args.storage_options)
    with reporting(location.name):
        store = DocumentStore(location.target, "r")
        with store:
            yield store


def open_store(location: Location, *, range_reads: bool = False) -> IndexedTarZarrStore:
    """The archive at ``location`` opened for reading, as a store (its records are
    ``store.archive``). ``range_reads``: remote records are fetched with exact range requests,
    so that several threads fetch concurrently (for commands that read many records)."""
    from ..nodes import IndexedTarZarrStore  # here: commands reading records alone never import it

    return IndexedTarZarrStore(location.target, "r", remote_range_reads=range_reads and location.is_remote)


# -- errors ------------------------------------------------------------------------------


def describe_error(error: BaseException, *subjects: str) -> str:
    """A one-line description of ``error`` that names the first of ``subjects`` (the archive)
    unless it names one of them already: ncore_like's errors say which archive in their
    ``archive`` attribute, other errors (OSErrors with a file name...) in their message."""
    if isinstance(error, NcoreLikeError) and error.archive is not None and error.archive in subjects:
        return f"{error.archive}: {error.detail}"
    from ..archive import error_detail  # here: only failures need the verifier's wording

    text = error_detail(error, None)
    if subjects and not any(subject in text for subject in subjects):
        text = f"{subjects[0]}: {text}"
    return text


@contextlib.contextmanager
def reporting(*subjects: str) -> Iterator[None]:
    """Turns expected errors into :class:`CommandError` naming the first of ``subjects``
    (unless the message names one of them)."""
    try:
        yield
    except (CommandError, BrokenPipeError):
        raise
    except EXPECTED_ERRORS as error:
        raise CommandError(describe_error(error, *subjects)) from error


# -- output ------------------------------------------------------------------------------


def print_json(document: Any) -> None:
    """Prints a JSON document (indented, keys in the order given), strict JSON: NaN and the
    infinities (in attributes, fill values) as the strings ``"NaN"``, ``"Infinity"`` and
    ``"-Infinity"``, as zarr's metadata spells them, not as bare tokens no strict parser
    (a browser's ``JSON.parse``) takes."""
    print(json.dumps(_strict(document), indent=2, ensure_ascii=False, allow_nan=False))


def _strict(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _strict(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(item) for item in value]
    return value


def format_bytes(size: int) -> str:
    """A byte count for people: ``512 B``, ``1.5 KiB``, ``3.2 GiB``."""
    if size < 1024:
        return f"{size} B"
    value = float(size)
    units = ("KiB", "MiB", "GiB", "TiB")
    for index, unit in enumerate(units):
        value /= 1024
        if value < 1024 or index == len(units) - 1:
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def format_json_value(value: Any) -> str:
    """An attribute value as compact JSON (how attributes are shown in text output)."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


class Progress(Protocol):
    """The part of a tqdm progress bar the commands use."""

    def update(self, n: float = 1) -> object: ...

    def close(self) -> None: ...

    def __enter__(self) -> Progress: ...

    def __exit__(self, *exc_info: object) -> object: ...


def progress(*, total: float | None, desc: str, quiet: bool, unit: str = "B") -> Progress:
    """A progress bar on stderr, shown only when stderr is a terminal (never in pipes, logs
    or tests) and not ``quiet``. ``unit="B"`` counts bytes (scaled to KiB, MiB...)."""
    from tqdm import tqdm  # type: ignore[import-untyped,unused-ignore]

    scaled: Mapping[str, Any] = {"unit_scale": True, "unit_divisor": 1024} if unit == "B" else {}
    bar: Progress = tqdm(
        total=total,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        disable=quiet or not sys.stderr.isatty(),
        leave=False,
        dynamic_ncols=True,
        **scaled,
    )
    return bar


@contextlib.contextmanager
def step_progress(steps: Mapping[str, tuple[str, str]], *, quiet: bool) -> Iterator[Callable[[str, int, int], None]]:
    """A progress callback of a library operation with several steps, ``callback(step,
    advance, total)``, that shows one bar per step (see :func:`progress`): opened when the
    step first reports, closed when the next one begins. ``steps`` maps each step to the
    bar's description and unit."""
    shown: str | None = None
    bar: Progress | None = None

    def update(step: str, advance: int, total: int) -> None:
        nonlocal shown, bar
        if bar is None or step != shown:
            if bar is not None:
                bar.close()
            desc, unit = steps.get(step, (step, "B"))
            shown, bar = step, progress(total=total, desc=desc, quiet=quiet, unit=unit)
        bar.update(advance)

    try:
        yield update
    finally:
        if bar is not None:
            bar.close()
