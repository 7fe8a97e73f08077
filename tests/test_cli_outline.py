"""``info`` and ``tree`` of an archive describe its node metadata documents without numpy or
the typed layer (``ncore_like/cli/_outline.py``): what they print is what the typed path
prints, byte for byte, over archives of both zarr formats, consolidated or not, with blobs,
Blosc or raw chunks, many dtypes and fill values, 0-d arrays and missing chunks."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ncore_like import BloscCompression, IndexedTarArchive, IndexedTarZarrStore
from ncore_like._pack._hierarchy import is_blob, open_root, walk
from ncore_like.cli._info import archive_info
from ncore_like.cli._outline import GroupOutline, archive_outline, outline_documents, outline_group
from ncore_like.cli._tree import archive_record_size, outline_document, render_outline
from ncore_like.store._consolidated import CONSOLIDATED_KEY_V2, CONSOLIDATED_KEY_V3, encode_consolidated
from ncore_like.store._documents import DtypeFacts, dtype_facts, plain_fill_value
from ncore_like.store._itar_store import IndexedTarZarrStore as DocumentStore
from ncore_like.store._metadata import _fill_value
from tests.support.zarr_version import zarr3_only

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")


@pytest.fixture(autouse=True)
def _quiet_zarr_warnings() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="zarr")
        warnings.filterwarnings("ignore", message=".*not part of the Zarr format 3.*")
        yield


# -- the two builders, rendered ------------------------------------------------------------


def rendered(outline: GroupOutline, store: DocumentStore, limit: int | None, attributes: bool) -> list[str]:
    return render_outline(outline, archive_record_size(store), attributes=attributes, max_members=limit)


def both(path: Path, *, depth: int | None = None, limit: int | None = None, attributes: bool = False) -> Any:
    """Text and JSON of the documents' outline (None if it falls back) and of the typed
    path's (or the error it raises)."""
    with DocumentStore(path) as store:
        try:
            outline = outline_documents(store, depth)
            whole = outline_documents(store)
        except (ValueError, KeyError, OSError) as error:
            outline = whole = None
            documents_error: str | None = type(error).__name__
        else:
            documents_error = None
        ours = None
        if outline is not None and whole is not None:
            ours = (
                rendered(outline, store, limit, attributes),
                json.dumps(outline_document(whole, archive_record_size(store), attributes=attributes)),
            )
    try:
        with IndexedTarZarrStore(path) as typed:
            root = open_root(typed, typed.archive)
            theirs: Any = (
                rendered(outline_group(root, depth), typed, limit, attributes),
                json.dumps(outline_document(outline_group(root), archive_record_size(typed), attributes=attributes)),
            )
    except Exception as error:  # whatever the typed path raises, the documents' path must not succeed
        theirs = error
    return ours, theirs, documents_error


def assert_same(path: Path, *, expect_documents: bool | None = True, **options: Any) -> None:
    ours, theirs, _ = both(path, **options)
    if ours is None:
        assert expect_documents is not True, f"fell back to the typed path: {theirs}"
        return
    assert expect_documents is not False
    assert not isinstance(theirs, Exception), f"the typed path raises {theirs!r}, the documents' path succeeds"
    assert ours == theirs


# -- archives written through the typed API ------------------------------------------------


def typed_archive(path: Path, zarr_format: int, consolidated: bool) -> Path:
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({"sequence": "s-1", "nested": {"a": [1, 2]}}, zarr_format=zarr_format)  # type: ignore[arg-type]
        root.create_array("poses", np.arange(24.0).reshape(6, 4), chunks=(2, 4), attributes={"unit": "m"})
        root.create_array("raw", np.arange(10, dtype=np.int16), chunks=(3,), compression=None)
        root.create_array(
            "zstd", np.ones((4, 4), np.float32), compression=BloscCompression("zstd", 3, "shuffle"), chunks=(2, 2)
        )
        root.create_array("scalar", np.float64(2.5))
        root.create_array("flags", np.array([True, False, True]))
        sparse = root.create_empty_array("sparse", shape=(8, 8), dtype=np.uint16, chunks=(4, 4), fill_value=7)
        sparse.write((slice(0, 4), slice(0, 4)), np.ones((4, 4), np.uint16))  # 1 of 4 chunks stored
        cameras = root.create_group("cameras", attributes={"count": 2})
        for camera in ("front", "rear"):
            frames = cameras.create_group(camera)
            for index in range(3):
                frames.create_bytes_array(f"{index:05d}", bytes([index]) * (10 + index), attributes={"i": index})
        if zarr_format == 3:  # format 2 stores no empty blob
            root.create_bytes_array("empty_blob", b"")
        deep = root.create_group("a").create_group("b").create_group("c")
        deep.create_array("leaf", np.arange(5, dtype=np.uint8), compression=None)  # numbers in format 2
        if consolidated:
            store.consolidate()
    return path


