"""The layering holds: read from the source with ``ast`` (tests/support/architecture.py).

* zarr-python is imported only by ``ncore_like/_compat`` (the one seam per zarr version);
* every run-time import goes down the layers (archive -> store -> backend -> nodes -> cli),
  imports by name (``importlib.import_module("...")``, ``__import__("...")``) included: in
  particular the store layer never reaches the typed layer;
* the layer diagram of ``docs/architecture.md`` is the one the imports give.
"""

from __future__ import annotations

import ast
import re

from tests.support.architecture import (
    ALLOWED,
    LAYERS,
    REPO,
    Import,
    _imports,
    layer_edges,
    layer_of,
    package_imports,
    render_diagram,
)

#: Imports of higher layers in annotations only (``if TYPE_CHECKING:``).
ANNOTATION_ONLY: set[tuple[str, str]] = set()


def _where(item: Import) -> str:
    return f"{item.module} (line {item.line}) imports {item.target}"


def test_only_the_compat_package_imports_zarr() -> None:
    offending = [
        _where(item)
        for item in package_imports()
        if (item.target == "zarr" or item.target.startswith("zarr."))
        and not item.module.startswith("ncore_like._compat")
    ]
    assert not offending, offending


def test_run_time_imports_go_down_the_layers() -> None:
    offending = []
    for item in package_imports():
        source, target = layer_of(item.module), layer_of(item.target)
        if item.type_checking or target is None or source == target:
            continue
        assert source is not None
        if target not in ALLOWED[source]:
            offending.append(f"{_where(item)}: layer {source} may not import layer {target}")
    assert not offending, offending


def test_the_store_layer_never_imports_the_typed_layer() -> None:
    for item in package_imports():
        if layer_of(item.module) == "store" and layer_of(item.target) in ("nodes", "backend", "cli"):
            assert item.type_checking, _where(item)
            assert (item.module, item.target) in ANNOTATION_ONLY, _where(item)


def test_imports_by_name_are_imports() -> None:
    source = (
        "import importlib\n"
        "from importlib import import_module\n"
        "def f(name):\n"
        "    importlib.import_module('ncore_like.nodes')\n"
        "    import_module('._group', 'ncore_like.nodes')\n"
        "    import_module('.nodes', package=__package__)\n"
        "    __import__('ncore_like.cli')\n"
        "    importlib.import_module(name)\n"  # not a constant: unknown, not counted
    )
    found = list(_imports(ast.parse(source), "ncore_like.store._base", "ncore_like.store"))
    dynamic = [(item.target, item.line) for item in found if item.dynamic]
    assert dynamic == [
        ("ncore_like.nodes", 4),
        ("ncore_like.nodes._group", 5),  # relative to the package named
        ("ncore_like.store.nodes", 6),  # relative to the importing module's package
        ("ncore_like.cli", 7),
    ]


def test_upward_imports_for_annotations_are_the_known_ones() -> None:
    order = list(ALLOWED)
    upward = {
        (item.module, item.target)
        for item in package_imports()
        if item.type_checking
        and layer_of(item.target) is not None
        and order.index(layer_of(item.target) or "") > order.index(layer_of(item.module) or "")
    }
    assert upward == ANNOTATION_ONLY


def test_the_architecture_page_shows_the_imports() -> None:
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    start, end = "<!-- layers: start -->\n```text\n", "\n```\n<!-- layers: end -->"
    assert start in page and end in page, "docs/architecture.md lost its diagram markers"
    shown = page.split(start, 1)[1].split(end, 1)[0]
    expected = render_diagram(layer_edges(package_imports()))
    assert shown == expected, (
        "docs/architecture.md shows another layer diagram than the imports give; "
        "regenerate it with `python -m tests.support.architecture`:\n" + expected
    )


def test_both_zarr_python_modules_of_the_seam_define_the_same_names() -> None:
    # One is imported per run (ncore_like._compat picks it): compared as source, so that a
    # name added to one module only fails here, under either zarr-python.
    import ast

    def defined(module: str) -> tuple[list[str], set[str]]:
        tree = ast.parse((REPO / "ncore_like" / "_compat" / f"{module}.py").read_text())
        exported: list[str] = []
        names: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        names.add(target.id)
                        if target.id == "__all__":
                            exported = list(ast.literal_eval(node.value))  # type: ignore[arg-type]
            elif isinstance(node, ast.FunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.ImportFrom):
                names.update(alias.asname or alias.name for alias in node.names)
        return exported, names

    exported3, names3 = defined("zarr3")
    exported2, names2 = defined("zarr2")
    assert exported2 == exported3
    assert set(exported3) <= names3 and set(exported2) <= names2


def test_the_layer_numbers_of_the_docstrings_follow_the_enforced_order() -> None:
    # "Layer N: ..." opens the docstring of a layer's package; numbered from 1 upwards in the
    # order of ALLOWED (lowest first), so that a docstring never reverses the import order.
    numbered = []
    for layer, members in LAYERS.items():
        for member in members:
            init = REPO / "ncore_like" / member / "__init__.py"
            if not init.is_file():
                continue
            docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
            found = re.match(r"Layer (\d+):", docstring)
            if found:
                numbered.append((layer, int(found.group(1))))
    assert [layer for layer, _ in numbered] == [layer for layer in ALLOWED if layer in dict(numbered)]
    assert [number for _, number in numbered] == list(range(1, len(numbered) + 1)), numbered
    assert dict(numbered) == {"archive": 1, "store": 2, "backend": 3, "nodes": 4}
