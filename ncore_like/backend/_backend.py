"""``Backend``: reads selections of arrays, fast.

The fast path (arrays of raw or Blosc-compressed C-order chunks in an indexed tar archive)
reads each touched chunk's record and decodes it on a worker thread, so one chunk's read
overlaps another's decoding; local records are read with ``os.pread`` (no lock), remote
ones with async range requests issued all at once (bounded by bytes in flight). A chunk
that fills a contiguous region of the output is decompressed straight into it (raw local
chunks are even read straight into it); others are decoded into a per-thread scratch buffer
and only the selected part is copied. Anything else goes to zarr-python, and every path
returns what zarr-python returns.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import numpy as np

from .. import _compat
from .._buffers import POOLED_BYTES, new_result
from .._concurrency import io_loop, run_in_worker, sync, worker_pool
from .._defaults import DECODED_CHUNK_BYTES, INLINE_BYTES, INLINE_READ_BYTES, MAX_BYTES_IN_FLIGHT
from .._log import DEBUG, library_logger
from .._lru import LRUCache, process_cache
from ..store._documents import ChunkKeys
from ._decode import blosc_decoded, blosc_into, decode_into, one_block_decoded, raw_checked, scratch_buffer
from ._plan import ArraySource, ChunkLayout, ChunkTask, ReadPlan, bytes_like, chunk_layout, plan_read
from ._selection import NUMPY_INTEGERS, Dim, basic_dims, canonical, paired_arrays
from ._state import ArrayState, RowReader

__all__ = ["Backend"]

T = TypeVar("T")

logger = library_logger("ncore_like.backend.fallback")

NDArray = np.ndarray[Any, Any]


async def _gather(*awaitables: Any) -> list[Any]:
    import asyncio  # here: blocking local reads never need it

    return await asyncio.gather(*awaitables)


async def _in_new_thread(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` on a new thread (``asyncio.to_thread``)."""
    import asyncio

    return await asyncio.to_thread(function, *args)


