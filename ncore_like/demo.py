"""The main job: record a synthetic sequence into an ``.itar`` archive and read it back.

Writes what a robotics recording looks like — encoded camera frames (JPEG blobs of a
synthetic road, padded to a camera's frame sizes), lidar sweeps (float32 points, chunked),
poses and timestamps — encoding the lidar chunks on worker threads, into one archive in a
temporary folder; reopens it from its consolidated metadata; reads random frames and lidar
slabs into preallocated buffers; prints the hierarchy and the throughput of each step.
Local files only.

Run it with ``./scripts/demo`` (or ``python -m ncore_like.demo --help``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from . import Array, BloscCompression, EncodedArray, Group, IndexedTarZarrStore

MB = 1e6


@contextmanager
def timed(results: dict[str, float], name: str) -> Iterator[None]:
    started = time.perf_counter()
    yield
    results[name] = time.perf_counter() - started


#: Camera frames are drawn in blocks of 8x8 pixels (one JPEG block each): 80 x 45 blocks.
_BLOCKS_WIDE, _BLOCKS_HIGH = 80, 45


def road_scene(index: int, camera: int) -> np.ndarray:
    """RGB colours (0-255) of the 8x8-pixel blocks of a synthetic camera frame: sky, grass
    and a road whose lane marks move with the frame ``index`` (the rear camera sees them
    move the other way)."""
    rows, cols = np.mgrid[0:_BLOCKS_HIGH, 0:_BLOCKS_WIDE].astype(np.float64)
    horizon = 20
    sky = np.array([70, 130, 220]) + (rows[..., None] / horizon) * np.array([110, 80, 30])
    scene = np.where((rows < horizon)[..., None], sky, np.array([60, 135, 55]))
    depth = np.clip((rows - horizon) / (_BLOCKS_HIGH - horizon), 0, 1)
    centre = _BLOCKS_WIDE / 2
    road = (rows >= horizon) & (np.abs(cols - centre) <= 2 + depth * 34)
    scene[road] = (95, 95, 100)
    phase = index if camera == 0 else -index
    dashes = road & (np.abs(cols - centre) <= 0.5 + depth) & (((rows + phase) // 3) % 2 == 0)
    scene[dashes] = (235, 235, 225)
    return scene


def jpeg_blocks(rgb: np.ndarray) -> bytes:
    """A baseline JPEG (JFIF) of an image drawn in 8x8 blocks of one colour each: every
    block is its DC coefficient alone, entropy-coded with small Huffman tables of its own
    (nine DC categories of 4 bits, the AC end-of-block as one bit). Any decoder reads it."""
    rgb = np.asarray(rgb, dtype=np.float64)
    red, green, blue = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    ycbcr = np.stack(
        [
            0.299 * red + 0.587 * green + 0.114 * blue,
            128 - 0.168736 * red - 0.331264 * green + 0.5 * blue,
            128 + 0.5 * red - 0.418688 * green - 0.081312 * blue,
        ],
        axis=-1,
    )
    # With every quantiser 8, a block's quantised DC is its mean - 128 (a JPEG DC is 8x that).
    dc = np.clip(np.round(ycbcr - 128), -127, 127).astype(np.int64).reshape(-1, 3)
    diff = np.diff(dc, axis=0, prepend=0).reshape(-1)  # block order Y Cb Cr, one predictor each
    category = np.where(diff == 0, 0, np.floor(np.log2(np.abs(diff) + 0.5)).astype(np.int64) + 1)
    magnitude = np.where(diff >= 0, diff, diff + (1 << category) - 1)
    width = 4 + category + 1  # category code, magnitude bits, end of block ("0")
    value = (category << (category + 1)) | (magnitude << 1)
    shifts = width[:, None] - 1 - np.arange(13)
    bits = (value[:, None] >> np.clip(shifts, 0, None)) & 1
    stream = bits[shifts >= 0]
    stream = np.concatenate([stream, np.ones(-len(stream) % 8, dtype=np.int64)])
    entropy = np.packbits(stream.astype(np.uint8)).tobytes().replace(b"\xff", b"\xff\x00")

    def segment(marker: int, body: bytes) -> bytes:
        return bytes([0xFF, marker]) + (len(body) + 2).to_bytes(2, "big") + body

    height, width_px = rgb.shape[0] * 8, rgb.shape[1] * 8
    frame = bytes([8, *height.to_bytes(2, "big"), *width_px.to_bytes(2, "big"), 3, 1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0])
    dc_table = bytes([0x00, 0, 0, 0, 9, *[0] * 12, *range(9)])
    ac_table = bytes([0x10, 1, *[0] * 15, 0x00])
    return b"".join(
        [
            b"\xff\xd8",
            segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"),
            segment(0xDB, bytes([0]) + bytes([8] * 64)),
            segment(0xC0, frame),
            segment(0xC4, dc_table + ac_table),
            segment(0xDA, bytes([3, 1, 0x00, 2, 0x00, 3, 0x00, 0, 63, 0])),
            entropy,
            b"\xff\xd9",
        ]
    )


@functools.lru_cache(maxsize=12)
def _scene_jpeg(index: int, camera: int) -> bytes:
    # The lane marks repeat every 6 frames: 12 encodings serve a whole sequence.
    return jpeg_blocks(road_scene(index, camera))


def camera_frame(rng: np.random.Generator, size: int, index: int, camera: int) -> bytes:
    """A camera frame: a JPEG of the road scene (see :func:`road_scene`) padded with comment
    segments of random bytes to about ``size`` bytes, as large and incompressible as a real
    camera's frames."""
    image = _scene_jpeg(index % 6, camera)
    padding = []
    left = size - len(image)
    while left > 4:
        part = min(left - 4, 65533)
        padding.append(b"\xff\xfe" + (part + 2).to_bytes(2, "big") + rng.bytes(part))
        left -= part + 4
    # After the JFIF segment (20 bytes), which some readers expect first.
    return image[:20] + b"".join(padding) + image[20:]


