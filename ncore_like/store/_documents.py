"""What a node metadata document says without numpy or zarr-python (pure).

The facts here are plain Python: the chunk grid and keys, the codec chain, whether chunks
are raw or Blosc-compressed, the names of the dimensions, and the data type *as numpy names
it* for the common fixed-size types. :mod:`._metadata` builds its views (numpy dtypes, fill
values) on top of them; the command line's ``info`` and ``tree`` of an archive use them
alone, so that they start without importing numpy (~0.1 s).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

__all__ = [
    "BLOSC_SHUFFLES",
    "V3_DATA_TYPES",
    "VARIABLE_LENGTH_KINDS",
    "XARRAY_DIMENSIONS",
    "ArrayLayout",
    "ChunkKeys",
    "DtypeFacts",
    "GroupView",
    "array_layout",
    "blob_layout",
    "bytes_like_dtype",
    "check_required",
    "children_by_record",
    "codecs_of",
    "describe_codecs",
    "dimension_names_of",
    "dtype_facts",
    "grid_shapes",
    "is_array_document",
    "plain_fill_value",
]

ZarrFormat = Literal[2, 3]

#: zarr format 3's data types the views understand (numpy names them the same).
V3_DATA_TYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
)
#: Blosc's shuffle names, by numcodecs' constant (the index).
BLOSC_SHUFFLES = ("noshuffle", "shuffle", "bitshuffle")
#: numpy's kinds of variable-length elements (objects, ``StringDType``): their size is
#: unknown until read.
VARIABLE_LENGTH_KINDS = "OT"
#: The attribute in which xarray keeps the dimension names of a zarr format 2 array.
XARRAY_DIMENSIONS = "_ARRAY_DIMENSIONS"


class ChunkKeys:
    """Store keys of an array's chunks by coordinates: ``prefix`` + the coordinates joined
    by ``separator`` (``zero_d`` for a 0-dimensional array's one chunk). Picklable."""

    def __init__(self, prefix: str, separator: str, zero_d: str) -> None:
        self._prefix, self._separator, self._zero_d = prefix, separator, zero_d

    def __call__(self, coords: tuple[int, ...]) -> str:
        if not coords:
            return self._zero_d
        return self._prefix + self._separator.join(map(str, coords))

    def moved(self, old: str, new: str) -> ChunkKeys:
        """The keys of the same chunks in the node whose keys start with ``new`` rather than
        ``old`` (its path and ``/``)."""
        return ChunkKeys(new + self._prefix[len(old) :], self._separator, new + self._zero_d[len(old) :])

    def first_axis(self, ndim: int) -> Callable[[int], str]:
        """The key of chunk ``(index, 0, ..., 0)`` of an ``ndim``-dimensional array by index
        (the chunks of rows, for reading rows by index)."""
        prefix, suffix = self._prefix, (self._separator + "0") * (ndim - 1)
        return lambda index: f"{prefix}{index}{suffix}"


class GroupView:
    """A group's metadata (read-only by convention; a plain class, see
    :class:`~ncore_like.backend._plan.ChunkLayout`)."""

    __slots__ = ("attributes", "document", "path", "zarr_format")

    def __init__(
        self, path: str, zarr_format: ZarrFormat, attributes: Mapping[str, Any], document: Mapping[str, Any]
    ) -> None:
        self.path = path
        self.zarr_format = zarr_format
        self.attributes = attributes
        #: The metadata document (zarr-python's consolidated form: v2 ``.zgroup`` plus
        #: ``"attributes"``, v3 ``zarr.json``).
        self.document = document


def is_array_document(document: Mapping[str, Any], zarr_format: ZarrFormat) -> bool:
    """True if the node metadata ``document`` is an array's, False if a group's.

    Raises:
        ValueError: For a zarr format 3 document of another node type.
    """
    if zarr_format == 2:
        return "shape" in document
    kind = document.get("node_type")
    if kind not in ("array", "group"):
        raise ValueError(f"node type {kind!r}")
    return bool(kind == "array")


# -- arrays: the chunk layout ------------------------------------------------------------

#: Keys the zarr specifications require of array metadata (zarr-python refuses documents
#: without them, and so do the views).
_REQUIRED = {
    2: ("shape", "chunks", "dtype", "compressor", "fill_value", "order", "filters", "zarr_format"),
    3: ("shape", "data_type", "chunk_grid", "chunk_key_encoding", "codecs", "fill_value", "zarr_format"),
}


def check_required(document: Mapping[str, Any], zarr_format: ZarrFormat) -> None:
    """ValueError unless the array document has every key its format requires, and says
    that format."""
    missing = [key for key in _REQUIRED[zarr_format] if key not in document]
    if missing:
        raise ValueError(f"no {', '.join(missing)}")
    if document["zarr_format"] != zarr_format:
        raise ValueError(f"zarr_format {document['zarr_format']!r} in a hierarchy of zarr format {zarr_format}")


def _int_tuple(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(type(item) is int and item >= 0 for item in value):
        raise ValueError(f"{what} {value!r} is no list of non-negative integers")
    return tuple(value)


class ArrayLayout(NamedTuple):
    """An array's chunk layout from its metadata document: all of it but the dtype and the
    fill value (numpy's part, see :mod:`._metadata`)."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    data_type: Any
    """The document's ``dtype`` (format 2) or ``data_type`` (format 3), as stored."""
    blosc: Mapping[str, Any] | None
    """numcodecs' Blosc configuration of the chunks, None if raw."""
    endian: Any
    """Format 3: the ``bytes`` codec's endianness (None: no byte order to apply)."""
    chunk_key: ChunkKeys
    unsupported: str | None
    """Why the codecs or key encoding aren't the ones the fast path reads (other codecs,
    filters, Fortran order...), None if they are."""


def grid_shapes(document: Mapping[str, Any], zarr_format: ZarrFormat) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shape and the chunk shape of the array whose document this is.

    Raises:
        ValueError: (or TypeError, AttributeError) For shapes no array can have.
    """
    shape = _int_tuple(document.get("shape"), "shape")
    if zarr_format == 2:
        chunks = _int_tuple(document.get("chunks"), "chunks")
    else:
        grid = document.get("chunk_grid") or {}
        if not isinstance(grid, dict) or grid.get("name") != "regular":
            raise ValueError(f"chunk grid {grid!r}")
        chunks = _int_tuple((grid.get("configuration") or {}).get("chunk_shape"), "chunk shape")
    if len(chunks) != len(shape):
        raise ValueError(f"chunks {list(chunks)} don't match the shape {list(shape)}")
    if 0 in chunks:  # zarr-python writes none (a grid of such chunks has no end)
        raise ValueError(f"chunks {list(chunks)} hold a size of 0")
    return shape, chunks


def array_layout(document: Mapping[str, Any], zarr_format: ZarrFormat, prefix: str) -> ArrayLayout:
    """The layout of the array whose document this is (``prefix``: its path and ``/``).

    Raises:
        ValueError: (or TypeError, AttributeError, KeyError) For documents that can't be an
            array's.
    """
    check_required(document, zarr_format)
    shape, chunks = grid_shapes(document, zarr_format)
    if zarr_format == 2:
        return _v2_layout(document, shape, chunks, prefix)
    return _v3_layout(document, shape, chunks, prefix)


def _v2_layout(
    document: Mapping[str, Any], shape: tuple[int, ...], chunks: tuple[int, ...], prefix: str
) -> ArrayLayout:
    unsupported = None
    compressor = document.get("compressor")
    blosc = None
    if compressor is not None:
        if isinstance(compressor, dict) and compressor.get("id") == "blosc":
            blosc = {key: value for key, value in compressor.items() if key != "id"}
        else:
            unsupported = f"compressor {compressor!r}"
    if document.get("filters"):
        unsupported = unsupported or "filters"
    if document.get("order", "C") != "C":
        unsupported = unsupported or "Fortran-ordered chunks"
    separator = document.get("dimension_separator") or "."
    if separator not in (".", "/"):
        unsupported = unsupported or f"dimension separator {separator!r}"
    keys = ChunkKeys(prefix, separator, prefix + "0")
    return ArrayLayout(shape, chunks, document.get("dtype"), blosc, None, keys, unsupported)


def _v3_layout(
    document: Mapping[str, Any], shape: tuple[int, ...], chunks: tuple[int, ...], prefix: str
) -> ArrayLayout:
    unsupported = None
    codecs = document.get("codecs")
    blosc = None
    endian = None
    first = codecs[0] if isinstance(codecs, list) and codecs else None
    if not isinstance(first, dict) or first.get("name") != "bytes":
        unsupported = "array-to-array codecs or sharding"
    else:
        endian = (first.get("configuration") or {}).get("endian", "little")
        rest = codecs[1:]  # type: ignore[index]
        if len(rest) == 1 and isinstance(rest[0], dict) and rest[0].get("name") == "blosc":
            config = dict(rest[0].get("configuration") or {})
            blosc = {
                "cname": config.get("cname"),
                "clevel": config.get("clevel"),
                "shuffle": BLOSC_SHUFFLES.index(config["shuffle"]) if config.get("shuffle") in BLOSC_SHUFFLES else -1,
                "blocksize": config.get("blocksize", 0),
            }
        elif rest:
            unsupported = "codecs other than one Blosc compressor"
    encoding = document.get("chunk_key_encoding") or {"name": "default"}
    separator = (encoding.get("configuration") or {}).get("separator")
    name = encoding.get("name")
    if name == "default" and (separator or "/") in (".", "/"):
        separator = separator or "/"
        keys = ChunkKeys(f"{prefix}c{separator}", separator, prefix + "c")
    elif name == "v2" and (separator or ".") in (".", "/"):
        separator = separator or "."
        keys = ChunkKeys(prefix, separator, prefix + "0")
    else:
        keys = ChunkKeys(prefix, "/", prefix)
        unsupported = unsupported or f"chunk key encoding {encoding!r}"
    return ArrayLayout(shape, chunks, document.get("data_type"), blosc, endian, keys, unsupported)


# -- arrays: the data type, as numpy names it ----------------------------------------------


class DtypeFacts(NamedTuple):
    """A data type's facts as numpy states them: ``str(dtype)``, ``dtype.kind`` and
    ``dtype.itemsize``."""

    text: str
    kind: str
    itemsize: int


_V2_TYPESTR = re.compile(r"([<>|])([biufcS])([1-9][0-9]*)")
_SIZES = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8), "c": (8, 16), "S": ()}
#: The largest finite value of numpy's floating types by item size.
_FLOAT_MAX = {2: 65504.0, 4: 3.4028234663852886e38, 8: math.inf}
_FLOAT_WORDS = frozenset({"NaN", "Infinity", "-Infinity"})
_NAMES = {"b": "bool", "i": "int", "u": "uint", "f": "float", "c": "complex"}


def dtype_facts(data_type: Any, zarr_format: ZarrFormat) -> DtypeFacts | None:
    """What numpy says of the dtype of a document's ``dtype`` (format 2: a typestring such
    as ``<f4``, ``>i2``, ``|b1``, ``|S7``) or ``data_type`` (format 3: ``float32``...), for
    booleans, numbers and fixed-length bytes; None for anything else (then ask numpy)."""
    if not isinstance(data_type, str):
        return None
    if zarr_format == 3:
        if data_type not in V3_DATA_TYPES:
            return None
        if data_type == "bool":
            return DtypeFacts("bool", "b", 1)
        kind = data_type.rstrip("0123456789")
        return DtypeFacts(data_type, "u" if kind == "uint" else kind[0], int(data_type[len(kind) :]) // 8)
    match = _V2_TYPESTR.fullmatch(data_type)
    if match is None or sys.byteorder != "little":  # numpy names native types by name only
        return None
    order, kind, digits = match.groups()
    size = int(digits)
    if kind == "S":
        return DtypeFacts(f"|S{size}", "S", size)  # bytes have no byte order
    if size not in _SIZES[kind]:
        return None
    if kind == "b":
        return DtypeFacts("bool", "b", 1)
    if order == ">" and size > 1:
        return DtypeFacts(f">{kind}{size}", kind, size)
    return DtypeFacts(f"{_NAMES[kind]}{size * 8}", kind, size)


def plain_fill_value(value: Any, facts: DtypeFacts, zarr_format: ZarrFormat) -> bool:
    """True if the views take ``value`` as the fill value of an array of this dtype (see
    ``_fill_value`` in :mod:`._metadata`), for the fill values writers use: null (format 2),
    booleans, integers the dtype holds, floats and ``NaN``/``Infinity``/``-Infinity`` for
    floating types, base64 of at most the item size for bytes. False means "don't know":
    ask numpy."""
    kind = facts.kind
    if value is None:
        return zarr_format == 2
    if kind == "S":
        if not isinstance(value, str):
            return False
        try:
            return len(base64.standard_b64decode(value)) <= facts.itemsize
        except (binascii.Error, ValueError):
            return False
    if isinstance(value, bool):
        return True
    if isinstance(value, int | float) and kind in "fc":
        # Within the type's range: numpy warns of an overflow to infinity.
        size = facts.itemsize // 2 if kind == "c" else facts.itemsize
        return abs(value) < 2**63 and (math.isnan(value) or abs(value) <= _FLOAT_MAX[size])
    if isinstance(value, int):
        if kind == "b":
            return value in (0, 1)
        bits = facts.itemsize * 8
        low, high = (0, 1 << bits) if kind == "u" else (-(1 << (bits - 1)), 1 << (bits - 1))
        return low <= value < high
    return isinstance(value, str) and kind in "fc" and value in _FLOAT_WORDS


def bytes_like_dtype(shape: tuple[int, ...], kind: str, itemsize: int) -> bool:
    """True for arrays whose values are a byte string: 0-dimensional fixed-length bytes, or
    one-dimensional ``uint8`` (``kind`` and ``itemsize``: numpy's, of the dtype)."""
    return (not shape and kind == "S") or (len(shape) == 1 and kind == "u" and itemsize == 1)


def blob_layout(
    zarr_format: ZarrFormat, shape: tuple[int, ...], chunks: tuple[int, ...], compressed: bool, kind: str, itemsize: int
) -> bool:
    """True for the layout of binary blobs as ``Group.create_bytes_array`` stores them, one
    raw chunk: in format 2 0-dimensional fixed-length bytes, in format 3 (which has no
    fixed-length bytes) one-dimensional ``uint8`` in one chunk (for an array whose metadata
    the views understand completely)."""
    if compressed or not bytes_like_dtype(shape, kind, itemsize):
        return False
    # Format 2's 1-d uint8 arrays hold numbers; a blob is one chunk (an empty one none).
    return not shape or (zarr_format == 3 and (chunks == shape or shape == (0,)))


# -- codecs and dimension names -----------------------------------------------------------


def codecs_of(document: Mapping[str, Any], zarr_format: ZarrFormat) -> tuple[dict[str, Any], ...]:
    """An array's codec chain from its metadata document, in the order chunks are encoded:
    zarr format 3's ``codecs`` (``{"name", "configuration"}``), format 2's ``filters`` then
    ``compressor`` (numcodecs' configurations, ``{"id", ...}``)."""
    if zarr_format == 3:
        chain = list(document.get("codecs") or [])
    else:
        chain = [*(document.get("filters") or []), *([document["compressor"]] if document.get("compressor") else [])]
    return tuple(dict(codec) for codec in chain if isinstance(codec, dict))


def _codec_text(codec: Mapping[str, Any]) -> str | None:
    """One codec as a word or two (None for the plain little-endian serialisation)."""
    name = str(codec.get("name") or codec.get("id") or "?")
    config = codec.get("configuration") if "name" in codec else codec
    config = config if isinstance(config, Mapping) else {}
    if name == "bytes":
        return None if config.get("endian") in (None, "little") else f"bytes {config.get('endian')}-endian"
    if name == "blosc":
        shuffle = config.get("shuffle")
        if isinstance(shuffle, int) and 0 <= shuffle < len(BLOSC_SHUFFLES):
            shuffle = BLOSC_SHUFFLES[shuffle]
        return f"blosc {config.get('cname')}/{config.get('clevel')}/{shuffle}"
    level = config.get("level", config.get("clevel"))
    return name if level is None else f"{name} {level}"


def describe_codecs(codecs: Sequence[Mapping[str, Any]]) -> str:
    """A codec chain (see :func:`codecs_of`) for people: its codecs in encoding order,
    joined by ``+`` (``zstd 3``, ``vlen-bytes + blosc lz4/5/shuffle``, ``delta + gzip 5``,
    ``crc32c``), ``none`` for raw chunks."""
    words = [text for text in map(_codec_text, codecs) if text is not None]
    return " + ".join(words) if words else "none"


def dimension_names_of(document: Mapping[str, Any], zarr_format: ZarrFormat) -> tuple[str | None, ...] | None:
    """The names of an array's dimensions: zarr format 3's ``dimension_names``; in format 2,
    which has none, xarray's ``_ARRAY_DIMENSIONS`` attribute. None without names (or with
    names that aren't one string, or null in format 3, per dimension)."""
    if zarr_format == 3:
        names = document.get("dimension_names")
        allowed: tuple[type, ...] = (str, type(None))
    else:
        names = (document.get("attributes") or {}).get(XARRAY_DIMENSIONS)
        allowed = (str,)
    shape = document.get("shape")
    if not isinstance(names, list | tuple) or not isinstance(shape, list | tuple) or len(names) != len(shape):
        return None
    return tuple(names) if all(isinstance(name, allowed) for name in names) else None


# -- hierarchy ------------------------------------------------------------------------------

#: The node metadata records whose folders are the members of a group, by zarr format.
_NODE_RECORDS: dict[int, tuple[str, ...]] = {2: (".zarray", ".zgroup"), 3: ("zarr.json",)}


def children_by_record(keys: Iterable[str], zarr_format: int) -> dict[str, list[str]]:
    """Each group's members (sorted), from the keys of the nodes' metadata records: a node at
    ``a/b`` has its record at ``a/b/zarr.json`` (or ``.zarray``/``.zgroup``), a member of
    ``a``."""
    found: dict[str, set[str]] = {}
    leaves = _NODE_RECORDS[zarr_format]
    for key in keys:
        node, _, leaf = key.rpartition("/")
        if leaf in leaves and node:
            group, _, name = node.rpartition("/")
            found.setdefault(group, set()).add(name)
    return {group: sorted(names) for group, names in found.items()}
