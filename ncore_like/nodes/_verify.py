"""Verifying arrays: every value of every array read, failing chunk records named.

:func:`verify_arrays` reads each array completely, in slabs of whole chunk rows along the
first axis (memory stays bounded whatever the array's size). A slab that fails is read
again chunk by chunk, so that each problem names the chunk record that can't be decoded.
Problems are :class:`~ncore_like.archive.Problem` entries, as the archive layer reports
them; they don't raise.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from .. import _compat
from ..archive import Problem, VerifyProgress
from ..archive._verify import READ_ERRORS
from ._array import Array
from ._encoding import chunk_regions

__all__ = ["SLAB_BYTES", "verify_arrays"]

#: Arrays are read in slabs of whole chunk rows of about this many bytes of values.
SLAB_BYTES = 64 << 20


def _nbytes(array: Array) -> int:
    return array.dtype.itemsize * math.prod(array.shape)


def _slabs(array: Array, slab_bytes: int) -> Iterator[tuple[slice, ...]]:
    """Selections of whole chunk rows (along the first axis) of about ``slab_bytes``; one
    empty selection (all of it) for 0-dimensional arrays."""
    shape, chunks = array.shape, array.chunks
    if not shape:
        yield ()
        return
    row_bytes = chunks[0] * math.prod(shape[1:]) * array.dtype.itemsize
    step = max(1, slab_bytes // max(1, row_bytes)) * chunks[0]
    for start in range(0, shape[0], step):
        yield (slice(start, min(start + step, shape[0])),)


def _slab_nbytes(array: Array, slab: tuple[slice, ...]) -> int:
    if not slab:
        return array.dtype.itemsize
    rows: int = slab[0].stop - slab[0].start
    return array.dtype.itemsize * math.prod(array.shape[1:]) * rows


def _chunk_problems(array: Array, slab: tuple[slice, ...], archive: str | None) -> list[Problem]:
    """The chunks of a slab that fail to read, one by one (to name their records)."""
    problems = []
    for coords, region in chunk_regions(array.shape, array.chunks):
        first = region[0]
        if slab and isinstance(first, slice) and not slab[0].start <= first.start < slab[0].stop:
            continue
        try:
            array.read(region)
        except READ_ERRORS as error:
            key = _compat.chunk_key(array.zarr, coords)
            problems.append(Problem.from_error(error, archive=archive, key=key, array=array.path))
    return problems


def verify_arrays(
    arrays: Sequence[Array],
    *,
    archive: str | None = None,
    progress: VerifyProgress | None = None,
    slab_bytes: int = SLAB_BYTES,
) -> list[Problem]:
    """Reads every array completely, slab by slab (see :data:`SLAB_BYTES`).

    Args:
        arrays: The arrays to read.
        archive: The path or URL of the archive the arrays are stored in, as
            :class:`~ncore_like.IndexedTarArchive` names it: messages of errors about it
            leave its name out (a report names it once).
        progress: Told of the bytes of values read, as ``progress("arrays", advance,
            total)``.
        slab_bytes: About how many bytes of values one read covers.

    Returns:
        The problems: per failing chunk (its record and array named), or per failing slab
        if no chunk of it fails on its own.
    """
    total = sum(_nbytes(array) for array in arrays)
    problems: list[Problem] = []
    for array in arrays:
        for slab in _slabs(array, slab_bytes):
            try:
                array.read(slab)
            except READ_ERRORS as error:
                found = _chunk_problems(array, slab, archive)
                problems += found or [Problem.from_error(error, archive=archive, array=array.path)]
            if progress is not None:
                progress("arrays", _slab_nbytes(array, slab), total)
    return problems
