"""``Array``: an array of a zarr hierarchy, read through the backend."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import closing
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from .. import _compat
from .._defaults import PACKED_BATCH_BYTES
from ..archive import IndexedTarArchive
from ..backend import ArrayState, Backend, is_blob as backend_is_blob
from ..backend._selection import NUMPY_INTEGERS, canonical, expanded, first_axis, is_basic
from ..errors import NcoreLikeError, ReadOnlyError, RecordExistsError
from ..store import IndexedTarZarrStore, Store, is_itar_zarr_store
from ..store._documents import ChunkKeys, blob_layout, codecs_of, describe_codecs, dimension_names_of
from ..store._metadata import ArrayView
from ._compression import BloscCompression
from ._encoding import Record, chunk_grid_shape, encode_chunk, encode_chunk_batches
from ._node import Node
from ._row_writer import RowWriter, row_writer

if TYPE_CHECKING:
    from .._compat import ZarrArray
    from ..archive._writer import PackedRecords

    _ArrayNode = Node[ZarrArray]
else:
    _ArrayNode = Node  # zarr-python's class by name only: imported when a node needs it

__all__ = ["Array", "Selection"]

Selection = Any  # ints, slices, Ellipsis, index lists, masks, tuples of them (as numpy)
NDArray = np.ndarray[Any, Any]


#: Errors of invalid selections (and of data that doesn't fit a write), re-raised with the
#: array and its store named (``a[::0]``: ValueError).
_SELECTION_ERRORS = (IndexError, TypeError, ValueError, OverflowError)
#: A batch of new chunk records goes to the store when it holds this many bytes or records
#: (large records go alone: batching only saves per-record Python work).
_WRITE_BATCH_BYTES = 256 << 10
_WRITE_BATCH_RECORDS = 512
#: Raw bytes of the small chunks packed into one batch of tar members for an archive.
_PACK_BATCH_BYTES = PACKED_BATCH_BYTES


def _fitted(data: npt.ArrayLike, shape: tuple[int, ...], dtype: np.dtype[Any] | None = None) -> NDArray:
    """``data`` broadcast to a selection's ``shape`` as numpy's assignment takes it: leading
    axes of length 1 the selection lacks are dropped (``a[t] = row[None]``), which neither
    ``numpy.broadcast_to`` nor zarr-python 2 does.

    Raises:
        ValueError: For data that doesn't broadcast, with both shapes.
    """
    given = np.asarray(data, dtype=dtype)
    while given.ndim > len(shape) and given.shape[0] == 1:
        given = given[0]
    try:
        return np.broadcast_to(given, shape)
    except ValueError:
        raise ValueError(f"data of shape {np.shape(data)} doesn't broadcast to the selection's shape {shape}") from None


def _named(error: BaseException, where: str) -> BaseException:
    """``error`` as the same class (so callers catch what zarr-python raises) with the array
    and its store named; ``error`` itself if it is the library's own (which names its archive
    already) or its class takes another constructor."""
    if isinstance(error, NcoreLikeError):
        return error
    try:
        return type(error)(f"{where}: {error}")
    except Exception:
        return error


def chunk_key_of(array: Array, coords: tuple[int, ...]) -> str:
    """The store key of the chunk of ``array`` at ``coords``: from the view of its metadata
    where it has one (no zarr-python), else zarr-python's."""
    return array._chunk_key(coords)


def is_blob(array: Array) -> bool:
    """True for binary blobs as :meth:`Group.create_bytes_array` stores them (see
    :func:`ncore_like.backend.is_blob`): from the view of its metadata where it has one (no
    zarr-python)."""
    if array._view is not None and array.archive is not None:
        return array._blob_record_key() is not None
    return backend_is_blob(array.zarr)


class _ChunkWriter(NamedTuple):
    """What encoding a whole chunk of an array takes."""

    dtype: np.dtype[Any]  # with the stored byte order
    chunks: tuple[int, ...]
    compression: BloscCompression | None
    fill_value: Any


def _has_negative_step(selection: Selection) -> bool:
    """True if ``selection`` (any form) has a slice of negative step (a loop: this runs on
    every read of a tuple, ``poses[t, :3]`` included)."""
    if type(selection) is slice:
        return selection.step is not None and selection.step < 0
    if type(selection) is tuple:
        for item in selection:
            if type(item) is slice and item.step is not None and item.step < 0:
                return True
    return False


