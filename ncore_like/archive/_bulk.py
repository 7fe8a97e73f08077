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

from collections.abc import Callable, Generator, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from typing import TypeVar

from .._concurrency import default_workers, ordered_map
from .._defaults import BULK_READ_AHEAD_BYTES
from ._archive import IndexedTarArchive

__all__ = ["map_records", "read_records"]

R = TypeVar("R")


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
        threads: Threads of the pool (default: one per CPU, see
            :func:`ncore_like._concurrency.default_workers`).
        read_ahead_bytes: Records of at most this many bytes in total are in progress or
            done but not consumed yet; a larger record runs alone.

    Raises:
        Whatever ``function`` raised for a key, when that key's turn comes.
    """
    workers = threads if threads is not None else default_workers()
    if workers < 1:
        raise ValueError(f"threads must be positive, got {workers}")
    return _mapped(archive, keys, function, workers, read_ahead_bytes)


def _mapped(
    archive: IndexedTarArchive, keys: Iterable[str], function: Callable[[str], R], workers: int, read_ahead_bytes: int
) -> Generator[tuple[str, R], None, None]:
    # A generator of its own, so that map_records checks its arguments when it is called.
    records = archive.records
    with (
        ThreadPoolExecutor(workers, thread_name_prefix="ncore_like-bulk") as pool,
        closing(
            ordered_map(
                pool,
                function,
                keys,
                # Two per thread: each thread has its next record queued while one is consumed.
                max_items=2 * workers,
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
    return map_records(archive, keys, archive.read, threads=threads, read_ahead_bytes=read_ahead_bytes)
