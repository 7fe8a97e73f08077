"""The documentation site as a reader sees it, in a real headless Chromium.

The site is built (``mkdocs build --strict``), served over HTTP from a free port of
127.0.0.1, and every page is opened at a desktop's width (1280 px) and a phone's (390 px).
A page fails on:

* **a table wider than its column**: a table, or any box around it that scrolls or clips
  what overflows it, whose content is wider than the box (the rest is behind a scroll bar,
  or cut off); a cell whose content is wider than the cell; a table reaching past the
  edges of the page's article;
* **a page wider than the window** (the reader would scroll the whole page sideways);
* **a raw Sphinx role** (``:class:`~ncore_like.RecordCache```, shown as
  ``:class:~ncore_like.RecordCache``): Markdown doesn't know them; the API reference must
  show a link or code;
* **a constant's name where its value belongs**: a signature's default or a parameter's
  "default:" naming a constant (``max_open=DEFAULT_MAX_OPEN``) instead of showing its value;
* **an image too small to read**. The criterion is the height of the image's smallest text
  as displayed: its height in the image's own pixels, times the displayed width over the
  natural width. The plots record that height (``scripts/plot_performance.py`` writes it
  into each PNG from the sizes of the fonts it drew with). It must be at least
  :data:`MIN_TEXT_PX` CSS pixels: the site's own smallest text, in its tables, is 12.8 px;
  text in a scaled raster image has no hinting, and below ~10 px letters of a sans-serif
  font blur into each other on a phone. An image that records no text size must not be
  shown smaller than its natural size (its author made it legible at that size, or not);
* **an image whose content is cut at its edge**: a plot's drawing keeps a margin of
  background on every side, so pixels other than the background in the outermost
  :data:`EDGE_PX` pixels of any side mean something runs off the image there (the clipped
  titles of the old plots). What is cut inside the image (text over text) is checked when
  the plots are drawn (``check_layout``, tested below).

The browser comes from ``tests/support/browser.py`` (skipped, saying why, where there is
no Chromium). The generator of the performance page and the griffe extension that renders
the API reference's docstrings are tested here too.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from PIL import Image

from tests.support.docs_site import build_site, serve_folder

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
#: A desktop's window, and a phone's (an iPhone 12 to 15 is 390 CSS px wide).
WIDTHS = (1280, 390)
#: The smallest text an image may show, in CSS pixels (see the module's docstring).
MIN_TEXT_PX = 10.0
#: How far from its edges an image's content must stay.
EDGE_PX = 2
#: A Sphinx cross-reference role as the browser shows it (Markdown eats the backticks).
RAW_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|const|exc|obj|mod|type):(?=[`~.!\w])")
#: A default given by a constant's name: ``name=CONSTANT`` in a signature,
#: ``default: CONSTANT`` in a parameter's description (``module.CONSTANT`` too).
CONSTANT_DEFAULT = re.compile(r"(?:\w=|default:)\s*(?:\w+\.)*(?P<name>[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b")


def _load_script(name: str) -> ModuleType:
    path = REPO / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def _page_urls() -> list[str]:
    """Every page's path on the site (``index.md`` is ``""``, ``cli.md`` is ``cli/``)."""
    return sorted("" if page.stem == "index" else f"{page.stem}/" for page in DOCS.glob("*.md"))


# -- what a page shows ------------------------------------------------------------------------

