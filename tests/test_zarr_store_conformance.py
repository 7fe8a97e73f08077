"""zarr-python 3's own store conformance suite, run against ItarZarrStore (zarr-python 2
ships no such suite: its store protocol is tested through tests/test_zarr2.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("zarr.testing.store", reason="zarr-python 3's store test suite")

from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.core.buffer import Buffer, default_buffer_prototype
from zarr.core.buffer.cpu import Buffer as CpuBuffer
from zarr.errors import ContainsArrayError
from zarr.testing.store import StoreTests

from ncore_like import IndexedTarArchive, RecordExistsError, UnfinishedArchiveError
from ncore_like.store import ItarZarrStore


class TestItarZarrStore(StoreTests[ItarZarrStore, CpuBuffer]):
    store_cls = ItarZarrStore
    buffer_cls = CpuBuffer

    async def set(self, store: ItarZarrStore, key: str, value: Buffer) -> None:
        # The back door: one layer down, the archive itself.
        store.archive[key] = value.to_bytes()

    async def get(self, store: ItarZarrStore, key: str) -> Buffer:
        return self.buffer_cls.from_bytes(store.archive[key])

    @pytest.fixture
    def store_kwargs(self, tmp_path: Path) -> dict[str, Any]:
        path = tmp_path / "store.itar"
        # An empty archive exists, so read-only variants of the kwargs open too.
        IndexedTarArchive(path, mode="w").close()
        return {"itar": path, "read_only": False}

    def test_store_repr(self, store: ItarZarrStore) -> None:
        # zarr-python's messages name the store: by the public class users opened.
        assert repr(store).startswith("IndexedTarZarrStore(") and "store.itar" in repr(store)

    def test_store_supports_writes(self, store: ItarZarrStore) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store: ItarZarrStore) -> None:
        assert store.supports_listing

    @pytest.mark.skip(reason="writers don't pickle: unpickling would truncate the archive or fork its writes")
    async def test_serializable_store(self, store: ItarZarrStore) -> None: ...

    @pytest.mark.skip(
        reason="a reader can't become a writer (that would truncate the archive), and written "
        "records can't be deleted (write-once)"
    )
    async def test_with_read_only_store(self, open_kwargs: dict[str, Any]) -> None: ...

    def test_store_eq(self, store: ItarZarrStore, store_kwargs: dict[str, Any]) -> None:
        # The suite opens a second writer of the same archive, which is refused (its partial
        # file exists); stores of one archive, and readers of one file, are equal.
        assert store == store
        assert store == ItarZarrStore(store.archive)
        with pytest.raises(UnfinishedArchiveError):
            self.store_cls(**store_kwargs)
        store.close()
        assert ItarZarrStore(store_kwargs["itar"]) == ItarZarrStore(store_kwargs["itar"])

    # The suite skips its delete tests itself: the store says supports_deletes = False.
    def test_store_supports_deletes(self, store: ItarZarrStore) -> None:
        assert not store.supports_deletes

    @pytest.mark.skip(reason="written records can't be deleted (write-once); tested in test_store.py")
    async def test_clear(self, store: ItarZarrStore) -> None: ...


async def test_reader_round_trip_of_the_suite_values(tmp_path: Path) -> None:
    # What the suite checks on a writer holds for a reader of the closed archive too.
    path = tmp_path / "r.itar"
    with IndexedTarArchive(path, mode="w") as archive:
        archive["c/0"] = b"\x01\x02\x03\x04"
    store = ItarZarrStore(path)
    assert store.read_only
    value = await store.get("c/0", default_buffer_prototype())
    assert value is not None and value.to_bytes() == b"\x01\x02\x03\x04"


def test_zarr_python_opens_a_new_archive_with_mode_w_and_refuses_to_clear_a_written_one(tmp_path: Path) -> None:
    # With supports_deletes = False, zarr-python clears a hierarchy opened with mode="w" by
    # delete_dir (a no-op on an empty archive) and refuses to overwrite existing nodes
    # instead of deleting them.
    store = ItarZarrStore(tmp_path / "w.itar", read_only=False)
    root = zarr.open_group(store, mode="w", zarr_format=3)
    root.create_array("a", shape=(2,), dtype="i4")[...] = np.arange(2, dtype="i4")
    with pytest.raises(ContainsArrayError):
        root.create_array("a", shape=(3,), dtype="i4", overwrite=True)
    with pytest.raises(RecordExistsError, match=r"can't be deleted \(archive records are write-once\)"):
        zarr.open_group(store, mode="w", zarr_format=3)
    store.close()
    np.testing.assert_array_equal(zarr.open_array(ItarZarrStore(tmp_path / "w.itar"), path="a")[...], [0, 1])
