"""The order of an epoch, its split across ranks and DataLoader workers, and what a pass
consumed (pure).

* **Order**: a permutation of all samples drawn from ``(seed, epoch)``. With ``block_size=k``
  the samples of each sequence are cut into blocks of ``k`` consecutive samples, the blocks are
  shuffled, and each window of ``spread`` blocks (a batch's worth on every rank) is dealt out
  round-robin: the first sample of each block, then the second... A batch then holds one sample
  of each of ``batch_size`` blocks — as many sequences as a global shuffle mixes — while a
  reader reads each block, ``k`` neighbouring samples, with one request.
* **Ranks**: the samples not consumed yet are cut to a multiple of the world size (``"drop"``:
  the last few are left out; ``"pad"``: the first few repeated); rank ``r`` takes every
  ``world_size``-th from ``r`` on.
* **Workers**: a rank's samples are cut into batches, the batches into units (a batch, or with
  blocks the ``k`` batches of a window); unit ``i`` goes to worker ``i % workers``. A DataLoader
  hands out one batch of each worker in turn (skipping the ones that are done), which fixes the
  order in which batches arrive (:func:`delivery`).
* **Consumed**: a pass is a *segment* — the world size, workers, batch size and unit it ran
  with, and the samples each rank consumed (the ranks go in step). Replaying the segments of an
  epoch tells exactly which samples were consumed, whatever the counts were; a resumed pass
  splits what remains, in the epoch's order, with its own counts.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import numpy as np

__all__ = [
    "Equalize",
    "Segment",
    "delivery",
    "epoch_order",
    "rank_stream",
    "remaining",
    "sequences_per_batch",
    "worker_units",
]

Equalize = Literal["drop", "pad"]
IntArray = np.ndarray[Any, np.dtype[np.int64]]


class Segment(NamedTuple):
    """A pass over (part of) an epoch: how it was split, and how far each rank got."""

    world_size: int
    workers: int
    batch_size: int
    unit: int
    """Batches per unit of work of a worker (``block_size`` with blocks, else 1)."""
    delivered: int
    """Samples each rank consumed, in the order its batches arrived."""


def epoch_order(
    lengths: IntArray, seed: int, epoch: int, *, shuffle: bool = True, block_size: int = 1, spread: int = 1
) -> IntArray:
    """The sample numbers of an epoch in their order (see the module's description)."""
    total = int(lengths.sum())
    if not shuffle:
        return np.arange(total, dtype=np.int64)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch])))
    if block_size <= 1:
        return rng.permutation(total).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    blocks = [
        (first, min(first + block_size, start + length))
        for start, length in zip(starts.tolist(), lengths.tolist(), strict=True)
        for first in range(start, start + length, block_size)
    ]
    picked = rng.permutation(len(blocks))
    parts = []
    for window in range(0, len(picked), max(1, spread)):
        chosen = picked[window : window + spread]
        # A block per row, padded with -1; read column by column: round-robin over the blocks.
        grid = np.full((len(chosen), block_size), -1, dtype=np.int64)
        for row, block in enumerate(chosen.tolist()):
            first, end = blocks[block]
            grid[row, : end - first] = np.arange(first, end)
        dealt = grid.T.ravel()
        parts.append(dealt[dealt >= 0])
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _equalized(rest: IntArray, order: IntArray, world_size: int, equalize: Equalize) -> IntArray:
    extra = len(rest) % world_size
    if not extra:
        return rest
    if equalize == "drop":
        return rest[: len(rest) - extra]
    return np.concatenate([rest, np.resize(order, world_size - extra)]) if len(order) else rest


def rank_stream(rest: IntArray, order: IntArray, rank: int, world_size: int, equalize: Equalize) -> IntArray:
    """The samples rank ``rank`` of ``world_size`` reads of ``rest`` (what remains of ``order``)."""
    return _equalized(rest, order, world_size, equalize)[rank::world_size]


def worker_units(length: int, workers: int, batch_size: int, unit: int) -> list[list[IntArray]]:
    """Per worker, its units of work: each the positions (in a rank's stream of ``length``) of
    ``unit`` batches, read together."""
    per_worker: list[list[IntArray]] = [[] for _ in range(max(1, workers))]
    step = batch_size * unit
    for number, start in enumerate(range(0, length, step)):
        per_worker[number % len(per_worker)].append(np.arange(start, min(start + step, length), dtype=np.int64))
    return per_worker


def delivery(length: int, workers: int, batch_size: int, unit: int) -> list[IntArray]:
    """The batches of a rank's stream of ``length`` (their positions) in the order a DataLoader
    hands them out: one of each worker in turn, skipping workers that are done."""
    queues = []
    for units in worker_units(length, workers, batch_size, unit):
        positions = np.concatenate(units) if units else np.zeros(0, np.int64)
        queues.append([positions[start : start + batch_size] for start in range(0, len(positions), batch_size)])
    batches: list[IntArray] = []
    for turn in range(max((len(queue) for queue in queues), default=0)):
        batches.extend(queue[turn] for queue in queues if turn < len(queue))
    return batches


def remaining(order: IntArray, segments: list[Segment], equalize: Equalize) -> IntArray:
    """What remains of ``order`` after the samples consumed in ``segments`` (in order)."""
    rest = order
    for segment in segments:
        if segment.delivered <= 0:
            continue
        equalized = _equalized(rest, order, segment.world_size, equalize)
        length = len(equalized) // segment.world_size
        batches = delivery(length, segment.workers, segment.batch_size, segment.unit)
        positions = np.concatenate(batches)[: segment.delivered] if batches else np.zeros(0, np.int64)
        # Every rank consumed the same positions of its stream; rank r's position p is p * world + r.
        taken = (positions[:, None] * segment.world_size + np.arange(segment.world_size)).ravel()
        rest = rest[~np.isin(rest, equalized[taken])]
    return rest


def sequences_per_batch(sequence_of_samples: IntArray, batch_size: int) -> float:
    """The mean number of different sequences in a batch of ``batch_size`` consecutive
    samples (full batches only): how well an order mixes sequences."""
    full = len(sequence_of_samples) // batch_size
    if not full:
        return 0.0
    batches = sequence_of_samples[: full * batch_size].reshape(full, batch_size)
    return float(np.mean([len(np.unique(batch)) for batch in batches]))