@pytest.mark.parametrize("consolidated", [True, False])
@pytest.mark.parametrize("zarr_format", [2, pytest.param(3, marks=zarr3_only)])
def test_typed_archives_are_described_from_their_documents(
    tmp_path: Path, zarr_format: int, consolidated: bool
) -> None:
    path = typed_archive(tmp_path / "t.itar", zarr_format, consolidated)
    for options in ({}, {"attributes": True}, {"depth": 1}, {"depth": 2, "limit": 1}, {"limit": 0}, {"limit": 2}):
        assert_same(path, **options)  # type: ignore[arg-type]
    # info counts what the typed walk counts.
    with IndexedTarZarrStore(path) as typed:
        nodes = list(walk(open_root(typed, typed.archive)))
        groups = 1 + sum(1 for node in nodes if not hasattr(node, "shape"))
        blobs = sum(1 for node in nodes if hasattr(node, "shape") and is_blob(node))  # type: ignore[arg-type]
        arrays = len(nodes) - groups + 1 - blobs
    with DocumentStore(path) as store:
        info = archive_info(store)
    assert (info["groups"], info["arrays"], info["blobs"]) == (groups, arrays, blobs)


# -- archives of hand-written documents ----------------------------------------------------

V2_DTYPES = ["<f4", ">i2", "|S7", "|b1", "<U3", "|O", "<i8", ">f8", "|u1", "<c8", "<f2", "<M8[ns]", "float32", "|i1"]
V3_TYPES = ["float32", "int16", "uint8", "bool", "complex128", "string", "float16", "datetime64"]
FILL_VALUES = [None, 0, 1, -1, 300, 1.5, "NaN", "Infinity", "AAAA", "QUJDREVGR0g=", "!!", True, [1], ""]


def write_archive(path: Path, zarr_format: int, nodes: dict[str, dict[str, Any]], consolidated: bool) -> Path:
    """An archive of the given node metadata records (key: JSON) and a chunk record of the
    first chunk of each array."""
    records = {key: json.dumps(value).encode() for key, value in nodes.items()}
    with IndexedTarArchive(path, "w") as archive:
        for key, value in nodes.items():
            shape = value.get("shape")
            if isinstance(shape, list):
                folder = key.rpartition("/")[0]
                prefix = f"{folder}/" if folder else ""
                coords = ["0"] * len(shape)
                if zarr_format == 2:
                    chunk = prefix + (".".join(coords) if coords else "0")
                else:
                    chunk = prefix + "c" + "".join("/" + c for c in coords)
                archive[chunk] = bytes(16)
        for key, data in records.items():
            archive[key] = data
        if consolidated:
            collected = {key: data for key, data in records.items() if key != ".zattrs" or zarr_format == 2}
            name = CONSOLIDATED_KEY_V2 if zarr_format == 2 else CONSOLIDATED_KEY_V3
            archive[name] = encode_consolidated(collected, zarr_format)  # type: ignore[arg-type]
    return path


