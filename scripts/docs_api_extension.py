"""How the API reference reads ncore_like's docstrings: a griffe extension, loaded by
mkdocstrings (``mkdocs.yml``) when the site is built.

* **Sphinx roles become cross-references.** The docstrings name other objects the Sphinx
  way (``:class:`~ncore_like.RecordCache```, ``:meth:`read```), which Markdown would show
  as is. Each role becomes a link to the object's entry in the reference, written the way
  Sphinx shows it: ``~`` keeps the last name only, functions and methods get ``()``. Names
  are resolved as Python would from the docstring's own scope (``read`` in a method of
  ``IndexedTarArchive`` is ``IndexedTarArchive.read``), then from the package's top level.
  Objects the reference doesn't show stay code, without a link.
* **Signatures show values, not the names of constants.** A parameter defaulting to a
  public module constant (``max_open=DEFAULT_MAX_OPEN``) shows the constant's value
  (``max_open=64``), in the signature and in the parameter's description.

``tests/test_docs_site.py`` checks the rendered pages for roles and constants left over.
"""

from __future__ import annotations

import contextlib
import html
import re
from collections.abc import Callable, Iterator
from typing import Any

import griffe

#: A Sphinx cross-reference role: ``:class:`Name```, ``:py:meth:`~mod.Class.method```,
#: ``:func:`title <target>```.
ROLE = re.compile(r":(?:py:)?(?P<role>class|func|meth|attr|data|const|exc|obj|mod|type):`(?P<content>[^`]+)`")
_TITLED = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")
_CALLED = frozenset({"func", "meth"})
#: A public constant by naming convention.
CONSTANT = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*")


def convert_roles(text: str, identify: Callable[[str], str | None]) -> str:
    """``text`` with every Sphinx role replaced by a cross-reference ``<autoref>`` tag (which
    mkdocs-autorefs turns into a link, or into plain code if the reference doesn't show the
    object), or by inline code where ``identify`` (a target -> its full dotted path, or
    ``None``) doesn't know the target."""

    def replace(match: re.Match[str]) -> str:
        content = match["content"].strip()
        titled = _TITLED.match(content)
        target = (titled["target"] if titled else content).strip()
        linked = not target.startswith("!")
        target = target.lstrip("!")
        short = target.startswith("~")
        target = target.lstrip("~").lstrip(".")
        if titled:
            shown = titled["title"]
        else:
            shown = target.rsplit(".", 1)[-1] if short else target
            if match["role"] in _CALLED:
                shown += "()"
        code = f"<code>{html.escape(shown)}</code>"
        identifier = identify(target) if linked else None
        if identifier is None:
            return code
        return f'<autoref identifier="{html.escape(identifier)}" optional>{code}</autoref>'

    return ROLE.sub(replace, text)


def find(scope: griffe.Object | griffe.Alias, target: str) -> griffe.Object | griffe.Alias | None:
    """The object ``target`` (a dotted name) names in the docstring of ``scope``: resolved
    from the scope outwards, else as a full path, else from the package's top level."""
    collection = scope.modules_collection
    first, dot, rest = target.partition(".")
    paths = [target, f"{scope.package.path}.{target}"]
    with contextlib.suppress(griffe.NameResolutionError):
        paths.insert(0, scope.resolve(first) + dot + rest)
    for path in paths:
        try:
            return collection[path]  # type: ignore[no-any-return]
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
    return None


def identifier(found: griffe.Object | griffe.Alias) -> str:
    """The identifier autorefs knows ``found`` by: its canonical path (where it is defined),
    which mkdocstrings registers for every object it renders, whatever name showed it."""
    try:
        return found.canonical_path
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return found.path


def constant_value(function: griffe.Function, default: Any) -> Any:
    """The value to show for a parameter's ``default``: the value of the module constant it
    names, else ``default`` itself."""
    if not isinstance(default, griffe.ExprName) or not CONSTANT.fullmatch(default.name):
        return default
    found = find(function, default.name)
    try:
        target = found.final_target if isinstance(found, griffe.Alias) else found
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return default
    if isinstance(target, griffe.Attribute) and target.value is not None:
        return target.value
    return default


def _objects(root: griffe.Object) -> Iterator[griffe.Object]:
    """``root`` and every object defined in it (not the names it imports)."""
    yield root
    for member in root.members.values():
        if not member.is_alias:
            assert isinstance(member, griffe.Object)
            yield from _objects(member)


class SphinxRolesAndConstants(griffe.Extension):
    """Rewrites a loaded package's docstrings and signatures as the module's docstring says."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _objects(pkg):
            if obj.docstring is not None and ROLE.search(obj.docstring.value):
                scope = obj

                def identify(target: str, scope: griffe.Object = scope) -> str | None:
                    found = find(scope, target)
                    return None if found is None else identifier(found)

                obj.docstring.value = convert_roles(obj.docstring.value, identify)
                obj.docstring.__dict__.pop("parsed", None)  # parsed again from the new text
            if isinstance(obj, griffe.Function):
                for parameter in obj.parameters:
                    parameter.default = constant_value(obj, parameter.default)