def lidar_sweep(rng: np.random.Generator, points: int, index: int) -> np.ndarray:
    """One sweep: points on a ring around the vehicle, with a little structure and noise."""
    angle = np.linspace(0, 2 * np.pi, points, dtype=np.float32) + index * 0.01
    distance = 10 + 5 * np.sin(angle * 7) + rng.normal(0, 0.05, points).astype(np.float32)
    height = np.round(rng.normal(0, 0.5, points), 2).astype(np.float32)
    intensity = np.round(rng.random(points) * 100).astype(np.float32)
    return np.stack([distance * np.cos(angle), distance * np.sin(angle), height, intensity], axis=1)


def write_sequence(path: Path, args: argparse.Namespace, rng: np.random.Generator) -> dict[str, float]:
    results: dict[str, float] = {}
    frames = {
        camera: [camera_frame(rng, int(rng.integers(150_000, 450_000)), i, number) for i in range(args.frames)]
        for number, camera in enumerate(("front", "rear")[: args.cameras])
    }
    sweeps = np.stack([lidar_sweep(rng, args.points, i) for i in range(args.frames)])
    poses = np.tile(np.eye(4), (args.frames, 1, 1))
    poses[:, 0, 3] = np.cumsum(rng.random(args.frames))
    timestamps = 1_700_000_000_000_000 + np.arange(args.frames, dtype=np.int64) * 100_000

    with timed(results, "encode lidar on worker threads"), ThreadPoolExecutor(args.workers) as pool:
        # Each slab of sweeps is encoded on its own thread (Blosc releases the GIL).
        slabs = [sweeps[i : i + args.slab] for i in range(0, args.frames, args.slab)]
        encoded = list(pool.map(lambda slab: EncodedArray.encode(slab, chunks=(1, args.points, 4)), slabs))
    with timed(results, "write archive"), IndexedTarZarrStore(path, mode="w") as store:
        root = store.create_root_group({"sequence": "demo-drive", "frames": args.frames}, zarr_format=2)
        cameras = root.create_group("cameras")
        for camera, blobs in frames.items():
            group = cameras.create_group(camera, attributes={"codec": "jpeg", "fps": 10})
            for i, blob in enumerate(blobs):
                group.create_bytes_array(f"{i:05d}", blob)
        lidar = root.create_group("lidar", attributes={"sensor": "top", "fields": ["x", "y", "z", "intensity"]})
        for i, part in enumerate(encoded):
            lidar.create_encoded_array(f"slab_{i:03d}", part)
        root.create_array("poses", poses, compression=None, attributes={"frame": "world"})
        root.create_array("timestamps_us", timestamps, compression=BloscCompression(shuffle="shuffle"))
        store.consolidate()
    results["bytes written"] = float(path.stat().st_size)
    results["raw bytes"] = float(sum(len(b) for blobs in frames.values() for b in blobs) + sweeps.nbytes)
    return results