class _ByteBudget:
    """Bounds the bytes of records fetched and not yet decoded (asyncio)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._used = 0
        import asyncio  # here: blocking local reads never need it (~8 ms of a first import)

        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def hold(self, nbytes: int) -> AsyncIterator[None]:
        nbytes = min(nbytes, self._limit)  # a record larger than the budget goes alone
        async with self._changed:
            await self._changed.wait_for(lambda: self._used + nbytes <= self._limit)
            self._used += nbytes
        try:
            yield
        finally:
            async with self._changed:
                self._used -= nbytes
                self._changed.notify_all()


class Backend:
    """Reads (selections of) arrays: :meth:`read` for values, :meth:`blob` for blobs.

    Args:
        inline_bytes: Reads of fewer stored bytes run on the calling thread.
        max_bytes_in_flight: Bytes of remote records fetched but not yet decoded, per read.

    :attr:`stats` counts the reads by path taken (``"fast"``, ``"view"`` and
    ``"fallback: <reason>"``). The root groups of a store read through the store's backend
    unless given one (see :attr:`Store.backend`), shared by all their groups and arrays, so
    the statistics are those of one hierarchy.
    """

    def __init__(self, *, inline_bytes: int = INLINE_BYTES, max_bytes_in_flight: int = MAX_BYTES_IN_FLIGHT) -> None:
        if max_bytes_in_flight < 1:
            raise ValueError(f"max_bytes_in_flight must be positive, got {max_bytes_in_flight}")
        self.inline_bytes = inline_bytes
        self.max_bytes_in_flight = max_bytes_in_flight
        self._stats: Counter[str] = Counter()
        self._stats_lock = threading.Lock()
        # The state of each array read through a store's view, kept while the view lives.
        self._view_states: weakref.WeakKeyDictionary[Any, ArrayState] = weakref.WeakKeyDictionary()
        # Fast reads of single rows are counted without the lock (~0.3 us of a ~7 us read):
        # ``next`` of an ``itertools.count`` is one C call, atomic under the GIL. The count
        # is added to ``stats`` when it is read; ``_peeks`` counts the ``next`` calls that were
        # no read: those of ``stats``, and all rows of a batch but one (a batch is one read).
        self._row_reads = itertools.count()
        self._peeks = 0
        self._rows_counted = 0

    def state_of(self, view: Any) -> ArrayState:
        """The :class:`ArrayState` of the array that ``view`` (a store's metadata view of it)
        describes, the same for every node made of that view: ``group.array(name)`` makes a
        node per call, whose first read would otherwise work out the chunk layout and plan
        again (~8 us of a ~60 us read of an 800 KB frame)."""
        state = self._view_states.get(view)
        if state is None:
            state = self._view_states[view] = ArrayState()
        return state

    @property
    def stats(self) -> Counter[str]:
        """Reads by path taken (``"fast"``, ``"view"``, ``"fallback: <reason>"``); the same
        object every time, brought up to date when asked for."""
        with self._stats_lock:
            rows = next(self._row_reads) - self._peeks
            self._peeks += 1
            if rows != self._rows_counted:
                self._stats["fast"] += rows - self._rows_counted
                self._rows_counted = rows
            return self._stats

    def __reduce__(self) -> tuple[Any, ...]:
        # Arrays pickle with their backend (e.g. into DataLoader workers): rebuilt from its
        # settings, statistics start afresh.
        return (_rebuild_backend, (self.inline_bytes, self.max_bytes_in_flight))

    def _count(self, path: str) -> None:
        with self._stats_lock:
            self._stats[path] += 1

    def _fallback(self, array: ArraySource, reason: str, state: ArrayState | None) -> None:
        """Counts a read that zarr-python makes, and logs it (debug; once per array that
        keeps a state) with the array and why the fast path doesn't apply."""
        self._count(f"fallback: {reason}")
        if state is not None:
            if state.fallback_logged:
                return
            state.fallback_logged = True
        if logger.isEnabledFor(DEBUG):
            view, archive = array.view, array.archive
            path = view.path if view is not None else array.zarr.path
            where = archive.location.name if archive is not None else str(array.zarr.store)
            logger.debug("%s: array %r is read by zarr-python, not the fast path: %s", where, "/" + path, reason)

    # -- planning ------------------------------------------------------------------------

    def shape(self, array: ArraySource, selection: Any, *, state: ArrayState | None = None) -> tuple[int, ...]:
        """The shape ``array[selection]`` has (zarr-python's errors for invalid selections);
        from the fast path's plan where there is one, which the read of the same selection
        then uses too."""
        selection = canonical(selection)
        if type(selection) is int and state is not None:
            if not state.rows_known:
                self._rows(array, state)
            row = state.row_shape  # arrays with a row reader
            if row is not None and -row[0] <= selection < row[0]:
                return row[1]
        elif type(selection) in _ROW_BATCHES:
            batch = self._row_batch(array, selection, state)
            if batch is not None:
                return (len(batch[0]), *batch[1])
        elif type(selection) is tuple:
            part = self._row_part(array, selection, state)
            if part is not None:
                shape = tuple(dim[1] - dim[0] for dim in part if isinstance(dim, tuple))
                if type(selection[0]) is int:
                    return shape
                batch = self._row_batch(array, selection[0], state)
                if batch is not None:
                    return (len(batch[0]), *shape)
        if type(selection) is tuple or type(selection) in _ROW_BATCHES:
            selection = paired_arrays(selection, self._array_shape(array))
        fast = self._fast(array, selection, state)
        if not isinstance(fast, str):
            return fast[1].shape
        zarr_array = array.zarr
        return _compat.selection_shape(zarr_array, selection, _compat.selection_kind(zarr_array, selection))

    def _fast(self, array: ArraySource, selection: Any, state: ArrayState | None) -> tuple[ChunkLayout, ReadPlan] | str:
        """The fast path's layout and plan (memoised per array: an archive opened for reading
        doesn't change), or why the fast path doesn't apply."""
        state = ArrayState() if state is None else state
        layout = self._layout(array, state)
        if isinstance(layout, str):
            return layout
        plan: ReadPlan | str | None
        if selection is Ellipsis:
            plan = state.whole_plan
            if plan is None:
                plan = state.whole_plan = plan_read(array, layout, selection)
        else:
            # The plan of the last selection: a read with out= plans once for the shape check
            # and the read (the same object is the same selection: selections are immutable).
            last = state.last
            if last is not None and last[0] is selection:
                plan = last[1]
            else:
                plan = plan_read(array, layout, selection)
                state.last = (selection, plan)
        if isinstance(plan, str):
            return plan
        return layout, plan

    @staticmethod
    def _layout(array: ArraySource, state: ArrayState) -> ChunkLayout | str:
        """The array's chunk layout, memoised (an archive opened for reading doesn't change)."""
        layout = state.layout
        if layout is None:
            layout = state.layout = chunk_layout(array)
        return layout

    @staticmethod
    def _view_task(array: ArraySource, layout: ChunkLayout, plan: ReadPlan) -> ChunkTask | None:
        """The record whose bytes are the whole result (one raw chunk read completely)."""
        if layout.compressed or len(plan.tasks) != 1 or plan.shape != layout.shape:
            return None
        task = plan.tasks[0]
        if not (task.full and task.stored and task.size == layout.chunk_nbytes):
            return None
        if layout.stored_dtype != layout.dtype or layout.chunk_shape != plan.shape:
            return None
        return task

    @staticmethod
    def _view(record: bytes, layout: ChunkLayout, plan: ReadPlan) -> NDArray:
        return np.frombuffer(record, dtype=layout.stored_dtype).reshape(plan.shape)

    # -- one chunk (runs on worker threads) ----------------------------------------------

    @staticmethod
    def _direct_region(task: ChunkTask, layout: ChunkLayout, out: NDArray) -> NDArray | None:
        """The bytes of ``out`` the chunk fills, if it fills one contiguous region exactly."""
        if not task.full or out.dtype != layout.stored_dtype:
            return None
        region = out[task.out_selection] if task.out_selection else out
        if not region.flags.c_contiguous or region.size * region.itemsize != layout.chunk_nbytes:
            return None
        flat: NDArray = region.reshape(-1).view(np.uint8)
        return flat

    @staticmethod
    def _fill(task: ChunkTask, layout: ChunkLayout, out: NDArray) -> None:
        if task.out_selection:
            out[task.out_selection] = layout.fill_value
        else:
            out[...] = layout.fill_value

    def _place(
        self,
        task: ChunkTask,
        layout: ChunkLayout,
        out: NDArray,
        drop_axes: tuple[int, ...],
        record: bytes | None,
        keep: bool = False,
    ) -> None:
        """Reads (unless given) and decodes one chunk into ``out``. With ``keep`` (the one
        chunk of a read), a chunk the read takes part of is kept decoded for the next reads
        of it (see :data:`DECODED_CHUNK_BYTES`)."""
        if not task.stored:
            self._fill(task, layout, out)
            return
        where = layout.archive.location.name
        archive = layout.archive
        region = self._direct_region(task, layout, out)
        if region is not None:
            if record is None and not layout.compressed and task.size == region.size:
                archive.read_into(task.key, region.data)  # raw local chunk: no copy at all
                return
            record = archive.read(task.key) if record is None else record
            decode_into(record, region, compressed=layout.compressed, key=task.key, where=where)
            return
        chunk = self._kept_chunk(task, layout)
        if chunk is None:
            keep = keep and layout.chunk_nbytes <= _decoded.max_weight // 2
            buffer = new_result((layout.chunk_nbytes,), _BYTES) if keep else scratch_buffer(layout.chunk_nbytes)
            if record is None and not layout.compressed and task.size == buffer.size:
                archive.read_into(task.key, buffer.data)
            else:
                record = archive.read(task.key) if record is None else record
                decode_into(record, buffer, compressed=layout.compressed, key=task.key, where=where)
            chunk = buffer.view(layout.stored_dtype).reshape(layout.chunk_shape)
            if keep:
                chunk.setflags(write=False)
                _decoded.put((id(layout), task.key), (weakref.ref(layout), chunk))
        self._put(task, chunk, out, drop_axes)

    @staticmethod
    def _put(task: ChunkTask, chunk: NDArray, out: NDArray, drop_axes: tuple[int, ...]) -> None:
        """Copies the part of a decoded chunk that ``task`` takes into its place in ``out``."""
        values = chunk[task.chunk_selection]
        if drop_axes:
            values = values.squeeze(axis=drop_axes)
        if task.out_selection:
            out[task.out_selection] = values
        else:
            out[...] = values

    def _row_batch(
        self, array: ArraySource, selection: Any, state: ArrayState | None
    ) -> tuple[list[int], tuple[int, ...], np.dtype[Any], RowReader] | None:
        """The rows of an index list or 1-d integer array (a DataLoader's batch) or of a
        unit-step slice (a window) on the first axis of an array with a row reader, when they
        are small enough together to be read one after another on this thread, as ``read(i)``
        reads each (a plan and its tasks cost more than such rows' reads): the indices, a
        row's shape and dtype, the reader. None otherwise, indices out of bounds included
        (the general path raises their errors)."""
        if state is None or self._rows(array, state) is None:
            return None
        reader, row, layout = state.row_reader, state.row_shape, state.layout
        if reader is None or row is None or not isinstance(layout, ChunkLayout) or not row[1]:
            return None
        if type(selection) is slice:  # a window of rows, as poses[t : t + 16]
            if selection.step not in (None, 1):
                return None
            indices: list[int] = list(range(*selection.indices(row[0])))
        elif type(selection) is np.ndarray:
            if selection.ndim != 1 or selection.dtype.kind not in "iu":
                return None
            indices = selection.tolist()
        else:
            indices = selection
            if not all(type(index) is int for index in indices):
                if not all(type(index) is int or type(index) in NUMPY_INTEGERS for index in indices):  # bools: a mask
                    return None
                indices = [int(index) for index in indices]
        if not indices or len(indices) * layout.chunk_nbytes > self.inline_bytes:
            return None  # large rows decode side by side on the worker pool, as planned
        rows = row[0]
        if min(indices) < -rows or max(indices) >= rows:
            return None
        return indices, row[1], layout.dtype, reader

    def _read_rows(
        self, array: ArraySource, selection: Any, out: NDArray | None, state: ArrayState | None
    ) -> NDArray | None:
        """``array[selection]`` for a :meth:`_row_batch`, read row by row; else None."""
        batch = self._row_batch(array, selection, state)
        if batch is None:
            return None
        indices, row_shape, dtype, read_row = batch
        result = new_result((len(indices), *row_shape), dtype) if out is None else out
        for position, index in enumerate(indices):
            if read_row(index, result[position]) is None:
                return None  # an out the general path judges
        if len(indices) > 1:
            with self._stats_lock:
                self._peeks += len(indices) - 1
        return result

    def _row_part(self, array: ArraySource, selection: tuple[Any, ...], state: ArrayState | None) -> list[Dim] | None:
        """For a selection of parts of rows (``poses[i, :3]``, ``boxes[rows, 0]``,
        ``poses[t:t + 8, :3]``: an int, an index list or array or a slice, then ints and
        unit-step slices) of an array with a row reader, the selection of each dimension of
        a row (:func:`basic_dims`); None otherwise (invalid selections too)."""
        if state is None or not selection or type(selection[0]) not in _ROW_SELECTIONS:
            return None
        if self._rows(array, state) is None or state.row_shape is None:
            return None
        rows, row_shape = state.row_shape
        first = selection[0]
        if type(first) is int and not -rows <= first < rows:
            return None
        dims = basic_dims((0, *selection[1:]), (rows, *row_shape))  # the rows are the row readers' to check
        return None if dims is None else dims[1:]

    def _read_row_part(
        self, array: ArraySource, selection: tuple[Any, ...], out: NDArray | None, state: ArrayState | None
    ) -> NDArray | None:
        """``array[selection]`` for a :meth:`_row_part`: the rows read whole (small ones, as
        rows are) and the part taken from them, a view unless ``out`` is given; else None."""
        first = selection[0] if selection else None
        if type(first) is int and state is not None:  # one row's part (poses[t, :3])
            return self._read_part_of_row(array, first, selection, out, state)
        dims = self._row_part(array, selection, state)
        if dims is None or state is None or state.row_reader is None:
            return None
        # ``...`` last: all ints select a 0-d view, not a numpy scalar
        within = (slice(None), *(slice(*dim) if isinstance(dim, tuple) else dim for dim in dims), ...)
        whole = self._read_rows(array, first, None, state)
        return None if whole is None else _taken(whole, within, out)

    def _read_part_of_row(
        self, array: ArraySource, index: int, selection: tuple[Any, ...], out: NDArray | None, state: ArrayState
    ) -> NDArray | None:
        """:meth:`_read_row_part` of one row (``selection[0]`` is ``index``): the row read
        whole and numpy's indexing of it (:func:`_within_row`); None where the general path
        decides (its errors included)."""
        within = _within_row(selection)
        reader = self._rows(array, state)
        if within is None or reader is None:
            return None
        whole = reader(index, None)
        if whole is None:
            return None
        try:
            return _taken(whole, within, out)
        except IndexError:  # an index out of bounds, too many of them
            return None

    @staticmethod
    def _kept_chunk(task: ChunkTask, layout: ChunkLayout) -> NDArray | None:
        """The decoded chunk of ``task`` if an earlier read that took part of it kept it
        (a chunk's record never changes: archives are write-once)."""
        kept = _decoded.get((id(layout), task.key))
        return kept[1] if kept is not None and kept[0]() is layout else None

    def _rows(self, array: ArraySource, state: ArrayState) -> RowReader | None:
        """The array's row reader (see :meth:`_row_reader`), memoised; None if it has none."""
        if not state.rows_known:
            state.row_reader = self._row_reader(array, state)
            state.rows_known = True
        return state.row_reader

    def _row_reader(self, array: ArraySource, state: ArrayState) -> RowReader | None:
        """For local arrays chunked by whole single rows (a row per chunk: lidar sweeps, poses,
        rows of features), the read of one row by index, which is the commonest small read:
        one record read and decoded into the output with no plan. The reader returns None
        where the general path must decide (an index out of bounds, an ``out`` that isn't a
        writeable C-contiguous array of the row's dtype and shape: their errors). None for
        other arrays."""
        layout = self._layout(array, state)
        if isinstance(layout, str):
            return None
        archive, shape, chunks = layout.archive, layout.shape, layout.chunk_shape
        if archive.is_remote or not shape or chunks[0] != 1 or chunks[1:] != shape[1:]:
            return None
        if layout.stored_dtype != layout.dtype:
            return None
        # Everything a read needs is bound here, once: each lookup saved is a noticeable
        # share of a ~4 us read of a few KB.
        rows, row_shape, rest = shape[0], shape[1:], (0,) * (len(shape) - 1)
        dtype, compressed, chunk_key, fill = layout.dtype, layout.compressed, layout.chunk_key, layout.fill_value
        nbytes, where = layout.chunk_nbytes, archive.location.name
        state.row_shape = (rows, row_shape)

        # Formatted inline for ChunkKeys (a call less: rows never written look theirs up at
        # every read).
        key_of = (
            chunk_key.first_axis(len(shape))
            if isinstance(chunk_key, ChunkKeys)
            else lambda index: chunk_key((index, *rest))
        )

        flat = len(row_shape) == 1  # a 1-d row views as bytes directly
        # Small rows are read as bytes (Blosc ones decompressed into new bytes) that a
        # read-only result views, or that are copied into out=: cheaper than numcodecs' checks
        # of a destination (see blosc_decoded) and the steps of read_into. Larger ones are
        # read or decompressed into the result itself, as planned reads are.
        small = nbytes <= _SMALL_ROW_BYTES
        copy_small = compressed and small and _bytes_view(np.empty(row_shape, dtype)) is not None
        # Each row's key is formatted and looked up once (numbered_reader); a row's key is
        # formatted again only for an error's message.
        read, count = archive.numbered_reader(key_of), self._row_reads.__next__
        empty, frombuffer, ndarray, uint8 = np.empty, np.frombuffer, np.ndarray, np.uint8

        def read_row(index: int, out: NDArray | None) -> NDArray | None:
            if index < 0:
                index += rows
            if not 0 <= index < rows:
                return None
            if out is None and small:  # read-only by construction: the values are the bytes read or decoded
                count()
                record = read(index)
                if record is None:
                    return filled(None)
                if compressed:  # the commonest read of all: python-blosc's call for a row of one block
                    data = one_block_decoded(record, nbytes) or blosc_decoded(record, nbytes, key_of(index), where)
                else:
                    data = raw_checked(record, nbytes, key_of(index), where)
                row = frombuffer(data, dtype)
                return row if flat else row.reshape(row_shape)
            given = out is not None
            if given:
                if not (isinstance(out, ndarray) and out.shape == row_shape):
                    return None
                if out.dtype is not dtype and out.dtype != dtype:  # the same object, mostly: no comparison
                    return None
                if copy_small:  # decoded bytes copied into out's memory, checked on it (~0.3 us less)
                    target = out.data
                    if target.readonly or not target.c_contiguous:
                        return None
                    count()
                    record = read(index)
                    if record is None:
                        return filled(out)
                    data = one_block_decoded(record, nbytes) or blosc_decoded(record, nbytes, key_of(index), where)
                    target.cast("B")[:] = data
                    return out
                flags = out.flags
                if not (flags.c_contiguous and flags.writeable):
                    return None
            count()
            if out is None:
                out = empty(row_shape, dtype)
            if compressed:
                record = read(index)
                if record is None:
                    return filled(out if given else None)
                blosc_into(record, out, nbytes, key_of(index), where)  # Blosc fills out's memory
            else:
                try:
                    buffer = (out.view(uint8) if flat else out.reshape(-1).view(uint8)).data
                    archive.read_into(key_of(index), buffer)
                except KeyError:
                    if key_of(index) in archive:  # a KeyError of something else than the record's lookup
                        raise
                    return filled(out if given else None)
            if not given:
                out.setflags(write=False)
            return out

        def filled(out: NDArray | None) -> NDArray:
            """A row of a chunk never written: the fill value, into ``out`` if given, else
            in a new read-only array."""
            if out is not None:
                out[...] = fill
                return out
            row = empty(row_shape, dtype)
            row[...] = fill
            row.setflags(write=False)
            return row

        return read_row

    # -- executing a plan ----------------------------------------------------------------

    def _run_local(self, layout: ChunkLayout, plan: ReadPlan, out: NDArray) -> None:
        tasks = plan.tasks
        if len(tasks) <= 1 or plan.stored_bytes < self.inline_bytes:
            keep = len(tasks) == 1  # a loop over rows or elements of one chunk reads it again
            for task in tasks:
                self._place(task, layout, out, plan.drop_axes, None, keep)
            return
        pool = worker_pool()
        futures = [pool.submit(self._place, task, layout, out, plan.drop_axes, None) for task in tasks]
        from concurrent.futures import FIRST_EXCEPTION, wait  # here: single-threaded reads never need it

        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for future in done:
            future.result()  # raises the first error
        for future in futures:
            future.result()

    async def _run_async(self, layout: ChunkLayout, plan: ReadPlan, out: NDArray) -> None:
        archive = layout.archive
        if not archive.is_remote:
            if len(plan.tasks) <= 1 or plan.stored_bytes < self.inline_bytes:
                await run_in_worker(self._run_local, layout, plan, out)
            else:
                await _gather(
                    *(run_in_worker(self._place, task, layout, out, plan.drop_axes, None) for task in plan.tasks)
                )
            return
        budget = _ByteBudget(self.max_bytes_in_flight)
        keep = len(plan.tasks) == 1

        async def fetch_and_decode(task: ChunkTask) -> None:
            if not task.stored:
                self._fill(task, layout, out)
                return
            chunk = self._kept_chunk(task, layout)
            if chunk is not None:  # decoded already: no request
                self._put(task, chunk, out, plan.drop_axes)
                return
            async with budget.hold(task.size):
                record = await archive.read_async(task.key)
                await run_in_worker(self._place, task, layout, out, plan.drop_axes, record, keep)

        # All requests go out at once (within the budget); each chunk decodes on a worker
        # thread as soon as its bytes arrive.
        await _gather(*(fetch_and_decode(task) for task in plan.tasks))

    # -- public API ----------------------------------------------------------------------

    def read(
        self,
        array: ArraySource,
        selection: Any = Ellipsis,
        out: NDArray | None = None,
        *,
        state: ArrayState | None = None,
    ) -> NDArray:
        """The values of ``array[selection]``, in ``out`` if given (validated by the caller).

        ``state`` is the :class:`ArrayState` the caller keeps per array (e.g.
        :class:`~ncore_like.Array` does): the backend keeps what it learnt about the array
        there between reads.
        """
        if type(selection) is not int:  # numpy integers, 0-d arrays, 1-tuples: ints from here on
            selection = canonical(selection)
        if type(selection) is int and state is not None:
            reader = self._rows(array, state)
            if reader is not None:
                row = reader(selection, out)
                if row is not None:
                    return row
        elif type(selection) in _ROW_BATCHES:
            rows = self._read_rows(array, selection, out, state)
            if rows is not None:
                return rows
        elif type(selection) is tuple:
            values = self._read_row_part(array, selection, out, state)
            if values is not None:
                return values
        if type(selection) is tuple or type(selection) in _ROW_BATCHES:
            selection = paired_arrays(selection, self._array_shape(array))
        fast = self._fast(array, selection, state)
        if isinstance(fast, str):
            self._fallback(array, fast, state)
            zarr_array = array.zarr
            return _compat.read_selection(zarr_array, selection, _compat.selection_kind(zarr_array, selection), out)
        layout, plan = fast
        if out is None:
            task = self._view_task(array, layout, plan)
            if task is not None:
                self._count("view")
                archive = layout.archive
                if archive.is_remote or task.size < POOLED_BYTES:
                    return self._view(archive.read(task.key), layout, plan)
                # A large raw chunk (a camera frame): read straight into reused memory, as a
                # planned read of the chunk is.
                out = new_result(plan.shape, layout.dtype)
                self._place(task, layout, out, plan.drop_axes, None)
                out.setflags(write=False)  # read-only, as a view of the record's bytes is
                return out
            out = new_result(plan.shape, layout.dtype)
        self._count("fast")
        if layout.archive.is_remote:
            sync(self._run_async(layout, plan, out), io_loop())
        else:
            self._run_local(layout, plan, out)
        return out

    async def read_async(
        self,
        array: ArraySource,
        selection: Any = Ellipsis,
        out: NDArray | None = None,
        *,
        state: ArrayState | None = None,
    ) -> NDArray:
        """:meth:`read` without blocking the running loop: remote requests are awaited,
        decoding runs on worker threads, so gathered reads overlap both. Small local reads
        (:data:`INLINE_READ_BYTES`) run on the loop's thread, as :meth:`read`: they take
        microseconds, a hand-off to a worker thread and back more (~40-140 us)."""
        selection = paired_arrays(canonical(selection), self._array_shape(array))
        if self._small_local(array, selection, state):
            return self.read(array, selection, out, state=state)
        fast = self._fast(array, selection, state)  # planning only: no I/O
        if isinstance(fast, str):
            self._fallback(array, fast, state)
            zarr_array = array.zarr
            kind = _compat.selection_kind(zarr_array, selection)
            # Not on the worker pool: zarr-python's record reads use that pool, and fallback
            # reads occupying it while they wait for them would starve it.
            return await _in_new_thread(_compat.read_selection, zarr_array, selection, kind, out)
        layout, plan = fast
        if out is None:
            task = self._view_task(array, layout, plan)
            if task is not None:
                self._count("view")
                return self._view(await layout.archive.read_async(task.key), layout, plan)
            out = new_result(plan.shape, layout.dtype)
        self._count("fast")
        await self._run_async(layout, plan, out)
        return out

    def _small_local(self, array: ArraySource, selection: Any, state: ArrayState | None) -> bool:
        """True for a read from a local archive of at most :data:`INLINE_READ_BYTES`, stored
        and decoded (a row by index, a few small rows, a small region)."""
        archive = array.archive
        if archive is None or archive.is_remote or state is None:
            return False
        layout = self._layout(array, state)
        if isinstance(layout, str):
            return False
        if self._rows(array, state) is not None:  # rows by index, no plan needed to tell
            if type(selection) is int:
                return layout.chunk_nbytes <= INLINE_READ_BYTES
            if type(selection) in _ROW_BATCHES:
                batch = self._row_batch(array, selection, state)
                if batch is not None:
                    return len(batch[0]) * layout.chunk_nbytes <= INLINE_READ_BYTES
        fast = self._fast(array, selection, state)
        if isinstance(fast, str):
            return False
        plan = fast[1]
        values = int(np.prod(plan.shape)) * layout.dtype.itemsize
        return plan.stored_bytes <= INLINE_READ_BYTES and values <= INLINE_READ_BYTES

    @staticmethod
    def _array_shape(array: ArraySource) -> tuple[int, ...]:
        """The array's shape, from its metadata view where it has one (no zarr-python)."""
        view = array.view
        if view is not None and view.unsupported is None:
            return view.shape
        return tuple(array.zarr.shape)

    @staticmethod
    def _check_blob(array: ArraySource) -> None:
        view = array.view
        if view is not None and view.unsupported is None:
            shape, dtype, path = view.shape, view.dtype, view.path
        else:
            zarr_array = array.zarr
            shape, dtype, path = tuple(zarr_array.shape), np.dtype(zarr_array.dtype), zarr_array.path
        if not bytes_like(shape, dtype):
            raise TypeError(f"array {path!r} of dtype {dtype} and shape {shape} is no binary blob")

    def _blob_task(self, array: ArraySource, state: ArrayState | None) -> tuple[ChunkLayout, ChunkTask] | None:
        self._check_blob(array)
        fast = self._fast(array, Ellipsis, state)
        if isinstance(fast, str):
            return None
        task = self._view_task(array, *fast)
        return None if task is None else (fast[0], task)

    def blob(self, array: ArraySource, *, state: ArrayState | None = None) -> bytes:
        """The bytes of a blob array (0-d fixed bytes, or 1-d uint8): its record itself if
        stored as one raw chunk, one copy otherwise. TypeError for other arrays."""
        found = self._blob_task(array, state)
        if found is not None:
            return found[0].archive.read(found[1].key)
        return self.read(array, state=state).tobytes()

    async def blob_async(self, array: ArraySource, *, state: ArrayState | None = None) -> bytes:
        """:meth:`blob` without blocking the running loop."""
        found = self._blob_task(array, state)
        if found is not None:
            return await found[0].archive.read_async(found[1].key)
        return (await self.read_async(array, state=state)).tobytes()


#: Rows up to this size are read as bytes, which a result views or ``out=`` copies (a copy of
#: a few KB costs less than numcodecs' checks of a destination, ~1.5 us); larger ones are read
#: into the result itself (no second copy, no fresh pages of a new bytes object to fault in).
_SMALL_ROW_BYTES = 16 * 1024


_BYTES = np.dtype(np.uint8)

#: Decoded chunks that a read took part of (see :data:`DECODED_CHUNK_BYTES`), by the id of
#: their array's layout and their key, one bound for the process however many stores are
#: open. An entry refers to its layout weakly: it keeps no archive (and no file) open, and a
#: layout's id reused by another after it is gone finds no entry of its own.
_decoded: LRUCache[tuple[int, str], tuple[weakref.ref[ChunkLayout], NDArray]] = process_cache(
    DECODED_CHUNK_BYTES, weight=lambda entry: entry[1].nbytes
)

#: Selections of a few rows (:meth:`Backend._row_batch`), and the first items of selections
#: of parts of rows (:meth:`Backend._row_part`).
_ROW_BATCHES = frozenset((list, slice, np.ndarray))
_ROW_SELECTIONS = _ROW_BATCHES | {int}


def _taken(whole: NDArray, within: tuple[Any, ...], out: NDArray | None) -> NDArray:
    """``whole[within]`` (a view), or copied into ``out``."""
    values: NDArray = whole[within]
    if out is None:
        return values
    out[...] = values
    return out


def _within_row(selection: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """What a selection whose first item picks one row takes of that row, for numpy to index
    it with: its other items if they are ints, unit-step slices and at most one ``Ellipsis``
    (numpy takes those as zarr-python does: slices clipped, negative ints from the end),
    with ``Ellipsis`` last if it has none (all ints then select a 0-d view, not a scalar);
    None otherwise."""
    rest = selection[1:]
    ellipsis = False
    for item in rest:
        if type(item) is slice:
            if item.step is not None and item.step != 1:
                return None
        elif item is Ellipsis:
            if ellipsis:
                return None
            ellipsis = True
        elif type(item) is not int:  # bools are masks to numpy
            return None
    return rest if ellipsis else (*rest, Ellipsis)


def _bytes_view(array: NDArray) -> memoryview | None:
    """The memory of a C-contiguous array as a flat memoryview of bytes, or None for dtypes
    without a buffer format (e.g. datetimes)."""
    try:
        return array.data.cast("B")
    except (ValueError, TypeError, NotImplementedError):
        return None


def _rebuild_backend(inline_bytes: int, max_bytes_in_flight: int) -> Backend:
    return Backend(inline_bytes=inline_bytes, max_bytes_in_flight=max_bytes_in_flight)
