"""The repository's command lines (benchmarks, the fuzzer, plots): each runs as a module
from the repository root, ``.venv/bin/python -m scripts.bench_read``, so that it imports
its helpers (``scripts._benchlib``, ``tests.support``) without editing ``sys.path``. No
part of the ``ncore_like`` package."""
