"""The main job (the demo) runs end to end in a reduced size and leaves a valid archive."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ncore_like import IndexedTarZarrStore
from ncore_like.demo import main


def test_demo_writes_and_reads_a_sequence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--frames", "12", "--points", "2000", "--slab", "4", "--reads", "10", "--dir", str(tmp_path)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    for expected in ("writing a synthetic sequence", "random frames", "lidar", "asyncio.gather", "cameras"):
        assert expected in printed
    root = IndexedTarZarrStore(tmp_path / "sequence.itar").open_root_group()
    assert root.attributes["frames"] == 12
    assert [name for name, _ in root.group("cameras").groups()] == ["front", "rear"]
    frame = root.array("cameras/front/00003").read_bytes()
    assert frame.startswith(b"\xff\xd8") and frame.endswith(b"\xff\xd9")
    slabs = [root.array(f"lidar/slab_{i:03d}") for i in range(3)]
    assert [slab.shape for slab in slabs] == [(4, 2000, 4)] * 3
    points = np.concatenate([slab.read() for slab in slabs])
    np.testing.assert_array_equal(points[5], np.asarray(slabs[1].zarr[1]))
    assert root.array("timestamps_us").read().shape == (12,)


def test_help_reads_as_plain_text() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ncore_like.demo", "--help"], capture_output=True, text=True, check=True, timeout=60
    )
    assert "``" not in result.stdout and ".itar archive" in result.stdout


def test_camera_frames_are_jpegs_of_the_scene_as_pillow_decodes_them() -> None:
    import io

    from PIL import Image

    from ncore_like.demo import camera_frame, road_scene

    rng = np.random.default_rng(7)
    for index, camera in [(0, 0), (5, 0), (3, 1)]:
        frame = camera_frame(rng, 200_000, index, camera)
        assert 200_000 - 4 <= len(frame) <= 200_000  # padded to the size asked for
        assert frame.startswith(b"\xff\xd8\xff\xe0") and frame.endswith(b"\xff\xd9")
        decoded = np.asarray(Image.open(io.BytesIO(frame)).convert("RGB"), dtype=int)
        expected = np.repeat(np.repeat(road_scene(index, camera), 8, axis=0), 8, axis=1)
        assert decoded.shape == (360, 640, 3)
        assert np.abs(decoded - expected).max() <= 2  # the colour conversion's rounding
    # The lane marks move from frame to frame, the other way for the rear camera.
    assert not np.array_equal(road_scene(0, 0), road_scene(1, 0))
    assert np.array_equal(road_scene(1, 0), road_scene(5, 1))
