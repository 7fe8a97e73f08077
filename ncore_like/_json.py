"""JSON text of node metadata as ``json.dumps(..., indent=...)`` writes it, faster.

zarr-python writes node metadata indented, and json's indented encoder is pure Python,
built anew on every call: ~4 us for an array's ``.zattrs`` of one attribute, a noticeable
share of creating an array of a camera frame. The encoder here handles the plain values
node metadata is made of and leaves everything else to json itself, errors included.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["JSON_INDENT", "encode_json", "indented_json"]

#: zarr-python 3's default indent of node metadata JSON (its ``json_indent`` setting).
JSON_INDENT = 2


def encode_json(document: Any, indent: int | None = JSON_INDENT) -> bytes:
    """A node metadata document as zarr-python 3 serialises it."""
    return indented_json(document, indent).encode()


def indented_json(document: Any, indent: int | None) -> str:
    """``json.dumps(document, allow_nan=True, indent=indent)``, character for character."""
    if type(indent) is int and indent >= 0:
        try:
            return _plain_json(document, "\n", "\n" + " " * indent)
        except (_NotPlain, RecursionError):  # e.g. numpy scalars, int keys, a cycle
            pass
    return json.dumps(document, allow_nan=True, indent=indent)


class _NotPlain(Exception):
    """A value :func:`_plain_json` leaves to json."""


_escaped = json.encoder.encode_basestring_ascii  # json's own (its C version where built)
_int_text = int.__repr__
_float_text = float.__repr__


def _plain_json(value: Any, margin: str, step: str) -> str:
    """JSON text of ``value`` as json's indented encoder writes it on a line starting with
    ``margin`` (a newline and the indent so far); ``step`` is a newline and one indent.
    Exact types only: json's handling of subclasses (``str`` or ``int`` enums) is its own."""
    kind = type(value)
    if kind is str:
        return _escaped(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if kind is int:
        return _int_text(value)
    if kind is float:
        if value != value:
            return "NaN"
        if value in (math.inf, -math.inf):
            return "Infinity" if value > 0 else "-Infinity"
        return _float_text(value)
    inner = margin + step[1:]
    if kind is dict:
        if not value:
            return "{}"
        items = []
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            items.append(_escaped(key) + ": " + _plain_json(item, inner, step))
        return "{" + inner + ("," + inner).join(items) + margin + "}"
    if kind is list or kind is tuple:
        if not value:
            return "[]"
        return "[" + inner + ("," + inner).join([_plain_json(item, inner, step) for item in value]) + margin + "]"
    raise _NotPlain
