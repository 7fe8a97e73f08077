"""The documentation works: its Python examples run and the site builds cleanly.

* Every ```` ```python ```` block of a page runs, in page order, in one namespace per page
  and in a fresh temporary working directory per page (examples write relative paths such
  as ``"sequence.itar"``). A block whose first line is exactly one of :data:`SKIP_MARKERS`
  is not run (it needs a server or a package the test environment lacks).
* ``mkdocs build --strict`` builds the site without warnings.
* The benchmark tables of ``performance.md`` are those ``scripts/plot_performance.py``
  renders from ``docs/data/*.json`` (the page is regenerated whenever the figures change).
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.docs_site import build_site
from tests.support.zarr_version import ZARR_MAJOR

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
SKIP_MARKERS = ("# not run: needs a server", "# not run: needs torch")
_FENCE_OPEN = re.compile(r"^(?P<fence>`{3,}|~{3,})\s*(?P<info>[^\s`]*)")


@dataclass(frozen=True)
class CodeBlock:
    """A fenced code block of a documentation page."""

    page: str
    line: int
    """1-based line of the opening fence."""
    language: str
    source: str

    @property
    def skipped(self) -> bool:
        first = self.source.split("\n", 1)[0].rstrip()
        return first in SKIP_MARKERS

    @property
    def label(self) -> str:
        return f"{self.page}:{self.line}"


def code_blocks(path: Path) -> list[CodeBlock]:
    """The top-level fenced code blocks of a Markdown page, in order.

    Only fences starting at column 0 count: the examples are written that way, and a block
    indented inside a list or an admonition is shown, not run.
    """
    blocks: list[CodeBlock] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        match = _FENCE_OPEN.match(lines[index])
        if match is None:
            index += 1
            continue
        fence, start = match["fence"], index
        body: list[str] = []
        index += 1
        while index < len(lines) and not (
            lines[index].startswith(fence[0] * len(fence)) and not lines[index].strip(fence[0]).strip()
        ):
            body.append(lines[index])
            index += 1
        if index >= len(lines):
            raise AssertionError(f"{path.name}:{start + 1}: code block is never closed")
        blocks.append(CodeBlock(path.name, start + 1, match["info"].lower(), "\n".join(body) + "\n"))
        index += 1
    return blocks


def _pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def _python_pages() -> list[Path]:
    return [page for page in _pages() if any(block.language == "python" for block in code_blocks(page))]


def test_every_page_is_checked() -> None:
    names = {page.name for page in _pages()}
    assert {
        "index.md",
        "quickstart.md",
        "format.md",
        "api.md",
        "remote.md",
        "processes.md",
        "cli.md",
        "performance.md",
    } <= names


def test_code_block_parser(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n"
        "```python\nx = 1\n```\n"
        "```text\n```python\nnot a fence of its own\n```\n"
        "````python\n# not run: needs a server\n```\ninner\n```\n````\n"
        "    ```python\n    indented = True\n    ```\n",
        encoding="utf-8",
    )
    blocks = code_blocks(page)
    assert [(block.line, block.language, block.skipped) for block in blocks] == [
        (2, "python", False),
        (5, "text", False),
        (9, "python", True),
    ]
    assert blocks[0].source == "x = 1\n"
    assert blocks[1].source == "```python\nnot a fence of its own\n"
    assert blocks[2].source == "# not run: needs a server\n```\ninner\n```\n"


@pytest.mark.parametrize("page", _python_pages(), ids=lambda page: page.name)
def test_python_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # The page's namespace is a registered module, so functions and classes its examples
    # define pickle by reference (e.g. tasks sent to a fork-based process pool).
    module = ModuleType(f"docs_{page.stem}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    ran = 0
    for block in code_blocks(page):
        if block.language != "python" or block.skipped:
            continue
        if ZARR_MAJOR < 3 and "zarr_format=3" in block.source:
            continue  # zarr format 3 needs zarr-python 3 (the zarr-python 2 run)
        code = compile(block.source, f"<{block.label}>", "exec")
        try:
            exec(code, module.__dict__)
        except BaseException as error:
            raise AssertionError(f"example at {block.label} failed: {error!r}") from error
        # An example must leave no event loop running for the next one.
        with pytest.raises(RuntimeError):
            asyncio.get_running_loop()
        ran += 1
    assert ran, f"{page.name}: every python block is skipped"


def test_examples_not_run_still_compile() -> None:
    """Blocks needing a server or torch are not run, but must be valid Python."""
    for page in _pages():
        for block in code_blocks(page):
            if block.language == "python" and block.skipped:
                compile(block.source, f"<{block.label}>", "exec")


def test_skip_markers_are_exact() -> None:
    """A block meant to be skipped but misspelling its marker would run (and fail); one
    mentioning "not run" anywhere else would be a typo too."""
    for page in _pages():
        for block in code_blocks(page):
            first = block.source.split("\n", 1)[0].strip()
            if "not run" in first.lower():
                assert first in SKIP_MARKERS, f"{block.label}: unknown skip marker {first!r}"


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    completed = build_site(tmp_path / "site")
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    assert "WARNING" not in output, output
    assert (tmp_path / "site" / "index.html").is_file()


def _plot_script() -> ModuleType:
    path = REPO / "scripts" / "plot_performance.py"
    spec = importlib.util.spec_from_file_location("plot_performance", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_the_reference_covers_every_public_name() -> None:
    import ncore_like
    import ncore_like.errors

    page = (DOCS / "reference.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: ncore_like\.(\w+)", page, flags=re.MULTILINE))
    if "errors" in documented:  # the module's page documents every error
        documented |= set(ncore_like.errors.__all__)
    missing = sorted(set(ncore_like.__all__) - documented)
    assert not missing, f"docs/reference.md lacks {missing}"


#: Characters of a code line that fit the content column of the site at 1280 px.
CODE_COLUMNS = 88


@pytest.mark.parametrize("page", sorted(path.name for path in DOCS.glob("*.md")))
def test_code_blocks_fit_the_content_column(page: str) -> None:
    long = [
        f"{block.label} +{number}: {len(line)} characters"
        for block in code_blocks(DOCS / page)
        for number, line in enumerate(block.source.splitlines(), start=1)
        if len(line) > CODE_COLUMNS
    ]
    assert not long, f"code lines wider than {CODE_COLUMNS} characters (cut off on the page): {long}"


def test_performance_tables_match_the_benchmark_data() -> None:
    plot = _plot_script()
    page = DOCS / "performance.md"
    current = page.read_text(encoding="utf-8")
    expected = plot.update_tables(current, plot.load_benchmarks(DOCS / "data"))
    assert current == expected, (
        "docs/performance.md is out of date with docs/data/*.json: run .venv/bin/python -m scripts.plot_performance"
    )


def test_every_verdict_is_its_ratio_against_its_target() -> None:
    """A bar of the plot and a row of the tables must never flatter: where a target is on the
    ratio's own scale ("<= 3 RTT", ">= 0.80x"), the verdict (the colour of the bar, the "met"
    column) is exactly that comparison, and rows without a verdict have no such target."""
    plot = _plot_script()
    checked = 0
    for name, results in plot.load_benchmarks(DOCS / "data").items():
        for row in results.rows:
            match = plot._RATIO_TARGET.match(row.target)
            if match is None or row.ratio is None:
                continue
            value = float(match["value"])
            expected = {"<=": row.ratio <= value, ">=": row.ratio >= value}.get(match["op"])
            label = f"{name}: {row.workload} / {row.measure} ({row.ratio:.2f} vs {row.target})"
            assert row.ok is not None, f"{label}: a target without a verdict"
            if expected is not None:
                assert row.ok == expected, f"{label}: verdict {row.ok} contradicts the ratio"
                checked += 1
    assert checked > 20  # the check ran over the benchmark data


def test_performance_plots_exist_and_are_shown() -> None:
    plot = _plot_script()
    page = (DOCS / "performance.md").read_text(encoding="utf-8")
    for name in plot.load_benchmarks(DOCS / "data"):
        image = plot.image_path(DOCS / "img", name)
        assert image.is_file(), "run .venv/bin/python -m scripts.plot_performance"
        assert f"(img/{image.name})" in page, f"performance.md doesn't show {image.name}"


# -- the command line page shows the real help --------------------------------------------


def _cli_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    from ncore_like.cli import main

    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out


def _normalised(text: str) -> str:
    return " ".join(text.split())


def test_cli_page_matches_the_help(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ncore_like.cli")
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps at the terminal width
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    blocks = [block.source for block in code_blocks(DOCS / "cli.md") if block.language == "text"]
    top = next(block for block in blocks if block.startswith("$ ncore-like --help\n"))
    assert _normalised(top.removeprefix("$ ncore-like --help\n")) == _normalised(_cli_help(["--help"], capsys))
    commands = re.findall(r"^## `ncore-like (\w+)`$", page, flags=re.MULTILINE)
    assert commands == ["ls", "tree", "info", "cat", "extract", "pack", "verify", "recover", "refs", "view"]
    for command in commands:
        real = _cli_help([command, "--help"], capsys)
        usage = real.split("\n\n", 1)[0]
        documented = next((block for block in blocks if block.startswith(f"usage: ncore-like {command} ")), None)
        assert documented is not None, f"cli.md shows no usage of {command!r}"
        assert _normalised(documented) == _normalised(usage), f"usage of {command!r} changed:\n{usage}"