#: Measures the page in the browser: tables, images, text, widths.
_MEASURE = """() => {
  const article = document.querySelector("article") || document.body;
  const column = article.getBoundingClientRect();
  const name = (table) => {
    let heading = null;
    for (const h of article.querySelectorAll("h1, h2, h3, h4")) {
      if (h.compareDocumentPosition(table) & Node.DOCUMENT_POSITION_FOLLOWING) heading = h;
    }
    const header = table.querySelector("tr");
    return `table under "${heading ? heading.textContent.replace("¶", "").trim() : "(top)"}"`
      + ` headed "${header ? header.innerText.replace(/\\s+/g, " ").trim().slice(0, 60) : ""}"`;
  };
  const tables = [...article.querySelectorAll("table")].map((table) => {
    const hidden = [];
    // Boxes that scroll or clip what overflows them (content overflowing a box that shows
    // it, as material's table boxes reach into the article's padding, is no problem).
    for (let box = table; box && box !== document.documentElement; box = box.parentElement) {
      if (getComputedStyle(box).overflowX !== "visible" && box.scrollWidth > box.clientWidth + 1) {
        const what = `${box.tagName.toLowerCase()}.${box.className || ""}`;
        hidden.push(`${what}: ${box.scrollWidth} px of content in ${box.clientWidth} px`);
      }
    }
    for (const cell of table.querySelectorAll("td, th")) {
      if (cell.scrollWidth > cell.clientWidth + 1) {
        const what = `cell "${cell.innerText.slice(0, 40)}"`;
        hidden.push(`${what}: ${cell.scrollWidth} px of content in ${cell.clientWidth} px`);
      }
    }
    const box = table.getBoundingClientRect();
    return {name: name(table), hidden, left: box.left, right: box.right};
  });
  const images = [...article.querySelectorAll("img")].map((image) => ({
    src: image.currentSrc || image.src,
    loaded: image.complete && image.naturalWidth > 0,
    natural: image.naturalWidth,
    shown: image.getBoundingClientRect().width,
    left: image.getBoundingClientRect().left,
    right: image.getBoundingClientRect().right,
  }));
  return {
    column: {left: column.left, right: column.right},
    tables,
    images,
    text: article.innerText,
    pageWidth: document.documentElement.scrollWidth,
    windowWidth: window.innerWidth,
  };
}"""


@dataclass
class Rendered:
    """One page at one width, as measured in the browser."""

    url: str
    width: int
    column: dict[str, float]
    tables: list[dict[str, Any]]
    images: list[dict[str, Any]]
    text: str
    page_width: int
    window_width: int
    problems: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("docs") / "site"
    completed = build_site(folder)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return folder


@pytest.fixture(scope="module")
def site_url(site: Path) -> Iterator[str]:
    with serve_folder(site) as url:
        yield url


@pytest.fixture(scope="module")
def rendered(browser: Any, site_url: str) -> Callable[[str, int], Rendered]:
    """Opens a page at a width (once per module: every check reads the same measures)."""
    seen: dict[tuple[str, int], Rendered] = {}

    def render(path: str, width: int) -> Rendered:
        if (path, width) not in seen:
            context = browser.new_context(viewport={"width": width, "height": 900})
            try:
                page = context.new_page()
                page.goto(site_url + path, wait_until="load")
                page.evaluate("() => Promise.all([...document.images].map((i) => i.decode().catch(() => null)))")
                data = page.evaluate(_MEASURE)
            finally:
                context.close()
            seen[path, width] = Rendered(
                url=site_url + path,
                width=width,
                column=data["column"],
                tables=data["tables"],
                images=data["images"],
                text=data["text"],
                page_width=data["pageWidth"],
                window_width=data["windowWidth"],
            )
        return seen[path, width]

    return render


def table_problems(page: Rendered) -> list[str]:
    problems = []
    for table in page.tables:
        problems += [f"{table['name']}: {hidden}" for hidden in table["hidden"]]
        if table["left"] < page.column["left"] - 1 or table["right"] > page.column["right"] + 1:
            problems.append(
                f"{table['name']} spans {table['left']:.0f}-{table['right']:.0f} px, "
                f"its column {page.column['left']:.0f}-{page.column['right']:.0f} px"
            )
    if page.page_width > page.window_width:
        problems.append(f"the page is {page.page_width} px wide in a window of {page.window_width} px")
    return problems