def _flipped(result: NDArray, axes: set[int], out: NDArray | None) -> NDArray:
    """``result`` reversed along ``axes`` (a view), or copied so into ``out``."""
    flipped = result[tuple(slice(None, None, -1) if axis in axes else slice(None) for axis in range(result.ndim))]
    if out is None:
        return flipped
    out[...] = flipped
    return out


def _negative_steps(selection: Selection, shape: tuple[int, ...]) -> tuple[tuple[Any, ...], set[int]] | None:
    """For basic selections (canonical) with slices of negative step: the same selection with
    positive steps (one item per dimension) and the axes of the result to flip; None otherwise."""
    if not _has_negative_step(selection):
        return None
    items = selection if type(selection) is tuple else (selection,)
    if not all(item is Ellipsis or type(item) in (slice, int) for item in items):
        return None  # read() raises its error
    spelled = expanded(selection, len(shape))
    if spelled is None:
        return None
    positive: list[Any] = []
    flips: set[int] = set()
    axis = 0
    for item, size in zip(spelled, shape, strict=True):
        if not isinstance(item, slice):
            positive.append(item)
            continue
        if item.step is not None and item.step < 0:
            start, stop, step = item.indices(size)
            count = len(range(start, stop, step))
            first = start + (count - 1) * step
            positive.append(slice(first, start + 1, -step) if count else slice(0, 0))
            flips.add(axis)
        else:
            positive.append(item)
        axis += 1
    return tuple(positive), flips


