"""What both zarr-python modules of the seam share: turning metadata errors into
:class:`NodeMetadataError`, and the node metadata records ncore_like writes itself, byte
for byte as zarr-python 3 writes them (so archives written under either zarr-python
version are identical)."""

from __future__ import annotations

import contextlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np

from .._json import JSON_INDENT, encode_json, indented_json
from ..errors import NcoreLikeError, NodeMetadataError

__all__ = [
    "JSON_INDENT",
    "JsonTemplate",
    "StorePrimitives",
    "checked_format",
    "empty_bytes",
    "encode_json",
    "group_records_v2",
    "json_document",
    "parsing",
]


class JsonTemplate:
    """A metadata document serialised once (as :func:`encode_json` does) with some values
    left open, filled in per record: json's indented encoder is pure Python (~15 us for a
    ``.zarray``, ~50 us for a ``zarr.json``), the largest cost of creating an array of a few
    megabytes.

    Open values are given in the document as :meth:`hole` strings. A value filled in is
    serialised on its own and indented to its place (json indents a nested value as it
    would at the top, plus its level's indent on each new line), so the text is byte for
    byte :func:`encode_json` of the filled document.
    """

    def __init__(self, document: dict[str, Any], indent: int | None) -> None:
        self.indent = indent
        text = indented_json(document, indent)
        self._pieces: list[str] = []  # text between the holes
        self._holes: list[tuple[str, str]] = []  # (name, the indent of its line)
        start = 0
        while (found := text.find('"\\u0000', start)) >= 0:
            end = text.index('\\u0000"', found + 7) + 7  # '"\\u0000' and '\\u0000"': 7 characters
            line = text[text.rfind("\n", 0, found) + 1 : found]
            self._pieces.append(text[start:found])
            self._holes.append((text[found + 7 : end - 7], line[: len(line) - len(line.lstrip(" "))]))
            start = end
        self._pieces.append(text[start:])

    @staticmethod
    def hole(name: str) -> str:
        """The placeholder of the open value ``name`` in a document."""
        return f"\0{name}\0"

    def render(self, values: dict[str, Any]) -> bytes:
        """The document with each hole's value from ``values``."""
        parts = [self._pieces[0]]
        for (name, margin), piece in zip(self._holes, self._pieces[1:], strict=True):
            parts.append(self._value(values[name], margin))
            parts.append(piece)
        return "".join(parts).encode()

    def _value(self, value: Any, margin: str) -> str:
        indent = self.indent
        if isinstance(value, list | tuple) and all(type(item) is int for item in value):
            # A shape: ints as json writes them, without its encoder.
            if not value:
                return "[]"
            if indent is None:
                return "[" + ", ".join(map(str, value)) + "]"
            inner = "\n" + margin + " " * indent
            return "[" + inner + ("," + inner).join(map(str, value)) + "\n" + margin + "]"
        text = indented_json(value, indent)
        return text.replace("\n", "\n" + margin) if margin else text


def empty_bytes(fill_value: Any, length: int) -> bool:
    """True if ``fill_value`` as fixed-length bytes of ``length`` is all NUL bytes (None: the
    default, empty). Looked at in its own length, not as a blob's worth of zero bytes."""
    if fill_value is None:
        return True
    given = np.asarray(fill_value, dtype="S").tobytes()[:length]
    return given.count(0) == len(given)


def json_document(document: Any) -> Any:
    """A metadata document (zarr-python's ``to_dict()``, with tuples and numpy scalars) as
    JSON decodes it: lists, plain numbers and strings."""

    def plain(value: Any) -> Any:
        item = getattr(value, "item", None)  # numpy scalars
        if item is not None:
            return item()
        raise TypeError(f"{type(value).__name__} in node metadata")

    return json.loads(json.dumps(document, allow_nan=True, default=plain))