def v2_array(dtype: str, shape: list[int], fill: Any, compressor: Any, filters: Any, order: str) -> dict[str, Any]:
    return {
        "zarr_format": 2, "shape": shape, "chunks": [max(1, size // 2) for size in shape], "dtype": dtype,
        "compressor": compressor, "fill_value": fill, "order": order, "filters": filters,
    }  # fmt: skip


def v3_array(data_type: str, shape: list[int], fill: Any, codecs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [max(1, size // 2) for size in shape]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "codecs": codecs, "fill_value": fill, "attributes": {"k": data_type},
    }  # fmt: skip


BLOSC_V2 = {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}
BLOSC_V3 = {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3, "shuffle": "bitshuffle", "blocksize": 0}}

v2_specs = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from(V2_DTYPES),
        "shape": st.lists(st.integers(0, 5), max_size=2),
        "fill": st.sampled_from(FILL_VALUES),
        "compressor": st.sampled_from([None, BLOSC_V2, {"id": "zstd", "level": 1}]),
        "filters": st.sampled_from([None, [{"id": "vlen-utf8"}]]),
        "order": st.sampled_from(["C", "C", "F"]),
    }
)
v3_specs = st.fixed_dictionaries(
    {
        "data_type": st.sampled_from(V3_TYPES),
        "shape": st.lists(st.integers(0, 5), max_size=2),
        "fill": st.sampled_from(FILL_VALUES),
        "codecs": st.sampled_from(
            [
                [{"name": "bytes", "configuration": {"endian": "little"}}],
                [{"name": "bytes", "configuration": {"endian": "big"}}, BLOSC_V3],
                [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 0, "checksum": False}}],
            ]
        ),
    }
)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(specs=st.lists(v2_specs, min_size=1, max_size=3), consolidated=st.booleans())
def test_v2_documents_say_what_the_typed_path_says(
    tmp_path: Path, specs: list[dict[str, Any]], consolidated: bool
) -> None:
    nodes: dict[str, dict[str, Any]] = {".zgroup": {"zarr_format": 2}, ".zattrs": {"a": 1}}
    for index, spec in enumerate(specs):
        nodes[f"g/x{index}/.zarray"] = v2_array(**spec)
        nodes[f"g/x{index}/.zattrs"] = {"index": index}
    nodes["g/.zgroup"] = {"zarr_format": 2}
    path = write_archive(tmp_path / f"v2-{consolidated}-{abs(hash(json.dumps(specs)))}.itar", 2, nodes, consolidated)
    assert_same(path, expect_documents=None, attributes=True)


@zarr3_only
@SETTINGS
@given(specs=st.lists(v3_specs, min_size=1, max_size=3), consolidated=st.booleans())
def test_v3_documents_say_what_the_typed_path_says(
    tmp_path: Path, specs: list[dict[str, Any]], consolidated: bool
) -> None:
    nodes: dict[str, dict[str, Any]] = {"zarr.json": {"zarr_format": 3, "node_type": "group", "attributes": {}}}
    for index, spec in enumerate(specs):
        nodes[f"x{index}/zarr.json"] = v3_array(**spec)
    path = write_archive(tmp_path / f"v3-{consolidated}-{abs(hash(json.dumps(specs)))}.itar", 3, nodes, consolidated)
    assert_same(path, expect_documents=None, depth=1)


@pytest.mark.parametrize(
    ("dtype", "fill", "documents"),
    [
        ("<f4", 0.0, True), (">i2", -3, True), ("|S7", "QUJD", True), ("|b1", False, True), ("|u1", None, True),
        ("<U3", "", False), ("|O", 0, False), ("<M8[ns]", 0, False), ("<i2", 1.5, False), ("|u1", 300, False),
    ],
)  # fmt: skip
def test_what_the_documents_state_and_what_falls_back(tmp_path: Path, dtype: str, fill: Any, documents: bool) -> None:
    filters = [{"id": "vlen-utf8"}] if dtype == "|O" else None
    nodes = {".zgroup": {"zarr_format": 2}, "x/.zarray": v2_array(dtype, [4], fill, None, filters, "C")}
    path = write_archive(tmp_path / "a.itar", 2, nodes, consolidated=False)
    ours, theirs, _ = both(path)
    assert (ours is not None) is documents
    if ours is not None:
        assert ours == theirs
    else:  # archive_outline falls back to the typed path's outline: the same
        with DocumentStore(path) as store:
            if not isinstance(theirs, Exception):
                outline = archive_outline(store)
                assert rendered(outline, store, None, False) == theirs[0]


def test_broken_documents_fall_back_to_the_typed_paths_error(tmp_path: Path) -> None:
    nodes = {".zgroup": {"zarr_format": 2}, "x/.zarray": {"zarr_format": 2, "shape": "no list"}}
    path = write_archive(tmp_path / "a.itar", 2, nodes, consolidated=False)
    code = subprocess.run(
        [sys.executable, "-m", "ncore_like", "tree", str(path)], capture_output=True, text=True
    )  # the typed path's error, naming the archive
    assert code.returncode == 1
    assert str(path) in code.stderr and "the metadata of node 'x' can't be understood" in code.stderr


