"""A writer process for crash tests: writes deterministic records, logging each step to
stdout, so that the test can kill it with SIGKILL at any point and check what survives.

Usage: ``python -m tests.support.killed_writer LOCATION SEED COUNT FLUSH_EVERY MODE [OPTIONS_JSON]``

* ``MODE`` ``records``: raw records through ``IndexedTarArchive``; ``hierarchy``: one
  array per record through ``IndexedTarZarrStore`` (zarr format 2), consolidated at close;
  ``volumes``: one Blosc-compressed array of :func:`volume` per record, its chunks large
  enough for a durable store's direct writes (``archive/_direct.py``).
* Prints ``wrote KEY`` after each record, ``flushed N`` after a ``flush()`` returned with N
  records written, ``closing`` before ``close()`` and ``closed`` after it.
* With ``KILLED_WRITER_NOT_DURABLE=1`` in the environment the archive is opened with
  ``durable=False`` (no fsync: its writes go through the page cache, which outlives a
  killed process).
* With ``KILLED_WRITER_HOLD`` (seconds) in the environment, prints ``holding`` after the
  last record and waits that long before closing: a test that must stop the writer before
  its close doesn't race the close (on a busy machine the test may read the lines late).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from typing import Any

import numpy as np
from upath import UPath

from ncore_like import BloscCompression, IndexedTarArchive, IndexedTarZarrStore


def payload(seed: int, index: int) -> bytes:
    """The bytes of record ``index`` (the test regenerates them to compare)."""
    rng = random.Random(seed * 100_003 + index)
    return rng.randbytes(rng.choice((0, 1, 700, 4096, 30_000, 200_000)))


def volume(seed: int, index: int) -> np.ndarray[Any, Any]:
    """Array ``index`` of mode ``volumes``: 4 chunks of 512 KB that Blosc compresses to
    ~300-400 KB each (noise over a smooth part)."""
    rng = np.random.default_rng(seed * 100_003 + index)
    smooth = np.sin(np.arange(4 * 256 * 512, dtype=np.float32) / 40.0).reshape(4, 256, 512) * 50
    return (smooth + rng.normal(0, 2, size=smooth.shape) * (rng.random(smooth.shape) < 0.5)).astype(np.float32)


def key(index: int) -> str:
    return f"frames/{index:05d}"


def main() -> None:
    # Ctrl-C raises KeyboardInterrupt here even where the suite was started as a background
    # job, whose processes inherit SIGINT ignored (the writer then ran on and closed).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    location, seed, count, flush_every, mode = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
    options = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
    target = UPath(location, **options) if options else location

    def log(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    durable = os.environ.get("KILLED_WRITER_NOT_DURABLE") != "1"
    if mode == "records":
        archive = IndexedTarArchive(target, mode="w", durable=durable)
        write = archive.write
        flush, close = archive.flush, archive.close
    else:
        store = IndexedTarZarrStore(target, mode="w", durable=durable)
        group = store.create_root_group({"seed": seed}).create_group("frames")

        def write(name: str, data: bytes) -> None:
            name = name.rpartition("/")[2]
            if mode == "volumes":
                group.create_array(name, volume(seed, int(name)), chunks=(1, 256, 512), compression=BloscCompression())
            else:
                group.create_array(name, np.frombuffer(data, np.uint8), compression=None)

        flush = store.flush

        def close() -> None:
            store.consolidate()
            store.close()

    for index in range(count):
        write(key(index), payload(seed, index))
        log(f"wrote {key(index)}")
        if flush_every and (index + 1) % flush_every == 0:
            flush()
            log(f"flushed {index + 1}")
    hold = float(os.environ.get("KILLED_WRITER_HOLD", "0"))
    if hold:
        log("holding")
        time.sleep(hold)
    log("closing")
    close()
    log("closed")


if __name__ == "__main__":
    main()
