"""Training datasets over many archives: samples as written, orders reproducible from the
seed, rank splits disjoint and equal, exact resume with other worker and rank counts, real
DataLoader workers (fork, spawn, forkserver), S3 with the requests counted, the byte budget.

Every check compares sample identities (the ``SampleNumber`` field, and the values, which
encode their sequence and element), never counts alone."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import s3fs  # type: ignore[import-untyped,unused-ignore]
import torch
from upath import UPath

from ncore_like import ArchiveFormatError, ChecksumError, IndexedTarZarrStore, RecordCache
from ncore_like.dataset import (
    Blob,
    Rows,
    SampleIndex,
    SampleNumber,
    SampleView,
    TrainingDataset,
    TrainingLoader,
)
from ncore_like.dataset._dataset import PREFORK_SAMPLES
from tests.support.s3_clients import s3_clients_set_up
from tests.support.servers import ServerProcess

LIDAR = (50, 4)
FIELDS: dict[str, Any] = {
    "image": Blob("cameras/front/{i:05d}"),
    "lidar": "lidar",  # a string naming rows
    "pose": Rows("poses"),
    "number": SampleNumber(),
}


def image(sequence: int, index: int) -> bytes:
    size = 200 + (sequence * 37 + index * 11) % 300
    return bytes([sequence, index]) + np.random.default_rng([sequence, index]).bytes(size)


def lidar(sequence: int, index: int) -> np.ndarray:
    return np.random.default_rng([sequence, index, 1]).normal(size=LIDAR).astype(np.float32)


def poses(sequence: int, count: int) -> np.ndarray:
    return np.random.default_rng([sequence, 2]).normal(size=(count, 7))


def write_sequence(location: Path | UPath, sequence: int, count: int) -> None:
    """A recorder's archive: frame by frame, the image, the lidar sweep (Blosc in even
    sequences, raw in odd ones); the poses, several per chunk, at the end."""
    with IndexedTarZarrStore(location, mode="w") as store:
        root = store.create_root_group({"sequence": sequence})
        cameras = root.create_group("cameras").create_group("front")
        options: dict[str, Any] = {"compression": None} if sequence % 2 else {}
        sweeps = root.create_empty_array(
            "lidar", shape=(count, *LIDAR), dtype=np.float32, chunks=(1, *LIDAR), **options
        )
        for index in range(count):
            cameras.create_bytes_array(f"{index:05d}", image(sequence, index))
            sweeps.write(index, lidar(sequence, index))
        root.create_array("poses", poses(sequence, count), chunks=(4, 7))
        store.consolidate()


def write_fleet(folder: Path | UPath, counts: list[int]) -> list[str]:
    locations = []
    for sequence, count in enumerate(counts):
        location = folder / f"seq-{sequence:02d}.itar"
        write_sequence(location, sequence, count)
        locations.append(str(location))
    return locations


def check_sample(index: SampleIndex, sample: dict[str, Any]) -> None:
    """The sample's values are those written for its number."""
    sequence, position = index.locate(int(sample["number"]))
    assert bytes(sample["image"]) == image(sequence, position)
    np.testing.assert_array_equal(np.asarray(sample["lidar"]), lidar(sequence, position))
    np.testing.assert_array_equal(np.asarray(sample["pose"]), poses(sequence, index.lengths[sequence])[position])


@pytest.fixture
def fleet(tmp_path: Path) -> SampleIndex:
    write_fleet(tmp_path, [12, 9, 15, 12])  # 48 samples
    return SampleIndex.build(str(tmp_path / "*.itar"), FIELDS)


def numbers(samples: list[dict[str, Any]]) -> list[int]:
    return [int(sample["number"]) for sample in samples]


# -- the index ------------------------------------------------------------------------------


def test_a_view_takes_negative_numbers_one_by_one_and_in_batches(fleet: SampleIndex) -> None:
    view = SampleView(fleet)
    last = view[len(fleet) - 1]
    assert numbers([view[-1]]) == numbers([last]) == numbers(view.__getitems__([-1]))
    assert numbers(view.__getitems__([-len(fleet), 3, -2])) == [0, 3, len(fleet) - 2]
    with pytest.raises(IndexError):
        view.__getitems__([-len(fleet) - 1])


def test_samples_are_what_was_written(fleet: SampleIndex) -> None:
    assert list(fleet.lengths) == [12, 9, 15, 12]
    view = SampleView(fleet, verify_checksums=True)
    for number in range(len(fleet)):
        check_sample(fleet, view[number])
    assert numbers(view.__getitems__([40, 3, 3, 17])) == [40, 3, 3, 17]
    with pytest.raises(IndexError):
        view[len(fleet)]


