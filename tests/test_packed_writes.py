"""Records packed as tar members off the writing thread (``pack_records``, what
``create_array`` writes small chunks into an archive with): the batch header builder and key
checks give what their one-record versions give; a packed batch writes the bytes of
``write_many`` (which writes the bytes of ``write`` one by one), with the same refusals;
arrays written this way hold zarr-python's records and the archive of the unpacked path.
Large records checksummed off the writing thread (``checksummed_records``) write the same
bytes too, with the checksums they were given."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import ncore_like.nodes._array
from ncore_like import (
    BloscCompression,
    ChecksumError,
    EncodedArray,
    IndexedTarArchive,
    IndexedTarZarrStore,
    InvalidKeyError,
    RecordExistsError,
)
from ncore_like.archive import verify_archive
from ncore_like.archive._format import (
    has_node_metadata_key,
    is_node_metadata_key,
    member_header,
    member_headers,
    validate_key,
    validate_keys,
)
from ncore_like.archive._writer import ChecksummedRecords, PackedRecords, checksummed_records, pack_records
from tests.support import zarr_api
from tests.test_write_path import our_records, zarr_python_records

KEY_ALPHABET = "ab./\\\0é"


def random_key(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.6:
        return "/".join(f"n{rng.randrange(10 ** rng.randrange(1, 8))}" for _ in range(rng.randrange(1, 4)))
    if kind < 0.8:  # > 100 characters: a pax header
        return "long/" + "x" * rng.randrange(96, 300)
    return "ü/" + "".join(rng.choice("abcé€") for _ in range(rng.randrange(1, 20)))  # non-ASCII: pax


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("checksums", [True, False])
def test_member_headers_are_member_header_of_each_record(seed: int, checksums: bool) -> None:
    rng = random.Random(seed)
    for _ in range(20):
        count = rng.randrange(0, 120)  # below and above the size where numpy takes over
        ascii_only = rng.random() < 0.7  # most batches take the vectorised path
        keys = [random_key(rng) for _ in range(count)]
        if ascii_only:
            keys = [f"a/{rng.randrange(10**9)}/{'k' * rng.randrange(0, 80)}" for _ in range(count)]
        big = rng.random() < 0.1  # sizes beyond the ustar size field: pax
        sizes = [rng.choice((0, 1, 511, 512, 513, rng.randrange(8**11), 8**11 - 1)) for _ in keys]
        if big and sizes:
            sizes[rng.randrange(len(sizes))] = 8**11 + rng.randrange(1000)
        crcs = [rng.randrange(1 << 32) for _ in keys] if checksums else None
        expected = [member_header(key, size, None if crcs is None else crcs[i]) for i, (key, size) in
                    enumerate(zip(keys, sizes, strict=True))]  # fmt: skip
        assert member_headers(keys, sizes, crcs) == expected


def test_member_headers_refuses_lists_of_different_lengths() -> None:
    with pytest.raises(ValueError, match="2 keys, 1 sizes"):
        member_headers(["a", "b"], [1])
    with pytest.raises(ValueError, match="1 keys, 1 sizes and 2 checksums"):
        member_headers(["a"], [1], [1, 2])


def first_refusal(keys: list[Any]) -> str | None:
    for key in keys:
        try:
            validate_key(key, "x.itar")
        except InvalidKeyError as error:
            return str(error)
    return None


@pytest.mark.parametrize("seed", range(4))
def test_validate_keys_raises_what_validate_key_raises_for_the_first_bad_key(seed: int) -> None:
    rng = random.Random(seed)
    refused = 0
    for _ in range(3000):
        keys: list[Any] = ["".join(rng.choice(KEY_ALPHABET) for _ in range(rng.randrange(0, 7))) for _ in range(3)]
        if rng.random() < 0.5:  # mostly valid keys around a candidate
            keys = [f"ok/{index}" for index in range(rng.randrange(0, 4))] + keys[:1]
        if rng.random() < 0.02:
            keys.append(rng.choice((3, None, b"a")))
        expected = first_refusal(keys)
        if expected is None:
            validate_keys(keys, "x.itar")
        else:
            refused += 1
            with pytest.raises(InvalidKeyError) as error:
                validate_keys(keys, "x.itar")
            assert str(error.value) == expected
    assert refused > 300  # both sides are exercised


@pytest.mark.parametrize("seed", range(3))
def test_has_node_metadata_key_is_any_is_node_metadata_key(seed: int) -> None:
    rng = random.Random(seed)
    names = ["zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata", "xzarr.json", "zarr.jsonx", "c", "0.0", "a"]
    for _ in range(2000):
        keys = ["/".join(rng.choice(names) for _ in range(rng.randrange(1, 4))) for _ in range(rng.randrange(0, 5))]
        assert has_node_metadata_key(keys) == any(map(is_node_metadata_key, keys)), keys


def mixed_records(seed: int, count: int) -> list[tuple[str, bytes]]:
    """Records of 0 B to 300 KB, long and non-ASCII keys and node metadata among them."""
    rng = random.Random(seed)
    sizes = (0, 1, 511, 512, 513, 4096, 60_000, 300_000)
    records = []
    for index in range(count):
        if index % 23 == 5:
            name = f"g{index}/zarr.json"
        elif index % 11 == 3:
            name = f"long/{'x' * 120}/{index}"
        elif index % 13 == 4:
            name = f"é/{index}"
        else:
            name = f"a/{index}"
        records.append((name, rng.randbytes(rng.choice(sizes))))
    return records


def _batches(records: list[tuple[str, bytes]], rng: random.Random, batching: str) -> list[Sequence[Any]]:
    """``records`` as the batches ``write_many`` gets: packed as tar members (with or without
    checksums: otherwise than the archive, they are written record by record), or with their
    checksums (one batch, or several joined)."""
    batches: list[Sequence[Any]] = []
    start = 0
    while start < len(records):
        parts = []
        for _ in range(rng.choice((1, 3)) if batching == "checksummed" else 1):
            batch = records[start : start + rng.choice((1, 2, 7, 40))]
            start += len(batch)
            keys, payloads = [name for name, _ in batch], [data for _, data in batch]
            if batching == "checksummed":
                parts.append(checksummed_records(keys, payloads))  # type: ignore[arg-type]
            else:
                batches.append(pack_records(keys, payloads, checksums=batching == "packed"))
        if parts:
            batches.append(parts[0] if len(parts) == 1 else ChecksummedRecords.joined(parts))
    return batches


@pytest.mark.parametrize("checksums", [True, False])
@pytest.mark.parametrize("batching", ["packed", "packed without checksums", "checksummed"])
@pytest.mark.parametrize("seed", [0, 1])
def test_batches_made_off_the_writing_thread_write_the_bytes_of_write_many(
    tmp_path: Path, seed: int, checksums: bool, batching: str
) -> None:
    records = mixed_records(seed, 150)
    single, batched = tmp_path / "single.itar", tmp_path / "batched.itar"
    with IndexedTarArchive(single, mode="w", checksums=checksums) as archive:
        for name, data in records:
            archive[name] = data
    with IndexedTarArchive(batched, mode="w", checksums=checksums) as archive:
        for batch in _batches(records, random.Random(seed), batching):
            archive.write_many(batch)
        # Read back before close: from the write buffer and from the file.
        assert all(archive[name] == data for name, data in records)
    assert batched.read_bytes() == single.read_bytes()
    if checksums:
        assert verify_archive(IndexedTarArchive(batched)).ok


def test_packed_records_are_a_sequence_of_key_and_payload() -> None:
    records = [("a/0", b"zero"), ("a/1", b""), ("a/2", bytes(600))]
    packed = pack_records([name for name, _ in records], [data for _, data in records], checksums=True)
    assert len(packed) == 3
    assert [(name, bytes(data)) for name, data in packed] == records
    assert [(name, bytes(data)) for name, data in packed[1:]] == records[1:]
    assert bytes(packed[-1][1]) == bytes(600)
    with pytest.raises(ValueError, match="2 keys for 1 payloads"):
        pack_records(["a", "b"], [b"x"], checksums=True)


def test_an_archive_stores_the_checksums_a_checksummed_batch_brings(tmp_path: Path) -> None:
    # They are taken as given (computed where the payloads were made): a wrong one is what a
    # read of the record then refuses. Node metadata records in the batch are checksummed
    # by the archive itself, as it writes them only at close.
    path = tmp_path / "given.itar"
    payloads: list[bytes | memoryview] = [b"chunk zero", b"chunk one", b'{"zarr_format": 2}']
    right = checksummed_records(["x/0", "x/1"], payloads[:2])
    with IndexedTarArchive(path, mode="w") as archive:
        archive.write_many(ChecksummedRecords(right.keys, right.payloads, [right.crcs[0], right.crcs[1] ^ 1]))
        archive.write_many(ChecksummedRecords(["y/0", "y/.zarray"], [b"other", payloads[2]], [0, 0]))
    archive = IndexedTarArchive(path)
    assert archive["x/0"] == b"chunk zero"
    with pytest.raises(ChecksumError, match="x/1"):
        archive.read("x/1")
    assert archive["y/.zarray"] == payloads[2] and archive["y/0"] == b"other"


def test_checksummed_records_are_a_sequence_of_key_and_payload() -> None:
    records: list[tuple[str, bytes | memoryview]] = [("a/0", b"zero"), ("a/1", b""), ("a/2", memoryview(bytes(600)))]
    batch = checksummed_records([name for name, _ in records], [data for _, data in records])
    assert len(batch) == 3
    assert list(batch) == records
    assert batch[1:] == records[1:]
    assert batch[-1] == records[-1]
    with pytest.raises(ValueError, match="2 keys for 1 payloads"):
        checksummed_records(["a", "b"], [b"x"])


def test_a_taken_repeated_or_bad_key_refuses_the_whole_packed_batch(tmp_path: Path) -> None:
    def packed(*names: str) -> PackedRecords:
        return pack_records(list(names), [name.encode() for name in names], checksums=True)

    path = tmp_path / "a.itar"
    with IndexedTarArchive(path, mode="w") as archive:
        archive["x/0"] = b"x/0"
        with pytest.raises(RecordExistsError, match=r"'x/0' exists already") as taken:
            archive.write_many(packed("x/1", "x/0", "x/2"))
        assert taken.value.key == "x/0"
        with pytest.raises(RecordExistsError, match=r"'x/2' exists already") as repeated:
            archive.write_many(packed("x/2", "x/3", "x/2"))
        assert repeated.value.key == "x/2"
        with pytest.raises(InvalidKeyError, match=r"'\.\./x'"):
            archive.write_many(packed("x/4", "../x"))
        # Nothing of a refused batch is written or counted.
        assert archive.keys() == ["x/0"] and archive.file_size == 1024
        archive.write_many(packed("x/1", "x/2"))  # the keys are still free
    expected = tmp_path / "expected.itar"
    with IndexedTarArchive(expected, mode="w") as archive:
        for name in ("x/0", "x/1", "x/2"):
            archive[name] = name.encode()
    assert path.read_bytes() == expected.read_bytes()


DTYPES = ["<f4", ">f8", "|u1", "<i2", ">i4", "|b1", "<c8", "<M8[ns]"]
COMPRESSIONS = [None, BloscCompression(), BloscCompression("zstd", 3, "shuffle", 0)]


def write_array(
    path: Path, zarr_format: int, data: np.ndarray[Any, Any], chunks: tuple[int, ...], compression: Any
) -> None:
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        root.create_array("x", data, chunks=chunks, compression=compression)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    zarr_format=st.sampled_from(zarr_api.WRITABLE_FORMATS),
    dtype=st.sampled_from(DTYPES),
    rows=st.integers(1, 900),
    row_shape=st.lists(st.integers(1, 6), min_size=0, max_size=2).map(tuple),
    row_chunk=st.integers(1, 40),
    whole_rows=st.booleans(),
    compression=st.sampled_from(COMPRESSIONS),
    seed=st.integers(0, 2**32 - 1),
)
def test_arrays_of_many_small_chunks_are_zarr_pythons_and_the_unpacked_paths_archive(
    tmp_path_factory: pytest.TempPathFactory, zarr_format: int, dtype: str, rows: int, row_shape: tuple[int, ...],
    row_chunk: int, whole_rows: bool, compression: Any, seed: int,
) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    shape = (rows, *row_shape)
    data = (rng.integers(0, 100, size=shape) * rng.integers(0, 2, size=shape)).astype(dtype)
    # Chunks of whole rows (byte ranges of the values) or not; edge chunks when rows % row_chunk.
    chunks = (row_chunk, *(row_shape if whole_rows else (max(1, size - 1) for size in row_shape)))
    folder = tmp_path_factory.mktemp("w")
    # Small batches: many of them, on the worker pool when compressed.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ncore_like.nodes._array, "_PACK_BATCH_BYTES", 512)
        write_array(folder / "packed.itar", zarr_format, data, chunks, compression)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ncore_like.nodes._array, "_WRITE_BATCH_BYTES", 0)  # no packing: record by record
        write_array(folder / "unpacked.itar", zarr_format, data, chunks, compression)
    assert (folder / "packed.itar").read_bytes() == (folder / "unpacked.itar").read_bytes()
    assert our_records(folder / "packed.itar", "x") == zarr_python_records(
        zarr_format, "x", data, chunks, compression, {}
    )
    # EncodedArray.encode shares the encoding: the same records.
    encoded = EncodedArray.encode(data, chunks=chunks, compression=compression, zarr_format=zarr_format)  # type: ignore[arg-type]
    with IndexedTarZarrStore(folder / "encoded.itar", mode="w") as store:
        store.create_root_group({}, zarr_format=zarr_format).create_encoded_array("x", encoded)  # type: ignore[arg-type]
    assert our_records(folder / "encoded.itar", "x") == our_records(folder / "packed.itar", "x")


@pytest.mark.parametrize("zarr_format", zarr_api.WRITABLE_FORMATS)
@pytest.mark.parametrize("compression", [None, BloscCompression()])
def test_whole_chunk_writes_pad_edge_chunks_with_the_fill_value(
    tmp_path: Path, zarr_format: int, compression: BloscCompression | None
) -> None:
    data = np.random.default_rng(3).integers(0, 9, size=(7, 5)).astype("<i4")
    path = tmp_path / "a.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        array = root.create_empty_array("x", shape=(7, 5), dtype="<i4", chunks=(3, 5), compression=compression,
                                        fill_value=-7)  # fmt: skip
        array.write(..., data)
    # The edge chunk (row 6) is padded with -7, as zarr-python pads it: numcodecs' Blosc of
    # the padded chunk.
    edge = np.full((3, 5), -7, "<i4")
    edge[:1] = data[6:]
    expected = edge.tobytes() if compression is None else numcodecs.Blosc("lz4", 5, 2, 0).encode(edge)
    archive = IndexedTarArchive(path)
    assert archive["x/2.0" if zarr_format == 2 else "x/c/2/0"] == expected
    np.testing.assert_array_equal(IndexedTarZarrStore(path).open_root_group(consolidated=False).array("x").read(), data)
