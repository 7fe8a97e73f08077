"""Selections, normalised in one place.

Users index with what they have at hand: Python ints, numpy integers of any width (from
``rng.integers``, a sampler, ``np.arange``), 0-d integer arrays, negative indices, tuples
mixing them with slices, ``Ellipsis``. :func:`canonical` turns every integer into a Python
``int`` (and a 1-tuple into its item, as numpy reads ``a[(i,)]`` as ``a[i]``), so the fast
paths test one type; :func:`first_axis` does the same for ``a[i, :]`` and ``a[i, ...]``,
which numpy reads as ``a[i]`` too (and ``a[rows, :]`` as ``a[rows]``); :func:`expanded`
spells a selection out one item per dimension. The planner (:func:`basic_dims`), the shape
of a read and the writes of the typed layer all take selections through these functions.
"""

from __future__ import annotations

from types import EllipsisType
from typing import Any

import numpy as np

__all__ = ["NUMPY_INTEGERS", "basic_dims", "canonical", "expanded", "first_axis", "is_basic"]

#: The types of numpy's integer scalars (indices from ``numpy.arange``, ``rng.integers``...):
#: a set lookup, cheaper than ``isinstance(selection, np.integer)``.
NUMPY_INTEGERS = frozenset(np.dtype(code).type for code in np.typecodes["AllInteger"])

Dim = int | tuple[int, int]
"""An index, or the ``[start, stop)`` a unit-step slice takes."""


def _item(item: Any) -> Any:
    if type(item) is int or type(item) is slice or item is Ellipsis:
        return item
    if isinstance(item, np.integer):  # numpy's bool is no integer: masks stay masks
        return int(item)
    if type(item) is np.ndarray and item.ndim == 0 and item.dtype.kind in "iu":
        return int(item)
    return item


def canonical(selection: Any) -> Any:
    """``selection`` with numpy integers and 0-d integer arrays as ``int``, within tuples
    too, and a 1-tuple as its item; anything else (lists, arrays, masks, bools) unchanged."""
    if type(selection) is int:  # the most common case first: a row
        return selection
    if type(selection) in NUMPY_INTEGERS or isinstance(selection, np.integer):  # then a row by a numpy index
        return int(selection)
    if type(selection) is tuple:
        if len(selection) == 1:
            return _item(selection[0])
        for item in selection:
            if not (type(item) is int or type(item) is slice or item is Ellipsis):
                return tuple([_item(item) for item in selection])
        return selection  # canonical already (``a[i, :]``): no new tuple
    return _item(selection)


_ALL = slice(None)


def first_axis(selection: Any, ndim: int) -> Any:
    """For a canonical tuple whose first item is an int, a slice, a list or a 1-d array
    (rows by index, or a mask) and whose other items are full slices (``:``) and at most one
    ``Ellipsis``, in no more items than ``ndim`` takes, that first item: numpy reads
    ``a[i, :]``, ``a[i, ...]``, ``a[t:u, :]`` and ``a[rows, :]`` as ``a[i]``, ``a[t:u]``
    and ``a[rows]`` (whole rows, for the row readers). ``selection`` itself otherwise
    (invalid tuples included: they keep their errors)."""
    if type(selection) is not tuple or not selection:
        return selection
    first = selection[0]
    kind = type(first)
    if not (kind is int or kind is slice or kind is list or (kind is np.ndarray and first.ndim == 1)):
        return selection
    if len(selection) == 2:  # the common case: a[i, :] or a[i, ...]
        item = selection[1]
        whole = item is Ellipsis or (type(item) is slice and item == _ALL and ndim > 1)
        return first if whole else selection
    ellipses = 0
    for item in selection[1:]:
        if item is Ellipsis:
            ellipses += 1
        elif type(item) is not slice or item != _ALL:
            return selection
    if ellipses > 1 or len(selection) - ellipses > ndim:
        return selection
    return first


def expanded(selection: Any, ndim: int) -> list[Any] | None:
    """The items of a canonical selection, one per dimension: its ``Ellipsis`` (at most one)
    and the missing trailing dimensions as full slices; None for more than one ``Ellipsis``
    or more items than dimensions (numpy's errors)."""
    items = selection if type(selection) is tuple else (selection,)
    ellipses = sum(1 for item in items if item is Ellipsis)
    if ellipses > 1:
        return None
    fill = ndim - (len(items) - ellipses)
    if fill < 0:
        return None
    result: list[Any] = []
    for item in items:
        if item is Ellipsis:
            result.extend([slice(None)] * fill)
            fill = 0
        else:
            result.append(item)
    result.extend([slice(None)] * fill)
    return result


def basic_dims(selection: Any, shape: tuple[int, ...]) -> list[Dim] | None:
    """Per dimension, the index or the ``[start, stop)`` a canonical selection of ints,
    unit-step slices and at most one ``Ellipsis`` takes; None for anything else or anything
    invalid (zarr-python's indexers then plan it, or raise its error)."""
    items = expanded(selection, len(shape))
    if items is None:
        return None
    dims: list[Dim] = []
    for item, size in zip(items, shape, strict=True):
        if type(item) is int:  # bool (an int subclass) is excluded
            index = item + size if item < 0 else item
            if not 0 <= index < size:
                return None
            dims.append(index)
        elif type(item) is slice and item.step in (None, 1):
            start, stop, _ = item.indices(size)
            dims.append((start, max(start, stop)))
        else:
            return None
    return dims


def is_basic(selection: Any) -> bool:
    """True for a canonical selection of ints, unit-step slices and ``Ellipsis`` (what
    writes take)."""
    items = selection if type(selection) is tuple else (selection,)
    return all(
        type(item) is int or isinstance(item, EllipsisType) or (type(item) is slice and item.step in (None, 1))
        for item in items
    )