class Array(_ArrayNode):
    """An array of a zarr hierarchy.

    Reads return read-only numpy arrays (complete reads of arrays stored as one
    uncompressed chunk, e.g. encoded images, are views of their record: no copy) or fill
    a caller's buffer (``out=``).
    """

    def __init__(
        self,
        array: _compat.ZarrArray | None,
        backend: Backend | None = None,
        *,
        view: ArrayView | None = None,
        store: Store | None = None,
    ) -> None:
        super().__init__(array, view, store)
        self._backend = backend if backend is not None else Backend()
        # What the backend learnt about this array (shared by the nodes of one view).
        self._state = self._backend.state_of(view) if view is not None else ArrayState()
        self._writer: tuple[_ChunkWriter | None] | None = None  # how chunks are encoded, once known
        self._rows: tuple[RowWriter | None] | None = None  # how single rows are written, once known

    def __getstate__(self) -> dict[str, Any]:
        # The state is a cache of the backend's (and may hold what doesn't pickle).
        return {**self.__dict__, "_state": ArrayState(), "_writer": None, "_rows": None}

    @property
    def view(self) -> ArrayView | None:
        """The view of the array's metadata the fast path reads with (None: zarr-python's
        node serves it)."""
        return self._view  # type: ignore[return-value]

    @property
    def archive(self) -> IndexedTarArchive | None:
        """The archive a view's chunks are in (archives opened for reading)."""
        return self._store.archive if self._view is not None and isinstance(self._store, IndexedTarZarrStore) else None

    @property
    def backend(self) -> Backend:
        """The backend the array reads through (with its :attr:`Backend.stats`)."""
        return self._backend

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the array."""
        view = self._view
        return view.shape if view is not None else tuple(self.zarr.shape)  # type: ignore[union-attr]

    @property
    def dtype(self) -> np.dtype[Any]:
        """dtype of the array."""
        view = self._view
        if view is not None and view.unsupported is None:  # type: ignore[union-attr]
            return view.dtype  # type: ignore[union-attr]
        dtype: np.dtype[Any] = np.dtype(self.zarr.dtype)
        return dtype

    @property
    def chunks(self) -> tuple[int, ...]:
        """Chunk shape of the array."""
        view = self._view
        return view.chunks if view is not None else tuple(self.zarr.chunks)  # type: ignore[union-attr]

    # -- the array protocol: numpy, dask and other array libraries take an Array as it is --

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the values read (elements x item size; not the stored bytes)."""
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-dimensional array")
        return shape[0]

    def __getitem__(self, selection: Selection) -> NDArray:
        """``array[selection]``: :meth:`read`."""
        return self.read(selection)

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> NDArray:
        """The values as a numpy array (``numpy.asarray(array)``), read through the backend.
        They are always read into new memory, so ``copy=False`` raises ValueError, as numpy
        asks of objects that can't hand out a view."""
        if copy is False:
            raise ValueError(f"{self._where()}: copy=False is impossible, the values are read into new memory")
        # Read into new memory already: writeable unless it is a view of a raw record, which a
        # copy asked for (numpy.array) turns into memory of its own.
        values = self._backend.read(self, Ellipsis, None, state=self._state)
        if dtype is not None and np.dtype(dtype) != values.dtype:
            return values.astype(dtype)
        return values.copy() if copy and not values.flags.writeable else values

    def to_dask(self, chunks: Any = None) -> Any:
        """The array as a dask array (``dask[array]`` installed): each task reads its block
        through the array's fast backend, in whichever process or cluster worker runs it
        (the array pickles by location and index: workers open the archive themselves, with
        no I/O until they read). ``chunks``: dask's chunks (default: the array's own, one
        task per stored chunk)."""
        import dask.array as da

        return da.from_array(  # type: ignore[no-untyped-call]
            self,
            chunks=self.chunks if chunks is None else chunks,
            lock=False,  # reads of an archive need no lock
            asarray=False,  # the blocks are numpy arrays already
            meta=np.empty((0,) * self.ndim, dtype=self.dtype),
            name=f"ncore-like-{self._where_store()}-{self.path}",
        )

    @property
    def compression(self) -> BloscCompression | None:
        """The Blosc compression of the chunks (None if uncompressed; ValueError for other
        compressors or filters, whose chain :attr:`codecs` lists)."""
        compressor = _compat.blosc_compressor(self.zarr)
        if compressor == "other":
            raise ValueError(
                f"array {self.path!r} uses codecs other than one Blosc compressor ({describe_codecs(self.codecs)}); "
                "Array.codecs lists them"
            )
        if compressor is None:
            return None
        return BloscCompression.from_numcodecs(compressor)

    def _document(self) -> Mapping[str, Any]:
        """The metadata document (v2: ``.zarray`` plus ``"attributes"``; v3: ``zarr.json``)."""
        view = self._view
        return view.document if view is not None else _compat.array_document(self.zarr)

    def _zarr_format(self) -> Literal[2, 3]:
        view = self._view
        return view.zarr_format if view is not None else _compat.array_zarr_format(self.zarr)

    @property
    def codecs(self) -> tuple[dict[str, Any], ...]:
        """The codec chain of the chunks as the node metadata stores it, in encoding order:
        zarr format 3's ``codecs`` (``{"name": ..., "configuration": {...}}``, e.g. ``bytes``,
        ``zstd``, ``crc32c``, ``vlen-bytes``), zarr format 2's ``filters`` then ``compressor``
        (numcodecs' configurations, ``{"id": ..., ...}``); empty for raw format 2 chunks. What
        :attr:`compression` can't express (it raises ValueError) is listed here."""
        return codecs_of(self._document(), self._zarr_format())

    @property
    def dimension_names(self) -> tuple[str | None, ...] | None:
        """The names of the dimensions: zarr format 3's ``dimension_names`` (None for unnamed
        ones); in zarr format 2, which has none, xarray's ``_ARRAY_DIMENSIONS`` attribute.
        None if the array has no names."""
        return dimension_names_of(self._document(), self._zarr_format())

    @property
    def fill_value(self) -> Any:
        """The fill value of the node metadata (what chunks never written read as), a numpy
        scalar of the dtype; None for zarr format 2's ``null`` (zarr-python then reads zeros)."""
        view = self._view
        if isinstance(view, ArrayView) and view.unsupported is None:
            return None if view.document.get("fill_value") is None else view.fill_value
        return self.zarr.fill_value

    # -- reading -------------------------------------------------------------------------

    def _checked_out(self, out: NDArray, shape: tuple[int, ...]) -> None:
        if not isinstance(out, np.ndarray):
            raise ValueError(f"out for array {self.path!r} must be a numpy array, got {type(out).__name__}")
        flags, dtype = out.flags, self.dtype
        if out.dtype == dtype and out.shape == shape and flags.c_contiguous and flags.writeable:
            return  # the common case, checked at the cost of one flags object
        problems = []
        if out.dtype != self.dtype:
            problems.append(f"dtype {out.dtype} (expected {self.dtype})")
        if out.shape != shape:
            problems.append(f"shape {out.shape} (expected {shape})")
        if not out.flags.c_contiguous:
            problems.append("not C-contiguous")
        if not out.flags.writeable:
            problems.append("not writeable")
        if problems:
            raise ValueError(f"out for array {self.path!r}: {', '.join(problems)}")

    def _where(self) -> str:
        return f"array {self.path!r} of {self._where_store()}"

    def _shape_of(self, selection: Selection) -> tuple[int, ...]:
        try:
            return self._backend.shape(self, selection, state=self._state)
        except _SELECTION_ERRORS as error:
            named = _named(error, self._where())
            if named is error:
                raise
            raise named from error

    @staticmethod
    def _finish(result: NDArray, out: NDArray | None) -> NDArray:
        if out is not None:
            return out
        result.setflags(write=False)  # cheaper than reading the flags first
        return result

    def read(self, selection: Selection = Ellipsis, *, out: NDArray | None = None) -> NDArray:
        """Reads (a selection of) the array.

        Returns a read-only array of the selection's shape (0-dimensional for single
        elements). With ``out`` (a writeable, C-contiguous array of the array's dtype and the
        selection's shape, checked before reading) the values land in ``out``, which is
        returned itself (still writeable, of its own type, e.g. ``numpy.memmap``).
        """
        # The commonest small read first: one row of an array chunked by rows, straight to the
        # backend's row reader once it has one (it checks ``out`` and the bounds itself and
        # leaves anything else, errors included, to the general path below).
        if type(selection) is not int:
            # numpy's integers as ints in one step (a call less than canonical's: ~0.1 us)
            selection = int(selection) if type(selection) in NUMPY_INTEGERS else canonical(selection)
            if type(selection) is tuple:  # a[i, :] and a[i, ...] are rows too, a[rows, :] rows
                selection = first_axis(selection, self.ndim)
        reader = self._state.row_reader
        if reader is not None and type(selection) is int:
            row = reader(selection, out)
            if row is not None:
                return row  # read-only unless it is out
        elif _has_negative_step(selection):
            flips = self._flips(selection, out)
            if flips is not None:
                return _flipped(self.read(flips[0]), flips[1], out)
        # The error handling is written out: a context manager costs a noticeable share of
        # a one-chunk read.
        if out is not None:
            self._checked_out(out, self._shape_of(selection))
        try:
            result = self._backend.read(self, selection, out, state=self._state)
        except _SELECTION_ERRORS as error:
            named = _named(error, self._where())
            if named is error:
                raise
            raise named from error
        return self._finish(result, out)

    def _flips(self, selection: Selection, out: NDArray | None) -> tuple[tuple[Any, ...], set[int]] | None:
        """For a basic selection (canonical) with slices of negative step, read as numpy
        reads it: the same range with positive steps and the axes of its result to flip
        (:func:`_flipped`), ``out`` checked first; None for other selections (the general
        path raises their errors)."""
        flips = _negative_steps(selection, self.shape)
        if flips is not None and out is not None:
            self._checked_out(out, self._shape_of(flips[0]))
        return flips

    async def read_async(self, selection: Selection = Ellipsis, *, out: NDArray | None = None) -> NDArray:
        """:meth:`read` without blocking the running event loop; concurrent reads (e.g. with
        ``asyncio.gather``) overlap their I/O and decoding."""
        if _has_negative_step(selection):
            flips = self._flips(canonical(selection), out)
            if flips is not None:
                return _flipped(await self.read_async(flips[0]), flips[1], out)
        if out is not None:
            self._checked_out(out, self._shape_of(selection))
        try:
            result = await self._backend.read_async(self, selection, out, state=self._state)
        except _SELECTION_ERRORS as error:
            named = _named(error, self._where())
            if named is error:
                raise
            raise named from error
        return self._finish(result, out)

    def read_bytes(self) -> bytes:
        """The blob stored by :meth:`Group.create_bytes_array`: its record itself when stored
        as one uncompressed chunk, one copy otherwise. TypeError for arrays that are no blob."""
        return self._backend.blob(self, state=self._state)

    async def read_bytes_async(self) -> bytes:
        """:meth:`read_bytes` without blocking the running event loop."""
        return await self._backend.blob_async(self, state=self._state)

    # -- writing -------------------------------------------------------------------------

    def write(self, selection: Selection, data: npt.ArrayLike) -> None:
        """Writes ``data`` to a basic selection (ints, unit-step slices, Ellipsis).

        Every touched chunk is stored (also chunks equal to the fill value); partially
        selected chunks are completed with the current values (the fill value if not written
        yet), as zarr-python does. Archive records are write-once: in an archive, write each
        chunk once, i.e. whole chunks or chunk-aligned blocks; chunks written already are
        detected before anything is written. Other stores (memory, directories...) rewrite
        chunks. A write of several chunks that fails otherwise (e.g. a full disk) may leave
        other chunks of the selection stored.

        Raises:
            RecordExistsError: For chunks of an archive written already (a ValueError).
            ValueError: For other selections, data that doesn't broadcast to the selection,
                and arrays of stores opened for reading (checked before anything is
                written); like the IndexError of an index out of bounds and the TypeError
                of data of another kind, it names the array and its store.
        """
        try:
            self._write(selection, data)
        except _SELECTION_ERRORS as error:
            named = _named(error, self._where())
            if named is error:
                raise
            raise named from error

    def _write(self, selection: Selection, data: npt.ArrayLike) -> None:
        if self.read_only:
            raise ReadOnlyError(f"{self._where()}: store is opened for reading, can't write")
        # One row, or a short window of rows, of an array chunked by rows first, as reads
        # take them (the same index forms).
        rows = self._row_writes()
        if rows is not None:
            index = selection
            if type(index) is not int:
                index = int(index) if type(index) in NUMPY_INTEGERS else canonical(index)
                if type(index) is tuple:
                    index = first_axis(index, self.ndim)
            if type(index) in (int, slice) and rows(index, data):
                return
        selection = canonical(selection)
        if not is_basic(selection):
            raise ValueError(f"writes take basic selections (ints, unit-step slices, Ellipsis), got {selection!r}")
        blocks = self._whole_chunks(selection)
        if blocks is not None:
            self._write_whole_chunks(blocks, data)
            return
        # Chunks of an archive written already are found before anything is written, so a
        # rejected write changes nothing (zarr-python writes the chunks of a selection
        # concurrently).
        # numpy's cast (Python ints out of the dtype's range raise, as in an assignment,
        # instead of wrapping in zarr-python) and shapes; the shape's errors are named by write()
        values = _fitted(data, self._backend.shape(self, selection, state=self._state), self.dtype)
        if self._write_once():
            self._refuse_written(self.zarr.store, _compat.touched_chunk_keys(self.zarr, selection))
        _compat.write_basic_selection(self.zarr, selection, values)

    def _write_once(self) -> bool:
        """True if the array's records can't be rewritten (archives)."""
        return is_itar_zarr_store(self._record_store())

    def _blob_record_key(self) -> str | None:
        """The key of the record that is this blob (stored by :meth:`Group.create_bytes_array`:
        one raw chunk) in an archive opened for reading, None for other arrays and stores."""
        view = self._view
        if not isinstance(view, ArrayView) or self.archive is None or view.unsupported is not None:
            return None
        dtype = view.dtype
        if not blob_layout(
            view.zarr_format, view.shape, view.chunks, view.blosc is not None, dtype.kind, dtype.itemsize
        ):
            return None
        return view.chunk_key(tuple(0 for _ in view.shape))

    # -- writing records -----------------------------------------------------------------

    def _record_store(self) -> _compat.ZarrStore:
        """The zarr-python store the array's records are written to."""
        return self._store.zarr if self._store is not None else self.zarr.store

    def _chunk_key(self, coords: tuple[int, ...]) -> str:
        view = self._view
        return view.chunk_key(coords) if view is not None else _compat.chunk_key(self.zarr, coords)  # type: ignore[union-attr]

    def _write_new_chunks(
        self,
        values: NDArray,
        chunks: tuple[int, ...],
        fill_value: Any,
        compression: BloscCompression | None,
        origin: tuple[int, ...] | None = None,
    ) -> None:
        """Stores the chunk records of ``values`` as they are encoded (records of
        uncompressed chunks straight from ``values``: they are written before this
        returns): a new array's, or (``origin``: the chunk coordinates of the first) a
        block of whole chunks whose records don't exist yet. Small chunks go in batches;
        into an archive, each batch is laid out as its tar members by the thread that
        encoded it (see :func:`pack_records`), so that writing it takes a few calls, not a
        dozen per record."""
        store = self._record_store()
        origin = origin if origin is not None else (0,) * values.ndim
        if values.shape == chunks:  # one whole chunk (a frame, an image): no batches to plan
            record = encode_chunk(values, chunks, fill_value, compression, copy=False)
            _compat.write_record(store, self._chunk_key(origin), record)
            return
        chunk_bytes = math.prod(chunks) * values.dtype.itemsize
        if is_itar_zarr_store(store) and chunk_bytes < _WRITE_BATCH_BYTES:
            from ..archive._writer import pack_records  # writers only

            checksums = store.archive.has_checksums
            keys = self._batch_keys(values.shape, chunks, origin)

            def pack(coords: list[tuple[int, ...]], records: list[Record]) -> PackedRecords:
                return pack_records(keys(coords), records, checksums=checksums)

            batches = encode_chunk_batches(
                values, chunks, fill_value, compression, pack, copy=False, batch_bytes=_PACK_BATCH_BYTES
            )
            with closing(batches):  # a failed write cancels the batches not started
                for packed in batches:
                    _compat.write_records(store, packed)
            return
        keys = self._batch_keys(values.shape, chunks, origin)
        checksummed = is_itar_zarr_store(store) and store.archive.has_checksums
        from ..archive._writer import ChecksummedRecords, checksummed_records  # writers only

        def finish(coords: list[tuple[int, ...]], records: list[Record]) -> Sequence[tuple[str, Record]]:
            # On the thread that encoded the records: their checksums cost ~7 x less while its
            # cache holds them than on the writing thread (a 268 MB volume: ~10 ms of ~120).
            if checksummed:
                return checksummed_records(keys(coords), records)
            return list(zip(keys(coords), records, strict=True))

        def write(pending: list[Sequence[tuple[str, Record]]]) -> None:
            if len(pending) == 1:
                _compat.write_records(store, pending[0])
            elif checksummed:
                _compat.write_records(store, ChecksummedRecords.joined(pending))  # type: ignore[arg-type]
            else:
                _compat.write_records(store, [item for batch in pending for item in batch])

        # Large compressed chunks are made in memory used again once a record is let go of
        # (reused): this project's stores are done with a record's bytes when its write
        # returns, and other stores get a copy (see _compat.write_record), as for the views
        # of uncompressed values above.
        encoded = encode_chunk_batches(values, chunks, fill_value, compression, finish, copy=False, reused=True)
        pending: list[Sequence[tuple[str, Record]]] = []
        size = count = 0
        with closing(encoded):  # a failed write cancels the chunks not started
            for batch in encoded:
                pending.append(batch)
                size += sum(len(record) for _, record in batch)
                count += len(batch)
                if size >= _WRITE_BATCH_BYTES or count >= _WRITE_BATCH_RECORDS:
                    write(pending)
                    pending, size, count = [], 0, 0
        if pending:
            write(pending)

    def _batch_keys(
        self, shape: tuple[int, ...], chunks: tuple[int, ...], origin: tuple[int, ...]
    ) -> Callable[[list[tuple[int, ...]]], list[str]]:
        """The keys of a batch of chunks in C order of a block of ``shape`` whose first chunk
        is at ``origin``: where the block is one chunk across every dimension but the first,
        at the first chunk of each, a run of first-axis indices (~4x faster than a key made
        from each chunk's coordinates)."""
        view = self._view
        chunk_key = view.chunk_key if isinstance(view, ArrayView) else None
        if (
            isinstance(chunk_key, ChunkKeys)
            and shape
            and not any(origin[1:])
            and all(size <= chunk for size, chunk in zip(shape[1:], chunks[1:], strict=True))
        ):
            row_key, first = chunk_key.first_axis(len(shape)), origin[0]
            return lambda coords: list(map(row_key, range(first + coords[0][0], first + coords[-1][0] + 1)))
        key = self._chunk_key
        if not any(origin):
            return lambda coords: list(map(key, coords))
        return lambda coords: [key(tuple(map(sum, zip(origin, each, strict=True)))) for each in coords]

    def _write_chunk_records(self, records: Sequence[tuple[tuple[int, ...], bytes | memoryview]]) -> None:
        """Stores chunk records; in an archive, chunks written already are found before
        anything is written, so a rejected write changes nothing."""
        store = self._record_store()
        keys = [self._chunk_key(coords) for coords, _ in records]
        if self._write_once():
            self._refuse_written(store, keys)
        _compat.write_records(store, [(key, record) for key, (_, record) in zip(keys, records, strict=True)])

    def _refuse_written(self, store: _compat.ZarrStore, keys: Iterable[str]) -> None:
        """Raises RecordExistsError for the first of ``keys`` the archive holds already:
        archive records are write-once, and checking before anything is written makes a
        rejected write change nothing."""
        for key in keys:
            if _compat.record_exists(store, key):
                raise RecordExistsError(key, f"{self._where()}: chunk record {key!r} exists already")

    def _chunk_writer(self) -> _ChunkWriter | None:
        """How whole chunks of this array are encoded, None if zarr-python must do it (codecs
        other than one Blosc compressor, filters, Fortran order...); memoised."""
        if self._writer is None:
            self._writer = (self._find_chunk_writer(),)
        return self._writer[0]

    def _row_writes(self) -> RowWriter | None:
        """The writer of single rows (see :mod:`._row_writer`) of an archive's array chunked
        by rows, None for other arrays; memoised."""
        if self._rows is None:
            self._rows = (self._find_row_writer(),)
        return self._rows[0]

    def _find_row_writer(self) -> RowWriter | None:
        view, writer, store = self._view, self._chunk_writer(), self._record_store()
        if not isinstance(view, ArrayView) or writer is None or not is_itar_zarr_store(store):
            return None
        chunk_key = view.chunk_key
        if not isinstance(chunk_key, ChunkKeys):
            return None
        return row_writer(
            shape=view.shape,
            chunks=writer.chunks,
            dtype=writer.dtype,
            compression=writer.compression,
            row_key=chunk_key.first_axis(len(view.shape)),
            contains=store.exists_sync,
            store=store.set_bytes_sync,
            where=self._where(),
        )

    def _find_chunk_writer(self) -> _ChunkWriter | None:
        view = self._view
        try:
            if isinstance(view, ArrayView) and view.unsupported is None and view.fill_value is not None:
                blosc = view.blosc
                compression = None if blosc is None else BloscCompression.from_config(blosc)
                return _ChunkWriter(view.stored_dtype, view.chunks, compression, view.fill_value)
            layout = _compat.raw_chunk_layout(self.zarr)
            compressor = _compat.blosc_compressor(self.zarr)
            fill = self.zarr.fill_value
            if isinstance(layout, str) or compressor == "other" or fill is None:
                return None
            compression = None if compressor is None else BloscCompression.from_numcodecs(compressor)
            return _ChunkWriter(layout[0], layout[1], compression, fill)
        except ValueError:  # e.g. Blosc with automatic shuffle: zarr-python writes those
            return None

    def _whole_chunks(self, selection: Selection) -> tuple[tuple[slice, ...], tuple[int, ...]] | None:
        """For selections made of whole chunks (the part of edge chunks inside the array
        counts as whole): the region selected and the shape the data must broadcast to
        (without the dimensions selected by an int). None otherwise."""
        writer = self._chunk_writer()
        if writer is None:
            return None
        shape, chunks = self.shape, writer.chunks
        items = expanded(selection, len(shape))
        if items is None:
            return None  # zarr-python's error
        region: list[slice] = []
        data_shape: list[int] = []
        for item, size, chunk in zip(items, shape, chunks, strict=True):
            if isinstance(item, slice):
                start, stop, _ = item.indices(size)
                data_shape.append(max(0, stop - start))
            else:
                index = int(item)
                start = index + size if index < 0 else index
                if not 0 <= start < size:
                    return None  # out of bounds: zarr-python's error
                stop = start + 1
            if start >= stop or start % chunk or (stop % chunk and stop != size):
                return None
            region.append(slice(start, stop))
        return tuple(region), tuple(data_shape)

    def _write_whole_chunks(self, blocks: tuple[tuple[slice, ...], tuple[int, ...]], data: npt.ArrayLike) -> None:
        """Encodes and stores the chunks of a whole-chunk selection directly (what zarr-python
        would store, without its per-call machinery)."""
        writer = self._chunk_writer()
        assert writer is not None
        region, data_shape = blocks
        block_shape = tuple(item.stop - item.start for item in region)
        values = _fitted(data, data_shape, writer.dtype).reshape(block_shape)
        origin = tuple(item.start // chunk for item, chunk in zip(region, writer.chunks, strict=True))
        if self._write_once():
            grid = chunk_grid_shape(block_shape, writer.chunks)
            keys = self._batch_keys(block_shape, writer.chunks, origin)(list(itertools.product(*map(range, grid))))
            self._refuse_written(self._record_store(), keys)
        # Encoded as a new array's chunks are (batches on the worker pool, packed records).
        self._write_new_chunks(values, writer.chunks, writer.fill_value, writer.compression, origin)
