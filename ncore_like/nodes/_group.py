"""``Group``: a group of a zarr hierarchy, with the typed API to create and open members."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import closing
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from .. import _compat
from ..archive import scan_records
from ..backend import Backend, is_blob
from ..errors import ReadOnlyError
from ..store._documents import XARRAY_DIMENSIONS, GroupView
from ..store._metadata import ArrayView, parse_node, reshaped_view
from ._array import Array, _named
from ._attributes import json_attributes
from ._cache import NodeCache
from ._compression import BloscCompression
from ._encoding import (
    DEFAULT_COMPRESSION,
    ChunksLike,
    EncodedArray,
    default_fill_value,
    prepare_values,
    resolve_chunks,
    storage_dtype,
)
from ._node import Attributes, Node

if TYPE_CHECKING:
    from .._compat import ZarrGroup

    _GroupNode = Node[ZarrGroup]
else:
    _GroupNode = Node  # zarr-python's class by name only: imported when a node needs it

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["Group"]


class Group(_GroupNode):
    """A group of a zarr hierarchy.

    Members are opened through the group's :class:`NodeCache` if it has one (see
    :meth:`with_cache`); member groups share the cache. Arrays read through the group's
    :attr:`backend`, which member groups share too.
    """

    def __init__(
        self,
        group: _compat.ZarrGroup | None,
        cache: NodeCache | None = None,
        store: Store | None = None,
        backend: Backend | None = None,
        *,
        view: GroupView | None = None,
    ) -> None:
        super().__init__(group, view, store)
        if cache is not None:
            # One hierarchy, one zarr store: archive stores compare equal by location, so
            # another opening of the same archive shares the cache too.
            cache.bind(self.zarr.store if group is not None or store is None else store.zarr)
        self._cache = cache
        self._backend = backend if backend is not None else Backend()
        # Members are looked up as views when the store serves them (archives opened for
        # reading): no zarr-python node is built for a lookup.
        self._views = store is not None and store.serves_views
        # The view of the last array created here: the next one's is made from it when only
        # the shape, chunk shape and attributes differ (see reshaped_view).
        self._last_array: ArrayView | None = None

    @property
    def store(self) -> Store | None:
        """The store of the group (None for groups not opened or created through a Store)."""
        return self._store

    @property
    def backend(self) -> Backend:
        """The backend the group's arrays read through (with its :attr:`Backend.stats`)."""
        return self._backend

    @property
    def cache(self) -> NodeCache | None:
        """The node cache used to open members (None if not cached)."""
        return self._cache

    @property
    def zarr_format(self) -> Literal[2, 3]:
        """zarr format of the hierarchy."""
        if self._view is not None:
            return self._view.zarr_format
        return _compat.array_zarr_format(self.zarr)

    def with_cache(self, cache: NodeCache | None) -> Group:
        """The group, opening its members through ``cache``."""
        return Group(self._node, cache, self._store, self._backend, view=self._view)  # type: ignore[arg-type]

    # -- opening members -----------------------------------------------------------------

    def _wrap(self, node: _compat.ZarrNode) -> Group | Array:
        if _compat.is_group(node):
            return Group(node, self._cache, self._store, self._backend)  # type: ignore[arg-type]
        return Array(node, self._backend, store=self._store)  # type: ignore[arg-type]

    def _open(self, path: str) -> Group | Array | None:
        if self._views:
            assert self._store is not None
            full = f"{self.path}/{path}" if self.path else path
            view = self._store.node_view(full, self.zarr_format)
            if view is None:
                return None
            if isinstance(view, ArrayView):
                return Array(None, self._backend, view=view, store=self._store)
            return Group(None, self._cache, self._store, self._backend, view=view)
        node = _compat.open_member(self.zarr, path)
        return None if node is None else self._wrap(node)

    def get(self, path: str) -> Group | Array | None:
        """The (nested) member group or array at ``path``, None if there is none."""
        path = path.strip("/")
        if not path:
            return self
        if self._cache is None:
            return self._open(path)
        full = f"{self.path}/{path}" if self.path else path
        member: Group | Array | None = self._cache.get(full, lambda: self._open(path))
        return member

    def _missing(self, path: str, what: str) -> KeyError:
        where = self._store.name if self._store is not None else repr(self.zarr.store)
        return KeyError(f"no {what} {path!r} in group {self.path or '/'} of {where}")

    def node(self, path: str) -> Group | Array:
        """The (nested) member at ``path`` (KeyError if there is none)."""
        member = self.get(path)
        if member is None:
            raise self._missing(path, "member")
        return member

    def group(self, path: str) -> Group:
        """The (nested) member group at ``path`` (KeyError if missing or not a group)."""
        member = self.get(path)
        if not isinstance(member, Group):
            raise self._missing(path, "group")
        return member

    def array(self, path: str) -> Array:
        """The (nested) member array at ``path`` (KeyError if missing or not an array)."""
        member = self.get(path)
        if not isinstance(member, Array):
            raise self._missing(path, "array")
        return member

    def members(self) -> list[str]:
        """Names of all direct members (sorted)."""
        if self._views:
            assert self._store is not None
            names = self._store.child_names(self.path, self.zarr_format)
            if names is not None:
                return names
        return sorted(_compat.member_names(self.zarr))

    def keys(self) -> list[str]:
        """Names of all direct members, see :meth:`members`."""
        return self.members()

    def items(self) -> Iterator[tuple[str, Group | Array]]:
        """The direct members with their names (sorted by name, opened while iterating)."""
        if self._views:
            for name in self.members():
                found = self.get(name)
                if found is not None:
                    yield name, found
            return
        for name, node in sorted(_compat.member_nodes(self.zarr), key=lambda item: item[0]):
            if self._cache is None:
                yield name, self._wrap(node)
            else:
                full = f"{self.path}/{name}" if self.path else name
                member: Group | Array | None = self._cache.get(full, partial(self._wrap, node))
                assert member is not None
                yield name, member

    def groups(self) -> Iterator[tuple[str, Group]]:
        """The direct member groups with their names (sorted by name)."""
        for name, member in self.items():
            if isinstance(member, Group):
                yield name, member

    def blobs(self) -> Iterator[tuple[str, bytes]]:
        """The blobs among the direct members (stored by :meth:`create_bytes_array`, e.g.
        the encoded frames of a camera), by name, with their bytes. In an archive opened for
        reading they are read as a sequential scan (:func:`~ncore_like.archive.scan_records`):
        blobs next to each other in the file come in one request, far faster than one read
        each from object storage."""
        arrays = [(name, member) for name, member in self.items() if isinstance(member, Array)]
        archive = arrays[0][1].archive if arrays else None
        if archive is None:
            for name, array in arrays:  # other stores: one read each
                if is_blob(array.zarr):
                    yield name, array.read_bytes()
            return
        # In an archive opened for reading, a blob is a member whose metadata says it is one
        # raw record (the others have no blob record key).
        order = [(name, key) for name, key in ((name, array._blob_record_key()) for name, array in arrays) if key]
        with closing(scan_records(archive, [key for _, key in order if key in archive])) as scan:
            for name, key in order:
                # Handed out as they arrive; an empty blob has no record.
                yield name, next(scan)[1] if key in archive else b""

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and self.get(path) is not None

    # -- creating members ----------------------------------------------------------------

    def _check_writable(self) -> None:
        if self.read_only:
            where = self._store.name if self._store is not None else repr(self.zarr.store)
            raise ReadOnlyError("store is opened for reading, can't create members", archive=where)

    def create_group(self, name: str, *, attributes: Attributes | None = None) -> Group:
        """Creates a member group (an error if a member of that name exists); a nested name
        (``"a/b"``) also creates the groups in between."""
        self._check_writable()
        # Checked before the groups in between are created: a refused call creates nothing.
        self._check_new_name("group", name)
        attrs = json_attributes(attributes, self._member_where("group", name))
        parent_path, _, leaf = name.strip("/").rpartition("/")
        parent = self._required_path(parent_path)
        created = _compat.create_subgroup(parent.zarr, leaf, attrs)
        return Group(created, self._cache, self._store, self._backend)

    def _required_path(self, path: str) -> Group:
        """The group at ``path`` under this one, creating missing groups one level at a time
        (so the records are written in the same order under every zarr-python version)."""
        group = self
        for part in path.split("/") if path else ():
            group = group.require_group(part)
        return group

    def require_group(self, name: str) -> Group:
        """The member group ``name``, created if it doesn't exist yet."""
        member = self.get(name)
        if isinstance(member, Group):
            return member
        if member is not None:
            raise TypeError(f"member {name!r} of group {self.path or '/'} is an array, not a group")
        return self.create_group(name)

    def create_array(
        self,
        name: str,
        data: npt.ArrayLike,
        *,
        dtype: npt.DTypeLike | None = None,
        chunks: ChunksLike = "single",
        compression: BloscCompression | None = DEFAULT_COMPRESSION,
        attributes: Attributes | None = None,
        dimension_names: Sequence[str | None] | None = None,
    ) -> Array:
        """Creates a member array holding ``data``.

        Args:
            name: Name of the array in the group.
            data: The values (their shape is the array's, their dtype too unless ``dtype``).
            dtype: dtype to convert the values to.
            chunks: Chunk shape; ``"single"`` (one chunk, default) or ``"auto"`` (zarr-python's
                heuristic). Zero sizes are clamped to 1.
            compression: Blosc compression (default lz4, level 5, bit-shuffle), or None.
            attributes: Attributes of the array.
            dimension_names: A name per dimension (see :attr:`Array.dimension_names`): zarr
                format 3's ``dimension_names`` (None for an unnamed one); in format 2, xarray's
                ``_ARRAY_DIMENSIONS`` attribute (strings only), as xarray writes them.

        The array's node metadata is stored first, then its chunks as they are encoded. A
        call that fails while writing them (a full disk, an error of an encoding thread,
        Ctrl-C) leaves the array in the store with the chunks written so far: the others
        read as the fill value, and the name is taken. A store is write-once: write the
        hierarchy again (or into a new archive) rather than carry on after such an error.
        """
        self._check_writable()
        self._check_new_name("array", name)
        try:
            values, resolved = prepare_values(data, dtype, chunks, self.zarr_format)
        except (TypeError, ValueError) as error:  # data numpy can't make an array of, chunks
            named = _named(error, self._member_where("array", name))
            if named is error:
                raise
            raise named from error
        fill_value = default_fill_value(values.dtype)
        array = self._new_array(
            name, tuple(values.shape), values.dtype, resolved, compression, fill_value, attributes, dimension_names
        )
        # Chunks are written as they are encoded (on the worker pool when compressed), and
        # uncompressed ones straight from ``values``: the records are written before this
        # returns, so no copy is needed.
        array._write_new_chunks(values, resolved, fill_value, compression)
        return array

    def _new_array(
        self,
        name: str,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        chunks: tuple[int, ...],
        compression: BloscCompression | None,
        fill_value: Any,
        attributes: Attributes | None,
        dimension_names: Sequence[str | None] | None = None,
    ) -> Array:
        """Writes the node metadata of a new member array and returns it: as a view of the
        metadata written when the group belongs to a store (zarr-python's array is built only
        if something needs it), else wrapping zarr-python's array."""
        # Checked before the groups in between are created: a refused call creates nothing.
        self._check_new_name("array", name)
        where = self._member_where("array", name)
        if compression is not None and not isinstance(compression, BloscCompression):
            raise TypeError(f"{where}: compression must be a BloscCompression or None, got {compression!r}")
        attrs = json_attributes(attributes, where) or None
        parent_path, _, leaf = name.strip("/").rpartition("/")
        if parent_path:
            parent = self._required_path(parent_path)
            return parent._new_array(leaf, shape, dtype, chunks, compression, fill_value, attrs, dimension_names)
        blosc = compression.to_numcodecs() if compression is not None else None
        names = self._checked_dimension_names(name, dimension_names, len(shape))
        if names is not None and self.zarr_format == 2:
            attrs, names = {**(attrs or {}), XARRAY_DIMENSIONS: list(names)}, None
        path, document = _compat.write_array_metadata(
            self.zarr, name, shape=shape, dtype=dtype, chunks=chunks, blosc=blosc, fill_value=fill_value,
            attributes=attrs, dimension_names=names,
        )  # fmt: skip
        if self._store is None:
            return Array(_compat.array_from_document(self.zarr.store, path, document), self._backend)
        last = self._last_array
        view = reshaped_view(last, path, document, self._store.name) if last is not None else None
        if view is None:
            parsed = parse_node(path, document, self.zarr_format, self._store.name)
            assert isinstance(parsed, ArrayView)  # an array's document
            view = parsed
        self._last_array = view
        return Array(None, self._backend, view=view, store=self._store)

    def _check_new_name(self, kind: str, name: object) -> None:
        """Raises for a name no member can have: not a string (TypeError), empty, with
        empty, ``.`` or ``..`` parts, a backslash (which zarr-python reads as ``/``) or a
        NUL (ValueError). Nested names (``"a/b"``) and leading or trailing ``/`` are fine."""
        if not isinstance(name, str):
            raise TypeError(
                f"{kind} names are strings, got {type(name).__name__} {name!r} "
                f"(in group {self.path or '/'} of {self._where_store()})"
            )
        parts = name.strip("/").split("/")
        if any(part in ("", ".", "..") for part in parts) or "\\" in name or "\0" in name:
            raise ValueError(
                f"{self._member_where(kind, name)}: no member can have this name (empty, '.' or '..' parts, "
                "a backslash or a NUL)"
            )

    def _member_where(self, kind: str, name: str) -> str:
        """How errors name this group's member ``name`` (a nested name too), e.g. ``array
        'seq/x' of /data/drive.itar``."""
        path = f"{self.path}/{name.strip('/')}" if self.path else name.strip("/")
        return f"{kind} {path!r} of {self._where_store()}"

    def _checked_dimension_names(
        self, name: str, names: Sequence[str | None] | None, ndim: int
    ) -> tuple[str | None, ...] | None:
        if names is None:
            return None
        checked = tuple(names) if not isinstance(names, str) else ()
        allowed: tuple[type, ...] = (str,) if self.zarr_format == 2 else (str, type(None))
        if len(checked) != ndim or not all(isinstance(item, allowed) for item in checked):
            what = "a string" if self.zarr_format == 2 else "a string or None"
            raise ValueError(
                f"array {name!r} of group {self.path or '/'}: dimension_names must hold {what} per dimension "
                f"({ndim}), got {names!r}"
            )
        return checked

    def create_encoded_array(
        self,
        name: str,
        encoded: EncodedArray,
        *,
        attributes: Attributes | None = None,
        dimension_names: Sequence[str | None] | None = None,
    ) -> Array:
        """Creates a member array from chunks encoded by :meth:`EncodedArray.encode` (e.g. on
        worker threads), with attributes and dimension names as :meth:`create_array` takes
        them. The encoded array is validated before anything is written.

        Raises:
            ValueError: For stores opened for reading, encoded arrays of another zarr format,
                chunk shapes that don't match the shape, records outside the chunk grid.
            RecordExistsError: For chunks written already (archives; a ValueError).
        """
        self._check_writable()
        where = f"array {name!r} of group {self.path or '/'}"
        encoded.validate(self.zarr_format, where)
        array = self._new_array(
            name, encoded.shape, encoded.dtype, encoded.chunks, encoded.compression, encoded.fill_value, attributes,
            dimension_names,
        )  # fmt: skip
        array._write_chunk_records(sorted(encoded.chunk_records.items()))
        return array

    def create_bytes_array(self, name: str, data: bytes, *, attributes: Attributes | None = None) -> Array:
        """Stores a binary blob (e.g. an encoded image) as an uncompressed array: zarr format 2,
        0-dimensional fixed-length bytes (``|S<N>``, nvidia-ncore's layout); format 3,
        1-dimensional ``uint8`` (fixed-length bytes aren't part of zarr format 3)."""
        self._check_writable()
        self._check_new_name("array", name)
        if isinstance(data, str) or not isinstance(data, (bytes, bytearray, memoryview, np.ndarray)):
            raise TypeError(
                f"{self._member_where('array', name)}: a blob is bytes (or a buffer), got {type(data).__name__}"
                + (" (encode text first, e.g. text.encode())" if isinstance(data, str) else "")
            )
        blob = bytes(data)
        if self.zarr_format == 2:
            if not blob:
                raise ValueError(f"{self._member_where('array', name)}: zarr format 2 can't store an empty blob (|S0)")
            dtype = np.dtype(f"S{len(blob)}")
            encoded = EncodedArray((), dtype, (), None, 2, default_fill_value(dtype), {(): blob})
        else:
            dtype = np.dtype(np.uint8)
            records: dict[tuple[int, ...], bytes] = {(0,): blob} if blob else {}
            encoded = EncodedArray((len(blob),), dtype, (max(1, len(blob)),), None, 3, dtype.type(0), records)
        return self.create_encoded_array(name, encoded, attributes=attributes)

    def create_empty_array(
        self,
        name: str,
        *,
        shape: tuple[int, ...],
        dtype: npt.DTypeLike,
        chunks: tuple[int, ...],
        compression: BloscCompression | None = DEFAULT_COMPRESSION,
        fill_value: Any = None,
        attributes: Attributes | None = None,
        dimension_names: Sequence[str | None] | None = None,
    ) -> Array:
        """Creates a member array without data, whose chunks are written by
        :meth:`Array.write` (chunks not written read as ``fill_value``). Its node metadata is
        what :meth:`create_array` writes for the same dtype, chunks, compression, attributes
        and dimension names.

        Raises:
            ValueError: For stores opened for reading, and chunks that don't match the shape.
        """
        self._check_writable()
        self._check_new_name("array", name)
        # Everything checked before the node metadata is written: a refused call writes nothing.
        try:
            sizes = tuple(shape)
            if not all(
                isinstance(size, int | np.integer) and not isinstance(size, bool) and size >= 0 for size in sizes
            ):
                raise ValueError(f"shape {sizes!r} is no tuple of non-negative integers")
            dims = tuple(map(int, sizes))
            stored = storage_dtype(dtype, self.zarr_format)
            resolved = resolve_chunks(tuple(chunks), dims, stored.itemsize)
            fill = default_fill_value(stored) if fill_value is None else np.asarray(fill_value, dtype=stored)[()]
        except (TypeError, ValueError, OverflowError) as error:  # numpy's and our messages, the array named
            named = _named(error, self._member_where("array", name))
            if named is error:
                raise
            raise named from error
        return self._new_array(name, dims, stored, resolved, compression, fill, attributes, dimension_names)
