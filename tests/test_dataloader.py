"""PyTorch DataLoader workers read archives under fork, spawn and forkserver, local and S3,
with no user action (the parent used the archive before the workers started)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data
from upath import UPath

from ncore_like import IndexedTarZarrStore, NodeCache

FRAMES = 24


def frame(index: int) -> np.ndarray:
    return np.random.default_rng(index).integers(0, 255, (16, 16, 3), dtype=np.uint8)


def write_frames(location: Path | UPath) -> None:
    with IndexedTarZarrStore(location, mode="w") as store:
        root = store.create_root_group({"frames": FRAMES})
        group = root.create_group("frames")
        for index in range(FRAMES):
            group.create_array(f"{index:03d}", frame(index), chunks=(8, 16, 3))
            group.create_bytes_array(f"{index:03d}.raw", frame(index).tobytes())
        store.consolidate()


class FrameDataset(torch.utils.data.Dataset[Any]):
    """What a training job holds: one open store, its root group with a node cache."""

    def __init__(self, location: Path | UPath) -> None:
        self.root = IndexedTarZarrStore(location).open_root_group().with_cache(NodeCache())

    def __len__(self) -> int:
        return FRAMES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        decoded = self.root.array(f"frames/{index:03d}").read()
        raw = np.frombuffer(self.root.array(f"frames/{index:03d}.raw").read_bytes(), np.uint8)
        return torch.from_numpy(decoded.copy()), torch.from_numpy(raw.copy())


def check_loader(dataset: FrameDataset, context: str) -> None:
    dataset[0]  # the parent reads first: its descriptors, loops and threads exist at fork time
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=5, num_workers=2, multiprocessing_context=context, timeout=120
    )
    seen = 0
    for batch, (decoded, raw) in enumerate(loader):
        for offset in range(decoded.shape[0]):
            index = batch * 5 + offset
            np.testing.assert_array_equal(decoded[offset].numpy(), frame(index))
            np.testing.assert_array_equal(raw[offset].numpy(), frame(index).reshape(-1))
            seen += 1
    assert seen == FRAMES


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_local_archive_in_dataloader_workers(tmp_path: Path, context: str) -> None:
    write_frames(tmp_path / "frames.itar")
    check_loader(FrameDataset(tmp_path / "frames.itar"), context)


@pytest.mark.s3
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_s3_archive_in_dataloader_workers(s3_bucket: UPath, context: str) -> None:
    location = s3_bucket / "frames.itar"
    write_frames(location)
    dataset = FrameDataset(UPath(str(location), **dict(location.storage_options)))
    check_loader(dataset, context)
