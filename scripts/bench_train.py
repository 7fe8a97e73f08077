"""Benchmark of training loaders side by side: ncore_like's TrainingDataset against WebDataset,
LitData's StreamingDataset and MosaicML Streaming, each in its documented recipe, on the same
samples in S3 (moto on loopback behind a proxy adding a fixed latency per request), read by a
torch DataLoader with 2 workers and batches of 16; and ncore_like on the same archives as local
files.

ncore_like runs in its recipe for a fleet on storage with 20 ms per request: the sample index
saved beside the archives when they were written (as LitData's ``optimize`` and Mosaic's
``MDSWriter`` write theirs) and loaded from S3 by the job, blocks of 8 neighbouring samples (a
request each, dealt out over 8 batches). Also measured: the index built in the job (listing
the bucket and reading every archive's tail), a global shuffle (a request per sample), and
local files.

The data: 16 sequences x 64 samples; a sample is one JPEG-like frame of 30-120 KB (random
bytes between JPEG markers), one float32 (20000, 4) lidar sweep (uncompressed, as every loader
stores it) and one pose (7 float64, the first two its sequence and its element: every loader's
samples are checked against what was written, and identify their sequence). Each format is
written by its own writer: ncore_like one archive per sequence written frame by frame (a
recorder's order), WebDataset one tar shard per sequence, LitData ``optimize`` and Mosaic's
``MDSWriter`` with their default chunk and shard sizes.

Each loader runs in its own process (its imports, caches and workers apart), one epoch, the
loaders in turn (the order rotating between repeats). Reported per loader: samples/s of the
epoch, time to the first batch (from the start of the process's work: building or loading
what the loader needs, the workers' start), requests and MB through the proxy, sequences per
batch (a uniformly random order mixes ~10.2 of 16), the peak RSS of a worker process.

Run from the repository root::

    .venv/bin/python -m scripts.bench_train              # full run (a few minutes on 2 cores)
    .venv/bin/python -m scripts.bench_train --quick      # smoke test
    .venv/bin/python -m scripts.bench_train --json docs/data/bench_train.json

The peers come with the ``bench`` extra (a missing one is left out, with a note).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import scripts._benchlib as bench
from scripts._benchlib import MB, Row

NOTES: list[str] = []
PEERS = {"webdataset": "webdataset", "litdata": "litdata", "mosaic": "mosaicml-streaming"}
VERSIONS: dict[str, str] = {
    name: bench.package_version(name)
    for name in ("torch", "s3fs", "moto", "webdataset", "litdata", "mosaicml-streaming")
    if bench.package_version(name) != "?"
}
LIDAR = (20_000, 4)
#: ncore_like's recipe for storage with 20 ms per request: blocks of 8 neighbouring samples (a
#: request each, dealt out over 8 batches), the default byte budget (two windows of 8 x 16
#: samples). Beside blocks of 4 (a budget of 64 MiB), three runs each, alternating, on a quiet
#: machine: an epoch of 4.0-4.7 s against 4.6-6.0 s; moto's CPU 0.75-0.86 s against 1.14-1.38 s
#: (every request costs the test servers milliseconds of the same two cores).
BLOCK = 8


@dataclass(frozen=True)
class Config:
    sequences: int = 16
    samples: int = 64
    image_min: int = 30_000
    image_max: int = 120_000
    latency: float = 0.02
    workers: int = 2
    batch: int = 16
    repeats: int = 1
    seed: int = 0


def configure(args: argparse.Namespace) -> Config:
    if not args.quick:
        return Config(repeats=args.repeats, seed=args.seed)
    return Config(sequences=4, samples=16, image_min=3_000, image_max=12_000, repeats=1, seed=args.seed)


# -- the samples -------------------------------------------------------------------------------


def make_sample(seed: int, sequence: int, index: int, config: Config) -> tuple[bytes, np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, sequence, index])
    size = int(rng.integers(config.image_min, config.image_max + 1))
    image = b"\xff\xd8\xff\xe0" + rng.bytes(size - 6) + b"\xff\xd9"
    lidar = rng.normal(size=LIDAR).astype(np.float32)
    pose = np.concatenate([[sequence, index], rng.normal(size=5)])
    return image, lidar, pose


def samples(config: Config) -> Iterator[tuple[int, int, bytes, np.ndarray, np.ndarray]]:
    for sequence in range(config.sequences):
        for index in range(config.samples):
            yield (sequence, index, *make_sample(config.seed, sequence, index, config))


def write_ncore(folder: Path, config: Config) -> None:
    from ncore_like import IndexedTarZarrStore

    folder.mkdir(parents=True)
    for sequence in range(config.sequences):
        with IndexedTarZarrStore(folder / f"seq-{sequence:02d}.itar", mode="w") as store:
            root = store.create_root_group({"sequence": sequence})
            cameras = root.create_group("cameras").create_group("front")
            count = config.samples
            sweeps = root.create_empty_array(
                "lidar", shape=(count, *LIDAR), dtype=np.float32, chunks=(1, *LIDAR), compression=None
            )
            poses = root.create_empty_array(
                "poses", shape=(count, 7), dtype=np.float64, chunks=(1, 7), compression=None
            )
            for index in range(count):
                image, lidar, pose = make_sample(config.seed, sequence, index, config)
                cameras.create_bytes_array(f"{index:05d}", image)
                sweeps.write(index, lidar)
                poses.write(index, pose)
            store.consolidate()


def write_webdataset(folder: Path, config: Config) -> None:
    import webdataset as wds

    folder.mkdir(parents=True)
    writers: dict[int, Any] = {}
    for sequence, index, image, lidar, pose in samples(config):
        if sequence not in writers:
            writers[sequence] = wds.TarWriter(str(folder / f"seq-{sequence:02d}.tar"))
        writers[sequence].write(
            {"__key__": f"{sequence:02d}_{index:05d}", "jpg": image, "lidar.npy": lidar, "pose.npy": pose}
        )
    for writer in writers.values():
        writer.close()


def _litdata_sample(item: tuple[int, int, int, int, int, int]) -> dict[str, Any]:
    seed, sequence, index, sequences, per, image_min = item[0], item[1], item[2], item[3], item[4], item[5]
    config = Config(sequences=sequences, samples=per, image_min=image_min, image_max=image_min * 4, seed=seed)
    image, lidar, pose = make_sample(seed, sequence, index, config)
    return {"image": image, "lidar": lidar, "pose": pose}


def write_litdata(folder: Path, config: Config) -> None:
    import litdata

    assert config.image_max == config.image_min * 4
    inputs = [
        (config.seed, s, i, config.sequences, config.samples, config.image_min)
        for s in range(config.sequences)
        for i in range(config.samples)
    ]
    litdata.optimize(fn=_litdata_sample, inputs=inputs, output_dir=str(folder), chunk_bytes="64MB", num_workers=1)


def import_streaming() -> Any:
    """MosaicML Streaming's package. It imports torchvision for its vision datasets; torchvision's
    wheels on PyPI link the CUDA build of torch, so with the CPU build here the import fails.
    Then the two names it takes from torchvision are stood in for (its StreamingDataset and
    MDSWriter use neither), and the run says so."""
    try:
        import torchvision  # noqa: F401
    except Exception as error:
        import importlib.machinery
        import types

        note = f"mosaic: torchvision doesn't import with the CPU torch ({str(error)[:80]}); its two names stood in for"
        if note not in NOTES:
            NOTES.append(note)
        for name in (
            "torchvision",
            "torchvision.datasets",
            "torchvision.transforms",
            "torchvision.transforms.functional",
        ):
            module = sys.modules[name] = types.ModuleType(name)
            module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules["torchvision.datasets"].VisionDataset = type("VisionDataset", (), {})  # type: ignore[attr-defined]
        sys.modules["torchvision.transforms.functional"].to_tensor = lambda image: image  # type: ignore[attr-defined]
    import streaming

    return streaming


def write_mosaic(folder: Path, config: Config) -> None:
    MDSWriter = import_streaming().MDSWriter

    columns = {"image": "bytes", "lidar": "ndarray:float32:20000,4", "pose": "ndarray:float64:7"}
    with MDSWriter(out=str(folder), columns=columns) as writer:
        for _, _, image, lidar, pose in samples(config):
            writer.write({"image": image, "lidar": lidar, "pose": pose})


#: Where the fleet's sample index is saved, beside its archives (not matched by ``*.itar``).
INDEX_URL = "s3://ncore/fleet-index.npz"


def save_index(url: str, options: dict[str, Any]) -> None:
    """The fleet's sample index, saved beside its archives as part of writing them (what
    LitData's ``optimize`` and Mosaic's ``MDSWriter`` do with their index files)."""
    from ncore_like.dataset import SampleIndex

    SampleIndex.build("s3://ncore/*.itar", ncore_fields(), storage_options=options).save(url)


def ncore_fields() -> dict[str, Any]:
    """A sample of the archives as ncore_like's dataset reads it."""
    from ncore_like.dataset import Blob, Rows

    return {"image": Blob("cameras/front/{i:05d}"), "lidar": Rows("lidar"), "pose": Rows("poses")}


