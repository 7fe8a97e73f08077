"""Large compressed chunks written by the typed API are made in memory that is used again
once they are written (the pool of ``_buffers``, numcodecs' C function through ctypes): the records
are the bytes numcodecs and zarr-python write, every value reads back after many chunks in
flight, the memory is reused instead of made per chunk, and stores that keep what they are
given never get a view of it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest

import ncore_like._codecs
import ncore_like.nodes._encoding
from ncore_like import BloscCompression, IndexedTarArchive, IndexedTarZarrStore
from ncore_like._buffers import new_result
from tests.support import zarr_api
from tests.test_write_path import our_records, zarr_python_records

#: dtype, shape, chunk shape, compression: chunks of 256 KB and more (the writes that use the
#: buffers), runs of whole rows with a padded edge chunk and chunks that aren't (two paths).
CASES = [
    ("<f8", (5, 300, 230), (2, 300, 230), BloscCompression()),
    ("<i2", (3, 700, 260), (1, 400, 260), BloscCompression("zstd", 3, "shuffle", 0)),
    ("|u1", (4, 600, 600), (1, 600, 600), BloscCompression("lz4", 1, "noshuffle")),
    ("<f4", (3, 512, 512), (1, 512, 512), BloscCompression("blosclz", 9, "bitshuffle", 65536)),
]


def values_of(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray[Any, Any]:
    """Values that compress a little (noise over a smooth part), as sensor data does."""
    rng = np.random.default_rng(seed)
    smooth = np.sin(np.arange(int(np.prod(shape))) / 50.0).reshape(shape) * 100
    noisy = smooth + rng.normal(0, 3, size=shape) * (rng.random(shape) < 0.5)
    return noisy.astype(dtype)


def write(path: Path, values: np.ndarray[Any, Any], chunks: tuple[int, ...], compression: BloscCompression,
          *, durable: bool = True) -> None:  # fmt: skip
    with IndexedTarZarrStore(path, mode="w", durable=durable) as store:
        store.create_root_group({}).create_array("x", values, chunks=chunks, compression=compression)


def numcodecs_record(chunk: np.ndarray[Any, Any], compression: BloscCompression) -> bytes:
    """numcodecs' own encoding of a chunk, on a thread of its own (as zarr-python encodes:
    numcodecs' per-call context, whatever ``numcodecs.blosc.use_threads`` says)."""
    codec = numcodecs.Blosc(cname=compression.cname, clevel=compression.clevel, shuffle=compression.shuffle_id,
                            blocksize=compression.blocksize)  # fmt: skip
    with ThreadPoolExecutor(1) as thread:
        return bytes(thread.submit(codec.encode, np.ascontiguousarray(chunk)).result())


@pytest.mark.parametrize(("dtype", "shape", "chunks", "compression"), CASES)
def test_records_are_numcodecs_bytes(
    tmp_path: Path, dtype: str, shape: tuple[int, ...], chunks: tuple[int, ...], compression: BloscCompression
) -> None:
    values = values_of(dtype, shape)
    write(tmp_path / "a.itar", values, chunks, compression)
    archive = IndexedTarArchive(tmp_path / "a.itar")
    compared = 0
    for index in np.ndindex(*(-(-size // chunk) for size, chunk in zip(shape, chunks, strict=True))):
        region = tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, chunks, strict=True))
        chunk = np.zeros(chunks, dtype)  # the fill value pads the edges
        part = values[region]
        chunk[tuple(slice(0, size) for size in part.shape)] = part
        assert archive[f"x/{'.'.join(map(str, index))}"] == numcodecs_record(chunk, compression), index
        compared += 1
    assert compared > 2


@pytest.mark.parametrize("zarr_format", zarr_api.WRITABLE_FORMATS)
def test_records_are_zarr_pythons(tmp_path: Path, zarr_format: int) -> None:
    dtype, shape, chunks, compression = CASES[0]
    values = values_of(dtype, shape, seed=1)
    with IndexedTarZarrStore(tmp_path / "a.itar", mode="w") as store:
        root = store.create_root_group({}, zarr_format=zarr_format)  # type: ignore[arg-type]
        root.create_array("x", values, chunks=chunks, compression=compression)
    assert our_records(tmp_path / "a.itar", "x") == zarr_python_records(
        zarr_format, "x", values, chunks, compression, {}
    )


@pytest.mark.parametrize("durable", [True, False])
def test_many_chunks_in_flight_read_back_and_reuse_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable: bool
) -> None:
    """96 chunks of 512 KB encoded on the worker pool ahead of the writes: memory used again
    too early would hold another chunk's stream by the time its own is written."""
    made: list[int] = []  # addresses: holding the arrays would keep their memory from reuse

    def recorded(shape: tuple[int, ...], dtype: np.dtype[Any], *, aligned: bool = False) -> np.ndarray[Any, Any]:
        result = new_result(shape, dtype, aligned=aligned)
        made.append(result.__array_interface__["data"][0])
        return result

    monkeypatch.setattr(ncore_like.nodes._encoding, "new_result", recorded)
    values = values_of("<f4", (96, 256, 512), seed=2)
    values[::7] = 0  # some chunks compress to almost nothing (buffered by the writer)
    write(tmp_path / "a.itar", values, (1, 256, 512), BloscCompression(), durable=durable)
    root = IndexedTarZarrStore(tmp_path / "a.itar").open_root_group(consolidated=False)
    assert np.array_equal(root.array("x").read(), values)
    assert len(made) == 96  # every chunk compressed into the pools' memory
    # Each worker thread's pool holds as many buffers as it has records in flight (~20-25
    # here), not one per chunk.
    assert len(set(made)) <= 48


def test_without_numcodecs_c_function_the_records_are_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dtype, shape, chunks, compression = CASES[1]
    values = values_of(dtype, shape, seed=3)
    write(tmp_path / "fast.itar", values, chunks, compression)
    monkeypatch.setattr(ncore_like._codecs, "_compress_ctx", False)  # as if numcodecs exported no symbol
    assert ncore_like._codecs.blosc_compressor_into("lz4", 5, 1, 0, 2) is None
    write(tmp_path / "plain.itar", values, chunks, compression)
    assert our_records(tmp_path / "fast.itar", "x") == our_records(tmp_path / "plain.itar", "x")


def test_a_destination_too_small_is_refused_before_blosc_runs() -> None:
    compress_into = ncore_like._codecs.blosc_compressor_into("lz4", 5, 1, 0, 4)
    assert compress_into is not None
    raw = np.zeros(1000, np.uint8)
    with pytest.raises(ValueError, match="1015 bytes can't hold 1000"):
        compress_into(raw, np.empty(1015, np.uint8))
    dest = np.empty(1016, np.uint8)
    size = compress_into(raw, dest)
    assert numcodecs.blosc.decompress(dest[:size].tobytes()) == raw.tobytes()


@pytest.mark.parametrize("kind", ["memory", "directory"])
def test_stores_that_keep_records_get_bytes_of_their_own(tmp_path: Path, kind: str) -> None:
    """zarr-python's MemoryStore keeps what it is given: a view of reused memory would
    change under it with every later chunk."""
    import zarr.storage

    from ncore_like import ZarrStoreAdapter

    store = (
        ZarrStoreAdapter(zarr.storage.MemoryStore())
        if kind == "memory"
        else ZarrStoreAdapter.directory(tmp_path / "a.zarr")
    )
    values = values_of("<f4", (12, 256, 512), seed=4)
    root = store.create_root_group({})
    array = root.create_array("x", values, chunks=(1, 256, 512), compression=BloscCompression())
    assert np.array_equal(array.read(), values)
