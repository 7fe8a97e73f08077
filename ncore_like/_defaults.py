"""The one home of ncore_like's tunable defaults, each with the reason for its value.

Constructors take these as their default arguments; nothing else repeats a number.
"""

from __future__ import annotations

__all__ = [
    "BULK_READ_AHEAD_BYTES",
    "CACHE_MAX_BYTES",
    "CACHE_TTL",
    "DECODED_CHUNK_BYTES",
    "DECODED_CONSOLIDATED_RECORDS",
    "DECODED_INDEX_RECORDS",
    "ENCODE_AHEAD_BYTES",
    "ENCODE_BATCH_BYTES",
    "INLINE_BYTES",
    "INLINE_ENCODE_CHUNK_BYTES",
    "INLINE_READ_BYTES",
    "MAX_BYTES_IN_FLIGHT",
    "NODE_CACHE_SIZE",
    "PACKED_BATCH_BYTES",
    "REMOTE_BULK_THREADS",
    "RETRY_ATTEMPTS",
    "RETRY_BASE_DELAY",
    "RETRY_DEADLINE",
    "RETRY_MAX_DELAY",
    "SCAN_GAP_BYTES",
    "SCAN_SPANS_AHEAD",
    "SCAN_SPAN_BYTES",
    "TAIL_READ_SIZE",
]

#: Bytes read from the end of an archive when it is opened: the index header, the index and
#: (written last) the node metadata and consolidated records, so that opening a hierarchy
#: costs one read (one request remotely). 1 MiB holds the index of ~30,000 records.
TAIL_READ_SIZE = 1 << 20

#: Reads storing fewer bytes than this decode on the calling thread: handing chunks to the
#: worker pool costs ~150 us, which a 2-core machine wins back from ~2 MB of Blosc records
#: on (1.3x slower at 0.8 MB, 1.2x faster at 3 MB; scripts/bench_inline_threshold.py).
INLINE_BYTES = 1536 * 1024

#: Local reads of up to this many bytes run on the event loop's thread in the ``*_async``
#: methods: a positional read of a few pages (and a row's decoding) takes microseconds, a
#: hand-off to a worker thread and back much longer (~40-140 us on a 2-core VM).
INLINE_READ_BYTES = 64 * 1024

#: Remote reads that meet a transient failure (a dropped connection, a body cut short, HTTP
#: 429 or 5xx) are tried this many times in all, waiting 0.1, 0.2, 0.4... s (with jitter, at
#: most 2 s) in between, and never beyond the deadline: a flaky network costs a moment, a
#: failed service an error within half a minute, not a hang. The first retry after a
#: connection failure (no answer from the server, so no sign of overload) doesn't wait: with
#: 1 % resets and 1 % cut bodies, the waits cost 15-20 % of a bulk read's throughput.
#: (s3fs retries S3's own errors before these.)
RETRY_ATTEMPTS = 5
RETRY_BASE_DELAY = 0.1
RETRY_MAX_DELAY = 2.0
RETRY_DEADLINE = 30.0

#: Threads of ``read_records`` / ``map_records`` on a remote archive (local ones: one per
#: CPU). Each thread waits on one request: with two, 100 ~1 MB records from S3 with 20 ms
#: per request moved 13-17 MB/s, against 60-110 MB/s with 16 requests in flight
#: (scripts/bench_remote.py); the memory read ahead stays bounded by BULK_READ_AHEAD_BYTES.
REMOTE_BULK_THREADS = 16

#: Sequential scans (``scan_records``) read adjacent records as spans of this many bytes.
#: Measured on S3 (moto behind a proxy adding 20 ms per request), the first 100 ~0.8 MB
#: records of an archive in key order: spans of 4, 8, 16, 32, 64 MiB moved 85, 171, 305,
#: 413, 319 MB/s (one range GET of the same 80 MB: 364 MB/s; a request per record: 11.5).
SCAN_SPAN_BYTES = 32 << 20