def text_problems(page: Rendered) -> list[str]:
    lines = page.text.splitlines()
    roles = [line.strip() for line in lines if RAW_ROLE.search(line)]
    constants = [line.strip() for line in lines if CONSTANT_DEFAULT.search(line)]
    return [f"raw Sphinx role in {line!r}" for line in roles] + [
        f"a constant's name instead of its value in {line!r}" for line in constants
    ]


def smallest_text_px(path: Path) -> float | None:
    """The height of the smallest text of an image, in its own pixels, if it records it."""
    key = _load_script("plot_performance").SMALLEST_TEXT_KEY
    with Image.open(path) as image:
        value = getattr(image, "text", {}).get(key)
    return None if value is None else float(value)


def cut_edges(path: Path) -> list[str]:
    """The sides of an image where its content reaches the outermost :data:`EDGE_PX` pixels
    (anything but the colour of its top-left corner, taken as the background)."""
    with Image.open(path) as image:
        pixels = image.convert("RGB")
    width, height = pixels.size
    background = pixels.getpixel((0, 0))
    strips = {
        "top": (0, 0, width, EDGE_PX),
        "bottom": (0, height - EDGE_PX, width, height),
        "left": (0, 0, EDGE_PX, height),
        "right": (width - EDGE_PX, 0, width, height),
    }
    return [
        side
        for side, box in strips.items()
        if any(colour != background for _count, colour in pixels.crop(box).getcolors(maxcolors=1 << 16) or [])
    ]


def image_problems(page: Rendered, site: Path) -> list[str]:
    problems = []
    for image in page.images:
        path = site / unquote(urlsplit(image["src"]).path).lstrip("/")
        label = path.relative_to(site).as_posix() if path.is_relative_to(site) else image["src"]
        if not image["loaded"] or not path.is_file():
            problems.append(f"{label} doesn't load")
            continue
        scale = image["shown"] / image["natural"]
        smallest = smallest_text_px(path)
        if smallest is None:
            if scale < 0.99:
                problems.append(f"{label} (no text size recorded) is shown at {scale:.0%} of its size")
        elif smallest * scale < MIN_TEXT_PX:
            problems.append(
                f"{label}: its smallest text is {smallest * scale:.1f} px high as shown "
                f"({image['shown']:.0f} of {image['natural']} px wide), under {MIN_TEXT_PX} px"
            )
        if image["left"] < page.column["left"] - 1 or image["right"] > page.column["right"] + 1:
            problems.append(f"{label} reaches past the column")
        problems += [f"{label}: its content is cut at the {side} edge" for side in cut_edges(path)]
    return problems


_CASES = [
    pytest.param(path, width, id=f"{path.strip('/') or 'index'}-{width}") for path in _page_urls() for width in WIDTHS
]


@pytest.mark.parametrize(("path", "width"), _CASES)
def test_tables_fit_the_column(rendered: Callable[[str, int], Rendered], path: str, width: int) -> None:
    page = rendered(path, width)
    problems = table_problems(page)
    assert not problems, f"{page.url} at {width} px:\n" + "\n".join(problems)


@pytest.mark.parametrize(("path", "width"), _CASES)
def test_no_raw_markup_or_constant_names(rendered: Callable[[str, int], Rendered], path: str, width: int) -> None:
    page = rendered(path, width)
    problems = text_problems(page)
    assert not problems, f"{page.url} at {width} px:\n" + "\n".join(problems)


@pytest.mark.parametrize(("path", "width"), _CASES)
def test_images_are_readable_and_whole(
    rendered: Callable[[str, int], Rendered], site: Path, path: str, width: int
) -> None:
    page = rendered(path, width)
    problems = image_problems(page, site)
    assert not problems, f"{page.url} at {width} px:\n" + "\n".join(problems)


def test_the_checks_see_the_pages(rendered: Callable[[str, int], Rendered]) -> None:
    """The checks above read what they should: the performance page's ten tables and eight
    plots, and the API reference's text."""
    performance = rendered("performance/", 390)
    assert len(performance.tables) >= 10
    assert len(performance.images) >= 8
    assert all(image["loaded"] for image in performance.images)
    reference = rendered("reference/", 1280)
    assert "RecordCache" in reference.text and "max_open=64" in reference.text


