"""Fuzzing of indexed tar archives, long runs: damage a file, read everything back, judge
every answer (the mutations, reads and judging are ``tests/support/fuzz.py``'s, which
``tests/test_fuzz.py`` draws with hypothesis; see there for what counts as a failure).

The summary lists the mutations per kind, the reads that returned the original bytes, the
exceptions by class, changed bytes returned without verification, and every failure with
the command that reproduces it. Exit status 1 on any failure.

Run from the repository root::

    .venv/bin/python -m scripts.fuzz_archive --seconds 120            # a long run
    .venv/bin/python -m scripts.fuzz_archive --iterations 500 --seed 7
    .venv/bin/python -m scripts.fuzz_archive --seed 7 --only-iteration 123 -v   # reproduce one
    .venv/bin/python -m scripts.fuzz_archive --seconds 60 --verify-archive      # verify_archive too
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.support.fuzz import MUTATIONS, Tally, Watchdog, build_bases, iteration, summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "--iterations",
        type=int,
        default=None,
        help="mutated files to read (default: 1000, or unbounded with --seconds)",
    )
    parser.add_argument("--seconds", type=float, default=None, help="stop after this many seconds")
    parser.add_argument("--seed", type=int, default=None, help="seed of the run (default: random, printed)")
    parser.add_argument(
        "--only-iteration", type=int, default=None, help="run just this iteration of --seed (reproduce a failure)"
    )
    parser.add_argument(
        "--kinds", nargs="+", choices=sorted(MUTATIONS), default=list(MUTATIONS), help="mutation kinds to draw from"
    )
    parser.add_argument("--stack", type=int, default=2, help="at most this many mutations per file (default 2)")
    parser.add_argument(
        "--unverifiable",
        action="store_true",
        help="also rewrite indices without checksums or with renamed keys (changes checksums can't detect)",
    )
    parser.add_argument(
        "--verify-archive",
        action="store_true",
        help="also run verify_archive, which must not call an archive sound whose reads failed their checksums",
    )
    parser.add_argument(
        "--max-failures", type=int, default=20, help="stop after failures in this many mutated files (default 20)"
    )
    parser.add_argument("--tmpdir", type=Path, default=None, help="where the temporary files go")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every mutation")
    options = parser.parse_args(argv)
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**31)
    if options.only_iteration is not None:
        numbers: Iterator[int] = iter([options.only_iteration])
    elif options.iterations is None and options.seconds is not None:
        numbers = iter(range(2**62))
    else:
        numbers = iter(range(options.iterations if options.iterations is not None else 1000))
    watchdog = Watchdog()
    tally = Tally()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=options.tmpdir, prefix="fuzz-itar-") as folder:
        bases = build_bases(Path(folder), seed)
        for number in numbers:
            if options.seconds is not None and time.perf_counter() - started > options.seconds:
                break
            tally.merge(iteration(seed, number, bases, Path(folder), watchdog, options))
            failed_files = len({failure.reproduce for failure in tally.failures})
            if failed_files >= options.max_failures:
                print(f"stopping after failures in {failed_files} mutated files", file=sys.stderr)
                break
    print(summary(tally, seed, time.perf_counter() - started, watchdog))
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
