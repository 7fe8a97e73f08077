"""Reading samples of a :class:`~ncore_like.dataset.SampleIndex`: the records of the next
samples in flight, bounded by a byte budget.

Samples are read in groups (a worker's batch, or the batches of a window of blocks): the
records of a group are sorted by archive and offset, and records that follow each other in a
file (at most :data:`GAP_BYTES` apart: the tar headers between them) are read as one exact
range: a sample whose fields were written one after the other costs one request, a block of
neighbouring samples one request.
Remote ranges are async requests on fsspec's loop, all of a group at once; local ones
``pread`` on the shared worker pool. Groups go out while the bytes of the groups in flight or
not yet consumed stay within the budget (a group is at least one sample, so a sample larger
than the budget goes alone). Every record is checked against its CRC32C where that is asked
for; a damaged range that came from the record cache is dropped and read again.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .._concurrency import io_loop, worker_pool
from ..archive._ranges import ArchiveRanges, checksum
from ..errors import ChecksumError
from ._fields import Blob, Rows, SampleNumber

if TYPE_CHECKING:
    from ..nodes import ArchiveCollection
    from ._index import SampleIndex

__all__ = ["GAP_BYTES", "SampleReader"]

#: Records at most this far apart in a file are read as one range: what lies between two
#: records written one after the other (a tar header of 512 bytes, a pax header for a long key,
#: padding), never a record that isn't wanted.
GAP_BYTES = 1536
#: A range read at once is at most this long (longer runs of records are cut).
SPAN_BYTES = 16 << 20


@dataclass
class _Plan:
    """The reads of a group of samples."""

    numbers: list[int]
    spans: list[tuple[int, int, int]] = field(default_factory=list)
    """``(archive, offset, size)``, each one read."""
    refs: dict[tuple[int, str], tuple[int, int, int, int] | None] = field(default_factory=dict)
    """``(sample, field)`` -> ``(span, start in the span, size, crc)``; None: never written."""
    nbytes: int = 0


class SampleReader:
    """Reads samples of an index by number (see the module's description).

    Args:
        index: The samples.
        verify_checksums: Check each record against its CRC32C (archives written without
            checksums have none); on by default, local or remote (as
            :class:`~ncore_like.IndexedTarArchive` does).
        byte_budget: Bytes of records in flight or read and not yet handed out.

    Pickles as the index and its settings: a process opens what it reads.
    """

    def __init__(self, index: SampleIndex, *, verify_checksums: bool | None = True, byte_budget: int) -> None:
        if byte_budget < 1:
            raise ValueError(f"byte_budget must be positive, got {byte_budget}")
        self._index = index
        self._verify_setting = verify_checksums
        self._budget = byte_budget
        self._init()

    def _init(self) -> None:
        index = self._index
        self._ranges = ArchiveRanges(index.archives, storage_options=index.storage_options, cache=index.cache)
        verify = self._verify_setting is not False  # None means the default, as for archives
        self._verify = [has and verify for has in index.has_checksums]
        self._stored = [(name, f) for name, f in index.fields.items() if isinstance(f, Rows | Blob)]
        self._collection: ArchiveCollection | None = None
        self._lock = threading.Lock()
        # The bytes of plans read by read_ahead, by their samples: taken by the first stream
        # that plans them.
        self._read_ahead: dict[tuple[int, ...], list[bytes]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"index": self._index, "verify": self._verify_setting, "budget": self._budget}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._index, self._verify_setting, self._budget = state["index"], state["verify"], state["budget"]
        self._init()

    @property
    def byte_budget(self) -> int:
        return self._budget

    @byte_budget.setter
    def byte_budget(self, budget: int) -> None:
        if budget < 1:
            raise ValueError(f"byte_budget must be positive, got {budget}")
        self._budget = budget

    # -- planning -----------------------------------------------------------------------------

    def _plan(self, numbers: Sequence[int]) -> _Plan:
        index = self._index
        plan = _Plan(list(numbers))
        sequences = index.sequence_of(np.asarray(numbers, dtype=np.int64)).tolist() if len(numbers) else []
        wanted: dict[tuple[int, int, int], list[tuple[tuple[int, str], int]]] = {}
        for number, sequence in zip(plan.numbers, sequences, strict=True):
            for name, _ in self._stored:
                table = index.tables[name]
                size = int(table.sizes[number])
                if size < 0:
                    plan.refs[(number, name)] = None
                    continue
                place = (sequence, int(table.offsets[number]), size)
                wanted.setdefault(place, []).append(((number, name), int(table.crcs[number])))
        current: list[int] | None = None  # archive, start, end of the span being grown
        for sequence, offset, size in sorted(wanted):
            end = offset + size
            joins = current is not None and current[0] == sequence and offset - current[2] <= GAP_BYTES
            if current is not None and joins and end - current[1] <= SPAN_BYTES:
                current[2] = max(current[2], end)
            else:
                if current is not None:
                    plan.spans.append((current[0], current[1], current[2] - current[1]))
                current = [sequence, offset, end]
            for ref, crc in wanted[(sequence, offset, size)]:
                plan.refs[ref] = (len(plan.spans), offset - current[1], size, crc)
        if current is not None:
            plan.spans.append((current[0], current[1], current[2] - current[1]))
        plan.nbytes = sum(size for _, _, size in plan.spans)
        return plan

    def _split(self, group: Sequence[int]) -> Iterator[_Plan]:
        """Plans of a group of samples read together: all of it, or consecutive parts of it
        where its bytes pass half the budget (so that two are in flight)."""
        limit = max(1, self._budget // 2)
        picked = np.asarray(group, dtype=np.int64)
        start, held = 0, 0
        for position, size in enumerate(self._index.sample_bytes(picked).tolist()):
            if position > start and held + size > limit:
                yield self._plan(picked[start:position].tolist())
                start, held = position, 0
            held += size
        if start < len(picked):
            yield self._plan(picked[start:].tolist())

    # -- reading ------------------------------------------------------------------------------

    def _submit(self, plan: _Plan) -> list[tuple[list[int], Future[list[bytes]]]]:
        """Starts the reads of a plan: the remote spans as one gathered coroutine on fsspec's
        loop, the local ones as one task of the worker pool."""
        ranges = self._ranges
        remote = [number for number, span in enumerate(plan.spans) if ranges.is_remote(span[0])]
        local = [number for number, span in enumerate(plan.spans) if not ranges.is_remote(span[0])]
        jobs: list[tuple[list[int], Future[list[bytes]]]] = []
        if remote:

            async def fetch(spans: list[tuple[int, int, int]]) -> list[bytes]:
                return list(await asyncio.gather(*(ranges.read_async(*span) for span in spans)))

            remote_spans = [plan.spans[number] for number in remote]
            jobs.append((remote, asyncio.run_coroutine_threadsafe(fetch(remote_spans), io_loop())))
        if local:
            local_spans = [plan.spans[number] for number in local]
            jobs.append((local, worker_pool().submit(lambda: [ranges.read(*span) for span in local_spans])))
        return jobs

    @staticmethod
    def _collect(plan: _Plan, jobs: list[tuple[list[int], Future[list[bytes]]]]) -> list[bytes]:
        data: list[bytes] = [b""] * len(plan.spans)
        for numbers, job in jobs:
            for number, payload in zip(numbers, job.result(), strict=True):
                data[number] = payload
        return data

    def _payload(self, plan: _Plan, data: list[bytes], number: int, name: str) -> memoryview | None:
        ref = plan.refs[(number, name)]
        if ref is None:
            return None
        span, start, size, crc = ref
        payload = memoryview(data[span])[start : start + size]
        sequence = plan.spans[span][0]
        if self._verify[sequence] and checksum(payload) != crc:
            archive, offset, length = plan.spans[span]
            if not self._ranges.discard(archive, offset, length):
                self._damaged(number, name, offset + start, crc, payload)
            data[span] = self._ranges.read_uncached(archive, offset, length)  # the cached copy was damaged
            payload = memoryview(data[span])[start : start + size]
            if checksum(payload) != crc:
                self._damaged(number, name, offset + start, crc, payload)
        return payload

    def _damaged(self, number: int, name: str, offset: int, crc: int, payload: memoryview) -> None:
        sequence, position = self._index.locate(number)
        raise ChecksumError(
            f"the record of field {name!r} of sample {number} (element {position} of the sequence) at offset "
            f"{offset} doesn't match its CRC32C (stored {crc:08x}, read {checksum(payload):08x}): the archive is "
            "damaged there",
            archive=self._index.location(sequence),
            offset=offset,
        )

    def _finish(self, plan: _Plan, data: list[bytes]) -> Iterator[dict[str, Any]]:
        index = self._index
        for number in plan.numbers:
            sequence, position = index.locate(number)
            where = index.location(sequence)
            sample: dict[str, Any] = {}
            for name, kind in index.fields.items():
                if isinstance(kind, Rows | Blob):
                    payload = self._payload(plan, data, number, name)
                    table = index.tables[name]
                    layout = table.layouts[sequence]
                    if isinstance(kind, Rows):
                        sample[name] = layout.decode_row(payload, position % layout.rows_per_chunk, where)
                    else:
                        sample[name] = layout.decode_blob(payload, int(table.lengths[number]), where)
                elif isinstance(kind, SampleNumber):
                    sample[name] = number
                else:
                    sample[name] = kind(self._root(sequence), position)
            yield sample

    def _root(self, sequence: int) -> Any:
        with self._lock:
            if self._collection is None:
                from ..nodes import ArchiveCollection

                index = self._index
                self._collection = ArchiveCollection(
                    [known.location for known in index.archives],
                    storage_options=index.storage_options,
                    cache=index.cache,
                )
            collection = self._collection
        return collection.root(sequence)

    def read_ahead(self, groups: Iterable[Sequence[int]]) -> None:
        """Reads the first plan of each of ``groups`` now (all in flight together) and keeps
        the bytes for :meth:`stream`, which takes a plan's bytes from here instead of reading
        them: what a process reads before forking workers that will stream those groups. The
        bytes are not pickled (a spawned worker reads for itself)."""
        plans = [next(self._split(group)) for group in groups if len(group)]
        started = [(plan, self._submit(plan)) for plan in plans]
        for plan, jobs in started:
            self._read_ahead[tuple(plan.numbers)] = self._collect(plan, jobs)

    def forget_read_ahead(self) -> None:
        """Drops the bytes :meth:`read_ahead` kept that no stream took."""
        self._read_ahead = {}

    def _start(self, plan: _Plan, kept: list[bytes] | None) -> list[tuple[list[int], Future[list[bytes]]]]:
        """The reads of ``plan``: the bytes :meth:`read_ahead` kept for it, or started now."""
        if kept is None:
            return self._submit(plan)
        done: Future[list[bytes]] = Future()
        done.set_result(kept)
        return [(list(range(len(plan.spans))), done)]

    def read(self, numbers: Sequence[int]) -> list[dict[str, Any]]:
        """The samples ``numbers``, all their reads in flight together."""
        plans = [(plan, self._submit(plan)) for plan in self._split(numbers)]
        samples: list[dict[str, Any]] = []
        for plan, jobs in plans:
            samples.extend(self._finish(plan, self._collect(plan, jobs)))
        return samples

    def stream(self, groups: Iterable[Sequence[int]]) -> Generator[dict[str, Any], None, None]:
        """The samples of ``groups`` in order, each group's records read together (neighbours
        as one range), groups read ahead within the byte budget. Close the generator (or
        exhaust it) to cancel the reads in flight."""
        pending: deque[tuple[_Plan, list[tuple[list[int], Future[list[bytes]]]]]] = deque()
        held = 0
        try:
            for group in groups:
                for plan in self._split(group):
                    while pending and held + plan.nbytes > self._budget:
                        done, jobs = pending.popleft()
                        yield from self._finish(done, self._collect(done, jobs))
                        held -= done.nbytes
                    kept = self._read_ahead.pop(tuple(plan.numbers), None) if self._read_ahead else None
                    if kept is not None and not pending:
                        # Read before this worker was forked: handed out before any read
                        # starts here, as the first reads set up this process's storage
                        # client (~0.1 s of CPU on S3), which held the first batch up.
                        yield from self._finish(plan, kept)
                        continue
                    pending.append((plan, self._start(plan, kept)))
                    held += plan.nbytes
            while pending:
                done, jobs = pending.popleft()
                yield from self._finish(done, self._collect(done, jobs))
                held -= done.nbytes
        finally:
            for _, jobs in pending:
                for _, job in jobs:
                    job.cancel()