# -- the numpy-free facts against numpy ----------------------------------------------------


@pytest.mark.parametrize("order", "<>|=")
@pytest.mark.parametrize("kind", "biufcSUOMV")
@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 7, 8, 16])
def test_dtype_facts_are_numpys(order: str, kind: str, size: int) -> None:
    typestr = f"{order}{kind}{size}"
    facts = dtype_facts(typestr, 2)
    if facts is None:
        return
    dtype = np.dtype(typestr)
    assert facts == DtypeFacts(str(dtype), dtype.kind, dtype.itemsize)


@pytest.mark.parametrize("name", ["bool", "int8", "uint64", "float16", "complex64", "complex128", "string", "x"])
def test_v3_dtype_facts_are_numpys(name: str) -> None:
    facts = dtype_facts(name, 3)
    if name in ("string", "x"):
        assert facts is None
        return
    dtype = np.dtype(name)
    assert facts == DtypeFacts(str(dtype), dtype.kind, dtype.itemsize)


fill_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "nan", "AAAA", "QUJDREVGR0hJ", "!", "QQ"]), st.just([1]),
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    value=fill_values,
    typestr=st.sampled_from(
        ["|b1", "|i1", "<i2", ">i4", "<i8", "|u1", "<u2", "<u8", "<f2", ">f4", "<f8", "<c8", "|S3"]
    ),
    zarr_format=st.sampled_from([2, 3]),
)
def test_plain_fill_values_are_the_views(value: Any, typestr: str, zarr_format: int) -> None:
    facts = dtype_facts(typestr, 2)
    assert facts is not None
    if plain_fill_value(value, facts, zarr_format):  # type: ignore[arg-type]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # not even a warning
            _, why = _fill_value(value, np.dtype(typestr), zarr_format)  # type: ignore[arg-type]
        assert why is None


# -- imports -------------------------------------------------------------------------------


@pytest.mark.parametrize("zarr_format", [2, pytest.param(3, marks=zarr3_only)])
def test_info_and_tree_of_an_archive_import_no_numpy_no_typed_layer_no_zarr(tmp_path: Path, zarr_format: int) -> None:
    paths = [typed_archive(tmp_path / f"{flag}.itar", zarr_format, flag) for flag in (True, False)]
    for path in paths:
        for arguments in (["info"], ["info", "--json"], ["tree"], ["tree", "--json", "-a"], ["tree", "--depth", "1"]):
            code = (
                "import sys\n"
                "from ncore_like.cli import main\n"
                f"code = main({[*arguments, str(path)]!r})\n"
                "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'zarr', 'numcodecs')"
                " or m.startswith('ncore_like.nodes') or m.startswith('ncore_like.backend'))\n"
                "assert not loaded, loaded\n"
                "sys.exit(code)\n"
            )
            result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            assert result.returncode == 0, (arguments, path.name, result.stderr)


@pytest.mark.parametrize("zarr_format", [2, pytest.param(3, marks=zarr3_only)])
def test_blobs_are_what_zarr_pythons_path_calls_blobs(tmp_path: Path, zarr_format: int) -> None:
    # The documents' rule (shared with the typed views) against the backend's rule on
    # zarr-python's arrays: format 2's 1-d uint8 arrays in one chunk are numbers, no blob.
    from ncore_like.backend import is_blob as zarr_is_blob

    path = typed_archive(tmp_path / "t.itar", zarr_format, consolidated=True)
    with DocumentStore(path) as store:
        outline = outline_documents(store)
    assert outline is not None
    found: dict[str, bool] = {}
    stack = [outline]
    while stack:
        for node in stack.pop().members or ():
            if isinstance(node, GroupOutline):
                stack.append(node)
            else:
                found[node.path] = node.blob_size is not None
    with IndexedTarZarrStore(path) as typed:
        root = open_root(typed, typed.archive)
        expected = {path: zarr_is_blob(root.array(path).zarr) for path in found}
    assert found == expected and any(expected.values()) and not all(expected.values())