# -- the performance page's generator copes with the rows other benchmarks will add ------------


def _results(rows: list[Any]) -> Any:
    results = _load_script("plot_performance").Results
    return results(config={}, quick=False, elapsed_s=1.0, versions={"ncore_like": "0"}, cpus=2, rows=rows)


def _odd_rows() -> list[Any]:
    """Rows as future benchmarks may write them: no workload, no ratio, a best ratio on some
    rows only, long names, characters that mean something in Markdown, extreme ratios."""
    row = _load_script("plot_performance").Row
    long = "a measure whose name goes on and on, " * 6 + "read_async(x[1][2], *args) | done <b>"
    return [
        row("", "no workload at all", 1.5, "time a/b", ">= 1.00x", True),
        row("1 odd", long, 0.0004, "x_y/z_", "<= 2 RTT", True, detail="d " * 200),
        row("1 odd", "a second ratio of the same", 12000.0, "speedup", "(context)", None, detail="d " * 200),
        row("1 odd", "no ratio (skipped: not installed)", None, "", "", None),
        row("2 best", "with a best ratio", 0.97, "time", ">= 0.90x", True, best_ratio=0.99),
        row("2 best", "target far right of the bar", 0.2, "time", ">= 50x", False),
        *(row("3 many", f"row {index}", 1.0 + index, "t", "", None) for index in range(25)),
    ]


def test_tables_render_whatever_the_rows() -> None:
    """Every row of a generated table, once rendered as the site renders Markdown, is a row
    of exactly the table's columns, its ratio and verdict in their cells."""
    import markdown

    plot = _load_script("plot_performance")
    text = plot.render_table("bench_future", _results(_odd_rows()))
    rendered = markdown.markdown(text, extensions=["tables", "md_in_html", "attr_list"])
    rows = re.findall(r"<tr>(.*?)</tr>", rendered, flags=re.DOTALL)
    cells = [re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, flags=re.DOTALL) for row in rows]
    assert {len(row) for row in cells} == {len(plot.TABLE_COLUMNS)}
    # the header, a row naming each of the 3 workloads (not the empty one), the rows
    assert len(cells) == 1 + 3 + len(_odd_rows())
    assert f'<div class="{plot.TABLE_CLASS}">' in rendered
    assert any("<strong>0.97x</strong> (best 0.99x)" in row[1] for row in cells)
    assert any(row[2] == "≥ 50x<br />\n<strong>missed</strong>" or "missed" in row[2] for row in cells)
    assert any(row[3] == "as above" for row in cells)
    assert "read_async(x[1][2], *args) | done &lt;b&gt;" in rendered  # shown as written
    assert '<img alt="Bar chart' in rendered and f'class="{plot.PLOT_CLASS}"' in rendered


def test_plots_lay_out_whatever_the_rows(tmp_path: Path) -> None:
    """The plot of odd rows has no text cut or over other text, records its smallest text,
    and keeps its content off its edges."""
    plot = _load_script("plot_performance")
    results = {"bench_future": _results(_odd_rows()), "bench_one": _results(_odd_rows()[:1])}
    for name, result in results.items():
        assert plot.check_layout(plot.draw(name, result)) == [], name
    written = plot.plot(results, tmp_path)
    assert [path.name for path in written] == ["performance-bench_future.png", "performance-bench_one.png"]
    for path in written:
        assert smallest_text_px(path) == pytest.approx(plot.FONT_PT * plot.DPI / 72, abs=0.1)
        assert cut_edges(path) == []


def test_check_layout_sees_text_cut_or_overlapping() -> None:
    plot = _load_script("plot_performance")
    figure = plot.draw("bench_one", _results(_odd_rows()[:1]))
    assert plot.check_layout(figure) == []
    figure.text(0.5, 0.5, "a title far too long for the width of the image, " * 2)
    figure.text(0.02, 0.98, "over the title", va="top")
    problems = plot.check_layout(figure)
    assert any("far too long" in problem and "runs off the image" in problem for problem in problems), problems
    assert any("'over the title' overlaps" in problem or "overlaps 'over the title'" in problem for problem in problems)