def read_sequence(path: Path, args: argparse.Namespace, rng: np.random.Generator) -> tuple[Group, dict[str, float]]:
    results: dict[str, float] = {}
    with timed(results, "open (consolidated)"):
        root = IndexedTarZarrStore(path).open_root_group()
    cameras = [name for name, _ in root.group("cameras").groups()]
    picks = [(str(rng.choice(cameras)), int(rng.integers(args.frames))) for _ in range(args.reads)]
    frame_bytes = 0
    with timed(results, "random frame reads"):
        for camera, index in picks:
            frame_bytes += len(root.array(f"cameras/{camera}/{index:05d}").read_bytes())
    results["frame bytes"] = float(frame_bytes)

    slabs = [array for _, array in root.group("lidar").items() if isinstance(array, Array)]
    first = slabs[0]
    out = np.empty((2, *first.shape[1:]), dtype=first.dtype)
    with timed(results, "random lidar reads (2 sweeps, out=)"):
        for _ in range(args.reads):
            array = slabs[int(rng.integers(len(slabs)))]
            start = int(rng.integers(array.shape[0] - 1))
            array.read(np.s_[start : start + 2], out=out)
    results["lidar bytes"] = float(args.reads * out.nbytes)

    whole = np.empty(first.shape, dtype=first.dtype)
    with timed(results, "one lidar slab, ours"):
        for array in slabs:
            if array.shape == first.shape:
                array.read(out=whole)
    with timed(results, "one lidar slab, zarr-python"):
        for array in slabs:
            if array.shape == first.shape:
                np.asarray(array.zarr[...])

    async def gathered() -> tuple[float, int]:
        # Timed inside the loop: leaving asyncio.run formats the main task's result (all the
        # frames) on Python 3.11, which would be counted too.
        started = time.perf_counter()
        arrays = [root.array(f"cameras/{camera}/{index:05d}") for camera, index in picks[:50]]
        blobs = await asyncio.gather(*(array.read_bytes_async() for array in arrays))
        return time.perf_counter() - started, sum(len(blob) for blob in blobs)

    seconds, nbytes = asyncio.run(gathered())
    results["50 gathered read_bytes_async"] = seconds
    results["async bytes"] = float(nbytes)
    return root, results


def main(argv: list[str] | None = None) -> int:
    # The docstring's reStructuredText literals (``x``) read as plain text in a terminal.
    parser = argparse.ArgumentParser(prog="ncore_like.demo", description=__doc__.split("\n\n")[0].replace("``", ""))
    parser.add_argument("--frames", type=int, default=120, help="frames per camera and lidar sweeps (120)")
    parser.add_argument("--cameras", type=int, default=2, choices=(1, 2), help="cameras (2)")
    parser.add_argument("--points", type=int, default=50_000, help="lidar points per sweep (50000)")
    parser.add_argument("--slab", type=int, default=8, help="lidar sweeps per array, one chunk per sweep (8)")
    parser.add_argument("--reads", type=int, default=200, help="random reads of each kind (200)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="encoding threads")
    parser.add_argument("--dir", type=Path, help="folder for the archive (default: a temporary one)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(2026)

    with tempfile.TemporaryDirectory(prefix="ncore-like-demo-") as temporary:
        folder = args.dir or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "sequence.itar"
        print(f"writing a synthetic sequence to {path}")
        written = write_sequence(path, args, rng)
        print(
            f"  {written['raw bytes'] / MB:.1f} MB of frames and lidar -> "
            f"{written['bytes written'] / MB:.1f} MB archive; "
            f"lidar encoded in {written['encode lidar on worker threads'] * 1e3:.0f} ms on {args.workers} threads, "
            f"archive written in {written['write archive'] * 1e3:.0f} ms "
            f"({written['bytes written'] / MB / written['write archive']:.0f} MB/s)"
        )
        root, read = read_sequence(path, args, rng)

        from .cli._tree import render_tree

        print(f"\nthe hierarchy (first members of each group; all of it: ncore-like tree {path}):")
        for line in render_tree(root, max_members=4):
            print(f"  {line}")
        print("\nreading it back:")
        print(f"  open from consolidated metadata: {read['open (consolidated)'] * 1e3:.1f} ms")
        rate = read["frame bytes"] / MB / read["random frame reads"]
        print(f"  {args.reads} random frames: {read['random frame reads'] * 1e3:.0f} ms ({rate:.0f} MB/s)")
        seconds = read["random lidar reads (2 sweeps, out=)"]
        rate = read["lidar bytes"] / MB / seconds
        print(f"  {args.reads} random 2-sweep lidar slabs into out=: {seconds * 1e3:.0f} ms ({rate:.0f} MB/s)")
        ratio = read["one lidar slab, zarr-python"] / read["one lidar slab, ours"]
        print(
            f"  every full lidar slab: ours {read['one lidar slab, ours'] * 1e3:.0f} ms, "
            f"zarr-python {read['one lidar slab, zarr-python'] * 1e3:.0f} ms ({ratio:.1f}x)"
        )
        seconds = read["50 gathered read_bytes_async"]
        rate = read["async bytes"] / MB / seconds
        print(f"  50 frames with asyncio.gather(read_bytes_async): {seconds * 1e3:.0f} ms ({rate:.0f} MB/s)")
        print(
            f"\ndone; the archive {'stays in ' + str(folder) if args.dir else 'was removed with its temporary folder'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
