"""``Array.to_dask()``: dask arrays whose tasks read through the fast backend, computed on a
``LocalCluster`` of worker processes (which open the archive themselves), local and on S3;
the results are numpy's on the same values."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from upath import UPath

from ncore_like import BloscCompression, IndexedTarZarrStore

da = pytest.importorskip("dask.array", reason="dask is an optional extra")
distributed = pytest.importorskip("distributed", reason="distributed is an optional extra")

VALUES = np.arange(40 * 30 * 4, dtype=np.float32).reshape(40, 30, 4) * 0.5


def write(location: Path | UPath) -> None:
    with IndexedTarZarrStore(location, mode="w") as store:
        store.create_root_group({}).create_array("v", VALUES, chunks=(5, 30, 4), compression=BloscCompression())
        store.consolidate()


@pytest.fixture(scope="module")
def client() -> object:
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def test_to_dask_has_the_arrays_chunks_and_values(tmp_path: Path) -> None:
    write(tmp_path / "a.itar")
    array = IndexedTarZarrStore(tmp_path / "a.itar").open_root_group().array("v")
    lazy = array.to_dask()
    assert lazy.shape == VALUES.shape and lazy.dtype == VALUES.dtype and lazy.chunksize == (5, 30, 4)
    np.testing.assert_array_equal(lazy[3:17, 2].compute(scheduler="sync"), VALUES[3:17, 2])
    assert array.to_dask(chunks=(20, 30, 4)).numblocks == (2, 1, 1)
    assert len(pickle.dumps(array)) < 10_000  # what a task carries: location, options, index


def test_a_local_cluster_of_processes_computes_from_a_local_archive(tmp_path: Path, client: object) -> None:
    write(tmp_path / "a.itar")
    lazy = IndexedTarZarrStore(tmp_path / "a.itar").open_root_group().array("v").to_dask()
    np.testing.assert_allclose(client.compute(lazy.mean(axis=0)).result(), VALUES.mean(axis=0))  # type: ignore[attr-defined]


def test_a_local_cluster_of_processes_computes_from_s3(s3_bucket: UPath, client: object) -> None:
    write(s3_bucket / "a.itar")
    lazy = IndexedTarZarrStore(s3_bucket / "a.itar").open_root_group().array("v").to_dask()
    np.testing.assert_array_equal(client.compute(lazy.max(axis=(1, 2))).result(), VALUES.max(axis=(1, 2)))  # type: ignore[attr-defined]


def test_tasks_run_on_the_cluster_at_an_address_and_failures_come_back(client: object) -> None:
    from ncore_like.cluster import run_tasks

    address = client.scheduler.address  # type: ignore[attr-defined]
    finished: list[int] = []
    outcomes = run_tasks(divmod, [(7, 2), (1, 0), (9, 4)], scheduler=address, done=lambda n, _: finished.append(n))
    assert outcomes[0] == (3, 1) and outcomes[2] == (2, 1)
    assert isinstance(outcomes[1], ZeroDivisionError)
    assert sorted(finished) == [0, 1, 2]


def environment_variable(name: str) -> str | None:
    """Run on a worker: a variable of its environment."""
    import os

    return os.environ.get(name)


def test_local_cluster_workers_keep_glibcs_malloc_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # dask's nannies set MALLOC_TRIM_THRESHOLD_=65536, which maps every record over 128 KB
    # anew and doubled the CPU time of packing. (A cluster started earlier in this process
    # left it in the environment: as in a fresh command, it isn't there.)
    import os

    from ncore_like.cluster import run_tasks

    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    variables = [("MALLOC_TRIM_THRESHOLD_",), ("PATH",)]
    assert run_tasks(environment_variable, variables, workers=1) == [None, os.environ["PATH"]]
    assert "MALLOC_TRIM_THRESHOLD_" not in os.environ  # this process's environment as it was
