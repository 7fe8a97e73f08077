"""The package's import graph, read from the source with ``ast`` (nothing is imported), and
the layer diagram of ``docs/architecture.md`` rendered from it.

Import statements count wherever they are (functions, classes, try blocks), and so do
imports by name: ``importlib.import_module("...")`` and ``__import__("...")`` calls whose
name is a constant string (relative names resolved against the module's package).

Run ``python -m tests.support.architecture`` to print the diagram (paste it between the
markers of the page; ``tests/test_architecture.py`` fails while the page differs).
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "ncore_like"

#: Layers, lowest first, with the modules (or packages) of each. Every module of the
#: package belongs to exactly one.
LAYERS: dict[str, tuple[str, ...]] = {
    "foundation": (
        "errors",
        "_defaults",
        "_lru",
        "_lazy",
        "_log",
        "_concurrency",
        "_codecs",
        "_buffers",
        "_signals",
        "_json",
    ),
    "compat": ("_compat",),
    "archive": ("archive",),
    "store": ("store",),
    "backend": ("backend",),
    "nodes": ("nodes",),
    "dataset": ("dataset",),
    "xarray": ("xarray_backend",),
    "cluster": ("cluster",),
    "pack": ("_pack",),
    "viewer": ("viewer",),
    "cli": ("cli", "demo", "__main__"),
    "package": ("__init__",),
}

#: Which layers each layer may import at run time (the one-way dependencies).
ALLOWED: dict[str, frozenset[str]] = {
    "foundation": frozenset({"foundation"}),
    "compat": frozenset({"foundation"}),
    "archive": frozenset({"foundation"}),
    "store": frozenset({"foundation", "compat", "archive"}),
    "backend": frozenset({"foundation", "compat", "archive", "store"}),
    "nodes": frozenset({"foundation", "compat", "archive", "store", "backend"}),
    "dataset": frozenset({"foundation", "compat", "archive", "store", "backend", "nodes"}),
    "xarray": frozenset({"foundation", "archive", "store", "backend", "nodes"}),
    "cluster": frozenset({"foundation"}),
    "pack": frozenset({"foundation", "compat", "archive", "store", "backend", "nodes", "cluster"}),
    "viewer": frozenset({"foundation", "compat", "archive", "store", "backend", "nodes"}),
    "cli": frozenset(
        {"foundation", "compat", "archive", "store", "backend", "nodes", "cluster", "pack", "viewer", "package"}
    ),
    "package": frozenset({"foundation", "archive", "store", "backend", "nodes", "pack", "viewer"}),
}


@dataclass(frozen=True)
class Import:
    """One import statement of a module of the package."""

    module: str
    """The importing module, dotted (``ncore_like.store._base``)."""
    target: str
    """The imported module, dotted and absolute (``zarr.storage``, ``ncore_like.nodes``)."""
    type_checking: bool
    """True inside ``if TYPE_CHECKING:`` (annotations only, never run)."""
    line: int
    dynamic: bool = False
    """True for an import by name (``importlib.import_module``, ``__import__``)."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_by_name(call: ast.Call, package: str) -> str | None:
    """The module a call ``importlib.import_module(NAME[, PACKAGE])`` or ``__import__(NAME)``
    imports, if ``NAME`` is a constant string."""
    function = call.func
    by_attribute = isinstance(function, ast.Attribute) and function.attr == "import_module"
    by_name = isinstance(function, ast.Name) and function.id in ("import_module", "__import__")
    if not (by_attribute or by_name):
        return None
    if not call.args or not isinstance(call.args[0], ast.Constant) or not isinstance(call.args[0].value, str):
        return None
    name: str = call.args[0].value
    if not name.startswith("."):
        return name
    # import_module's package argument if it is a constant, else the module's own package.
    anchor = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "package"), None)
    if isinstance(anchor, ast.Constant) and isinstance(anchor.value, str):
        package = anchor.value
    level = len(name) - len(name.lstrip("."))
    base = package.split(".")
    base = base[: len(base) - (level - 1)]
    rest = name[level:]
    return ".".join([*base, rest] if rest else base)


def _imports(tree: ast.AST, module: str, package: str, type_checking: bool = False) -> Iterator[Import]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), module, package, True)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), module, package, type_checking)
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, type_checking, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            # ``from .. import _compat`` imports the submodule alone (its package runs as the
            # parent of every module anyway): no edge to the package's own layer.
            submodules_only = node.module is None and all(
                _module_path(f"{target}.{alias.name}") is not None for alias in node.names
            )
            if not submodules_only:
                yield Import(module, target, type_checking, node.lineno)
            if node.module is None or node.level:
                # ``from . import _root``: the names may be modules themselves.
                for alias in node.names:
                    candidate = f"{target}.{alias.name}"
                    if _module_path(candidate) is not None:
                        yield Import(module, candidate, type_checking, node.lineno)
        else:
            if isinstance(node, ast.Call):
                target = _imported_by_name(node, package)
                if target is not None:
                    yield Import(module, target, type_checking, node.lineno, dynamic=True)
            # Imports inside functions, classes, try blocks, expressions... count too.
            yield from _imports(node, module, package, type_checking)


def _module_path(dotted: str) -> Path | None:
    path = REPO.joinpath(*dotted.split("."))
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return None


def package_imports() -> list[Import]:
    """Every import statement of every module of ``ncore_like``."""
    found: list[Import] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        found.extend(_imports(tree, module, package))
    return found


def layer_of(module: str) -> str | None:
    """The layer of a module of the package (None for modules outside it)."""
    parts = module.split(".")
    if parts[0] != "ncore_like":
        return None
    first = parts[1] if len(parts) > 1 else "__init__"
    for layer, members in LAYERS.items():
        if first in members:
            return layer
    raise AssertionError(f"module {module} belongs to no layer: add it to LAYERS")


def layer_edges(imports: list[Import]) -> set[tuple[str, str]]:
    """Run-time dependencies between different layers: (importer, imported)."""
    edges = set()
    for item in imports:
        source, target = layer_of(item.module), layer_of(item.target)
        if not item.type_checking and target is not None and source != target:
            assert source is not None
            edges.add((source, target))
    return edges


#: Characters of a line of the diagram (the docs site's code column); longer lists wrap.
DIAGRAM_COLUMNS = 88


def render_diagram(edges: set[tuple[str, str]]) -> str:
    """The layers from top to bottom, each with the layers it imports at run time (long lists
    wrapped at :data:`DIAGRAM_COLUMNS`)."""
    width = max(len(layer) for layer in LAYERS)
    lines = []
    for layer in reversed(list(LAYERS)):
        below = [target for target in LAYERS if (layer, target) in edges]
        prefix = f"{layer:<{width}}  ->  "
        text = ", ".join(below) if below else "(nothing of the package)"
        first, *rest = textwrap.wrap(text, DIAGRAM_COLUMNS - len(prefix))
        lines += [prefix + first, *(" " * len(prefix) + part for part in rest)]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_diagram(layer_edges(package_imports())))
