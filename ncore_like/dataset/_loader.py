"""``TrainingLoader``: torch's ``DataLoader`` over a :class:`TrainingDataset` that counts
the batches it hands out, so that ``state_dict()`` knows what was consumed.

A DataLoader's workers hold copies of the dataset; the samples they read are counted where
the batches arrive, here: the workers' share and the order in which their batches arrive follow
from the split (see ``_order.delivery``).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from typing import Any

from ..errors import MissingDependencyError
from ._dataset import TrainingDataset

try:
    from torch.utils.data import DataLoader
except ImportError as error:  # pragma: no cover - the tests run with torch
    raise MissingDependencyError(
        f"TrainingLoader needs torch, which isn't installed ({error}): pip install 'ncore-like[torch]'"
    ) from error

__all__ = ["TrainingLoader"]


def _forks(context: Any) -> bool:
    """True if workers of a DataLoader with this ``multiprocessing_context`` are forked
    (and so inherit the memory of the process that starts them)."""
    if context is None:  # the start method set, else the platform's default (the first listed)
        chosen = multiprocessing.get_start_method(allow_none=True)
        return (chosen or multiprocessing.get_all_start_methods()[0]) == "fork"
    method = context if isinstance(context, str) else context.get_start_method()
    return bool(method == "fork")


class TrainingLoader(DataLoader):  # type: ignore[type-arg]
    """``torch.utils.data.DataLoader(dataset, batch_size, **kwargs)`` for a
    :class:`TrainingDataset`, whose :meth:`state_dict` / :meth:`load_state_dict` (the
    dataset's) resume mid-epoch.

    Any DataLoader argument works except ``sampler``, ``batch_sampler`` and ``shuffle`` (the
    dataset orders and splits the samples). With ``persistent_workers=True`` the workers are
    started again when the dataset's state was changed otherwise than by a pass that ran to its
    end (``set_epoch`` to another epoch, ``load_state_dict``, a pass left early).
    """

    def __init__(self, dataset: TrainingDataset, batch_size: int = 1, **kwargs: Any) -> None:
        if not isinstance(dataset, TrainingDataset):
            raise TypeError(f"TrainingLoader reads a TrainingDataset, not {type(dataset).__name__}")
        for name in ("sampler", "batch_sampler", "shuffle"):
            if kwargs.get(name) not in (None, False):
                raise ValueError(f"{name}= doesn't apply: the TrainingDataset orders and splits the samples")
        if batch_size is None or batch_size < 1:
            raise ValueError(f"batch_size must be a positive number of samples, got {batch_size!r}")
        dataset.batch_size = batch_size
        super().__init__(dataset, batch_size=batch_size, **kwargs)
        self._workers_state: tuple[int, int, int] | None = None

    @staticmethod
    def _snapshot(dataset: TrainingDataset) -> tuple[Any, ...]:
        """What a worker's copy of the dataset reads by (compared for persistent workers)."""
        return dataset.epoch, tuple(dataset._segments), dataset._spread_now(), dataset._pass

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        dataset: TrainingDataset = self.dataset  # type: ignore[assignment]
        dataset.placement()  # resolved here, before workers start: they may not see torch.distributed
        dataset.batch_size = self.batch_size
        dataset.start_pass(self.num_workers)
        if self.persistent_workers and self._workers_state != self._snapshot(dataset):
            self._iterator = None  # the workers' copies hold an older state: new workers
        sizes = dataset.batch_sizes()
        dataset._counted_by_loader = True
        self._workers_state = None  # unknown until this pass runs to its end
        starts_workers = self.num_workers > 0 and (not self.persistent_workers or self._iterator is None)
        try:
            if starts_workers and _forks(self.multiprocessing_context):
                dataset.read_first_groups(self.num_workers)  # the first workers inherit the bytes
            try:
                batches = super().__iter__()  # starts the workers
            finally:
                dataset.forget_first_groups()
            for number, batch_data in enumerate(batches):
                if number < len(sizes):
                    dataset.count_delivered(sizes[number])
                yield batch_data
        finally:
            dataset._counted_by_loader = False
        dataset.end_epoch()
        self._workers_state = self._snapshot(dataset)  # where persistent workers' copies are now too

    def state_dict(self) -> dict[str, Any]:
        """The dataset's :meth:`TrainingDataset.state_dict`."""
        dataset: TrainingDataset = self.dataset  # type: ignore[assignment]
        return dataset.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The dataset's :meth:`TrainingDataset.load_state_dict`."""
        dataset: TrainingDataset = self.dataset  # type: ignore[assignment]
        dataset.load_state_dict(state)