def upload(folder: Path, endpoint: str, bucket: str) -> None:
    import s3fs

    filesystem = s3fs.S3FileSystem(**bench.import_servers().s3_storage_options(endpoint))
    filesystem.call_s3("create_bucket", Bucket=bucket)
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            filesystem.put_file(str(path), f"{bucket}/{path.relative_to(folder)}")


# -- one loader, in its own process --------------------------------------------------------------


class PeakRss:
    """The peak resident memory of each child process (the DataLoader workers), sampled."""

    def __init__(self) -> None:
        import psutil

        self._me = psutil.Process()
        self.peaks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for child in self._me.children(recursive=True):
                try:
                    rss = child.memory_info().rss
                except Exception:
                    continue
                self.peaks[child.pid] = max(self.peaks.get(child.pid, 0), rss)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return max(self.peaks.values(), default=0)


def loader_ncore(spec: dict[str, Any]) -> Iterable[Any]:
    from ncore_like.dataset import SampleIndex, TrainingDataset, TrainingLoader

    options = spec.get("storage_options")
    if options is not None:  # as many connections as requests in flight (botocore keeps 10)
        options = {**options, "config_kwargs": {"max_pool_connections": 64}}
    if spec["loader"].endswith(("built", "local")):
        index = SampleIndex.build(spec["pattern"], ncore_fields(), storage_options=options)
    else:  # the index saved when the fleet was written, loaded by each job
        index = SampleIndex.load(spec["index_url"], storage_options=options)
    block = 1 if spec["loader"].endswith("block 1") else BLOCK
    dataset = TrainingDataset(index, seed=spec["seed"], block_size=block)
    return TrainingLoader(dataset, batch_size=spec["batch"], num_workers=spec["workers"], collate_fn=collate)


