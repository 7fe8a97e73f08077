"""What a sample is made of: fields, each read from every sequence (archive) the same way.

* :class:`Rows` — element ``i`` of an array along its first axis (a lidar sweep, a pose);
* :class:`Blob` — a blob array named by a pattern of ``i`` (``"cameras/front/{i:05d}"``);
* a function of ``(group, i)`` — anything else, computed from the sequence's root group;
* :class:`SampleNumber` — the sample's number in the index (for bookkeeping and tests).

Rows and blobs are resolved once per archive into a :class:`FieldLayout` (how to decode)
and one record per sample (where its bytes lie); functions run where the sample is read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from .. import _codecs
from ..errors import ArchiveFormatError

if TYPE_CHECKING:
    from ..nodes import Array, Group

__all__ = ["Blob", "Field", "FieldLayout", "FieldSpec", "Rows", "SampleNumber", "as_field", "resolve"]

NDArray = np.ndarray[Any, Any]


@dataclass(frozen=True)
class Rows:
    """Element ``i`` of the array at ``path`` along its first axis (a numpy array of the
    array's other dimensions). Its length is the array's first dimension."""

    path: str


@dataclass(frozen=True)
class Blob:
    """The bytes of the blob array named ``pattern.format(i=i)`` (as
    :meth:`~ncore_like.Group.create_bytes_array` writes them). Its length is the number of
    such arrays from ``i = 0`` on."""

    pattern: str

    def __post_init__(self) -> None:
        try:
            first, second = self.pattern.format(i=0), self.pattern.format(i=1)
        except (KeyError, IndexError, ValueError, AttributeError) as error:
            raise ValueError(
                f"blob pattern {self.pattern!r} names each sample's index as {{i}} (e.g. 'cameras/front/{{i:05d}}'); "
                f"formatting it with i failed: {type(error).__name__}: {error}"
            ) from None
        if first == second:
            raise ValueError(f"blob pattern {self.pattern!r} doesn't depend on {{i}}: every sample would be one blob")


@dataclass(frozen=True)
class SampleNumber:
    """The sample's number in the index (an ``int``)."""


Field = Union[Rows, Blob, SampleNumber, Callable[["Group", int], Any]]  # noqa: UP007 - a runtime alias
FieldSpec = Union[Field, str]  # noqa: UP007
"""A field, or a string: a pattern with ``{i`` names a :class:`Blob`, any other a :class:`Rows`."""


def as_field(spec: FieldSpec) -> Field:
    """The field a specification names (strings: see :data:`FieldSpec`)."""
    if isinstance(spec, str):
        return Blob(spec) if "{i" in spec else Rows(spec)
    if isinstance(spec, Rows | Blob | SampleNumber) or callable(spec):
        return spec
    raise TypeError(f"a field is Rows, Blob, SampleNumber, a function of (group, i) or a string, not {spec!r}")


@dataclass(frozen=True)
class FieldLayout:
    """How the records of a stored field of one archive decode (saved with the index)."""

    kind: str
    """``"rows"`` or ``"blob"``."""
    compressed: bool
    dtype: str = "|u1"
    """The values' dtype (rows)."""
    stored_dtype: str = "|u1"
    """The dtype of a decoded chunk's elements (byte order as stored)."""
    chunk_shape: tuple[int, ...] = ()
    row_shape: tuple[int, ...] = ()
    fill: str = ""
    """The fill value's bytes (hex) in the stored dtype, for chunks never written."""

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "chunk_shape": list(self.chunk_shape), "row_shape": list(self.row_shape)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FieldLayout:
        return cls(**{**data, "chunk_shape": tuple(data["chunk_shape"]), "row_shape": tuple(data["row_shape"])})

    @property
    def rows_per_chunk(self) -> int:
        return self.chunk_shape[0] if self.chunk_shape else 1

    def decode_row(self, record: bytes | memoryview | None, row: int, where: str) -> NDArray:
        """Row ``row`` (counted within its chunk) of a chunk record (None: never written)."""
        stored = np.dtype(self.stored_dtype)
        nbytes = math.prod(self.chunk_shape) * stored.itemsize
        if record is None:
            chunk = np.frombuffer(bytes.fromhex(self.fill) * math.prod(self.chunk_shape), stored)
        elif self.compressed:
            chunk = np.frombuffer(_decompress(record, where), stored)
        else:
            chunk = np.frombuffer(record, stored)
        if chunk.nbytes != nbytes:
            raise ArchiveFormatError(f"a chunk of {chunk.nbytes} bytes, expected {nbytes}", archive=where)
        values = chunk.reshape(self.chunk_shape)[row]
        dtype = np.dtype(self.dtype)
        decoded: NDArray = values.astype(dtype) if values.dtype != dtype else values.copy()  # writable, its own memory
        return decoded

    def decode_blob(self, record: bytes | memoryview | None, length: int, where: str) -> bytes:
        """The first ``length`` bytes of a blob's record (None: never written)."""
        if record is None:
            return bytes(length)
        data = _decompress(record, where) if self.compressed else record
        if len(data) < length:
            raise ArchiveFormatError(f"a blob record of {len(data)} bytes, expected {length}", archive=where)
        return bytes(data[:length])


def _decompress(record: bytes | memoryview, where: str) -> bytes:
    try:
        data: bytes = _codecs.blosc.decompress(bytes(record))
    except Exception as error:
        raise ArchiveFormatError(f"a chunk record is no Blosc stream ({error})", archive=where) from error
    return data


# -- resolving fields in one archive ----------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    """A stored field in one archive: its layout, and per sample ``i`` the record key (None:
    never written) and the blob's length."""

    layout: FieldLayout
    keys: list[str | None]
    lengths: list[int]


