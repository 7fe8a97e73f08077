"""Bulk reads: many records of one archive, read concurrently and handed out in order.

Operations over whole archives (verifying, copying, extracting) read every record once.
:func:`map_records` runs a function of each key on its own threads (remote reads overlap)
and yields the results in the order of the keys, holding at most a bounded number of
bytes (by the records' sizes in the index) that the consumer has not taken yet.
:func:`read_records` is the common case: the payloads themselves.

Both are generators that own a thread pool: exhaust them or close them (e.g. with
``contextlib.closing``), so that reads not started yet are cancelled and the threads end.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import closing
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from .._concurrency import default_workers, ordered_map
from .._defaults import (
    BULK_READ_AHEAD_BYTES,
    REMOTE_BULK_THREADS,
    SCAN_GAP_BYTES,
    SCAN_SPAN_BYTES,
    SCAN_SPANS_AHEAD,
)
from ..errors import ChecksumError
from ._archive import IndexedTarArchive

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = ["map_records", "read_records", "scan_records"]

R = TypeVar("R")


def _executor(workers: int, name: str) -> ThreadPoolExecutor:
    from concurrent.futures import ThreadPoolExecutor  # with the first bulk read: it brings logging

    return ThreadPoolExecutor(workers, thread_name_prefix=name)


def map_records(
    archive: IndexedTarArchive,
    keys: Iterable[str],
    function: Callable[[str], R],
    *,
    threads: int | None = None,
    read_ahead_bytes: int = BULK_READ_AHEAD_BYTES,
) -> Generator[tuple[str, R], None, None]:
    """Yields ``(key, function(key))`` for every key, in the order of ``keys``.

    Args:
        archive: The archive the keys are records of (their sizes bound the read-ahead).
        keys: Keys of records of ``archive`` (``KeyError`` for others, when their turn comes).
        function: Called on the pool's threads, typically reads the record.
        threads: Threads of the pool (default: one per CPU for local archives, see
            :func:`ncore_like._concurrency.default_workers`; 16 for remote ones, whose
            threads wait on requests).
        read_ahead_bytes: Records of at most this many bytes in total are in progress or
            done but not consumed yet; a larger record runs alone.

    Raises:
        Whatever ``function`` raised for a key, when that key's turn comes.
    """
    workers = threads if threads is not None else REMOTE_BULK_THREADS if archive.is_remote else default_workers()
    if workers < 1:
        raise ValueError(f"threads must be positive, got {workers}")
    return _mapped(archive, keys, function, workers, read_ahead_bytes)


def _mapped(
    archive: IndexedTarArchive, keys: Iterable[str], function: Callable[[str], R], workers: int, read_ahead_bytes: int
) -> Generator[tuple[str, R], None, None]:
    # A generator of its own, so that map_records checks its arguments when it is called.
    records = archive.records
    with (
        _executor(workers, "ncore_like-bulk") as pool,
        closing(
            ordered_map(
                pool,
                function,
                keys,
                # Eight per thread: while one record waits (e.g. a retry's backoff), the other
                # threads go on reading the records after it (1 % of 503s cost a third of the
                # throughput with two per thread; scripts/bench_remote.py --only faults).
                # The bytes read ahead stay bounded by read_ahead_bytes.
                max_items=8 * workers,
                max_bytes=read_ahead_bytes,
                size=lambda key: records[key].size,
            )
        ) as results,
    ):
        yield from results


def read_records(
    archive: IndexedTarArchive,
    keys: Iterable[str],
    *,
    threads: int | None = None,
    read_ahead_bytes: int = BULK_READ_AHEAD_BYTES,
) -> Generator[tuple[str, bytes], None, None]:
    """Yields ``(key, payload)`` for every key, in the order of ``keys``, read on
    ``threads`` threads with at most ``read_ahead_bytes`` read ahead (see
    :func:`map_records`)."""
    return map_records(archive, keys, _concurrent_reader(archive), threads=threads, read_ahead_bytes=read_ahead_bytes)


def _concurrent_reader(archive: IndexedTarArchive) -> Callable[[str], bytes]:
    """``archive.read``, but for remote archives on the buffered path, whose one file object
    serialises the reads of all threads: those records are read with exact range requests,
    so that the threads' requests overlap."""
    if not archive.is_remote or archive.remote_range_reads:
        return archive.read

    def read(key: str) -> bytes:
        if archive.in_memory(key):
            return archive.read(key)
        record = archive.records[key]
        data = archive.read_span(record.offset, record.size)
        if archive.verify_checksums:
            archive.check_payload(key, data)
        return data

    return read


