"""Every common index form reads what numpy reads and takes the fast path: Python and numpy
integers of any width, 0-d integer arrays, negative indices, tuples mixing them with
slices, Ellipsis, integer lists and arrays on the first axis (property tests against numpy;
the fast path is seen in the backend's counts)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ncore_like import BloscCompression, IndexedTarZarrStore
from ncore_like.backend._selection import basic_dims, canonical, expanded, is_basic

SHAPE = (13, 7, 5)
ROWS = (20, 6)
PARTS = (9, 4, 3)  # rows of two dimensions
SIGNED = (int, np.int8, np.int16, np.int32, np.int64, np.intp)
UNSIGNED = (np.uint8, np.uint16, np.uint32, np.uint64)


@pytest.fixture(scope="module")
def arrays(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[Any, np.ndarray[Any, Any]]]]:
    """A block-chunked and a row-chunked array of an archive opened for reading, with their values."""
    path: Path = tmp_path_factory.mktemp("selections") / "a.itar"
    block = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
    rows = np.arange(np.prod(ROWS), dtype=np.int16).reshape(ROWS) - 50
    parts = np.arange(np.prod(PARTS), dtype=np.float64).reshape(PARTS) / 7
    with IndexedTarZarrStore(path, "w") as store:
        root = store.create_root_group({})
        root.create_array("block", block, chunks=(4, 3, 5), compression=BloscCompression())
        root.create_array("rows", rows, chunks=(1, 6), compression=None)
        root.create_array("parts", parts, chunks=(1, *PARTS[1:]), compression=BloscCompression())
        store.consolidate()
    with IndexedTarZarrStore(path) as store:
        root = store.open_root_group()
        yield {
            name: (root.array(name), values) for name, values in (("block", block), ("rows", rows), ("parts", parts))
        }


@st.composite
def integers(draw: st.DrawFn, size: int) -> Any:
    """An index into a dimension of ``size`` as a user may hold it."""
    index = draw(st.integers(-size, size - 1))
    kinds: list[Any] = [*SIGNED, "0-d"] + (list(UNSIGNED) if index >= 0 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "0-d":
        return np.array(index, dtype=draw(st.sampled_from([np.int64, np.int32] + ([np.uint16] if index >= 0 else []))))
    return kind(index)


@st.composite
def unit_slices(draw: st.DrawFn, size: int) -> slice:
    bound = st.none() | st.integers(-size - 2, size + 2).map(lambda value: draw(st.sampled_from(SIGNED))(value))
    return slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1])))


@st.composite
def selections(draw: st.DrawFn, shape: tuple[int, ...]) -> Any:
    """A basic selection: some leading dimensions as ints or unit-step slices, perhaps an
    Ellipsis among them, as a tuple or a single item."""
    lead = draw(st.integers(0, len(shape)))
    items: list[Any] = [draw(integers(size) | unit_slices(size)) for size in shape[:lead]]
    if draw(st.booleans()):  # an Ellipsis, then items for the last dimensions
        trail = draw(st.integers(0, len(shape) - lead))
        items += [Ellipsis] + [draw(integers(size) | unit_slices(size)) for size in shape[len(shape) - trail :]]
    if len(items) == 1 and draw(st.booleans()):
        return items[0]
    return tuple(items)


@st.composite
def row_lists(draw: st.DrawFn, shape: tuple[int, ...]) -> Any:
    """Integer rows on the first axis (a list or an array of any integer type), perhaps
    followed by unit-step slices."""
    indices = draw(st.lists(st.integers(-shape[0], shape[0] - 1), min_size=1, max_size=6))
    form = draw(st.sampled_from(["list", "int64", "int32", "uint16", "numpy ints"]))
    if form == "list":
        rows: Any = indices
    elif form == "numpy ints":
        rows = [np.int64(index) for index in indices]
    else:
        if form == "uint16":
            indices = [index % shape[0] for index in indices]
        rows = np.array(indices, dtype=form)
    rest = [draw(unit_slices(size)) for size in shape[1 : 1 + draw(st.integers(0, len(shape) - 1))]]
    return (rows, *rest) if rest or draw(st.booleans()) else rows


def assert_reads_as_numpy(array: Any, values: np.ndarray[Any, Any], selection: Any) -> None:
    expected = values[selection]
    before = dict(array.backend.stats)
    result = array.read(selection)
    assert result.shape == expected.shape and np.array_equal(result, expected), selection
    out = np.empty(expected.shape, values.dtype)
    assert array.read(selection, out=out) is out and np.array_equal(out, expected), selection
    assert np.array_equal(array[selection], expected), selection
    taken = {path: count - before.get(path, 0) for path, count in array.backend.stats.items()}
    fallbacks = [path for path, count in taken.items() if count and path.startswith("fallback")]
    assert not fallbacks, (selection, fallbacks)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_basic_selections_read_as_numpy_on_the_fast_path(arrays: dict[str, Any], data: st.DataObject) -> None:
    for name in ("block", "rows"):
        array, values = arrays[name]
        assert_reads_as_numpy(array, values, data.draw(selections(values.shape), label=name))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_integer_rows_on_the_first_axis_read_as_numpy_on_the_fast_path(
    arrays: dict[str, Any], data: st.DataObject
) -> None:
    for name in ("block", "rows"):
        array, values = arrays[name]
        assert_reads_as_numpy(array, values, data.draw(row_lists(values.shape), label=name))


@st.composite
def parts_of_a_row(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[Any, ...]:
    """A row by index, then what to take of it (``poses[t, :3]``): ints (out of bounds too),
    unit-step slices, an Ellipsis, sometimes one item too many."""
    row = draw(integers(shape[0]))
    items: list[Any] = []
    for size in shape[1 : 1 + draw(st.integers(0, len(shape)))]:  # one past the last dimension
        items.append(draw(st.integers(-size - 2, size + 1) | unit_slices(size) | st.just(Ellipsis)))
    return (row, *items)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_parts_of_a_row_read_as_numpy_on_the_row_path(arrays: dict[str, Any], data: st.DataObject) -> None:
    """A part of one row is that row read whole and numpy's indexing of it: the values numpy
    gives, and numpy's IndexError (the general path's) for indices it refuses."""
    array, values = arrays["parts"]
    selection = data.draw(parts_of_a_row(values.shape))
    try:
        values[selection]
    except IndexError:
        # the general path's error, with the array named (not numpy's about the row's axes)
        problem = r"array 'parts' of .*: .*(index out of bounds for dim|too many indices for array|single ellipsis)"
        with pytest.raises(IndexError, match=problem):
            array.read(selection)
        with pytest.raises(IndexError, match=problem):
            array[selection]
        return
    before = array.backend.stats.get("fast", 0)
    assert_reads_as_numpy(array, values, selection)
    assert array.backend.stats.get("fast", 0) == before + 3  # read, read(out=), array[...]: the row path


def maybe_with_an_ellipsis(draw: st.DrawFn, items: list[Any]) -> tuple[Any, ...]:
    """``items`` as a tuple, an Ellipsis inserted somewhere half the time."""
    if draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), Ellipsis)
    return tuple(items)


@st.composite
def index_array_selections(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[Any, ...]:
    """Tuples with index arrays among ints, slices and an Ellipsis: lists, integer arrays and
    masks (of the right length, mostly), one or several."""
    items: list[Any] = []
    for size in shape[: draw(st.integers(1, len(shape)))]:
        kind = draw(st.sampled_from(["int", "slice", "list", "array", "mask", "mask"]))
        if kind == "int":
            items.append(draw(st.integers(-size, size - 1)))
        elif kind == "slice":
            items.append(draw(unit_slices(size)))
        elif kind == "mask":
            length = size if draw(st.integers(0, 5)) else size + draw(st.sampled_from([-1, 1]))
            items.append(np.array(draw(st.lists(st.booleans(), min_size=length, max_size=length)), bool))
        else:
            indices = draw(st.lists(st.integers(-size, size - 1), min_size=1, max_size=4))
            dtype = draw(st.sampled_from([np.int64, np.uint8]))
            if dtype is np.uint8:
                indices = [index % size for index in indices]
            items.append(indices if kind == "list" else np.array(indices, dtype))
    return maybe_with_an_ellipsis(draw, items)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_index_arrays_read_as_numpy_or_are_refused(arrays: dict[str, Any], data: st.DataObject) -> None:
    """numpy pairs index arrays (a[mask, mask] takes elements, not a block): every read is
    numpy's result, or an IndexError (numpy's own, or a refusal saying what isn't supported),
    never other values or another shape."""
    for name in ("block", "parts"):
        array, values = arrays[name]
        selection = data.draw(index_array_selections(values.shape), label=name)
        try:
            expected = values[selection]
        except IndexError:
            expected = None
        for read in (array.read, array.__getitem__):
            if expected is None:
                with pytest.raises(IndexError, match=f"array '{name}' of "):
                    read(selection)
                continue
            try:
                result = read(selection)
            except IndexError as error:  # a refusal: it must say what isn't supported
                assert "not supported" in str(error) or "unsupported" in str(error), (selection, error)
                continue
            assert result.shape == expected.shape and np.array_equal(result, expected), selection


@pytest.mark.parametrize(
    "selection",
    [
        (np.array([0, 1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0], bool), np.array([1, 0, 0, 1, 1, 0, 0], bool), 2),
        (np.array([1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0], bool), [6, 0], np.array([0, 1, 0, 0, 0], bool)),
        ([3, 4, 5], [1, 1, 0], -1),
        (Ellipsis, [4, 0]),
        (2, np.array([1, 0, 1, 0, 1, 0, 0], bool), Ellipsis),
        ([3, -1], slice(1, 4), 0),
    ],
    ids=["two masks", "mask, list, mask", "lists", "Ellipsis, list", "int, mask, Ellipsis", "list, slice, int"],
)
def test_index_arrays_numpy_pairs_are_read(arrays: dict[str, Any], selection: tuple[Any, ...]) -> None:
    """The forms with index arrays that are read (none refused), as numpy reads them."""
    array, values = arrays["block"]
    expected = values[selection]
    for result in (array.read(selection), array[selection]):
        assert result.shape == expected.shape and np.array_equal(result, expected)


@pytest.mark.parametrize(
    "selection",
    [
        (slice(None), np.array([-1, 3])),
        (0, 0, np.array([-2, 1], np.int64)),
        (np.array([-1, 2]), np.array([-3, 0]), 1),
        (Ellipsis, np.array([-3, 2], np.int32)),
        (slice(2, 9), np.array([3, 0], np.uint8)),
    ],
    ids=["second axis", "last axis", "paired", "after Ellipsis", "uint8 past the first chunk"],
)
@pytest.mark.parametrize("name", ["block", "parts"])
def test_index_arrays_are_read_as_numpy_and_left_as_given(
    arrays: dict[str, Any], name: str, selection: tuple[Any, ...]
) -> None:
    """The caller's index arrays (a sampler's) are not changed by a read: zarr-python wraps
    negative indices in the arrays it is given."""
    array, values = arrays[name]
    given = [item.copy() for item in selection if type(item) is np.ndarray]
    expected = values[selection]
    for result in (array.read(selection), array[selection]):
        assert result.shape == expected.shape and np.array_equal(result, expected)
    after = [item for item in selection if type(item) is np.ndarray]
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(given, after, strict=True))


@pytest.mark.parametrize("selection", [np.ones(5, bool), [True, False], (slice(None), np.ones(3, bool))])
@pytest.mark.parametrize("name", ["block", "parts"])
def test_a_mask_of_another_length_than_its_dimension_says_so(arrays: dict[str, Any], name: str, selection: Any) -> None:
    array, values = arrays[name]
    with pytest.raises(IndexError):
        values[selection]
    with pytest.raises(IndexError, match=f"array '{name}' of .*boolean index did not match the array along dim"):
        array.read(selection)


@pytest.mark.parametrize("selection", [slice(None, None, 0), (0, slice(1, 2, 0))], ids=["a[::0]", "a[0, 1:2:0]"])
def test_a_step_of_zero_is_numpys_error_with_the_array_named(arrays: dict[str, Any], selection: Any) -> None:
    array, values = arrays["block"]
    with pytest.raises(ValueError):
        values[selection]
    for read in (array.read, array.__getitem__):
        with pytest.raises(ValueError, match=r"array 'block' of .*a\.itar: slice step cannot be zero"):
            read(selection)


@st.composite
def stepped_selections(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[Any, ...]:
    """Basic selections whose slices take any step, negative ones included."""
    items: list[Any] = []
    for size in shape[: draw(st.integers(1, len(shape)))]:
        if draw(st.booleans()):
            items.append(draw(st.integers(-size, size - 1)))
        else:
            bound = st.none() | st.integers(-size - 2, size + 2)
            items.append(slice(draw(bound), draw(bound), draw(st.sampled_from([-3, -2, -1, 2, 3]))))
    return maybe_with_an_ellipsis(draw, items)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_slices_of_any_step_read_as_numpy_by_every_read(arrays: dict[str, Any], data: st.DataObject) -> None:
    """``read``, ``read(out=)``, ``[]`` and ``read_async`` alike: negative steps as numpy takes
    them (read with a positive step and flipped)."""
    for name in ("block", "parts"):
        array, values = arrays[name]
        selection = data.draw(stepped_selections(values.shape), label=name)
        try:
            expected = values[selection]
        except IndexError:  # an int the Ellipsis moved out of bounds
            with pytest.raises(IndexError, match=f"array '{name}' of "):
                array.read(selection)
            continue
        out = np.empty(expected.shape, values.dtype)
        results = (array.read(selection), array[selection], asyncio.run(array.read_async(selection)))
        assert array.read(selection, out=out) is out
        for result in (*results, out):
            assert result.shape == expected.shape and np.array_equal(result, expected), selection


@pytest.mark.parametrize("index", [5, -3, np.int64(5), np.uint8(5), np.int16(-3), np.array(5), np.array(-3, np.int32)])
def test_every_integer_form_takes_the_row_path(arrays: dict[str, Any], index: Any) -> None:
    array, values = arrays["rows"]
    before = array.backend.stats.get("fast", 0)
    row, again = array.read(index), array.read((index,))
    assert row.shape == values[index].shape and np.array_equal(row, values[index])
    assert np.array_equal(again, values[index])
    assert array.backend.stats.get("fast", 0) == before + 2


def test_canonical_forms() -> None:
    assert canonical(np.int64(3)) == 3 and type(canonical(np.int64(3))) is int
    assert canonical((np.uint32(2), slice(1, 3), Ellipsis)) == (2, slice(1, 3), Ellipsis)
    assert canonical((np.array(4),)) == 4 and type(canonical(np.array(-1, np.int8))) is int
    mask = np.array([True, False])
    assert canonical(mask) is mask and canonical(True) is True and canonical(np.bool_(True)) == np.bool_(True)
    assert canonical([np.int64(1), 2]) == [1, 2]  # lists stay what they are (numpy's meaning)
    assert expanded((1, Ellipsis, 2), 4) == [1, slice(None), slice(None), 2]
    assert expanded((Ellipsis, Ellipsis), 3) is None and expanded((1, 2, 3), 2) is None
    assert basic_dims((-1, slice(None, 2)), (4, 5)) == [3, (0, 2)]
    assert basic_dims((4,), (4,)) is None and basic_dims(slice(0, 4, 2), (4,)) is None
    assert is_basic((1, slice(None), Ellipsis)) and not is_basic((slice(None, None, 2),)) and not is_basic([1])
