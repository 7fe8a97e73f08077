"""The order of an epoch, and its split across ranks and DataLoader workers (pure).

* **Order**: a permutation of all samples drawn from ``(seed, epoch)``. With ``block_size=k``
  the samples of each sequence are cut into blocks of ``k`` consecutive samples and the blocks
  are shuffled instead (each block keeps its order): neighbouring samples lie next to each
  other in the archive and are read with one request, at the price of fewer sequences per
  batch.
* **Ranks**: the samples of an epoch not consumed yet are cut to a multiple of the world size
  (``"drop"``: the last few are left out; ``"pad"``: the first few repeated) and rank ``r``
  takes every ``world_size``-th from ``r`` on. While the ranks go in step, what they consumed
  together is a prefix of the epoch's order, whatever the world size was: a resumed epoch goes
  on from there with any number of ranks.
* **Workers**: a rank's samples are cut into batches; worker ``w`` of ``W`` reads batches
  ``w, w + W, ...``. A DataLoader hands out its workers' batches in turn, so a rank sees its
  batches in order, and what it consumed is a prefix of its samples, whatever ``W`` was.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

__all__ = ["Equalize", "epoch_order", "rank_samples", "sequences_per_batch", "worker_samples"]

Equalize = Literal["drop", "pad"]
IntArray = np.ndarray[Any, np.dtype[np.int64]]


def epoch_order(lengths: IntArray, seed: int, epoch: int, *, shuffle: bool = True, block_size: int = 1) -> IntArray:
    """The sample numbers of an epoch in their order (see the module's description)."""
    total = int(lengths.sum())
    if not shuffle:
        return np.arange(total, dtype=np.int64)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch])))
    if block_size <= 1:
        return rng.permutation(total).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    # Blocks sequence by sequence (a sequence's last block may be shorter).
    blocks = [
        (first, min(first + block_size, start + length))
        for start, length in zip(starts.tolist(), lengths.tolist(), strict=True)
        for first in range(start, start + length, block_size)
    ]
    picked = rng.permutation(len(blocks))
    return np.concatenate([np.arange(*blocks[b], dtype=np.int64) for b in picked] or [np.zeros(0, np.int64)])


def rank_samples(order: IntArray, consumed: int, rank: int, world_size: int, equalize: Equalize) -> IntArray:
    """The samples rank ``rank`` of ``world_size`` reads of what follows the first
    ``consumed`` of ``order``."""
    rest = order[consumed:]
    extra = len(rest) % world_size
    if extra:
        if equalize == "drop":
            rest = rest[: len(rest) - extra]
        else:
            padding = world_size - extra
            rest = np.concatenate([rest, np.resize(order, padding)]) if len(order) else rest
    return rest[rank::world_size]


def worker_samples(samples: IntArray, worker: int, workers: int, batch_size: int) -> IntArray:
    """The samples worker ``worker`` of ``workers`` reads: batches ``worker``, ``worker +
    workers``, ... of ``batch_size`` samples."""
    if workers <= 1:
        return samples
    starts = np.arange(worker * batch_size, len(samples), workers * batch_size)
    if not len(starts):
        return samples[:0]
    return np.concatenate([samples[start : start + batch_size] for start in starts])


def sequences_per_batch(sequence_of_samples: IntArray, batch_size: int) -> float:
    """The mean number of different sequences in a batch of ``batch_size`` consecutive
    samples (full batches only): how well an order mixes sequences."""
    full = len(sequence_of_samples) // batch_size
    if not full:
        return 0.0
    batches = sequence_of_samples[: full * batch_size].reshape(full, batch_size)
    return float(np.mean([len(np.unique(batch)) for batch in batches]))
