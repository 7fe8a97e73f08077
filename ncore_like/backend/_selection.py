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


def _index_array(item: Any) -> bool:
    return type(item) is list or type(item) is np.ndarray


def _index_values(item: Any) -> np.ndarray[Any, Any]:
    """An index array as a new array of numpy's ``intp``: zarr-python wraps negative indices
    in the array it is given (the caller's indices would change) and misplaces small unsigned
    ones past the first chunk of a dimension. uint64 beyond ``intp`` stays as it is (out of
    bounds: zarr-python's error, not a negative index); masks stay masks."""
    values = np.asarray(item)
    unsigned64 = values.dtype.kind == "u" and values.dtype.itemsize == 8
    if values.dtype.kind not in "iu" or (unsigned64 and values.max(initial=0) > np.iinfo(np.intp).max):
        return values
    return np.array(values, dtype=np.intp)


def paired_arrays(selection: Any, shape: tuple[int, ...]) -> Any:
    """A canonical selection with index arrays (lists, integer or boolean arrays) as numpy
    reads it, in a form zarr-python reads alike; ``selection`` itself without them.

    numpy pairs two or more index arrays: ``a[rows, cols]`` takes ``a[rows[k], cols[k]]``, a
    mask standing for its ``nonzero()`` indices. zarr-python's ``[]`` pairs integer arrays
    too, but indexes each dimension by its own mask when there is one (``a[mask, mask]``
    would read a block): the masks are given as their indices. One index array selects along
    its dimension in both, but zarr-python takes no Ellipsis with it (``a[..., [2, 0]]``:
    spelled out as slices) and keeps the array's dimension in place where numpy moves it
    first (integers and the array apart, a slice before the array: ``a[0, :, [2, 0]]`` has
    the shape ``(2, n)``). Integer arrays are copied as ``intp`` (see :func:`_index_values`).

    Raises:
        IndexError: Where numpy raises one (a mask of another length than its dimension,
            index arrays that don't broadcast together), and for what is not supported
            rather than read otherwise than numpy: paired index arrays with slices (or
            fewer items than dimensions), an index array's dimension numpy moves first.
    """
    if type(selection) is not tuple:
        if not (_index_array(selection) and np.ndim(selection) == 1):
            return selection
        selection = (selection,)  # rows by index or a mask: checked as the first item
    arrays = [position for position, item in enumerate(selection) if _index_array(item)]
    if not arrays:
        return selection
    if any(np.ndim(selection[position]) != 1 for position in arrays):
        return selection  # masks or index arrays of several dimensions: zarr-python's (errors)
    spelled = expanded(selection, len(shape))
    if spelled is None:
        return selection  # zarr-python's error
    items = [_index_values(item) if _index_array(item) else item for item in spelled]
    masks = [axis for axis, item in enumerate(items) if type(item) is np.ndarray and item.dtype == np.bool_]
    for axis in masks:
        if len(items[axis]) != shape[axis]:
            raise IndexError(
                f"boolean index did not match the array along dimension {axis}: the dimension is "
                f"{shape[axis]} long, the boolean index {len(items[axis])}"
            )
    if len(arrays) == 1:
        _check_in_place(selection, items)
        return tuple(items)
    for axis in masks:
        items[axis] = items[axis].nonzero()[0]
    if any(type(item) is slice for item in items):
        raise IndexError(
            "index arrays numpy pairs (a[rows, cols] takes a[rows[k], cols[k]]) are not supported with slices "
            f"or fewer items than the {len(shape)} dimensions: give one integer or index array per dimension, "
            "or read the slices first and index the result with numpy"
        )
    try:
        np.broadcast_shapes(*(item.shape for item in items if type(item) is np.ndarray))
    except ValueError:
        shapes = " ".join(str(item.shape) for item in items if type(item) is np.ndarray)
        raise IndexError(
            f"shape mismatch: indexing arrays could not be broadcast together with shapes {shapes}"
        ) from None
    return tuple(items)


def _check_in_place(selection: tuple[Any, ...], spelled: list[Any]) -> None:
    """Raises IndexError where numpy moves the one index array's dimension first: integers
    and the array apart in ``selection`` (a slice or an Ellipsis between them, even one of
    no dimensions) and a slice before the array once spelled out."""
    advanced = [position for position, item in enumerate(selection) if type(item) is int or _index_array(item)]
    apart = advanced[-1] - advanced[0] + 1 != len(advanced)
    array_axis = next(axis for axis, item in enumerate(spelled) if type(item) is np.ndarray)
    if apart and any(type(item) is slice for item in spelled[:array_axis]):
        raise IndexError(
            "an integer and an index array apart, with a slice before the array: numpy puts the array's "
            "dimension first (a[0, :, [2, 0]] has the shape (2, n)); not supported: select with a slice of "
            "length 1 instead of the integer (a[0:1, :, [2, 0]][0]), or transpose the result"
        )