# -- sequential scans --------------------------------------------------------------------------


class _Span(NamedTuple):
    """Adjacent records read as one byte range of the file (their tar headers included)."""

    start: int
    end: int
    members: list[tuple[str, int, int]]  # key, payload offset, payload size


def _spans(archive: IndexedTarArchive, keys: Iterable[str], span_bytes: int) -> Iterator[_Span]:
    """Consecutive keys whose payloads follow each other in the file (at most
    :data:`SCAN_GAP_BYTES` apart) grouped into spans of at most ``span_bytes`` (a larger
    record is a span of its own); records read without I/O are spans of their own."""
    records = archive.records
    current: _Span | None = None
    for key in keys:
        record = records[key]
        start, end = record.offset, record.offset + record.size
        if archive.in_memory(key):
            if current is not None:
                yield current
                current = None
            yield _Span(start, start, [(key, start, record.size)])  # read by key, no I/O
            continue
        if current is not None and 0 <= start - current.end <= SCAN_GAP_BYTES and end - current.start <= span_bytes:
            current.members.append((key, start, record.size))
            current = current._replace(end=end)
            continue
        if current is not None:
            yield current
        current = _Span(start, end, [(key, start, record.size)])
    if current is not None:
        yield current


def _read_span(archive: IndexedTarArchive, span: _Span) -> list[tuple[str, bytes | ChecksumError]]:
    """The payloads of the span's records, checked on the thread that read them; a record
    failing its checksum ends the list with its error (raised when its turn comes, after
    the records before it were handed out)."""
    if span.start == span.end:  # records held in memory (and empty ones)
        return [(key, archive.read(key)) for key, _, _ in span.members]
    data = memoryview(archive.read_span(span.start, span.end - span.start))
    verify = archive.verify_checksums
    payloads: list[tuple[str, bytes | ChecksumError]] = []
    for key, offset, size in span.members:
        payload = bytes(data[offset - span.start : offset - span.start + size])
        if verify:
            try:
                archive.check_payload(key, payload)
            except ChecksumError as error:
                payloads.append((key, error))
                break
        payloads.append((key, payload))
    return payloads


def scan_records(
    archive: IndexedTarArchive,
    keys: Iterable[str] | None = None,
    *,
    span_bytes: int = SCAN_SPAN_BYTES,
    spans_ahead: int = SCAN_SPANS_AHEAD,
) -> Generator[tuple[str, bytes], None, None]:
    """Yields ``(key, payload)`` of every record (default: all, in file order) in the order
    of ``keys``, reading them as a stream: records that follow each other in the file are
    read together, as spans of up to ``span_bytes`` (one ``pread``, or one range request of
    a remote archive), ``spans_ahead`` spans in flight ahead of the consumer. Scanning a
    sequence in key order then costs a request per span, not per record. Checksums are
    verified as the archive's reads do (:attr:`IndexedTarArchive.verify_checksums`).

    Raises:
        KeyError: For keys that are no records (when their turn comes).
        ChecksumError: For a record that doesn't match its checksum (when its turn comes).
    """
    if span_bytes < 1 or spans_ahead < 1:
        raise ValueError(f"span_bytes and spans_ahead must be positive, got {span_bytes} and {spans_ahead}")
    if keys is None:
        records = archive.records
        keys = sorted(archive.keys(), key=lambda key: records[key].offset)
    return _scanned(archive, keys, span_bytes, spans_ahead)


def _scanned(
    archive: IndexedTarArchive, keys: Iterable[str], span_bytes: int, spans_ahead: int
) -> Generator[tuple[str, bytes], None, None]:
    with (
        _executor(spans_ahead, "ncore_like-scan") as pool,
        closing(
            ordered_map(
                pool,
                lambda span: _read_span(archive, span),
                _spans(archive, keys, span_bytes),
                max_items=spans_ahead,
                max_bytes=spans_ahead * span_bytes,
                size=lambda span: span.end - span.start,
            )
        ) as spans,
    ):
        for _, payloads in spans:
            for key, payload in payloads:
                if isinstance(payload, ChecksumError):
                    raise payload
                yield key, payload
