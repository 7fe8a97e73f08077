"""Members of archives opened for reading are looked up as views of their metadata: the
facts the views give are zarr-python's, and lookups and fast reads build no zarr-python
node."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings, strategies as st

from ncore_like import Backend, BloscCompression, IndexedTarArchive, IndexedTarZarrStore, NodeMetadataError
from ncore_like._compat import chunk_key
from tests.support import zarr_api
from tests.support.zarr_version import ZARR_MAJOR

DTYPES_V2 = ["<f4", ">f8", "|u1", "<i2", ">i4", "|b1", "|S7", "<c8", "<M8[ns]", "<u8"]
DTYPES_V3 = ["float32", "float64", "uint8", "int16", "int32", "bool", "complex64", "uint64"]


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="zarr")
        yield


@st.composite
def arrays(draw: st.DrawFn) -> dict[str, Any]:
    zarr_format = draw(st.sampled_from(zarr_api.WRITABLE_FORMATS))
    dtype = np.dtype(draw(st.sampled_from(DTYPES_V2 if zarr_format == 2 else DTYPES_V3)))
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.integers(1, 6)) for _ in range(ndim))
    chunks = tuple(draw(st.integers(1, size)) for size in shape)
    fill: Any = None
    if dtype.kind == "f" and draw(st.booleans()):
        fill = draw(st.sampled_from([float("nan"), float("inf"), -1.5]))
    elif dtype.kind in "iu" and draw(st.booleans()):
        fill = 3
    elif dtype.kind == "b":
        fill = draw(st.booleans())
    compressed = draw(st.booleans())
    separator = draw(st.sampled_from([".", "/"]))
    return {
        "zarr_format": zarr_format, "dtype": dtype, "shape": shape, "chunks": chunks, "fill": fill,
        "compressed": compressed, "separator": separator, "attributes": {"n": draw(st.integers(0, 9)), "s": "x"},
    }  # fmt: skip


def write_with_zarr(path: Path, spec: dict[str, Any]) -> np.ndarray[Any, Any]:
    """An array written by zarr-python itself into an archive (any layout zarr writes)."""
    dtype = spec["dtype"]
    rng = np.random.default_rng(0)
    if dtype.kind == "S":
        values = rng.integers(97, 123, size=(*spec["shape"], dtype.itemsize), dtype=np.uint8).view(dtype)[..., 0]
    elif dtype.kind == "M":
        values = rng.integers(0, 10**9, size=spec["shape"]).astype(dtype)
    else:
        values = (rng.standard_normal(spec["shape"]) * 10).astype(dtype)
    store = IndexedTarZarrStore(path, mode="w")
    if spec["zarr_format"] == 3:  # zarr-python 3 only
        root = zarr.open_group(store.zarr, mode="w", zarr_format=3)
        blosc = zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle")
        array = root.create_array(
            "group/x", shape=spec["shape"], dtype=dtype, chunks=spec["chunks"], fill_value=spec["fill"],
            compressors=blosc if spec["compressed"] else None, attributes=spec["attributes"],
            chunk_key_encoding={"name": "default", "separator": spec["separator"]},
        )  # fmt: skip
    else:
        root = zarr_api.open_group(store.zarr, "w", zarr_format=2)
        array = zarr_api.create_array(
            root, "group/x", shape=spec["shape"], dtype=dtype, chunks=spec["chunks"], fill_value=spec["fill"],
            compressor=BloscCompression().to_numcodecs() if spec["compressed"] else None,
            attributes=spec["attributes"],
        )  # fmt: skip
    if values.size > 1:
        array[(slice(0, 1),) * values.ndim] = values[(slice(0, 1),) * values.ndim]  # some chunks stay unwritten
    store.close()
    return values


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=arrays(), consolidated=st.booleans())
def test_views_give_zarr_pythons_facts(tmp_path: Path, spec: dict[str, Any], consolidated: bool) -> None:
    path = tmp_path / f"v{np.random.default_rng().integers(1 << 60)}.itar"
    write_with_zarr(path, spec)
    if consolidated:
        with _reopen_for_consolidation(path) as rewritten:
            rewritten.consolidate()
    store = IndexedTarZarrStore(path)
    array = store.open_root_group(consolidated=consolidated).group("group").array("x")
    view = array.view
    assert view is not None
    node = zarr.open_array(IndexedTarZarrStore(path).zarr, path="group/x", mode="r")
    assert array.shape == tuple(node.shape) and array.chunks == tuple(node.chunks)
    assert array.dtype == np.dtype(node.dtype)
    assert dict(array.attributes) == dict(node.attrs)
    if view.unsupported is None:
        # zarr format 2's null fill value fills with zeros (as zarr-python reads it).
        fill = node.fill_value if node.fill_value is not None else np.zeros((), node.dtype)[()]
        assert np.asarray(view.fill_value, dtype=view.dtype).tobytes() == np.asarray(fill, dtype=view.dtype).tobytes()
        corner = tuple(max(0, -(-size // chunk) - 1) for size, chunk in zip(node.shape, node.chunks, strict=True))
        assert view.chunk_key(corner) == chunk_key(node, corner)
    # Reads through the view equal zarr-python's, stored chunks and fill values alike.
    if ZARR_MAJOR < 3 and node.fill_value is None:
        # zarr-python 2 leaves unwritten chunks of a null fill value as they are (numpy.empty,
        # or out), where zarr-python 3 and the view fill them: both read into zeros (see
        # test_backend.py::test_unwritten_chunks_of_a_null_fill_value_read_the_same_into_any_out).
        expected = np.zeros(node.shape, node.dtype)
        node.get_basic_selection(Ellipsis, out=expected)
        np.testing.assert_array_equal(array.read(out=np.zeros(node.shape, node.dtype)), expected)
        return
    expected = node[...]
    np.testing.assert_array_equal(array.read(), expected)


def _reopen_for_consolidation(path: Path) -> IndexedTarZarrStore:
    """A writer holding the records of ``path`` (archives are write-once: copy them)."""
    from ncore_like import IndexedTarArchive

    reader = IndexedTarArchive(path)
    records = {key: reader[key] for key in reader.keys()}
    path.unlink()
    store = IndexedTarZarrStore(path, mode="w")
    for key, value in records.items():
        store.archive[key] = value
    return store


@settings(max_examples=200, deadline=None)
@given(value=st.binary(max_size=40), itemsize=st.integers(1, 32), zarr_format=st.sampled_from([2, 3]))
def test_a_bytes_fill_value_is_numpys_element_of_the_dtype(value: bytes, itemsize: int, zarr_format: int) -> None:
    """A fixed-size bytes fill value (base64 in the metadata) is what numpy makes of the
    decoded bytes as an element of the dtype (cut to its size, trailing NULs dropped)."""
    import base64

    from ncore_like.store._metadata import _fill_value

    dtype = np.dtype(f"S{itemsize}")
    found, why = _fill_value(base64.standard_b64encode(value).decode(), dtype, zarr_format)  # type: ignore[arg-type]
    expected = np.array(value, dtype=dtype)[()]
    assert why is None and type(found) is type(expected)
    assert found == expected and found.dtype == expected.dtype


def test_lookups_and_fast_reads_build_no_zarr_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "a.itar"
    frames = {f"{i:03d}": np.arange(i, i + 64, dtype=np.uint8) for i in range(5)}
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({"seq": 1})
        group = root.create_group("frames", attributes={"fps": 10})
        for name, values in frames.items():
            group.create_array(name, values, compression=None, attributes={"i": int(values[0])})
        root.create_array("rows", np.arange(40.0).reshape(10, 4), chunks=(1, 4), compression=BloscCompression())
        root.create_bytes_array("blob", b"\xff\xd8jpeg\x00")
        store.consolidate()
    root = IndexedTarZarrStore(path).open_root_group()
    built: list[str] = []
    for cls in (zarr.Array, zarr.Group):
        original = cls.__init__

        def counting(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> None:
            built.append(type(self).__name__)
            _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counting)
    group = root.group("frames")
    assert group.attributes == {"fps": 10} and group.members() == sorted(frames)
    for name, values in frames.items():
        array = group.array(name)
        assert array.shape == values.shape and array.dtype == values.dtype and array.attributes == {"i": int(values[0])}
        np.testing.assert_array_equal(array.read(), values)
        np.testing.assert_array_equal(root.array(f"frames/{name}").read(np.s_[3:9]), values[3:9])
    rows = root.array("rows")
    np.testing.assert_array_equal(rows.read(7), np.arange(28.0, 32.0))
    np.testing.assert_array_equal(rows.read(np.s_[2:5], out=np.empty((3, 4))), np.arange(8.0, 20.0).reshape(3, 4))
    assert root.array("blob").read_bytes() == b"\xff\xd8jpeg\x00"
    assert [name for name, _ in root.items()] == ["blob", "frames", "rows"]
    assert built == []
    assert isinstance(rows.zarr, zarr.Array) and built == ["Array"]  # built when asked for


def test_damaged_node_metadata_in_a_view_is_a_clear_error(tmp_path: Path) -> None:
    from ncore_like import IndexedTarArchive

    path = tmp_path / "d.itar"
    with IndexedTarArchive(path, mode="w") as archive:
        archive[".zgroup"] = b'{"zarr_format": 2}'
        archive["x/.zarray"] = b'{"zarr_format": 2, "shape": [3], "dtype": "<f4"}'
        archive["y/.zarray"] = b"not json"
    root = IndexedTarZarrStore(path).open_root_group(consolidated=False)
    with pytest.raises(NodeMetadataError, match=r"node 'x' can't be understood \(no chunks, compressor"):
        root.array("x")
    with pytest.raises(NodeMetadataError, match="y/.zarray is no JSON"):
        root.array("y")


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_chunks_of_size_0_in_node_metadata_are_a_clear_error(tmp_path: Path, zarr_format: int) -> None:
    """No writer makes them (a grid of such chunks has no end): a damaged or crafted
    document, refused naming the node, the file and the problem, by reads and the commands."""
    import subprocess
    import sys

    from ncore_like import IndexedTarArchive

    path = tmp_path / "z.itar"
    common = {"zarr_format": zarr_format, "shape": [100], "fill_value": 0}
    if zarr_format == 2:
        document = {**common, "chunks": [0], "dtype": "<i4", "compressor": None, "order": "C", "filters": None}
        root, node = (".zgroup", b'{"zarr_format": 2}'), "x/.zarray"
    else:
        document = {**common, "node_type": "array", "data_type": "int32", "codecs": [{"name": "bytes"}],
                    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [0]}},
                    "chunk_key_encoding": {"name": "default"}}  # fmt: skip
        root, node = ("zarr.json", b'{"zarr_format": 3, "node_type": "group"}'), "x/zarr.json"
    with IndexedTarArchive(path, mode="w") as archive:
        archive[root[0]] = root[1]
        archive[node] = json.dumps(document).encode()
    problem = r"node 'x' can't be understood \(chunks \[0\] hold a size of 0\)"
    with pytest.raises(NodeMetadataError, match=rf"z\.itar: the metadata of {problem}"):
        IndexedTarZarrStore(path).open_root_group(consolidated=False).array("x").read()
    for command in ("tree", "cat"):
        done = subprocess.run(
            [sys.executable, "-m", "ncore_like", command, str(path), *(["x"] if command == "cat" else [])],
            capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 1 and "Traceback" not in done.stderr and "size of 0" in done.stderr


def test_a_v2_array_without_dimension_separator_reads_its_chunks_on_the_fast_path(tmp_path: Path) -> None:
    # zarr-python before 2.8 wrote no ``dimension_separator``: "." is meant (the keys "x/1.2").
    written, path = tmp_path / "written.itar", tmp_path / "old.itar"
    data = np.arange(24, dtype="<i4").reshape(4, 6)
    with IndexedTarZarrStore(written, "w") as store:
        store.create_root_group({}, zarr_format=2).create_array("x", data, chunks=(2, 2), compression=None)
    reader = IndexedTarArchive(written)
    assert "x/1.2" in reader.keys()
    with IndexedTarArchive(path, "w") as writer:
        for key in reader.keys():
            if key == "x/.zarray":
                document = json.loads(reader[key])
                document.pop("dimension_separator", None)
                writer[key] = json.dumps(document).encode()
            else:
                writer[key] = reader[key]
    expected = zarr_api.values(zarr_api.open_unconsolidated(IndexedTarZarrStore(path).zarr)["x"])
    np.testing.assert_array_equal(expected, data)  # zarr-python reads the chunks
    backend = Backend()
    array = IndexedTarZarrStore(path).open_root_group(consolidated=False, backend=backend).array("x")
    np.testing.assert_array_equal(array.read(), expected)
    np.testing.assert_array_equal(array.read(np.s_[1:4, 3:6]), expected[1:4, 3:6])
    assert set(backend.stats) == {"fast"}, backend.stats


def test_nodes_of_one_view_share_the_backends_state_per_backend_and_store(tmp_path: Path) -> None:
    # group.array(name) makes a node per call; its reads reuse what an earlier node of the same
    # view learnt, but only for the same backend (whose statistics count them) and store.
    import gc

    values = np.arange(40.0, dtype=np.float32).reshape(10, 4)
    path = tmp_path / "rows.itar"
    with IndexedTarZarrStore(path, mode="w") as writer:
        writer.create_root_group({}).create_group("g").create_array(
            "rows", values, chunks=(1, 4), compression=BloscCompression()
        )
        writer.consolidate()
    store = IndexedTarZarrStore(path)
    first, second = Backend(), Backend()
    root, other = store.open_root_group(backend=first), store.open_root_group(backend=second)
    for index in range(3):
        np.testing.assert_array_equal(root.group("g").array("rows").read(index), values[index])
    np.testing.assert_array_equal(other.group("g").array("rows").read(7), values[7])
    assert first.stats["fast"] == 3 and second.stats["fast"] == 1
    # Another store of the same file reads through its own archive, whichever was opened first.
    again = IndexedTarZarrStore(path)
    store.close()
    np.testing.assert_array_equal(again.open_root_group().group("g").array("rows").read(-1), values[-1])
    # The shared states go with their stores' views: none kept for archives no longer open.
    del store, root, other, again
    gc.collect()
    assert len(first._view_states) == len(second._view_states) == 0


def test_roots_opened_again_read_through_the_stores_backend(tmp_path: Path) -> None:
    # A root opened per read (e.g. in a dataset's __getitem__) reuses what the store's backend
    # learnt about each array, and the backend's statistics count the reads of every root.
    import pickle

    values = np.arange(40.0, dtype=np.float32).reshape(10, 4)
    path = tmp_path / "rows.itar"
    with IndexedTarZarrStore(path, mode="w") as writer:
        root = writer.create_root_group({})
        assert root.backend is writer.backend
        root.create_group("g").create_array("rows", values, chunks=(1, 4), compression=BloscCompression())
        writer.consolidate()
    store = IndexedTarZarrStore(path)
    arrays = [store.open_root_group().group("g").array("rows") for _ in range(3)]
    for index, array in enumerate(arrays):
        np.testing.assert_array_equal(array.read(index), values[index])
    assert all(array.backend is store.backend for array in arrays)
    assert arrays[0]._state is arrays[2]._state  # the layout and row reader worked out once
    assert store.backend.stats == {"fast": 3}
    given = Backend()
    assert store.open_root_group(consolidated=False, backend=given).group("g").array("rows").backend is given
    copy = pickle.loads(pickle.dumps(store))  # e.g. a worker process: a backend of its own
    np.testing.assert_array_equal(copy.open_root_group().group("g").array("rows").read(-1), values[-1])
    assert copy.backend is not store.backend and copy.backend.stats == {"fast": 1}
    assert store.backend.stats == {"fast": 3}
    copy.close()


def _view_facts(view: Any) -> dict[str, Any]:
    """Every fact of an array view, the chunk keys as the keys of a few chunks."""
    facts = {name: getattr(view, name) for name in type(view).__slots__ if name not in ("__weakref__", "chunk_key")}
    facts["fill_value"] = np.asarray(view.fill_value, dtype=view.dtype).tobytes() if view.unsupported is None else None
    corners = [
        (0,) * len(view.shape),
        tuple(max(0, -(-s // c) - 1) for s, c in zip(view.shape, view.chunks, strict=True)),
    ]
    facts["chunk_keys"] = [view.chunk_key(corner) for corner in corners]
    return facts


@st.composite
def families(draw: st.DrawFn) -> dict[str, Any]:
    zarr_format = draw(st.sampled_from(zarr_api.WRITABLE_FORMATS))
    dtype = np.dtype(draw(st.sampled_from(["<f4", "|u1", "<i2", "|b1", "<f8"])))
    ndim = draw(st.integers(0, 3))
    shapes = [tuple(draw(st.integers(1, 7)) for _ in range(ndim)) for _ in range(3)]
    return {
        "zarr_format": zarr_format, "dtype": dtype, "shapes": shapes,
        "chunks": [tuple(draw(st.integers(1, size)) for size in shape) for shape in shapes],
        "compressed": draw(st.booleans()), "other": draw(st.sampled_from(["dtype", "compression", "ndim", "none"])),
        "names": draw(st.booleans()),
    }  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=families())
def test_the_views_of_arrays_created_one_after_another_are_those_of_their_metadata(
    tmp_path: Path, spec: dict[str, Any]
) -> None:
    # Arrays alike but for shape, chunks and attributes get a view made from the one before
    # (see reshaped_view); each must be exactly what parsing its own metadata gives, and what
    # a reader of the archive sees.
    from ncore_like.store._metadata import parse_node

    path = tmp_path / f"f{np.random.default_rng().integers(1 << 60)}.itar"
    dtype, compression = spec["dtype"], BloscCompression() if spec["compressed"] else None
    written: dict[str, np.ndarray[Any, Any]] = {}
    views: dict[str, Any] = {}
    with IndexedTarZarrStore(path, mode="w") as store:
        group = store.create_root_group({}, zarr_format=spec["zarr_format"]).create_group("g")
        plan = [
            (shape, chunks, dtype, compression) for shape, chunks in zip(spec["shapes"], spec["chunks"], strict=True)
        ]
        other = spec["other"]  # an array unlike the others in between: its view is parsed
        odd_dtype = np.dtype("<i4") if other == "dtype" else dtype
        odd_compression = (None if compression else BloscCompression()) if other == "compression" else compression
        odd_shape = (*spec["shapes"][0], 2) if other == "ndim" else spec["shapes"][0]
        plan.insert(2, (odd_shape, odd_shape, odd_dtype, odd_compression))
        for index, (shape, chunks, kind, codec) in enumerate(plan):
            values = (np.arange(int(np.prod(shape))).reshape(shape) % 7).astype(kind)
            names = [f"d{axis}" for axis in range(len(shape))] if spec["names"] else None
            array = group.create_array(
                f"a{index}", values, chunks=chunks, compression=codec, attributes={"i": index, "s": "x" * index},
                dimension_names=names,
            )  # fmt: skip
            view = array.view
            assert view is not None
            parsed = parse_node(view.path, view.document, spec["zarr_format"], str(path))
            assert _view_facts(view) == _view_facts(parsed)
            np.testing.assert_array_equal(array.read(), values)
            written[f"a{index}"], views[f"a{index}"] = values, view
        store.consolidate()
    root = IndexedTarZarrStore(path).open_root_group(consolidated=False).group("g")
    for name, values in written.items():
        read = root.array(name)
        np.testing.assert_array_equal(read.read(), values)
        assert _view_facts(read.view) == _view_facts(views[name])


def test_a_view_is_made_from_another_only_if_their_metadata_differ_in_shape_chunks_and_attributes() -> None:
    from ncore_like.store._metadata import ArrayView, parse_node, reshaped_view

    document = {
        "shape": [4], "chunks": [2], "dtype": "<f4", "fill_value": 0.0, "order": "C", "filters": None,
        "dimension_separator": ".", "compressor": None, "zarr_format": 2, "attributes": {"a": 1},
    }  # fmt: skip
    prototype = parse_node("x/a", document, 2, "t.itar")
    assert isinstance(prototype, ArrayView)
    moved = reshaped_view(prototype, "y/b", {**document, "shape": [9], "chunks": [5], "attributes": {}}, "t")
    assert moved is not None and moved.shape == (9,) and moved.chunks == (5,) and moved.chunk_key((1,)) == "y/b/1"
    assert moved.attributes == {} and moved.path == "y/b"
    for changed in ({"dtype": "<f8"}, {"fill_value": 1.0}, {"fill_value": -0.0}, {"fill_value": 0}, {"order": "F"},
                    {"dimension_separator": "/"}, {"compressor": {"id": "blosc"}}, {"filters": [{"id": "delta"}]},
                    {"extra": 1}):  # fmt: skip
        assert reshaped_view(prototype, "y/b", {**document, **changed}, "t") is None, changed
    with pytest.raises(NodeMetadataError, match="size of 0"):
        reshaped_view(prototype, "y/b", {**document, "chunks": [0]}, "t")