def _checked_view(array: Array, what: str, where: str) -> Any:
    view = array.view
    if view is None:
        raise ValueError(f"{where}: {what} can't be read without zarr-python (open the archive for reading)")
    if view.unsupported is not None:
        raise ValueError(
            f"{where}: {what} is stored in a way the training dataset doesn't read directly ({view.unsupported}); "
            "use a function field, e.g. lambda group, i: group.array(path).read(i)"
        )
    stored = view.stored_dtype
    if stored.hasobject or stored.kind in "OUTV" or stored.itemsize == 0:
        raise ValueError(f"{where}: {what} has dtype {stored}, not fixed-size elements; use a function field")
    if view.blosc is not None and view.blosc.get("shuffle") not in (0, 1, 2):
        raise ValueError(f"{where}: {what} uses Blosc with automatic shuffle; use a function field")
    return view


def _fill_hex(view: Any) -> str:
    fill = view.fill_value
    stored = view.stored_dtype
    value = np.zeros((), stored) if fill is None else np.asarray(fill).astype(stored)
    return bytes(np.asarray(value, stored).tobytes()).hex()


def _array_or_none(root: Group, path: str, where: str) -> Array | None:
    """The array at ``path``, None if there is no node there (ValueError for a group)."""
    from ..nodes import Array

    node = root.get(path)
    if node is not None and not isinstance(node, Array):
        raise ValueError(f"{where}: {path!r} is a group, no array")
    return node


def _array(root: Group, path: str, where: str) -> Array:
    array = _array_or_none(root, path, where)
    if array is None:
        raise ValueError(f"{where}: no array {path!r}")
    return array


def resolve_rows(field: Rows, root: Group, where: str) -> Resolved:
    array = _array(root, field.path, where)
    view = _checked_view(array, f"array {field.path!r}", where)
    shape, chunks = view.shape, view.chunks
    if not shape:
        raise ValueError(f"{where}: array {field.path!r} is 0-dimensional: it has no rows")
    if any(size > chunk for size, chunk in zip(shape[1:], chunks[1:], strict=True)):
        raise ValueError(
            f"{where}: a row of array {field.path!r} (shape {shape}) spans several chunks (chunks {chunks}); the "
            "training dataset reads rows stored in one chunk: rechunk it, or use a function field"
        )
    layout = FieldLayout(
        "rows", view.blosc is not None, view.dtype.str, view.stored_dtype.str, tuple(chunks), tuple(shape[1:]),
        _fill_hex(view),
    )  # fmt: skip
    rest = (0,) * (len(shape) - 1)
    archive = root.store.archive  # type: ignore[union-attr]
    keys: list[str | None] = []
    for index in range(shape[0]):
        key = view.chunk_key((index // chunks[0], *rest))
        keys.append(key if key in archive else None)
    return Resolved(layout, keys, [0] * shape[0])


def resolve_blobs(field: Blob, root: Group, where: str) -> Resolved:
    archive = root.store.archive  # type: ignore[union-attr]
    keys: list[str | None] = []
    lengths: list[int] = []
    compressed: bool | None = None
    index = 0
    while True:
        path = field.pattern.format(i=index)
        blob = _array_or_none(root, path, where)
        if blob is None:
            break
        view = _checked_view(blob, f"blob {path!r}", where)
        shape, dtype = view.shape, view.dtype
        if not ((not shape and dtype.kind == "S") or (len(shape) == 1 and dtype == np.uint8)):
            raise ValueError(f"{where}: {path!r} (dtype {dtype}, shape {shape}) is no blob; use Rows or a function")
        if shape and view.chunks[0] < shape[0]:
            raise ValueError(f"{where}: blob {path!r} is stored in several chunks; use a function field")
        if compressed is not None and compressed != (view.blosc is not None):
            raise ValueError(f"{where}: the blobs of {field.pattern!r} are stored compressed and uncompressed")
        compressed = view.blosc is not None
        key = view.chunk_key((0,) * len(shape))
        keys.append(key if key in archive else None)
        lengths.append(shape[0] if shape else dtype.itemsize)
        index += 1
    if not index:  # a pattern that names nothing (a typo, another zero padding): not 0 samples
        raise ValueError(f"{where}: no blob {field.pattern.format(i=0)!r} (the first of {field.pattern!r})")
    return Resolved(FieldLayout("blob", bool(compressed)), keys, lengths)


def resolve(field: Field, root: Group, where: str) -> Resolved | None:
    """The records of a stored field in one archive (None for fields computed when read)."""
    if isinstance(field, Rows):
        return resolve_rows(field, root, where)
    if isinstance(field, Blob):
        return resolve_blobs(field, root, where)
    return None