#: Spans read ahead of the consumer of a scan (in flight at once on remote archives).
SCAN_SPANS_AHEAD = 4

#: Records at most this many bytes apart in the file join a span (the tar headers between
#: payloads are 0.5-1.5 KiB; reading a gap costs less than another request).
SCAN_GAP_BYTES = 64 << 10

#: Bytes of chunks being encoded on the worker pool ahead of the thread writing their
#: records (``create_array``): enough to keep every core busy while one record is written,
#: small next to the array itself.
ENCODE_AHEAD_BYTES = 64 << 20

#: Chunks smaller than this go to the worker pool in batches of about this many (raw)
#: bytes, not one task each: a task's round trip costs more than encoding a 4 KB chunk.
#: Encoding 20,000 chunks of 4 KiB took 0.72 s one per task, 0.34 s in batches of 64 KiB,
#: 0.42 s of 256 KiB, 0.46 s of 1 MiB (scripts/bench_write.py --only batch, busy machine).
ENCODE_BATCH_BYTES = 64 << 10

#: Compressed chunks up to this size are encoded on the calling thread, not on the worker
#: pool. Encoding one holds the GIL for most of its time (Python per chunk, packing it as a
#: tar member: Blosc itself was ~6.5 of ~25 us of CPU per 4 KB row), so threads can't run it
#: side by side, and handing the GIL from one to the next costs more than they overlap. A
#: [20000, 1024] float32 array, 2 CPUs, durable=False, best of 4: chunks of one row (4 KB)
#: 414-535 ms inline against 580-660 ms on the pool, 16 KB 247-279 against 306-335, with a
#: third less CPU; from 32 KB on the pool is faster (185-223 against 224-273).
INLINE_ENCODE_CHUNK_BYTES = 16 << 10

#: Small chunks written into an archive by ``create_array`` are encoded and laid out as tar
#: members in batches of about this many raw bytes (one task of the worker pool, one write):
#: the per-batch cost (a dozen numpy operations for the headers, a task's round trip, a
#: write) fades from ~256 KiB on. CPU time of a [20000, 1024] f4 array in chunks of one row,
#: encoded inline (busy machine, best of 7): 64 KiB 0.32 s, 256 KiB 0.26 s, 1 MiB 0.23 s,
#: 4 MiB 0.25 s.
PACKED_BATCH_BYTES = 1 << 20

#: Bytes of remote records fetched but not yet decoded, per read (bounds memory when a
#: read's requests all go out at once).
MAX_BYTES_IN_FLIGHT = 256 << 20

#: Bytes of records read ahead of their consumer by bulk operations over many records
#: (verifying, copying, extracting): enough to keep every thread's requests in flight.
BULK_READ_AHEAD_BYTES = 256 << 20

#: Records, summed over the decoded indices kept per process (about 60 MB for typical keys).
DECODED_INDEX_RECORDS = 250_000

#: Decoded chunks that a read took part of, kept in the process (least recently used out
#: first) for the next reads of the same chunk: a loop over the rows of a single-chunk array
#: (the default chunking) would otherwise decode the whole chunk for every row. Chunks of
#: more than half of it are not kept.
DECODED_CHUNK_BYTES = 32 << 20

#: Decoded consolidated metadata records kept per process.
DECODED_CONSOLIDATED_RECORDS = 64

#: Opened nodes a NodeCache keeps unless told otherwise.
NODE_CACHE_SIZE = 4096

#: Bytes a local record cache of remote archives keeps by default (``RecordCache``): the
#: frames a training job samples from hundreds of sequences, a small share of a local NVMe.
CACHE_MAX_BYTES = 10 << 30

#: Seconds a record cache trusts an object version it checked (``RecordCache``): DataLoader
#: workers and collections reopen the same archives within seconds, and each check costs a
#: round trip; archives are written once, so a minute is how long a rewrite may go unseen.
CACHE_TTL = 60.0
