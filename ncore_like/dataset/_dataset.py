"""``TrainingDataset`` (shuffled, split, resumable iteration) and ``SampleView`` (by number).

``TrainingDataset`` is a ``torch.utils.data.IterableDataset`` when torch is installed (and a
plain iterable otherwise). Each epoch's order comes from ``(seed, epoch)``; the samples are
split between ranks and between a DataLoader's workers as :mod:`._order` describes; each
worker reads its samples ahead within a byte budget (:mod:`._reader`). What was consumed is
counted where batches arrive — by :class:`~ncore_like.dataset.TrainingLoader`, or by the
dataset itself when it is iterated in the process — so that :meth:`TrainingDataset.state_dict`
resumes exactly after it, also with other numbers of workers and ranks.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._order import Equalize, Segment, delivery, epoch_order, rank_stream, remaining, sequences_per_batch, worker_units
from ._reader import SampleReader

if TYPE_CHECKING:
    from ._index import SampleIndex

__all__ = ["DEFAULT_BYTE_BUDGET", "MAX_BLOCK_BUDGET", "SampleView", "TrainingDataset"]

#: Bytes of records each reading process keeps in flight or read ahead: a few batches of
#: camera frames and lidar sweeps, enough for a round trip of 20-100 ms at hundreds of MB/s.
DEFAULT_BYTE_BUDGET = 64 << 20
#: The most a reading process keeps by default with blocks (two windows of them; see
#: :attr:`TrainingDataset.byte_budget`).
MAX_BLOCK_BUDGET = 1 << 30
#: Samples read together (and their neighbours coalesced) when no batch size is known.
DEFAULT_GROUP = 16
#: The samples :meth:`TrainingDataset.read_first_groups` reads before DataLoader workers are
#: forked, at most (but always the first worker's first batch): that read holds the first
#: batch up, while a worker's own start-up is short where S3 is read without botocore (no
#: client to set up). On S3 behind 20 ms per request, batches of 16, 2 workers, the first
#: worker's batch alone (16) gave the first batch 0.2-0.4 s sooner than both workers' (32) in
#: 5 of 6 alternating benchmark runs; every worker's first batch took 0.59-0.86 s with 8.
PREFORK_SAMPLES = 16
_STATE_FORMAT = "ncore_like.TrainingDataset/2"

try:  # torch is optional: the dataset is a plain iterable without it
    from torch.utils.data import IterableDataset as _IterableBase
except ImportError:  # pragma: no cover - the tests run with torch
    _IterableBase = object  # type: ignore[assignment,misc]


def _worker() -> tuple[int, int]:
    """``(worker id, workers)`` of the DataLoader worker process this runs in, ``(0, 1)`` outside one."""
    data = sys.modules.get("torch.utils.data")
    info = data.get_worker_info() if data is not None else None
    return (0, 1) if info is None else (info.id, info.num_workers)


def _in_worker() -> bool:
    data = sys.modules.get("torch.utils.data")
    return data is not None and data.get_worker_info() is not None


def _distributed() -> tuple[int, int] | None:
    """``(rank, world size)`` of an initialised ``torch.distributed``, else of the launcher's
    environment (``RANK``, ``WORLD_SIZE``, as torchrun sets them and workers inherit them)."""
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        return int(distributed.get_rank()), int(distributed.get_world_size())
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is not None and world is not None:
        return int(rank), int(world)
    return None


class TrainingDataset(_IterableBase):  # type: ignore[type-arg]
    """The samples of a :class:`~ncore_like.dataset.SampleIndex` in a seeded, epoch-dependent
    order, split between ranks and DataLoader workers, resumable mid-epoch.

    Args:
        index: The samples.
        seed: The seed of every epoch's order (the same on every rank).
        shuffle: A global shuffle across all samples (``False``: in index order).
        block_size: Read blocks of this many consecutive samples of a sequence with one request
            each, dealt out over as many batches (for storage where requests are dear; see the
            Training page for what it does to mixing); 1: every sample on its own.
        batch_size: The DataLoader's batch size: workers read whole batches (set by
            :class:`~ncore_like.dataset.TrainingLoader`; needed with more than one worker).
        equalize: Every rank gets the same number of samples: ``"drop"`` leaves the last few
            of an epoch out, ``"pad"`` repeats the first few.
        rank: This process's rank (with ``world_size``); default: from an initialised
            ``torch.distributed``, else the ``RANK`` / ``WORLD_SIZE`` variables, else 0 of 1.
        world_size: The number of ranks (with ``rank``).
        verify_checksums: Check every record against its CRC32C (on by default; ``False``
            saves the checksum's share of a local read).
        byte_budget: Bytes each reading process keeps in flight or read ahead; default: see
            :attr:`byte_budget`.

    Iterating yields dicts, one entry per field. ``len()`` is the number of samples this rank
    reads in the current epoch from where it stands.
    """

    def __init__(
        self,
        index: SampleIndex,
        *,
        seed: int = 0,
        shuffle: bool = True,
        block_size: int = 1,
        batch_size: int | None = None,
        equalize: Equalize = "drop",
        rank: int | None = None,
        world_size: int | None = None,
        verify_checksums: bool | None = True,
        byte_budget: int | None = None,
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be positive, got {block_size}")
        if equalize not in ("drop", "pad"):
            raise ValueError(f"equalize must be 'drop' or 'pad', got {equalize!r}")
        if (rank is None) != (world_size is None):
            raise ValueError("pass rank and world_size together (or neither, to take them from torch.distributed)")
        if rank is not None and world_size is not None and (world_size < 1 or not 0 <= rank < world_size):
            raise ValueError(f"rank {rank} of world_size {world_size}: need 0 <= rank < world_size")
        self.index = index
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.block_size = int(block_size)
        self.batch_size = self._checked_batch(batch_size)
        self.equalize: Equalize = equalize
        self._placement = None if rank is None or world_size is None else (int(rank), int(world_size))
        if self._placement is None:
            self._placement = _distributed()
        if byte_budget is not None and byte_budget < 1:
            raise ValueError(f"byte_budget must be positive, got {byte_budget}")
        self._byte_budget = byte_budget
        self._reader = SampleReader(index, verify_checksums=verify_checksums, byte_budget=self.byte_budget)
        self._epoch = 0
        self._segments: list[Segment] = []  # the passes of this epoch before the current one
        self._spread: int | None = None  # blocks per window of this epoch's order (fixed by its first pass)
        self._pass: tuple[int, int, int, int] | None = None  # world size, workers, batch size, unit
        self._delivered = 0  # samples this rank consumed in the current pass
        self._counted_by_loader = False

    @staticmethod
    def _checked_batch(batch_size: int | None) -> int | None:
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        return batch_size

    # -- where this process stands ------------------------------------------------------------

    @property
    def rank(self) -> int:
        return self.placement()[0]

    @property
    def world_size(self) -> int:
        return self.placement()[1]

    def placement(self) -> tuple[int, int]:
        """``(rank, world_size)`` (see the constructor)."""
        if self._placement is None:
            found = _distributed()
            if found is None:
                return 0, 1
            self._placement = found
        return self._placement

    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch ``epoch`` from its beginning (as ``DistributedSampler.set_epoch``; an
        epoch that ran to its end moves to the next by itself)."""
        if epoch != self._epoch or self._segments or self._delivered:
            self._epoch, self._segments, self._spread, self._delivered = int(epoch), [], None, 0

    @property
    def byte_budget(self) -> int:
        """Bytes each reading process keeps in flight or read ahead: the one given, else
        :data:`DEFAULT_BYTE_BUDGET` (64 MiB) or, with blocks, two windows of them
        (``2 * block_size * batch_size`` samples of the index's largest) if that is more,
        at most :data:`MAX_BLOCK_BUDGET` (1 GiB). A window is read with a request per block
        only when it fits in half the budget (else it is read in parts, a request per block
        and part)."""
        if self._byte_budget is not None:
            return self._byte_budget
        if self._unit == 1 or not len(self.index):
            return DEFAULT_BYTE_BUDGET
        window = self._unit * (self.batch_size or DEFAULT_GROUP) * int(self.index.sample_bytes().max())
        return int(min(MAX_BLOCK_BUDGET, max(DEFAULT_BYTE_BUDGET, 2 * window)))

    @property
    def _unit(self) -> int:
        return self.block_size if self.block_size > 1 else 1

    def _spread_now(self) -> int:
        if self._spread is not None:
            return self._spread
        return (self.batch_size or DEFAULT_GROUP) * self.world_size

    def order(self, epoch: int | None = None) -> np.ndarray[Any, Any]:
        """All sample numbers of an epoch in their order (before the split between ranks)."""
        return epoch_order(
            self.index.lengths, self.seed, self._epoch if epoch is None else epoch, shuffle=self.shuffle,
            block_size=self.block_size, spread=self._spread_now(),
        )  # fmt: skip

    def _segments_now(self) -> list[Segment]:
        if self._pass is None or not self._delivered:
            return list(self._segments)
        return [*self._segments, Segment(*self._pass, self._delivered)]

    def _stream(self) -> np.ndarray[Any, Any]:
        """This rank's samples in the current pass (those consumed in it included)."""
        order = self.order()
        rank, world = self.placement()
        return rank_stream(remaining(order, self._segments, self.equalize), order, rank, world, self.equalize)

    def start_pass(self, workers: int) -> None:
        """Begins a pass with ``workers`` DataLoader workers (0 or 1: in this process), after
        what the passes before consumed (what :class:`TrainingLoader` does before each
        iteration)."""
        self._segments = self._segments_now()
        self._delivered = 0
        if self._spread is None:
            self._spread = self._spread_now()
        self._pass = (self.world_size, max(1, workers), self.batch_size or DEFAULT_GROUP, self._unit)
        self._reader.byte_budget = self.byte_budget  # the batch size may have changed

    def rank_samples(self) -> np.ndarray[Any, Any]:
        """The samples this rank reads from where it stands, in the order they arrive in this
        process (``workers`` of the current pass: see :func:`._order.delivery`)."""
        stream = self._stream()
        _, workers, batch, unit = self._pass or (0, 1, self.batch_size or DEFAULT_GROUP, self._unit)
        batches = delivery(len(stream), workers, batch, unit)
        positions = np.concatenate(batches) if batches else np.zeros(0, np.int64)
        return stream[positions][self._delivered :]

    def batch_sizes(self) -> list[int]:
        """The sizes of the batches of the current pass, in the order they arrive."""
        _, workers, batch, unit = self._pass or (0, 1, self.batch_size or DEFAULT_GROUP, self._unit)
        return [len(batch_positions) for batch_positions in delivery(len(self._stream()), workers, batch, unit)]

    def __len__(self) -> int:
        return len(self._stream()) - self._delivered

    # -- iterating ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[dict[str, Any]]:
        # A worker's copy keeps its own epoch (persistent workers start the next one after a
        # pass that ran to its end); in the process that consumes the samples, the dataset
        # counts them unless a TrainingLoader counts the batches.
        in_worker = _in_worker()
        if not in_worker and not self._counted_by_loader:
            self.start_pass(1)
        worker, workers = _worker()
        if workers > 1 and self.batch_size is None:
            raise ValueError(
                "a TrainingDataset read by several DataLoader workers needs batch_size= (the DataLoader's), "
                "or use ncore_like.dataset.TrainingLoader"
            )
        if self._pass is None:
            self.start_pass(workers)
        count = not in_worker and not self._counted_by_loader
        stream = self._stream()
        units = worker_units(len(stream), workers, self.batch_size or DEFAULT_GROUP, self._unit)[worker]
        for sample in self._reader.stream(self._worker_groups(stream, units)):
            if count:
                self._delivered += 1  # handed out: consumed
            yield sample
        if in_worker or not self._counted_by_loader:
            self.end_epoch()

    def _worker_groups(self, stream: np.ndarray[Any, Any], units: list[np.ndarray[Any, Any]]) -> Iterator[list[int]]:
        """The groups of samples (read together) of a DataLoader worker whose units (its
        positions in this rank's ``stream``, from ``worker_units``) these are, in the order
        it reads them (made as they are asked for)."""
        batch = self.batch_size or DEFAULT_GROUP
        for number, positions in enumerate(units):
            group = stream[positions].tolist()
            if number == 0 and self._unit > 1:
                # The first batch on its own (a request per sample, the rest of its blocks with
                # one each): it comes as soon as its own samples are there, not the whole window.
                yield group[:batch]
                group = group[batch:]
            if group:
                yield group

    def read_first_groups(self, workers: int) -> None:
        """Reads, now and in this process, the first group of samples of each of the first
        of ``workers`` DataLoader workers (their batches come in turn: the first worker's is
        the first batch handed out): as many workers' as :data:`PREFORK_SAMPLES` allows, and
        at least one. :class:`~ncore_like.dataset.TrainingLoader` does it before forking the
        workers, which inherit the bytes: those workers hand their first batch out without
        waiting for their own start-up (their storage client and first connections, ~0.3 s
        on S3), while that start-up runs; the others read their first batches themselves.
        :meth:`forget_first_groups` drops the bytes in this process."""
        stream, samples = self._stream(), 0
        groups: list[list[int]] = []
        for units in worker_units(len(stream), workers, self.batch_size or DEFAULT_GROUP, self._unit):
            group = next(self._worker_groups(stream, units), None)
            if group is None:
                continue  # a worker with nothing to read this pass
            if groups and samples + len(group) > PREFORK_SAMPLES:
                break
            groups.append(group)
            samples += len(group)
        self._reader.read_ahead(groups)

    def forget_first_groups(self) -> None:
        """Drops what :meth:`read_first_groups` read and no reader here took."""
        self._reader.forget_read_ahead()

    def end_epoch(self) -> None:
        """Moves to the beginning of the next epoch (what a pass that ran to its end does)."""
        self._epoch, self._segments, self._spread, self._delivered = self._epoch + 1, [], None, 0

    def count_delivered(self, samples: int) -> None:
        """Counts samples this rank consumed (what :class:`TrainingLoader` does per batch)."""
        self._delivered += samples

    # -- resuming -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the epoch stands: resume with :meth:`load_state_dict`, on any number of ranks
        and workers. The ranks must have consumed the same number of samples (as they do
        training in step); any rank's state is then the job's."""
        return {
            "format": _STATE_FORMAT,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "block_size": self.block_size,
            "equalize": self.equalize,
            "samples": len(self.index),
            "index": self.index.fingerprint(),
            "epoch": self._epoch,
            "spread": self._spread,
            "passes": [list(segment) for segment in self._segments_now()],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes where :meth:`state_dict` was taken: the samples of its epoch not consumed
        yet, in the same order, split between this job's ranks and workers. ValueError if the
        state is of another order (seed, shuffle, block size) or another index."""
        if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
            raise ValueError(f"not a TrainingDataset state: {state!r:.200}")
        mine = {
            "seed": self.seed, "shuffle": self.shuffle, "block_size": self.block_size, "equalize": self.equalize,
            "samples": len(self.index), "index": self.index.fingerprint(),
        }  # fmt: skip
        if "index" not in state:  # a state saved before states carried it: the count alone
            del mine["index"]
        differ = {key: (state.get(key), value) for key, value in mine.items() if state.get(key) != value}
        if differ:
            what = ", ".join(f"{key} {theirs!r} (this dataset: {ours!r})" for key, (theirs, ours) in differ.items())
            raise ValueError(f"the state is of another order or index: {what}")
        self._epoch = int(state["epoch"])
        self._spread = None if state["spread"] is None else int(state["spread"])
        self._segments = [Segment(*(int(value) for value in segment)) for segment in state["passes"]]
        self._pass, self._delivered = None, 0

    def mixing(self, batch_size: int, epoch: int | None = None) -> float:
        """Sequences per batch of ``batch_size`` in an epoch's order, on average (a uniformly
        random order of many sequences mixes about ``batch_size`` of them)."""
        return sequences_per_batch(self.index.sequence_of(self.order(epoch)), batch_size)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_placement"] = self.placement() if self._placement is not None or _distributed() else None
        return state

    def __repr__(self) -> str:
        return (
            f"<TrainingDataset of {len(self.index)} samples, epoch {self._epoch}, rank {self.rank} of "
            f"{self.world_size}, seed {self.seed}>"
        )


class SampleView:
    """Samples by number, for a sampler of your own: ``view[n]`` reads one,
    ``view.__getitems__(numbers)`` (what a DataLoader calls for a batch) reads many with all
    their reads in flight together.

    Args:
        index: The samples.
        verify_checksums: As for :class:`TrainingDataset`.
    """

    def __init__(self, index: SampleIndex, *, verify_checksums: bool | None = True) -> None:
        self.index = index
        self._reader = SampleReader(index, verify_checksums=verify_checksums, byte_budget=DEFAULT_BYTE_BUDGET)

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, number: int) -> dict[str, Any]:
        if not isinstance(number, int | np.integer):
            raise TypeError(f"samples are addressed by number, got {type(number).__name__}")
        if not -len(self) <= number < len(self):
            raise IndexError(f"sample {number} of {len(self)}")
        return self._reader.read([int(number) % len(self)])[0]

    def __getitems__(self, numbers: Sequence[int]) -> list[dict[str, Any]]:
        count = len(self)
        for number in numbers:
            if not -count <= number < count:  # negative numbers from the end, as [] takes them
                raise IndexError(f"sample {number} of {count}")
        return self._reader.read([int(number) % count for number in numbers])
