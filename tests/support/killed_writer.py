"""A writer process for crash tests: writes deterministic records, logging each step to
stdout, so that the test can kill it with SIGKILL at any point and check what survives.

Usage: ``python -m tests.support.killed_writer LOCATION SEED COUNT FLUSH_EVERY MODE [OPTIONS_JSON]``

* ``MODE`` ``records``: raw records through ``IndexedTarArchive``; ``hierarchy``: one
  array per record through ``IndexedTarZarrStore`` (zarr format 2), consolidated at close.
* Prints ``wrote KEY`` after each record, ``flushed N`` after a ``flush()`` returned with N
  records written, ``closing`` before ``close()`` and ``closed`` after it.
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

import numpy as np
from upath import UPath

from ncore_like import IndexedTarArchive, IndexedTarZarrStore


def payload(seed: int, index: int) -> bytes:
    """The bytes of record ``index`` (the test regenerates them to compare)."""
    rng = random.Random(seed * 100_003 + index)
    return rng.randbytes(rng.choice((0, 1, 700, 4096, 30_000, 200_000)))


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

    if mode == "records":
        archive = IndexedTarArchive(target, mode="w")
        write = archive.write
        flush, close = archive.flush, archive.close
    else:
        store = IndexedTarZarrStore(target, mode="w")
        group = store.create_root_group({"seed": seed}).create_group("frames")

        def write(name: str, data: bytes) -> None:
            group.create_array(name.rpartition("/")[2], np.frombuffer(data, np.uint8), compression=None)

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
