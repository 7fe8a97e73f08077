"""Large results are read into memory that earlier results had, once their callers have let go
of them (``backend/_buffers.py``): a result still held, or anything made from it, is never
written again, from this thread or another; dropped ones are used again."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ncore_like import BloscCompression, ChecksumError, IndexedTarArchive, IndexedTarZarrStore
from ncore_like._buffers import POOLED_BYTES

NDArray = np.ndarray[Any, Any]


def frames_archive(path: Path, count: int = 6) -> list[NDArray]:
    """Raw single-chunk frames of different sizes (all pooled), and a compressed volume."""
    rng = np.random.default_rng(7)
    frames = [rng.integers(0, 255, (int(rng.integers(POOLED_BYTES, 3 * POOLED_BYTES)),), dtype=np.uint8)
              for _ in range(count)]  # fmt: skip
    with IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({})
        group = root.create_group("frames")
        for index, frame in enumerate(frames):
            group.create_array(f"f{index}", frame, chunks="single", compression=None)
        volume = rng.normal(size=(4, 256, 256)).astype(np.float32)
        root.create_array("volume", volume, chunks=(1, 256, 256), compression=BloscCompression())
        store.consolidate()
    return [*frames, volume]


def data_address(array: NDArray) -> int:
    address: int = array.__array_interface__["data"][0]
    return address


def test_results_held_in_any_form_are_never_written_by_later_reads(tmp_path: Path) -> None:
    path = tmp_path / "frames.itar"
    expected = frames_archive(path)
    root = IndexedTarZarrStore(path).open_root_group()
    arrays = [root.group("frames").array(f"f{index}") for index in range(6)]
    held: list[Any] = [
        arrays[0].read(),  # the result itself
        arrays[1].read()[10:-10],  # a view of it (the result dropped)
        memoryview(arrays[2].read()),  # its buffer
        np.frombuffer(arrays[3].read(), dtype=np.uint8),  # an array made from its buffer
    ]
    volume = root.array("volume").read()  # decoded into pooled memory too
    for _ in range(5):  # many reads of every size, each result dropped at once
        for array in arrays:
            array.read()
        root.array("volume").read()
    np.testing.assert_array_equal(held[0], expected[0])
    np.testing.assert_array_equal(held[1], expected[1][10:-10])
    np.testing.assert_array_equal(np.asarray(held[2]), expected[2])
    np.testing.assert_array_equal(held[3], expected[3])
    np.testing.assert_array_equal(volume, expected[-1])
    assert not held[0].flags.writeable and not volume.flags.writeable  # read-only, as always


def test_a_dropped_result_leaves_its_memory_to_the_next_read(tmp_path: Path) -> None:
    path = tmp_path / "frames.itar"
    expected = frames_archive(path)
    frames = IndexedTarZarrStore(path).open_root_group().group("frames")
    first = frames.array("f0").read()
    address = data_address(first)
    del first
    again = frames.array("f0").read()
    assert data_address(again) == address  # no new pages to fault in
    np.testing.assert_array_equal(again, expected[0])
    other = frames.array("f0").read()  # while `again` is held: other memory
    assert data_address(other) != address
    np.testing.assert_array_equal(other, expected[0])


def test_results_held_by_one_thread_survive_reads_of_another(tmp_path: Path) -> None:
    path = tmp_path / "frames.itar"
    expected = frames_archive(path)
    frames = IndexedTarZarrStore(path).open_root_group().group("frames")
    problems: list[str] = []

    def reader(offset: int) -> None:
        for round_ in range(40):
            index = (offset + round_) % 6
            held = frames.array(f"f{index}").read()
            for other in range(6):
                frames.array(f"f{other}").read()  # dropped at once
            if not np.array_equal(held, expected[index]):
                problems.append(f"thread {offset}, round {round_}: frame {index} changed")

    threads = [threading.Thread(target=reader, args=(offset,)) for offset in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not problems


def test_a_damaged_large_frame_raises_and_leaves_no_bytes_behind(tmp_path: Path) -> None:
    path = tmp_path / "frames.itar"
    expected = frames_archive(path)
    record = IndexedTarArchive(path).records["frames/f1/0"]
    with path.open("r+b") as file:
        file.seek(record.offset + 1000)
        file.write(bytes([expected[1][1000] ^ 0xFF]))
    frames = IndexedTarZarrStore(path).open_root_group().group("frames")
    for _ in range(3):
        with pytest.raises(ChecksumError, match="frames/f1/0"):
            frames.array("f1").read()
        np.testing.assert_array_equal(frames.array("f2").read(), expected[2])
