"""``ArchiveCollection``: many archives by number (by list or glob, local or remote), opened
lazily in whichever process reads them, at most ``max_open`` at once, pickled as their
locations; and PyTorch DataLoader workers sampling frames across them."""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from upath import UPath

from ncore_like import ArchiveCollection, IndexedTarZarrStore
from ncore_like.errors import ChecksumError
from tests.support.s3_clients import s3_clients_set_up
from tests.support.servers import ServerProcess


def settle(server: ServerProcess) -> list[dict[str, Any]]:
    """The server's request log once it stopped growing (the proxy logs a request as it ends)."""
    logged = server.requests()
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        time.sleep(0.05)
        again = server.requests()
        if again == logged:
            return logged
        logged = again
    return logged


def write_sequences(folder: Path | UPath, count: int) -> list[str]:
    names = []
    for number in range(count):
        location = folder / f"seq-{number:03d}.itar"
        with IndexedTarZarrStore(location, mode="w") as store:
            root = store.create_root_group({"sequence": number})
            front = root.create_group("front")
            for frame in range(4):
                front.create_bytes_array(f"{frame:04d}", bytes([number, frame]) * 100)
            root.create_array("poses", np.full((4, 3), number, np.float32), chunks=(1, 3))
            store.consolidate()
        names.append(str(location))
    return names


@pytest.mark.parametrize("verify_checksums", [True, False])
def test_archives_let_go_by_the_collection_keep_serving_their_readers(tmp_path: Path, verify_checksums: bool) -> None:
    """``max_open`` bounds what the collection holds, not what its users hold: an archive it
    lets go while another thread reads it, or while a root of it is kept, must keep serving
    (closed under them, reads failed, or read another archive through a reused descriptor)."""
    import contextlib
    import os
    from concurrent.futures import ThreadPoolExecutor

    write_sequences(tmp_path, 5)
    collection = ArchiveCollection(str(tmp_path / "seq-*.itar"), max_open=1, verify_checksums=verify_checksums)
    kept = collection.root(0)
    collection.root(1)  # archive 0 let go by the collection
    np.testing.assert_array_equal(kept.array("poses").read(0), [0, 0, 0])
    assert kept.group("front").array("0003").read_bytes() == bytes([0, 3]) * 100

    def reads(seed: int) -> int:
        rng = np.random.default_rng(seed)
        wrong = 0
        for _ in range(200):
            number, frame = int(rng.integers(5)), int(rng.integers(4))
            wrong += collection.read_array(number, f"front/{frame:04d}").tobytes() != bytes([number, frame]) * 100
            wrong += not np.array_equal(collection.read_array(number, "poses", frame), [number] * 3)
        return wrong

    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(reads, range(8))) == 0
    del kept

    def open_archives() -> int:
        count = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(FileNotFoundError):  # the listing's own descriptor, closed since
                count += os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path))  # not other tests' files
        return count

    assert open_archives() <= 1  # what the collection holds, and no more


def test_archives_by_number_open_lazily_and_at_most_max_open(tmp_path: Path) -> None:
    names = write_sequences(tmp_path, 6)
    collection = ArchiveCollection(str(tmp_path / "seq-*.itar"), max_open=2)  # a glob, expanded sorted
    assert collection.locations == names and len(collection) == 6 and collection.open_count == 0
    for number in (0, 3, 5, 3, 1):
        assert collection.read(number, "front/0002/0") == bytes([number, 2]) * 100
        np.testing.assert_array_equal(collection.read_array(number, "poses", 1), [number] * 3)
        assert collection.root(number).attributes == {"sequence": number}
        assert collection.open_count <= 2
    assert collection[-1].name == names[-1]
    with pytest.raises(IndexError):
        collection[6]
    small = pickle.dumps(collection)
    assert len(small) < 200 + sum(len(name) for name in names)  # the locations, nothing opened
    again = pickle.loads(small)
    assert again.open_count == 0 and again.read(4, "front/0000/0") == bytes([4, 0]) * 100
    collection.close()
    assert collection.open_count == 0
    with pytest.raises(ValueError, match="no archive matches"):
        ArchiveCollection(str(tmp_path / "nothing-*.itar"))


def test_a_remote_collection_by_glob(s3_bucket: UPath) -> None:
    write_sequences(s3_bucket, 3)
    options = dict(s3_bucket.storage_options)
    collection = ArchiveCollection(str(s3_bucket / "seq-*.itar"), storage_options=options, max_open=1)
    assert len(collection) == 3
    assert [collection.read(number, "front/0001/0")[:2] for number in range(3)] == [bytes([n, 1]) for n in range(3)]
    assert collection.open_count == 1


@pytest.mark.s3
def test_a_remote_glob_matches_as_fsspec_and_lists_once(s3_bucket: UPath, s3_proxy: ServerProcess) -> None:
    """The objects a remote pattern names are fsspec's glob's; a pattern with its wildcards in
    its last part costs one listing (fsspec's glob asks three times on S3), and a folder whose
    name matches is not an archive."""
    import s3fs  # type: ignore[import-untyped,unused-ignore]

    names = ["seq-0.itar", "seq-1.itar", "seq-2.itar", "seq-10.itar", ".seq-3.itar", "other.txt", "sub/seq-4.itar"]
    for name in names:
        (s3_bucket / name).write_bytes(b"not opened")
    options = dict(s3_bucket.storage_options)
    base = str(s3_bucket).rstrip("/")
    oracle = s3fs.S3FileSystem(**options)
    for pattern in ["seq-*.itar", "seq-?.itar", "seq-[02].itar", "seq-[!0]*.itar", "*.itar", "*/seq-*.itar"]:
        s3_proxy.clear_requests()
        found = ArchiveCollection(f"{base}/{pattern}", storage_options=options).locations
        if "/" not in pattern:
            assert [(r["method"], r["range"]) for r in settle(s3_proxy)] == [("GET", None)], pattern
        assert found == sorted(f"s3://{path}" for path in oracle.glob(f"{base[len('s3://') :]}/{pattern}")), pattern
    (s3_bucket / "seq-5.itar" / "inside").write_bytes(b"a folder's object")
    assert f"{base}/seq-5.itar" not in ArchiveCollection(f"{base}/seq-*.itar", storage_options=options).locations
    with pytest.raises(ValueError, match="no archive matches"):
        ArchiveCollection(f"{base}/nothing-*.itar", storage_options=options)
    with pytest.raises(ValueError, match="no archive matches"):
        ArchiveCollection(f"{base}/no-such-folder/*.itar", storage_options=options)


