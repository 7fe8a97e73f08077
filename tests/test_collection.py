"""``ArchiveCollection``: many archives by number (by list or glob, local or remote), opened
lazily in whichever process reads them, at most ``max_open`` at once, pickled as their
locations; and PyTorch DataLoader workers sampling frames across them."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from upath import UPath

from ncore_like import ArchiveCollection, IndexedTarZarrStore


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
