"""The indented JSON of node metadata (``ncore_like._json``) is json's own, character for
character: zarr-python reads what json writes, and archives written by either zarr-python
version must stay identical."""

from __future__ import annotations

import enum
import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ncore_like._json import encode_json, indented_json

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()  # any code point: escapes, surrogates, non-ASCII
)
_documents = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=2000, deadline=None)
@given(document=_documents, indent=st.sampled_from([None, 0, 1, 2, 4]))
def test_indented_json_is_jsons_own_text(document: Any, indent: int | None) -> None:
    assert indented_json(document, indent) == json.dumps(document, allow_nan=True, indent=indent)


class _Level(enum.IntEnum):
    LOW = 1


class _Name(enum.StrEnum):
    A = "a"


@pytest.mark.parametrize(
    "document",
    [
        {1: "int key", "x": 1},  # json turns the key into a string
        {None: 1, True: 2, 1.5: 3},
        {"level": _Level.LOW},  # subclasses: json's own spelling
        {"name": _Name.A},
        [float("nan"), math.inf, -math.inf, -0.0, 1e300, 5e-324],
        {"nested": [{"a": []}, {}, [[], [{}]]]},
    ],
    ids=["int-key", "other-keys", "int-enum", "str-enum", "floats", "empty-containers"],
)
def test_unusual_values_are_written_as_json_writes_them(document: Any) -> None:
    for indent in (None, 0, 2):
        assert indented_json(document, indent) == json.dumps(document, allow_nan=True, indent=indent)
    assert encode_json(document) == json.dumps(document, allow_nan=True, indent=2).encode()


def test_what_json_refuses_is_refused_alike() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        indented_json({"t": np.int64(3)}, 2)
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        indented_json({"cycle": cycle}, 2)
