"""ncore_like under zarr-python 2.18 (the suite's second run, see scripts/test): format 3
refused with a clear error, zarr-python 2's own stores and API, and archives byte-identical
to those written under zarr-python 3."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from ncore_like import (
    EncodedArray,
    IndexedTarArchive,
    IndexedTarZarrStore,
    RecordExistsError,
    ZarrStoreAdapter,
)
from ncore_like.store import CONSOLIDATED_KEY_V3
from ncore_like.store._consolidated import encode_consolidated
from tests.support.zarr_version import ZARR_MAJOR

pytestmark = pytest.mark.skipif(ZARR_MAJOR >= 3, reason="tests of the zarr-python 2 run")

REPO = Path(__file__).resolve().parent.parent
FORMAT_3_ERROR = r"zarr format 3 needs zarr-python 3 \(zarr-python 2\.\d+\.\d+ is installed"

# Run by the other zarr-python (3, in .venv) and by this one: the same hierarchy each time.
WRITER = """
import sys
import numpy as np
from ncore_like import BloscCompression, IndexedTarZarrStore
with IndexedTarZarrStore(sys.argv[1], mode="w") as store:
    root = store.create_root_group({"sequence": "drive-7", "nested": {"a": [1, 2.5, None]}})
    cameras = root.create_group("cameras/front", attributes={"fps": 10})
    for number in range(3):
        cameras.create_bytes_array(f"{number:04d}", bytes([number]) * 50 + b"\\x00\\x00")
    root.create_array("lidar", np.arange(4000, dtype=np.float32).reshape(100, 40), chunks=(30, 40))
    root.create_array("poses", np.arange(24, dtype=">f8").reshape(6, 4), chunks=(4, 4), compression=None)
    root.create_array("labels", np.array([b"car", b"truck", b""]), compression=BloscCompression("zstd", 3, "shuffle"))
    root.create_array("times", np.arange(5).astype("datetime64[ms]"), chunks="auto")
    root.create_array("deep/er/flags", np.arange(10) % 3 == 0)
    root.create_empty_array("never_written", shape=(7,), dtype=np.int16, chunks=(3,), fill_value=-1)
    store.consolidate()
