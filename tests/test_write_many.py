"""Batched record writes (``IndexedTarArchive.write_many``, what ``create_array`` uses for
small chunks): the same archive, byte for byte, as the records written one by one; every
key checked before anything of a batch is written; a disk failure mid-batch counts exactly
the records written before it."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ncore_like import (
    BloscCompression,
    IndexedTarArchive,
    IndexedTarZarrStore,
    InvalidKeyError,
    ReadOnlyError,
    RecordExistsError,
)
from ncore_like.archive import is_node_metadata_key
from tests.support import zarr_api
from tests.support.killed_writer import key, payload

REPO = Path(__file__).resolve().parent.parent


def mixed_records(seed: int, count: int) -> list[tuple[str, bytes]]:
    """Records of 0 B to 300 KB (each side of the write buffer's 256 KiB record limit,
    filling its 4 MiB several times), with node metadata records among them."""
    rng = random.Random(seed)
    sizes = (0, 1, 511, 512, 513, 4096, 60_000, (256 << 10) - 513, (256 << 10) - 512, 256 << 10, 300_000)
    records = []
    for index in range(count):
        name = f"a/{index}" if index % 17 else f"g{index}/zarr.json"
        records.append((name, rng.randbytes(rng.choice(sizes))))
    return records


def batches(records: list[tuple[str, bytes]], seed: int) -> list[list[tuple[str, bytes]]]:
    rng = random.Random(seed)
    out, start = [], 0
    while start < len(records):
        stop = start + rng.choice((1, 2, 7, 50, 200))
        out.append(records[start:stop])
        start = stop
    return out


@pytest.mark.parametrize("checksums", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_write_many_writes_the_bytes_of_writes_one_by_one(tmp_path: Path, seed: int, checksums: bool) -> None:
    records = mixed_records(seed, 120)
    single, batched = tmp_path / "single.itar", tmp_path / "batched.itar"
    with IndexedTarArchive(single, mode="w", checksums=checksums) as archive:
        for name, data in records:
            archive[name] = data
    with IndexedTarArchive(batched, mode="w", checksums=checksums) as archive:
        for batch in batches(records, seed):
            archive.write_many([(name, memoryview(data)) for name, data in batch])
        # Read back before close: from the write buffer and from the file.
        assert all(archive[name] == data for name, data in records)
    assert batched.read_bytes() == single.read_bytes()
    reader = IndexedTarArchive(batched, verify_checksums=checksums)
    assert {name: reader[name] for name in reader.keys()} == dict(records)


def test_a_taken_or_repeated_key_refuses_the_whole_batch(tmp_path: Path) -> None:
    path = tmp_path / "a.itar"
    with IndexedTarArchive(path, mode="w") as archive:
        archive["x/0"] = b"first"
        with pytest.raises(RecordExistsError, match=r"'x/0' exists already") as taken:
            archive.write_many([("x/1", b"one"), ("zarr.json", b"{}"), ("x/0", b"again")])
        assert taken.value.key == "x/0"
        with pytest.raises(RecordExistsError, match=r"'x/2' exists already") as repeated:
            archive.write_many([("x/2", b"two"), ("x/3", b"three"), ("x/2", b"twice")])
        assert repeated.value.key == "x/2"
        with pytest.raises(InvalidKeyError):
            archive.write_many([("x/4", b"four"), ("../x", b"bad")])
        with pytest.raises(TypeError, match=r"'x/6' must be bytes-like"):
            archive.write_many([("x/5", b"five"), ("x/6", 6)])  # type: ignore[list-item]
        # Nothing of a refused batch is written or counted, node metadata included.
        assert archive.keys() == ["x/0"] and archive.file_size == 1024
        archive.write_many([("x/1", b"one"), ("x/2", b"two")])  # the keys are still free
    expected = tmp_path / "expected.itar"
    with IndexedTarArchive(expected, mode="w") as archive:
        archive["x/0"] = b"first"
        archive["x/1"] = b"one"
        archive["x/2"] = b"two"
    assert path.read_bytes() == expected.read_bytes()


def test_write_many_on_an_archive_opened_for_reading_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.itar"
    with IndexedTarArchive(path, mode="w") as archive:
        archive["a"] = b"1"
    with pytest.raises(ReadOnlyError, match=r"can't write 'b', 'c'"):
        IndexedTarArchive(path).write_many([("b", b"2"), ("c", b"3")])
    assert IndexedTarArchive(path).keys() == ["a"]


BATCH_WRITER = textwrap.dedent(
    """
    import resource, signal, sys
    from ncore_like import IndexedTarArchive
    from ncore_like.archive._writer import pack_records
    from tests.support.killed_writer import key, payload

    path, seed, count, limit, packed = sys.argv[1], *map(int, sys.argv[2:6])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    items = [(key(index), payload(seed, index)) for index in range(count)]
    failures = 0
    with IndexedTarArchive(path, mode="w") as archive:
        for start in range(0, count, 25):
            batch = items[start : start + 25]
            try:
                if packed:  # laid out as tar members beforehand, written in one piece
                    archive.write_many(pack_records([k for k, _ in batch], [p for _, p in batch], checksums=True))
                else:
                    archive.write_many(batch)
            except OSError:  # space freed: the records not counted, again
                failures += 1
                resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
                counted = [name for name, _ in batch if name in archive]
                assert counted == [name for name, _ in batch[: len(counted)]], counted
                archive.write_many([item for item in batch if item[0] not in archive])
    print("failures", failures, flush=True)
    """
)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize(("seed", "limit"), [(5, 2 << 20), (6, 5_000_001)])
def test_a_disk_failure_mid_batch_counts_the_records_written_before_it(
    tmp_path: Path, seed: int, limit: int, packed: bool
) -> None:
    path = tmp_path / "batched.itar"
    count = 300
    process = subprocess.run(
        [sys.executable, "-c", BATCH_WRITER, str(path), str(seed), str(count), str(limit), str(int(packed))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 0 and process.stdout.split() == ["failures", "1"], (process.stdout, process.stderr)
    archive = IndexedTarArchive(path, verify_checksums=True)
    assert archive.keys() == [key(index) for index in range(count)]
    assert all(archive[key(index)] == payload(seed, index) for index in range(count))


@pytest.mark.parametrize("compression", [None, BloscCompression()])
def test_create_array_of_many_small_chunks_stores_every_chunk(
    tmp_path: Path, compression: BloscCompression | None
) -> None:
    # 3000 chunks of 64 B: several write batches (by count), the last one short.
    values = np.random.default_rng(7).random((3000, 16), dtype=np.float32)
    path = tmp_path / "rows.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({})  # the installed zarr-python's default format
        root.create_array("rows", values, chunks=(1, 16), compression=compression)
    # zarr-python reads every chunk back.
    group = zarr_api.open_group(IndexedTarZarrStore(path).zarr, "r")
    np.testing.assert_array_equal(group["rows"][...], values)
    keys = IndexedTarArchive(path).keys()
    chunks = [name for name in keys if name.startswith("rows/") and not is_node_metadata_key(name)]
    assert len(chunks) == 3000