@pytest.mark.s3
def test_a_remote_glob_and_the_reads_share_one_client(s3_bucket: UPath) -> None:
    """Listing a pattern and reading the archives it names set up one S3 client (~0.1 s each),
    in a fresh process (no filesystem object cached)."""
    write_sequences(s3_bucket, 2)
    code = f"""
    from ncore_like import ArchiveCollection
    pattern, options = {str(s3_bucket / "seq-*.itar")!r}, {dict(s3_bucket.storage_options)!r}
    collection = ArchiveCollection(pattern, storage_options=options)
    assert [collection.read(n, "front/0001/0")[:2] for n in range(2)] == [bytes([n, 1]) for n in range(2)]
    """
    assert s3_clients_set_up(code) == 1


def test_dataloader_workers_sample_across_archives(tmp_path: Path) -> None:
    torch_data = pytest.importorskip("torch.utils.data")
    write_sequences(tmp_path, 5)
    collection = ArchiveCollection(str(tmp_path / "seq-*.itar"), max_open=2)

    class Frames(torch_data.Dataset):  # type: ignore[misc]
        def __len__(self) -> int:
            return len(collection) * 4

        def __getitem__(self, item: int) -> bytes:
            number, frame = divmod(item, 4)
            return collection.read(number, f"front/{frame:04d}/0")

    loader = torch_data.DataLoader(Frames(), batch_size=3, num_workers=2, collate_fn=list)
    frames = [frame for batch in loader for frame in batch]
    assert frames == [bytes([number, frame]) * 100 for number in range(5) for frame in range(4)]


def write_frames(location: Path | UPath, count: int) -> dict[str, bytes]:
    """An archive of ``count`` 60 KB frames (blobs); the frames by record key."""
    frames = {f"front/{frame:04d}/0": bytes([frame]) * 60_000 for frame in range(count)}
    with IndexedTarZarrStore(location, mode="w") as store:
        front = store.create_root_group().create_group("front")
        for key, frame in frames.items():
            front.create_bytes_array(key.split("/")[1], frame)
        store.consolidate()
    return frames


def flip_byte(location: Path | UPath, offset: int) -> None:
    data = bytearray(location.read_bytes())
    data[offset] ^= 0x04
    location.write_bytes(bytes(data))


def test_a_collection_opens_its_archives_with_the_options_it_was_given_in_every_process(
    s3_bucket: UPath, s3_proxy: ServerProcess
) -> None:
    frames = write_frames(s3_bucket / "seq-000.itar", 4)
    options = dict(s3_bucket.storage_options)
    collection = ArchiveCollection(
        str(s3_bucket / "seq-*.itar"),
        storage_options=options,
        remote_range_reads=True,
        index_tail_read_size=None,  # the header block, then the index: every frame is read from storage
        verify_checksums=False,
    )
    collection = pickle.loads(pickle.dumps(collection))  # as a DataLoader worker gets it
    s3_proxy.clear_requests()
    archive = collection.archive(0)
    assert archive.remote_range_reads and not archive.verify_checksums and archive.tail_size == 512
    s3_proxy.clear_requests()
    key = "front/0002/0"
    assert collection.read(0, key) == frames[key]
    record = archive.records[key]
    logged = [request for request in settle(s3_proxy) if request["method"] == "GET"]
    assert [request["range"] for request in logged] == [f"bytes={record.offset}-{record.offset + record.size - 1}"]
    # The default buffered path fetches a block around the record instead.
    default = ArchiveCollection(str(s3_bucket / "seq-*.itar"), storage_options=options, index_tail_read_size=None)
    s3_proxy.clear_requests()
    assert default.read(0, key) == frames[key]
    assert [request["range"] for request in settle(s3_proxy)] != [request["range"] for request in logged]


def test_a_collection_verifies_checksums_unless_told_not_to(s3_bucket: UPath) -> None:
    location = s3_bucket / "seq-000.itar"
    frames = write_frames(location, 4)
    record = IndexedTarZarrStore(location).archive.records["front/0001/0"]
    flip_byte(location, record.offset + 100)
    options = dict(s3_bucket.storage_options)
    for range_reads in (False, True):
        collection = pickle.loads(
            pickle.dumps(ArchiveCollection([str(location)], storage_options=options, remote_range_reads=range_reads))
        )
        with pytest.raises(ChecksumError, match=r"seq-000\.itar: record 'front/0001/0'"):
            collection.read(0, "front/0001/0")
        with pytest.raises(ChecksumError, match="'front/0001/0'"):
            collection.read_array(0, "front/0001")
        assert collection.read(0, "front/0002/0") == frames["front/0002/0"]
    unverified = ArchiveCollection([str(location)], storage_options=options, verify_checksums=False)
    damaged = unverified.read(0, "front/0001/0")
    assert damaged != frames["front/0001/0"] and len(damaged) == len(frames["front/0001/0"])