def test_plot_refuses_an_unreadable_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A layout with text cut (here: names not wrapped) writes no image and says which."""
    plot = _load_script("plot_performance")
    monkeypatch.setattr(plot, "_TEXT_WIDTH_IN", 10.0)
    with pytest.raises(ValueError, match=r"the plot of bench_future would be unreadable: .* runs off the image"):
        plot.plot({"bench_future": _results(_odd_rows())}, tmp_path)
    assert not list(tmp_path.iterdir())


# -- the API reference's griffe extension -------------------------------------------------------


def test_roles_become_cross_references() -> None:
    extension = _load_script("docs_api_extension")
    known = {"pkg.RecordCache": "pkg._cache.RecordCache", "read": "pkg.A.read", "pkg.f": "pkg._f.f"}
    text = (
        "A :class:`~pkg.RecordCache`, :meth:`read`, :py:func:`pkg.f`, :attr:`~A.unknown`, "
        ":func:`the f <pkg.f>`, :class:`!RecordCache`."
    )
    converted = extension.convert_roles(text, known.get)
    assert converted == (
        'A <autoref identifier="pkg._cache.RecordCache" optional><code>RecordCache</code></autoref>, '
        '<autoref identifier="pkg.A.read" optional><code>read()</code></autoref>, '
        '<autoref identifier="pkg._f.f" optional><code>pkg.f()</code></autoref>, '
        "<code>unknown</code>, "
        '<autoref identifier="pkg._f.f" optional><code>the f</code></autoref>, '
        "<code>RecordCache</code>."
    )


def test_the_extension_resolves_names_and_shows_values(tmp_path: Path) -> None:
    """Loaded by griffe as mkdocs loads it: roles resolve from the docstring's scope, then the
    package's top level; defaults naming a public constant show its value."""
    import griffe

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from ._defaults import LIMIT as LIMIT\nfrom ._a import A as A\n")
    (package / "_defaults.py").write_text("LIMIT = 64\nSPAN = 1 << 20\n")
    (package / "_a.py").write_text(
        "from ._defaults import LIMIT, SPAN\n"
        "_UNSET = object()\n"
        "limit = 3\n"
        "class A:\n"
        '    """See :meth:`read` and :class:`~pkg.A`; :func:`nowhere` is unknown."""\n'
        "    def __init__(self, size: int = LIMIT, span: int = SPAN, other: object = _UNSET, n: int = limit):\n"
        '        """Uses :attr:`size` of :class:`A`."""\n'
        "        self.size = size\n"
        "    def read(self) -> None:\n"
        '        """Like :meth:`A.read`, from B: :class:`B`."""\n'
        "class B:\n"
        "    pass\n"
    )
    extension = _load_script("docs_api_extension").SphinxRolesAndConstants()
    loaded = griffe.load("pkg", search_paths=[tmp_path], extensions=griffe.load_extensions(extension))
    cls = loaded["_a.A"]
    assert cls.docstring.value == (
        'See <autoref identifier="pkg._a.A.read" optional><code>read()</code></autoref> and '
        '<autoref identifier="pkg._a.A" optional><code>A</code></autoref>; <code>nowhere()</code> is unknown.'
    )
    assert cls.members["read"].docstring.value == (
        'Like <autoref identifier="pkg._a.A.read" optional><code>A.read()</code></autoref>, from B: '
        '<autoref identifier="pkg._a.B" optional><code>B</code></autoref>.'
    )
    defaults = {parameter.name: str(parameter.default) for parameter in cls.members["__init__"].parameters}
    assert defaults == {"self": "None", "size": "64", "span": "1 << 20", "other": "_UNSET", "n": "limit"}