def loader_webdataset(spec: dict[str, Any]) -> Iterable[Any]:
    import torch
    import webdataset as wds

    urls = spec["wds_urls"]  # presigned: curl (WebDataset's reader of http URLs) doesn't sign requests
    dataset = (
        wds.WebDataset(urls, shardshuffle=len(urls), nodesplitter=wds.split_by_node, seed=spec["seed"])
        .shuffle(1000)
        .decode()
        .to_tuple("jpg", "lidar.npy", "pose.npy")
        .map(lambda t: {"image": t[0], "lidar": t[1], "pose": t[2]})
    )
    return torch.utils.data.DataLoader(
        dataset, batch_size=spec["batch"], num_workers=spec["workers"], collate_fn=collate
    )


def loader_litdata(spec: dict[str, Any]) -> Iterable[Any]:
    import litdata
    from litdata.streaming import downloader

    # Its obstore client refuses plain http (the test servers on loopback): allowed, nothing else changed.
    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"

    options = {"endpoint_url": spec["endpoint"], "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
    dataset = litdata.StreamingDataset(
        "s3://litdata/", shuffle=True, seed=spec["seed"], storage_options=options, cache_dir=spec["cache"]
    )
    return litdata.StreamingDataLoader(
        dataset, batch_size=spec["batch"], num_workers=spec["workers"], collate_fn=collate
    )


def loader_mosaic(spec: dict[str, Any]) -> Iterable[Any]:
    import torch

    StreamingDataset = import_streaming().StreamingDataset
    os.environ["S3_ENDPOINT_URL"] = spec["endpoint"]
    dataset = StreamingDataset(
        remote="s3://mosaic/", local=spec["cache"], shuffle=True, shuffle_seed=spec["seed"], batch_size=spec["batch"]
    )
    return torch.utils.data.DataLoader(
        dataset, batch_size=spec["batch"], num_workers=spec["workers"], collate_fn=collate
    )


LOADERS: dict[str, Callable[[dict[str, Any]], Iterable[Any]]] = {
    "ncore_like": loader_ncore,
    "ncore_like built": loader_ncore,
    "ncore_like local": loader_ncore,
    "ncore_like block 1": loader_ncore,
    "webdataset": loader_webdataset,
    "litdata": loader_litdata,
    "mosaic": loader_mosaic,
}


def collate(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """Stacks the sweeps and poses (as torch's default would) and checks nothing here: the
    parent checks every sample against what was written."""
    import torch

    return {
        "image": [bytes(sample["image"]) for sample in batch],
        "lidar": torch.stack([torch.as_tensor(np.asarray(sample["lidar"])) for sample in batch]),
        "pose": torch.stack([torch.as_tensor(np.asarray(sample["pose"])) for sample in batch]),
    }


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    """One epoch of one loader: its figures, and the identities of its batches."""
    config = Config(**spec["config"])
    started = time.perf_counter()
    memory = PeakRss()
    loader = LOADERS[spec["loader"]](spec)
    first = None
    batches: list[list[int]] = []
    checked = 0
    for batch in loader:
        if first is None:
            first = time.perf_counter() - started
        identities = []
        for position, image in enumerate(batch["image"]):
            pose = batch["pose"][position].numpy()
            sequence, index = int(pose[0]), int(pose[1])
            if checked % 7 == 0:  # every seventh sample compared whole (regenerating all would slow the loop)
                want_image, want_lidar, want_pose = make_sample(config.seed, sequence, index, config)
                lidar = batch["lidar"][position].numpy()
                same = image == want_image and np.array_equal(lidar, want_lidar) and np.array_equal(pose, want_pose)
                bench.expect(same, spec["loader"])
            bench.expect(0 <= sequence < config.sequences and 0 <= index < config.samples, spec["loader"])
            identities.append(sequence * config.samples + index)
            checked += 1
        batches.append(identities)
    elapsed = time.perf_counter() - started
    return {"seconds": elapsed, "first_batch": first, "batches": batches, "worker_rss": memory.stop()}


def steady_rate(found: dict[str, Any]) -> float:
    """Samples per second after the first batch (the startup is the first batch's time)."""
    batches = found["batches"]
    return sum(len(batch) for batch in batches[1:]) / (found["seconds"] - found["first_batch"])


# -- the parent ---------------------------------------------------------------------------------


@dataclass
class Measured:
    name: str
    samples_per_s: list[float]
    """Of the whole epoch, the first batch's wait included."""
    first_batch: list[float]
    steady_per_s: list[float] = field(default_factory=list)
    """After the first batch."""
    requests: int = 0
    moved: int = 0
    mixing: float = 0.0
    samples: int = 0
    unique: int = 0
    worker_rss: int = 0


def mixing(batches: list[list[int]], per: int, batch: int) -> float:
    full = [b for b in batches if len(b) == batch]
    return statistics.mean(len({n // per for n in b}) for b in full) if full else 0.0


def bench_loaders(run: bench.Run[Config]) -> list[Row]:
    import s3fs

    servers, config = bench.import_servers(), run.config
    names = ["ncore_like", "ncore_like built", "ncore_like local", "ncore_like block 1"]
    for name, package in PEERS.items():
        if importlib.util.find_spec(package.replace("mosaicml-streaming", "streaming")) is None:
            NOTES.append(f"{name} left out: {package} is not installed (the bench extra)")
        else:
            names.append(name)
    folders = {
        "ncore_like": run.tmp / "ncore",
        "webdataset": run.tmp / "wds",
        "litdata": run.tmp / "litdata",
        "mosaic": run.tmp / "mosaic",
    }
    writers = {
        "ncore_like": write_ncore,
        "webdataset": write_webdataset,
        "litdata": write_litdata,
        "mosaic": write_mosaic,
    }
    for name, writer in writers.items():
        if name in names:
            writer(folders[name], config)
    stored = sum(path.stat().st_size for path in folders["ncore_like"].glob("*.itar"))
    wanted = sum(len(image) + lidar.nbytes + pose.nbytes for _, _, image, lidar, pose in samples(config))
    results = {name: Measured(name, [], []) for name in names}
    with servers.start_moto() as moto:
        for name, bucket in (
            ("ncore_like", "ncore"),
            ("webdataset", "wds"),
            ("litdata", "litdata"),
            ("mosaic", "mosaic"),
        ):
            if name in names:
                upload(folders[name], moto.endpoint, bucket)
        save_index(INDEX_URL, servers.s3_storage_options(moto.endpoint))
        with servers.start_proxy(moto.endpoint, latency=config.latency) as proxy:
            options = servers.s3_storage_options(proxy.endpoint)
            signer = s3fs.S3FileSystem(**options)
            wds_urls = [signer.url(f"wds/seq-{sequence:02d}.tar", expires=7200) for sequence in range(config.sequences)]
            for round_ in range(config.repeats):
                shift = round_ % len(names)
                for name in names[shift:] + names[:shift]:
                    cache = run.tmp / f"cache-{name.replace(' ', '-')}-{round_}"
                    spec = {
                        "loader": name,
                        "config": asdict(config),
                        "seed": config.seed + round_,
                        "batch": config.batch,
                        "workers": config.workers,
                        "sequences": config.sequences,
                        "endpoint": proxy.endpoint,
                        "cache": str(cache),
                        "pattern": str(folders["ncore_like"] / "*.itar")
                        if name.endswith("local")
                        else "s3://ncore/*.itar",
                        "storage_options": None if name.endswith("local") else options,
                        "wds_urls": wds_urls,
                        "index_url": INDEX_URL,
                    }
                    found = None
                    for attempt in range(1 if name.startswith("ncore_like") else 2):
                        # A peer that fails (MosaicML Streaming once read a shard as empty) runs once
                        # more; failing again, it is left out of the round, with a note.
                        proxy.clear_requests()
                        shutil.rmtree(cache, ignore_errors=True)
                        try:
                            found = child(spec, run.tmp)
                            break
                        except RuntimeError as error:
                            if name.startswith("ncore_like"):
                                raise
                            last = str(error).strip().splitlines()[-1][:200]
                            NOTES.append(f"{name} failed in round {round_ + 1} (attempt {attempt + 1}): {last}")
                    shutil.rmtree(cache, ignore_errors=True)
                    if found is None:
                        continue
                    requests = [r for r in proxy.requests() if r["method"] in ("GET", "HEAD")]
                    measured = results[name]
                    count = sum(len(b) for b in found["batches"])
                    measured.samples_per_s.append(count / found["seconds"])
                    measured.steady_per_s.append(steady_rate(found))
                    measured.first_batch.append(found["first_batch"])
                    measured.requests = 0 if name.endswith("local") else len(requests)
                    measured.moved = 0 if name.endswith("local") else sum(r.get("bytes", 0) for r in requests)
                    measured.mixing = mixing(found["batches"], config.samples, config.batch)
                    measured.samples = count
                    measured.unique = len({n for b in found["batches"] for n in b})
                    measured.worker_rss = max(measured.worker_rss, found["worker_rss"])
    uniform = statistics.mean(
        len({n // config.samples for n in batch})
        for batch in np.random.default_rng(config.seed)
        .permutation(config.sequences * config.samples)
        .reshape(-1, config.batch)
    )
    measured_ones = {name: measured for name, measured in results.items() if measured.samples_per_s}
    return rows(measured_ones, config, stored, wanted, uniform)


def child(spec: dict[str, Any], tmp: Path) -> dict[str, Any]:
    path = tmp / "spec.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    env = bench.import_servers().loopback_env()
    # AWS_ALLOW_HTTP: obstore (LitData's downloader) refuses http endpoints otherwise; the servers are on loopback.
    env.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ALLOW_HTTP="true",
    )
    result = subprocess.run(
        [sys.executable, "-m", "scripts.bench_train", "--child", str(path)],
        capture_output=True, text=True, env=env, timeout=1800, cwd=bench.REPO_ROOT,  # where scripts is a package
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"{spec['loader']} failed:\n{result.stderr[-4000:]}")
    if result.stderr.strip():
        NOTES.append(f"{spec['loader']} wrote to stderr: {result.stderr.strip()[-300:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def rows(results: dict[str, Measured], config: Config, stored: int, wanted: int, uniform: float) -> list[Row]:
    out: list[Row] = []
    ours = results["ncore_like"]
    rate = statistics.median(ours.samples_per_s)
    peers = [m for name, m in results.items() if not name.startswith("ncore_like")]
    total = config.sequences * config.samples
    for measured in results.values():
        speed = statistics.median(measured.samples_per_s)
        steady = statistics.median(measured.steady_per_s)
        first = statistics.median(measured.first_batch)
        detail = (
            f"{speed:.0f} samples/s over the epoch ({steady:.0f} after the first batch), first batch {first:.2f} s, "
            f"{measured.requests} requests, "
            f"{measured.moved / MB:.0f} MB moved, {measured.mixing:.1f} sequences/batch, "
            f"{measured.unique}/{total} samples ({measured.samples} read), "
            f"worker peak RSS {measured.worker_rss / MB:.0f} MB"
        )
        raw = {
            "samples_per_s": speed,
            "steady_samples_per_s": steady,
            "first_batch_s": first,
            "requests": measured.requests,
            "moved_mb": measured.moved / MB,
            "mixing": measured.mixing,
            "worker_rss_mb": measured.worker_rss / MB,
        }
        out.append(
            Row("loaders", measured.name, speed / rate, "samples/s vs ncore_like on S3", "(figures)", None, raw, detail)
        )
    if peers:
        best = max(peers, key=lambda m: statistics.median(m.samples_per_s))
        ratio = rate / statistics.median(best.samples_per_s)
        out.append(
            Row(
                "targets",
                f"samples/s vs the best peer ({best.name})",
                ratio,
                "ncore_like/peer",
                ">= 1.00x",
                ratio >= 1.0,
            )
        )
        fastest = min(peers, key=lambda m: statistics.median(m.first_batch))
        ratio = statistics.median(fastest.first_batch) / statistics.median(ours.first_batch)
        out.append(
            Row(
                "targets",
                f"time to first batch vs the fastest peer ({fastest.name})",
                ratio,
                "peer/ncore_like",
                ">= 1.00x",
                ratio >= 1.0,
            )
        )
    if "ncore_like local" in results:
        ratio = rate / statistics.median(results["ncore_like local"].samples_per_s)
        out.append(
            Row(
                "targets",
                "samples/s on S3 vs the same archives as local files",
                ratio,
                "S3/local",
                ">= 0.80x",
                ratio >= 0.8,
            )
        )
    moved = ours.moved / wanted
    out.append(
        Row(
            "targets",
            f"bytes moved vs the samples' bytes ({wanted / MB:.0f} MB; {stored / MB:.0f} MB stored)",
            moved,
            "moved/wanted",
            "<= 1.05x (index tails included)",
            moved <= 1.05,
        )
    )
    out.append(
        Row(
            "targets",
            f"sequences per batch of {config.batch} (uniformly random: {uniform:.1f})",
            ours.mixing,
            "sequences",
            ">= 9",
            ours.mixing >= 9,
        )
    )
    return out


WORKLOADS = {"loaders": bench_loaders}


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and len(sys.argv) == 3 and sys.argv[1] == "--child":
        spec = json.loads(Path(sys.argv[2]).read_text(encoding="utf-8"))
        print(json.dumps(run_child(spec)))
        return 0

    def more(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--repeats", type=int, default=1, help="epochs per loader (interleaved)")

    return bench.run_benchmark(
        "bench_train",
        __doc__,
        WORKLOADS,
        configure,
        argv=argv,
        other_versions=VERSIONS,
        load_average=True,
        notes=NOTES,
        quick_help="small, fast run (smoke test)",
        seed_help="random seed (data, orders)",
        add_arguments=more,
    )


if __name__ == "__main__":
    sys.exit(main())