def group_records_v2(attributes: dict[str, Any], indent: int | None = JSON_INDENT) -> dict[str, bytes]:
    """The ``.zgroup`` and ``.zattrs`` records of a zarr format 2 group, by name."""
    return {".zgroup": encode_json({"zarr_format": 2}, indent), ".zattrs": encode_json(attributes, indent)}


#: What zarr-python and numcodecs raise for node metadata they can't understand.
_PARSE_ERRORS: tuple[type[Exception], ...] = (TypeError, KeyError, ValueError, AttributeError, IndexError)


@contextlib.contextmanager
def parsing(where: object, path: str, also: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Turns what zarr-python (or numcodecs) raises for node metadata it can't understand
    (damaged JSON: TypeErrors, KeyErrors..., and the classes ``also``) into
    :class:`NodeMetadataError`."""
    try:
        yield
    except (NcoreLikeError, FileNotFoundError):
        raise
    except _PARSE_ERRORS + also as error:
        name = path or "/"
        raise NodeMetadataError(
            f"the metadata of node {name!r} can't be understood ({type(error).__name__}: {error})", archive=str(where)
        ) from error


class StorePrimitives(ABC):
    """The synchronous primitives of a store written once for every zarr-python version
    (e.g. archives): each version's ``SyncZarrStore`` turns them into its store protocol."""

    @abstractmethod
    def value_size(self, key: str) -> int | None:
        """The size of the value of ``key``, None if there is none."""

    @abstractmethod
    def read_value(self, key: str) -> bytes | None:
        """The whole value of ``key``, None if there is none."""

    @abstractmethod
    def read_range(self, key: str, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of the value of ``key`` (which exists)."""

    async def read_value_async(self, key: str) -> bytes | None:
        """:meth:`read_value` without blocking the running loop."""
        return self.read_value(key)

    async def read_range_async(self, key: str, start: int, stop: int) -> bytes:
        """:meth:`read_range` without blocking the running loop."""
        return self.read_range(key, start, stop)

    @abstractmethod
    def exists_sync(self, key: str) -> bool:
        """True if the store holds ``key``."""

    @abstractmethod
    def set_bytes_sync(self, key: str, value: bytes | memoryview) -> None:
        """Stores ``value`` under ``key`` (bytes as they are: no zarr ``Buffer`` around them)."""

    async def set_bytes_async(self, key: str, value: bytes | memoryview) -> None:
        """:meth:`set_bytes_sync` without blocking the running loop."""
        self.set_bytes_sync(key, value)

    def set_many_sync(self, items: Sequence[tuple[str, bytes | memoryview]]) -> None:
        """Stores values in order, as :meth:`set_bytes_sync` one by one (stores that can
        write a batch at once override it)."""
        for key, value in items:
            self.set_bytes_sync(key, value)

    @abstractmethod
    def delete_sync(self, key: str) -> None:
        """Deletes ``key``."""

    @abstractmethod
    def listed_keys(self) -> list[str]:
        """Every key the store lists."""

    def delete_prefix_sync(self, prefix: str) -> None:
        """Deletes every key under ``prefix`` (every key for ``""``): what zarr-python asks
        for when it opens a hierarchy with ``mode="w"``."""
        start = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        for key in self.listed_keys():
            if key.startswith(start):
                self.delete_sync(key)

    @abstractmethod
    def list_dir_sync(self, prefix: str) -> Iterator[str]:
        """Names directly under ``prefix`` (no trailing ``/``; ``""`` for the root)."""


def checked_format(zarr_format: object, formats: tuple[int, ...], zarr_version: str) -> Literal[2, 3]:
    """``zarr_format`` if the installed zarr-python (``formats``) reads and writes it, else a
    ValueError that says what does."""
    if zarr_format not in formats:
        if zarr_format in (2, 3):
            raise ValueError(
                f"zarr format {zarr_format} needs zarr-python 3 (zarr-python {zarr_version} is installed, "
                f"which reads and writes zarr format 2)"
            )
        raise ValueError(f"unsupported zarr format {zarr_format!r} (expected 2 or 3)")
    return zarr_format  # type: ignore[return-value]