def test_saved_index_reads_the_same(fleet: SampleIndex, tmp_path: Path) -> None:
    fleet.save(tmp_path / "index.npz")
    loaded = SampleIndex.load(tmp_path / "index.npz")
    assert list(loaded.lengths) == list(fleet.lengths)
    assert [known.location for known in loaded.archives] == [known.location for known in fleet.archives]
    for sample in SampleView(loaded).__getitems__(list(range(len(loaded)))):
        check_sample(loaded, sample)


@pytest.mark.s3
def test_an_index_saved_beside_the_archives_on_s3(
    s3_bucket: UPath, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saved to a URL (for ranks on other machines) and loaded from it, the index reads the
    same samples; a missing one is a FileNotFoundError naming it, a damaged one a ValueError;
    a failed local save leaves the file that was there."""
    options = dict(s3_bucket.storage_options)
    index = SampleIndex.build(s3_fleet(s3_bucket, [5, 7]), FIELDS, storage_options=options)
    url = str(s3_bucket).rstrip("/") + "/fleet.npz"
    index.save(url)  # with the index's own storage options
    loaded = SampleIndex.load(url, storage_options=options)
    assert [known.location for known in loaded.archives] == [known.location for known in index.archives]
    samples = SampleView(loaded).__getitems__(list(range(len(loaded))))
    assert numbers(samples) == list(range(12))
    for sample in samples:
        check_sample(loaded, sample)
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        SampleIndex.load(str(s3_bucket).rstrip("/") + "/missing.npz", storage_options=options)
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        SampleIndex.load(tmp_path / "missing.npz")
    (s3_bucket / "junk.npz").write_bytes(b"not numpy")
    with pytest.raises(ValueError, match=r"junk\.npz: not a saved sample index"):
        SampleIndex.load(str(s3_bucket).rstrip("/") + "/junk.npz", storage_options=options)
    index.save(tmp_path / "fleet.npz")
    before = (tmp_path / "fleet.npz").read_bytes()

    def fails(source: str, target: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fails)
    with pytest.raises(OSError, match=r"No space left on device: '.*fleet\.npz'"):
        SampleIndex.build(s3_fleet(s3_bucket, [3]), FIELDS, storage_options=options).save(tmp_path / "fleet.npz")
    assert (tmp_path / "fleet.npz").read_bytes() == before and os.listdir(tmp_path) == ["fleet.npz"]


@pytest.mark.s3
def test_an_index_loaded_from_s3_and_its_samples_share_one_client(s3_bucket: UPath) -> None:
    """Loading a saved index from S3 and reading its samples set up one S3 client (~0.1 s
    each), in a fresh process."""
    options = dict(s3_bucket.storage_options)
    url = str(s3_bucket).rstrip("/") + "/fleet.npz"
    SampleIndex.build(s3_fleet(s3_bucket, [4, 4]), FIELDS, storage_options=options).save(url)
    code = f"""
    from ncore_like.dataset import SampleIndex, SampleView
    index = SampleIndex.load({url!r}, storage_options={options!r})
    assert [sample["number"] for sample in SampleView(index).__getitems__(list(range(8)))] == list(range(8))
    """
    assert s3_clients_set_up(code) == 1


def sequence_attribute(group: Any, index: int) -> int:
    return int(group.attributes["sequence"]) * 100 + index


def test_function_fields(tmp_path: Path) -> None:
    write_fleet(tmp_path, [5, 6])
    with pytest.raises(ValueError, match="length="):
        SampleIndex.build(str(tmp_path / "*.itar"), {"tag": sequence_attribute})
    index = SampleIndex.build(
        str(tmp_path / "*.itar"), {"tag": sequence_attribute, "number": SampleNumber()}, length=lambda group: 4
    )
    samples = SampleView(index).__getitems__(list(range(len(index))))
    assert [sample["tag"] for sample in samples] == [0, 1, 2, 3, 100, 101, 102, 103]
    index.save(tmp_path / "index.npz")
    with pytest.raises(ValueError, match="'tag' is a function"):
        SampleIndex.load(tmp_path / "index.npz")
    loaded = SampleIndex.load(tmp_path / "index.npz", functions={"tag": sequence_attribute})
    assert SampleView(loaded)[5]["tag"] == 101


def test_bad_fields_and_files_are_named(tmp_path: Path) -> None:
    write_fleet(tmp_path, [4])
    pattern = str(tmp_path / "*.itar")
    with pytest.raises(ValueError, match=r"seq-00\.itar: no array 'radar'"):
        SampleIndex.build(pattern, {"radar": Rows("radar")})
    with pytest.raises(ValueError, match="is a group"):
        SampleIndex.build(pattern, {"cameras": Rows("cameras")})
    # A blob pattern that can't be formatted with i, or doesn't depend on it; a length that
    # is no function: said at once, not as a bare KeyError or "'int' object is not callable".
    with pytest.raises(ValueError, match=r"blob pattern 'cameras/front/\{j:05d\}' names .*KeyError: 'j'"):
        SampleIndex.build(pattern, {"front": Blob("cameras/front/{j:05d}")})
    with pytest.raises(ValueError, match="no archive to index"):
        SampleIndex.build([], FIELDS)
    for typo in ("cameras/front/{i:04d}", "camera/front/{i:05d}"):  # names nothing: not a 0-sample index
        with pytest.raises(ValueError, match=rf"seq-00\.itar: no blob '{typo.format(i=0)}' \(the first of"):
            SampleIndex.build(pattern, {"front": Blob(typo)})
    with pytest.raises(ValueError, match="doesn't depend on"):
        Blob("cameras/front/00000{i!s:.0}")
    with pytest.raises(TypeError, match=r"length= is a function of a sequence's root group.*got int 5"):
        SampleIndex.build(pattern, {"number": SampleNumber(), "tag": sequence_attribute}, length=5)  # type: ignore[arg-type]
    with IndexedTarZarrStore(tmp_path / "wide.itar", mode="w") as store:
        store.create_root_group({}).create_array("grid", np.zeros((4, 100)), chunks=(1, 50))
        store.consolidate()
    with pytest.raises(ValueError, match=r"wide\.itar: a row of array 'grid'.*spans several chunks"):
        SampleIndex.build([tmp_path / "wide.itar"], {"grid": Rows("grid")})
    (tmp_path / "junk.npz").write_bytes(b"not numpy")
    with pytest.raises(ValueError, match=r"junk\.npz: not a saved sample index"):
        SampleIndex.load(tmp_path / "junk.npz")
    with pytest.raises(ValueError, match="no archive matches"):
        SampleIndex.build(str(tmp_path / "none-*.itar"), FIELDS)


def test_damaged_record_is_an_error_naming_the_archive(tmp_path: Path) -> None:
    write_fleet(tmp_path, [6])
    index = SampleIndex.build(str(tmp_path / "*.itar"), FIELDS)
    table = index.tables["image"]
    offset = int(table.offsets[3])
    path = tmp_path / "seq-00.itar"
    data = bytearray(path.read_bytes())
    data[offset + 5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match=r"seq-00\.itar.*field 'image' of sample 3"):
        SampleView(index)[3]  # verified by default, as archives are
    assert bytes(SampleView(index, verify_checksums=False)[3]["image"]) != image(0, 3)  # what was asked for
    assert SampleView(index, verify_checksums=True)[2]["number"] == 2  # its neighbours are fine


def test_an_archive_changed_since_the_index_is_an_error(tmp_path: Path) -> None:
    write_fleet(tmp_path, [6, 6])
    index = SampleIndex.build(str(tmp_path / "*.itar"), FIELDS)
    (tmp_path / "seq-01.itar").unlink()
    write_sequence(tmp_path / "seq-01.itar", 1, 2)  # rewritten, shorter
    with pytest.raises(ArchiveFormatError, match=r"seq-01\.itar.*has the archive changed since the index was built"):
        SampleView(index)[11]


# -- order and splits -----------------------------------------------------------------------


def test_order_is_reproducible_from_the_seed(fleet: SampleIndex) -> None:
    first = numbers(list(TrainingDataset(fleet, seed=7)))
    again = numbers(list(TrainingDataset(fleet, seed=7)))
    assert first == again
    assert sorted(first) == list(range(len(fleet)))  # every sample once
    assert first != list(range(len(fleet)))
    assert numbers(list(TrainingDataset(fleet, seed=8))) != first
    dataset = TrainingDataset(fleet, seed=7)
    list(dataset)  # an epoch to its end: the next one comes next
    second = numbers(list(dataset))
    assert second != first and sorted(second) == sorted(first)
    other = TrainingDataset(fleet, seed=7)
    other.set_epoch(1)
    assert numbers(list(other)) == second
    assert list(dataset.order(0)) == first


@pytest.mark.parametrize("equalize", ["drop", "pad"])
def test_ranks_are_disjoint_and_equal(fleet: SampleIndex, equalize: str) -> None:
    world = 5  # 48 samples: 3 left over
    parts = [
        numbers(list(TrainingDataset(fleet, seed=2, rank=rank, world_size=world, equalize=equalize)))  # type: ignore[arg-type]
        for rank in range(world)
    ]
    assert len({len(part) for part in parts}) == 1
    seen = Counter(number for part in parts for number in part)
    order = list(TrainingDataset(fleet, seed=2).order(0))
    if equalize == "drop":
        assert set(seen) == set(order[:45]) and set(seen.values()) == {1}
    else:
        assert set(seen) == set(order) and seen.total() == 50
        assert {number for number, count in seen.items() if count == 2} == set(order[:2])


# -- resuming ------------------------------------------------------------------------------


def run_ranks(
    index: SampleIndex,
    world: int,
    workers: int,
    batches: int | None,
    state: dict[str, Any] | None = None,
    context: str = "fork",
    block_size: int = 1,
) -> tuple[list[list[int]], dict[str, Any]]:
    """Ranks in step, each a TrainingLoader with ``workers`` workers: ``batches`` batches each
    (None: to the end of the epoch); their samples in order, and rank 0's state after."""
    loaders = []
    for rank in range(world):
        dataset = TrainingDataset(index, seed=11, rank=rank, world_size=world, block_size=block_size)
        if state is not None:
            dataset.load_state_dict(state)
        loaders.append(
            TrainingLoader(
                dataset, batch_size=4, num_workers=workers, multiprocessing_context=context if workers else None,
                timeout=120 if workers else 0,
            )
        )  # fmt: skip
    seen: list[list[int]] = [[] for _ in range(world)]
    iterators = [iter(loader) for loader in loaders]
    step = 0
    while batches is None or step < batches:
        try:
            for rank, iterator in enumerate(iterators):
                batch = next(iterator)
                seen[rank] += batch["number"].tolist()
                for position in range(len(batch["number"])):
                    check_sample(index, {key: value[position] for key, value in batch.items()})
        except StopIteration:
            break
        step += 1
    return seen, loaders[0].state_dict()


def test_loader_samples_in_the_ranks_order(fleet: SampleIndex) -> None:
    seen, state = run_ranks(fleet, world=2, workers=2, batches=None)
    for rank in range(2):
        expected = TrainingDataset(fleet, seed=11, rank=rank, world_size=2).rank_samples()
        assert seen[rank] == list(expected)
    assert state["epoch"] == 1 and state["passes"] == []


@pytest.mark.parametrize(
    ("before", "after"),
    [((1, 2), (1, 3)), ((2, 2), (2, 0)), ((2, 1), (4, 2)), ((3, 2), (2, 1)), ((1, 0), (4, 2))],
    ids=["workers-2-to-3", "workers-2-to-0", "ranks-2-to-4", "ranks-3-to-2", "ranks-1-to-4"],
)
def test_resume_exactly_with_other_worker_and_rank_counts(
    fleet: SampleIndex, before: tuple[int, int], after: tuple[int, int]
) -> None:
    """(ranks, workers) before and after the interruption: every sample of the epoch exactly
    once in all (what is left of the 48 samples divides by the new world size), the rest in the epoch's order."""
    first, state = run_ranks(fleet, *before, batches=2)
    assert state["epoch"] == 0 and state["passes"] == [[before[0], max(1, before[1]), 4, 1, 8]]
    rest, end = run_ranks(fleet, *after, batches=None, state=state)
    everything = Counter(number for part in first + rest for number in part)
    assert set(everything) == set(range(len(fleet))) and set(everything.values()) == {1}
    order = list(TrainingDataset(fleet, seed=11).order(0))
    consumed = 2 * 4 * before[0]
    assert sorted(n for part in first for n in part) == sorted(order[:consumed])  # a prefix of the order
    world = after[0]
    for rank, part in enumerate(rest):
        assert part == order[consumed:][rank::world]
    assert end["epoch"] == 1


@pytest.mark.parametrize(("before", "after"), [((2, 2), (4, 3)), ((1, 3), (2, 2))], ids=["2x2-to-4x3", "1x3-to-2x2"])
def test_resume_with_blocks(fleet: SampleIndex, before: tuple[int, int], after: tuple[int, int]) -> None:
    """With blocks, workers read windows of batches: what was consumed is no prefix of the
    order, and still every sample comes exactly once."""
    first, state = run_ranks(fleet, *before, batches=3, block_size=3)
    rest, _ = run_ranks(fleet, *after, batches=None, state=state, block_size=3)
    everything = Counter(number for part in first + rest for number in part)
    order = TrainingDataset(fleet, seed=11, block_size=3, batch_size=4, rank=0, world_size=before[0]).order(0)
    dropped = set(order.tolist()) - set(everything)
    assert set(everything.values()) == {1}
    assert len(dropped) < after[0]  # what the new world size doesn't divide, at most
    assert sum(map(len, first)) == 3 * 4 * before[0]


def test_blocks_mix_like_a_global_shuffle(tmp_path: Path) -> None:
    write_fleet(tmp_path, [32] * 8)
    index = SampleIndex.build(str(tmp_path / "*.itar"), {"number": SampleNumber(), "pose": "poses"})
    blocks = TrainingDataset(index, seed=1, block_size=8, batch_size=8)
    order = blocks.order(0)
    assert sorted(order.tolist()) == list(range(len(index)))
    shuffled = TrainingDataset(index, seed=1, batch_size=8).mixing(8)
    assert blocks.mixing(8) >= shuffled - 0.5  # ~5.3 sequences of 8 per batch of 8 either way
    # every batch of 8 holds one sample of each of 8 blocks of 8 neighbours
    for start in range(0, len(order), 64):
        window = order[start : start + 64].reshape(8, 8)
        assert all(len(set((window[:, column] // 8).tolist())) == 1 for column in range(8))


def test_resume_in_the_same_process_and_state_checks(fleet: SampleIndex) -> None:
    dataset = TrainingDataset(fleet, seed=4)
    iterator = iter(dataset)
    head = [int(next(iterator)["number"]) for _ in range(10)]
    state = dataset.state_dict()
    assert state["passes"] == [[1, 1, 16, 1, 10]]
    resumed = TrainingDataset(fleet, seed=4)
    resumed.load_state_dict(state)
    assert head + numbers(list(resumed)) == list(dataset.order(0))
    with pytest.raises(ValueError, match="seed 4"):
        TrainingDataset(fleet, seed=5).load_state_dict(state)
    with pytest.raises(ValueError, match="not a TrainingDataset state"):
        resumed.load_state_dict({"epoch": 0})
    # The same number of samples from the archives in another order (a glob expanded again
    # after the fleet changed): the remaining samples would be others, some twice.
    reordered = SampleIndex.build(list(reversed([archive.location for archive in fleet.archives])), FIELDS)
    assert len(reordered) == len(fleet)
    with pytest.raises(ValueError, match="another order or index: index"):
        TrainingDataset(reordered, seed=4).load_state_dict(state)
    older = {key: value for key, value in state.items() if key != "index"}  # saved before states held it
    TrainingDataset(fleet, seed=4).load_state_dict(older)


def test_persistent_workers_follow_the_state(fleet: SampleIndex) -> None:
    dataset = TrainingDataset(fleet, seed=9)
    loader = TrainingLoader(dataset, batch_size=4, num_workers=2, persistent_workers=True, timeout=120)
    epochs = []
    for _ in range(2):
        epochs.append([n for batch in loader for n in batch["number"].tolist()])
    assert epochs == [list(dataset.order(0)), list(dataset.order(1))]
    partial = []
    for batch in loader:  # epoch 2, left after two batches
        partial += batch["number"].tolist()
        if len(partial) == 8:
            break
    rest = [n for batch in loader for n in batch["number"].tolist()]
    assert partial + rest == list(dataset.order(2))


# -- DataLoader workers ----------------------------------------------------------------------


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_dataloader_workers(fleet: SampleIndex, context: str) -> None:
    seen, _ = run_ranks(fleet, world=1, workers=2, batches=None, context=context)
    assert seen[0] == list(TrainingDataset(fleet, seed=11).rank_samples())


def _own_reads_fail(worker: int) -> None:
    """A worker's own reads fail (when their bytes are waited for): it can only hand out what
    it was given when it started."""
    dataset = torch.utils.data.get_worker_info().dataset

    def refuse(plan: Any) -> list[tuple[list[int], Future[list[bytes]]]]:
        failed: Future[list[bytes]] = Future()
        failed.set_exception(OSError(f"worker {worker} read for itself"))
        return [(list(range(len(plan.spans))), failed)]

    dataset._reader._submit = refuse


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_forked_workers_start_with_batches_read_before_the_fork(
    fleet: SampleIndex, context: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loader reads the workers' first batches before forking them (2 x 4 samples: within
    the bound), which hand them out without a read of their own (their start-up runs
    meanwhile); the loader keeps no copy. Spawned workers inherit nothing: nothing is read
    for them."""
    prereads: list[int] = []
    original = TrainingDataset.read_first_groups

    def counted(self: TrainingDataset, workers: int) -> None:
        prereads.append(workers)
        original(self, workers)

    monkeypatch.setattr(TrainingDataset, "read_first_groups", counted)
    dataset = TrainingDataset(fleet, seed=3, block_size=2)
    loader = TrainingLoader(
        dataset, batch_size=4, num_workers=2, multiprocessing_context=context, worker_init_fn=_own_reads_fail,
        timeout=120,
    )  # fmt: skip
    expected = list(TrainingDataset(fleet, seed=3, block_size=2).rank_samples())
    batches = iter(loader)
    if context == "fork":
        first = [next(batches)["number"].tolist() for _ in range(2)]  # one from each worker
        assert first == [expected[:4], expected[4:8]]
        assert prereads == [2] and dataset._reader._read_ahead == {}
    with pytest.raises(OSError, match="read for itself"):
        next(batches)
    assert prereads == ([2] if context == "fork" else [])
    # Shut the workers down here: the raised error's traceback keeps this frame (and the
    # iterator) alive until a later garbage collection, maybe during another test and while
    # a spawned worker is still starting; that worker then finds its queue's semaphore gone
    # and exits, and torch's SIGCHLD handler raises it in whatever test runs (seen twice:
    # dropping the name alone left the traceback's reference cycle to the collector).
    del batches
    gc.collect()
    assert not multiprocessing.active_children()  # no worker outlives the test


@pytest.mark.parametrize(("batch", "workers", "read"), [(4, 8, 4), (8, 8, 2), (16, 8, 1), (32, 2, 1), (64, 2, 1)])
def test_the_read_before_the_fork_is_bounded(tmp_path: Path, batch: int, workers: int, read: int) -> None:
    """Before the fork, the first batches of as many workers as PREFORK_SAMPLES allows are
    read (each sample a request of the parent's one client), and always the first worker's:
    with many workers, reading every first batch there held the first batch up."""
    assert PREFORK_SAMPLES == 16  # the cases are worked out for it
    write_fleet(tmp_path, [64, 64, 64, 64])  # every worker's first batch is a full one
    dataset = TrainingDataset(SampleIndex.build(str(tmp_path / "*.itar"), FIELDS), seed=6, batch_size=batch)
    dataset.start_pass(workers)
    dataset.read_first_groups(workers)
    stream = dataset.rank_samples()  # the batches in the order they arrive: the workers' in turn
    wanted = [stream[worker * batch : (worker + 1) * batch].tolist() for worker in range(read)]
    assert sorted(map(list, dataset._reader._read_ahead)) == sorted(wanted)
    dataset.forget_first_groups()
    assert dataset._reader._read_ahead == {}


def test_a_batch_read_before_the_fork_is_handed_out_before_any_other_read_starts(
    fleet: SampleIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's first reads set up its storage client (~0.1 s of CPU on S3), which held up
    the batch it already had: that batch comes out before any read starts."""
    dataset = TrainingDataset(fleet, seed=5, batch_size=4, block_size=2)
    dataset.start_pass(1)
    dataset.read_first_groups(1)
    handed_out = 0
    started_at: list[int] = []
    submit = dataset._reader._submit

    def watched(plan: Any) -> Any:
        started_at.append(handed_out)
        return submit(plan)

    monkeypatch.setattr(dataset._reader, "_submit", watched)
    dataset._counted_by_loader = True  # as in a loader's worker: the pass set up above stays
    taken = []
    for sample in dataset:
        taken.append(int(sample["number"]))
        handed_out += 1
    assert taken == list(dataset.order(0))
    assert started_at and started_at[0] == 4, started_at  # the first batch, then the reads of the rest


def test_a_failed_read_before_the_fork_leaves_the_dataset_counting(
    fleet: SampleIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that fails while the loader reads the first worker's first batch is raised, and the
    dataset still counts what it hands out itself: a state taken after resumes exactly."""
    dataset = TrainingDataset(fleet, seed=4, batch_size=4)
    loader = TrainingLoader(dataset, batch_size=4, num_workers=2, multiprocessing_context="fork", timeout=120)

    def storage_down(plan: Any) -> None:
        raise OSError("storage down")

    with monkeypatch.context() as patch:
        patch.setattr(dataset._reader, "_submit", storage_down)
        with pytest.raises(OSError, match="storage down"):
            next(iter(loader))
    order = list(dataset.order(0))
    taken = []
    for sample in dataset:  # in this process, as a plain iterable
        taken.append(int(sample["number"]))
        if len(taken) == 8:
            break
    resumed = TrainingDataset(fleet, seed=4, batch_size=4)
    resumed.load_state_dict(dataset.state_dict())
    assert taken + numbers(list(resumed)) == order


def test_plain_dataloader_needs_the_batch_size(fleet: SampleIndex) -> None:
    loader = torch.utils.data.DataLoader(TrainingDataset(fleet, seed=1), batch_size=4, num_workers=2, timeout=120)
    with pytest.raises(ValueError, match="batch_size="):
        list(loader)
    dataset = TrainingDataset(fleet, seed=1, batch_size=4)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=2, timeout=120)
    assert [n for batch in loader for n in batch["number"].tolist()] == list(dataset.order(0))


def test_iteration_without_torch(tmp_path: Path) -> None:
    write_fleet(tmp_path, [3, 3])
    script = f"""
import sys
sys.modules["torch"] = None  # as if torch were not installed
from ncore_like.dataset import SampleIndex, TrainingDataset, SampleNumber
index = SampleIndex.build({str(tmp_path / "*.itar")!r}, {{"lidar": "lidar", "number": SampleNumber()}})
dataset = TrainingDataset(index, seed=1)
print(sorted(sample["number"] for sample in dataset))
try:
    from ncore_like.dataset import TrainingLoader
except ImportError as error:
    print(type(error).__name__, "ncore-like[torch]" in str(error))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [str(list(range(6))), "MissingDependencyError True"]


# -- remote --------------------------------------------------------------------------------


def s3_fleet(bucket: UPath, counts: list[int]) -> str:
    for sequence, count in enumerate(counts):
        write_sequence(bucket / f"seq-{sequence:02d}.itar", sequence, count)
    return str(bucket).rstrip("/") + "/*.itar"


@pytest.mark.s3
def test_s3_requests_and_bytes(s3_bucket: UPath, s3_proxy: ServerProcess) -> None:
    pattern = s3_fleet(s3_bucket, [10, 14, 8])
    options = dict(s3_bucket.storage_options)
    s3_proxy.clear_requests()
    index = SampleIndex.build(pattern, FIELDS, storage_options=options)
    reads = [r for r in s3_proxy.requests() if r["method"] == "GET" and r["range"] is not None]
    assert sorted(r["path"].rsplit("/", 1)[1] for r in reads) == ["seq-00.itar", "seq-01.itar", "seq-02.itar"]
    assert all(r["range"].startswith("bytes=-") for r in reads)  # one tail each (the glob's listing aside)
    s3_proxy.clear_requests()
    dataset = TrainingDataset(index, seed=5)
    samples = list(dataset)
    assert numbers(samples) == list(dataset.order(0))
    for sample in samples:
        check_sample(index, sample)
    gets = [r for r in s3_proxy.requests() if r["method"] == "GET"]
    # Image, sweep and pose of a sample: image and sweep were written one after the other (one
    # range), the poses' chunk lies at the end (a range of its own, shared by 4 samples of a group).
    wanted = index.stored_bytes(range(len(index)))
    assert len(gets) <= 2 * len(index)
    assert all(r["range"] is not None for r in gets)
    moved = sum(r["bytes"] for r in gets)
    records = 3 * len(index)
    assert wanted <= moved <= wanted + 1536 * records  # at most the tar headers between the records read


@pytest.mark.s3
def test_local_and_s3_archives_in_one_index(s3_bucket: UPath, tmp_path: Path) -> None:
    write_sequence(tmp_path / "local.itar", 0, 10)
    write_sequence(s3_bucket / "remote.itar", 1, 10)
    locations = [str(tmp_path / "local.itar"), str(s3_bucket).rstrip("/") + "/remote.itar"]
    index = SampleIndex.build(locations, FIELDS, storage_options=dict(s3_bucket.storage_options))
    samples = SampleView(index).__getitems__(list(range(20)))  # both kinds in one batch
    assert numbers(samples) == list(range(20))
    for sample in samples:
        check_sample(index, sample)


@pytest.mark.s3
def test_s3_blocks_are_read_with_a_request_each(s3_bucket: UPath, s3_proxy: ServerProcess) -> None:
    pattern = s3_fleet(s3_bucket, [16, 16, 16, 16])
    fields = {"image": FIELDS["image"], "lidar": "lidar", "number": SampleNumber()}  # written one after the other
    index = SampleIndex.build(pattern, fields, storage_options=dict(s3_bucket.storage_options))
    dataset = TrainingDataset(index, seed=2, block_size=4, batch_size=4)
    s3_proxy.clear_requests()
    samples = list(dataset)
    assert numbers(samples) == list(dataset.order(0))
    for sample in samples:
        sequence, position = index.locate(int(sample["number"]))
        assert bytes(sample["image"]) == image(sequence, position)
        np.testing.assert_array_equal(sample["lidar"], lidar(sequence, position))
    gets = [r for r in s3_proxy.requests() if r["method"] == "GET"]
    assert len(gets) <= 64 // 4 + 4  # a block of 4 neighbours per request; the first batch on its own
    assert dataset.mixing(4, epoch=0) >= 2.5  # batches of 4 from 4 blocks (of 4 sequences)


def test_blocks_get_a_budget_of_two_windows_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a byte budget, a dataset of blocks keeps two windows of them (when more than
    the default), so that each block is one read; a budget given is kept (here one that cuts
    windows in parts: more reads, the same samples)."""
    import ncore_like.dataset._dataset as dataset_module
    from ncore_like.archive._ranges import ArchiveRanges

    write_fleet(tmp_path, [16, 16, 16, 16])
    fields = {"image": FIELDS["image"], "lidar": "lidar", "number": SampleNumber()}  # written one after the other
    index = SampleIndex.build(str(tmp_path / "*.itar"), fields)
    monkeypatch.setattr(dataset_module, "DEFAULT_BYTE_BUDGET", 8192)  # less than two windows of this fleet
    reads: list[tuple[int, int, int]] = []
    read = ArchiveRanges.read

    def counted(self: ArchiveRanges, archive: int, offset: int, size: int) -> bytes:
        reads.append((archive, offset, size))
        return read(self, archive, offset, size)

    monkeypatch.setattr(ArchiveRanges, "read", counted)
    window = 4 * 4 * max(index.stored_bytes([number]) for number in range(len(index)))
    orders = []
    for budget, most in ((None, 64 // 4 + 4), (8192, None)):
        reads.clear()
        dataset = TrainingDataset(index, seed=2, block_size=4, batch_size=1, byte_budget=budget)
        dataset.batch_size = 4  # set after construction, as TrainingLoader does
        assert dataset.byte_budget == (int(2 * window) if budget is None else budget) and window > 8192 / 2
        samples = list(dataset)
        orders.append(numbers(samples))
        assert orders[-1] == list(dataset.order(0))
        if most is not None:
            assert len(reads) <= most  # a read per block; the first batch on its own
        else:
            assert len(reads) > 64 // 4 + 4
    assert orders[0] == orders[1]
    with pytest.raises(ValueError, match="byte_budget must be positive"):
        TrainingDataset(index, block_size=4, byte_budget=0)


@pytest.mark.s3
def test_s3_through_the_record_cache(s3_bucket: UPath, s3_proxy: ServerProcess, tmp_path: Path) -> None:
    pattern = s3_fleet(s3_bucket, [6, 6])
    cache = RecordCache(tmp_path / "cache")
    index = SampleIndex.build(pattern, FIELDS, storage_options=dict(s3_bucket.storage_options), cache=cache)
    dataset = TrainingDataset(index, seed=1, block_size=1)
    first = list(dataset)
    s3_proxy.clear_requests()
    second = list(dataset)  # epoch 1: the same samples, other order, other groups
    for sample in first + second:
        check_sample(index, sample)
    assert sorted(numbers(second)) == sorted(numbers(first))
    again = [r for r in s3_proxy.requests() if r["method"] == "GET"]
    assert len(again) < len(first)  # the ranges of single samples repeat: cache hits


@pytest.mark.s3
def test_byte_budget_is_respected(s3_bucket: UPath, s3_proxy: ServerProcess) -> None:
    pattern = s3_fleet(s3_bucket, [12])
    index = SampleIndex.build(
        pattern, {"lidar": "lidar", "number": SampleNumber()}, storage_options=dict(s3_bucket.storage_options)
    )
    sample_bytes = index.stored_bytes([0])
    budget = int(sample_bytes * 3.5)
    dataset = TrainingDataset(index, shuffle=False, batch_size=1, byte_budget=budget)
    s3_proxy.clear_requests()
    iterator = iter(dataset)
    taken = [int(next(iterator)["number"])]
    time.sleep(0.5)  # nothing more may be read while the consumer waits
    requested = sum(r["bytes"] for r in s3_proxy.requests() if r["method"] == "GET")
    assert sample_bytes * 2 <= requested <= budget
    for _ in range(4):
        taken.append(int(next(iterator)["number"]))
    time.sleep(0.5)
    requested = sum(r["bytes"] for r in s3_proxy.requests() if r["method"] == "GET")
    assert requested <= budget + len(taken) * sample_bytes
    assert taken + numbers(list(iterator)) == list(range(12))


# -- event loops of the parent in forked workers -------------------------------------------------


def _drop_and_collect(holder: list[Any]) -> None:
    async def collect() -> None:
        holder.clear()  # the child drops the parent's filesystem object...
        s3fs.S3FileSystem.clear_instance_cache()
        gc.collect()  # ...and collects it on a running loop, as a worker's first remote read did
        await asyncio.sleep(0.2)

    asyncio.run(collect())


@pytest.mark.s3
def test_forked_child_leaves_the_parents_sessions_alone(
    s3_storage_options: dict[str, Any], s3_bucket: UPath, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "close-calls"
    original = s3fs.S3FileSystem.close_session

    def spy(loop: Any, s3: Any) -> None:
        with calls.open("a") as log:
            log.write(f"{os.getpid()}\n")
        original(loop, s3)

    monkeypatch.setattr(s3fs.S3FileSystem, "close_session", staticmethod(spy))
    filesystem = s3fs.S3FileSystem(**s3_storage_options, skip_instance_cache=True)
    filesystem.ls(s3_bucket.path)  # a session on the parent's loop
    holder: list[Any] = [filesystem]
    del filesystem
    child = multiprocessing.get_context("fork").Process(target=_drop_and_collect, args=(holder,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    closers = calls.read_text().split() if calls.exists() else []
    assert str(child.pid) not in closers  # the parent's session is the parent's to close
    assert holder[0].ls(s3_bucket.path) == []  # and it still works here


@pytest.mark.s3
def test_s3_dataloader_workers_print_no_tracebacks(s3_bucket: UPath, capfd: pytest.CaptureFixture[str]) -> None:
    pattern = s3_fleet(s3_bucket, [8, 8])
    index = SampleIndex.build(pattern, FIELDS, storage_options=dict(s3_bucket.storage_options))
    dataset = TrainingDataset(index, seed=3)
    SampleView(index)[0]  # the parent reads first: its sessions exist when the workers fork
    loader = TrainingLoader(dataset, batch_size=4, num_workers=2, multiprocessing_context="fork", timeout=120)
    seen = [n for batch in loader for n in batch["number"].tolist()]
    assert seen == list(dataset.order(0))
    output = capfd.readouterr()
    assert "Traceback" not in output.err and "different loop" not in output.err and "Unclosed" not in output.err
