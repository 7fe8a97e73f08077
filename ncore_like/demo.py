"""The main job: record a synthetic sequence into an ``.itar`` archive and read it back.

Writes what a robotics recording looks like — encoded camera frames (JPEG-like blobs),
lidar sweeps (float32 points, chunked), poses and timestamps — encoding the lidar chunks
on worker threads, into one archive in a temporary folder; reopens it from its consolidated
metadata; reads random frames and lidar slabs into preallocated buffers; prints the
hierarchy and the throughput of each step. Local files only.

Run it with ``./scripts/demo`` (or ``python -m ncore_like.demo --help``).
"""

from __future__ import annotations

import argparse
import asyncio
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


def jpeg_like(rng: np.random.Generator, size: int) -> bytes:
    """Bytes shaped like a JPEG file (start/end markers around incompressible data)."""
    return b"\xff\xd8\xff\xe0" + rng.bytes(size - 6) + b"\xff\xd9"


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
        camera: [jpeg_like(rng, int(rng.integers(150_000, 450_000))) for _ in range(args.frames)]
        for camera in ("front", "rear")[: args.cameras]
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