"""


def write_with(python: Path | str, path: Path) -> None:
    subprocess.run([str(python), "-c", WRITER, str(path)], check=True, capture_output=True, cwd=REPO)


def test_archives_are_byte_identical_to_those_written_under_zarr_python_3(tmp_path: Path) -> None:
    zarr3_python = REPO / ".venv" / "bin" / "python"
    if not zarr3_python.exists():
        pytest.skip("no .venv with zarr-python 3 (scripts/test creates it; CI runs it first)")
    version = subprocess.run(
        [str(zarr3_python), "-c", "import zarr; print(zarr.__version__)"], capture_output=True, text=True, check=True
    )
    assert version.stdout.startswith("3.")
    write_with(zarr3_python, tmp_path / "zarr3.itar")
    write_with(sys.executable, tmp_path / "zarr2.itar")
    assert (tmp_path / "zarr2.itar").read_bytes() == (tmp_path / "zarr3.itar").read_bytes()


def test_zarr_python_2_reads_what_we_wrote(tmp_path: Path) -> None:
    write_with(sys.executable, tmp_path / "a.itar")
    store = IndexedTarZarrStore(tmp_path / "a.itar")
    for group in (zarr.open_consolidated(store.zarr, mode="r"), zarr.open_group(store.zarr, mode="r")):
        np.testing.assert_array_equal(group["lidar"][:], np.arange(4000, dtype=np.float32).reshape(100, 40))
        np.testing.assert_array_equal(group["poses"][:], np.arange(24, dtype=">f8").reshape(6, 4))
        np.testing.assert_array_equal(group["never_written"][:], np.full(7, -1, np.int16))
        assert group["cameras/front"].attrs["fps"] == 10
        assert dict(group.attrs) == {"sequence": "drive-7", "nested": {"a": [1, 2.5, None]}}
    root = store.open_root_group()
    assert root.array("cameras/front/0002").read_bytes() == b"\x02" * 50 + b"\x00\x00"
    np.testing.assert_array_equal(root.array("labels").read(), np.array([b"car", b"truck", b""]))
    np.testing.assert_array_equal(root.array("deep/er/flags")[2:8], (np.arange(10) % 3 == 0)[2:8])


def test_zarr_format_3_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    with IndexedTarZarrStore(tmp_path / "w.itar", mode="w") as store:
        with pytest.raises(ValueError, match=r"w\.itar: " + FORMAT_3_ERROR):
            store.create_root_group({}, zarr_format=3)
        with pytest.raises(ValueError, match=FORMAT_3_ERROR):
            EncodedArray.encode(np.arange(4), zarr_format=3)
        with pytest.raises(ValueError, match="unsupported zarr format 4"):
            store.create_root_group({}, zarr_format=4)  # type: ignore[arg-type]
        store.create_root_group({})
    # A format 3 hierarchy (as zarr-python 3 writes it), opened either way.
    root_record = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}).encode()
    with IndexedTarArchive(tmp_path / "v3.itar", mode="w") as archive:
        archive["zarr.json"] = root_record
        archive[CONSOLIDATED_KEY_V3] = encode_consolidated({"zarr.json": root_record}, 3)
    for consolidated in (True, False):
        with pytest.raises(ValueError, match=FORMAT_3_ERROR):
            IndexedTarZarrStore(tmp_path / "v3.itar").open_root_group(consolidated)


@pytest.mark.parametrize("kind", ["memory", "directory", "dict"])
def test_adapters_over_zarr_python_2_stores(tmp_path: Path, kind: str) -> None:
    zarr_store = {
        "memory": zarr.storage.MemoryStore(),
        "directory": zarr.storage.DirectoryStore(str(tmp_path / "d.zarr")),
        "dict": {},
    }[kind]
    store = ZarrStoreAdapter(zarr_store)
    root = store.create_root_group({"title": kind})
    values = np.arange(60, dtype=np.int32).reshape(6, 10)
    root.create_array("sub/values", values, chunks=(4, 10))
    store.consolidate()
    # zarr-python 2 reads what the typed API wrote, and the typed API reads it back.
    group = zarr.open_group(zarr_store, mode="r")
    np.testing.assert_array_equal(group["sub/values"][:], values)
    assert group.attrs["title"] == kind
    reopened = ZarrStoreAdapter(zarr_store).open_root_group()
    np.testing.assert_array_equal(reopened.array("sub/values")[1:5, 3], values[1:5, 3])
    # A second write into a chunk of a rewritable store completes it, as zarr-python 2 does.
    array = root.create_empty_array("partial", shape=(8,), dtype=np.int16, chunks=(8,), fill_value=0)
    array.write(slice(0, 3), np.array([1, 2, 3], np.int16))
    array.write(slice(5, 8), np.array([6, 7, 8], np.int16))
    np.testing.assert_array_equal(zarr.open_group(zarr_store, mode="r")["partial"][:], [1, 2, 3, 0, 0, 6, 7, 8])


def test_chunks_written_through_zarr_python_2_are_write_once(tmp_path: Path) -> None:
    store = IndexedTarZarrStore(tmp_path / "w.itar", mode="w")
    group = zarr.open_group(store.zarr, mode="w")
    array = group.create_dataset("a", shape=(4,), chunks=(2,), dtype="i4", fill_value=0)
    array[:2] = [1, 2]
    with pytest.raises(RecordExistsError) as raised:
        array[:2] = [3, 4]
    assert raised.value.key == "a/0"
    group.attrs["rewritten"] = True  # node metadata may be rewritten until close
    store.close()
    reader = zarr.open_group(IndexedTarZarrStore(tmp_path / "w.itar").zarr, mode="r")
    np.testing.assert_array_equal(reader["a"][:2], [1, 2])
    assert reader.attrs["rewritten"] is True


def test_a_store_opened_for_reading_refuses_zarr_python_2_writes(tmp_path: Path) -> None:
    write_with(sys.executable, tmp_path / "r.itar")
    before = (tmp_path / "r.itar").read_bytes()
    store = IndexedTarZarrStore(tmp_path / "r.itar")
    with pytest.raises((ValueError, PermissionError)):
        store.zarr["extra/0"] = b"x"
    with pytest.raises((ValueError, PermissionError)):
        zarr.open_group(store.zarr, mode="r")["poses"][0] = 1
    assert (tmp_path / "r.itar").read_bytes() == before


def test_metadata_zarr_python_2_cannot_decode_is_a_node_metadata_error(tmp_path: Path) -> None:
    from ncore_like import NodeMetadataError

    with IndexedTarArchive(tmp_path / "d.itar", mode="w") as archive:
        archive[".zgroup"] = b'{"zarr_format": null}'  # damaged: zarr-python 2 raises its MetadataError
    with pytest.raises(NodeMetadataError, match=r"d\.itar.*the metadata of node '/' can't be understood"):
        IndexedTarZarrStore(tmp_path / "d.itar").open_root_group(False)
