"""zarr v2 hierarchies shared with the reference implementation nvidia-ncore 19.8.3."""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from ncore_like import IndexedTarZarrStore
from tests.support import zarr_api
from tests.support.reference import run_reference
from tests.test_store import write_hierarchy

pytestmark = pytest.mark.reference


def dump_ours(group: zarr.Group) -> dict[str, Any]:
    """Our reading of a hierarchy, in the shape of the reference tool's ``dump-zarr``."""
    groups: dict[str, Any] = {"": dict(group.attrs)}
    arrays: dict[str, Any] = {}

    def walk(node: zarr.Group, prefix: str) -> None:
        for name, member in zarr_api.members(node):
            path = f"{prefix}{name}"
            if isinstance(member, zarr.Group):
                groups[path] = dict(member.attrs)
                walk(member, f"{path}/")
            elif member.shape == () and member.dtype.kind == "S":
                # A blob: its single uncompressed chunk record. zarr-python 3 reads 0-d fixed
                # bytes through a numpy scalar, which drops trailing NUL bytes of the blob.
                blob = member.store.archive[f"{path}/0"]
                arrays[path] = {
                    "dtype": member.dtype.str,
                    "shape": [],
                    "attrs": dict(member.attrs),
                    "sha256": hashlib.sha256(blob).hexdigest(),
                }
            else:
                values = np.asarray(member[...])
                arrays[path] = {
                    "dtype": values.dtype.str,
                    "shape": list(values.shape),
                    "attrs": dict(member.attrs),
                    "sha256": hashlib.sha256(values.tobytes()).hexdigest(),
                }

    walk(group, "")
    return {"groups": groups, "arrays": arrays}


def comparable(dump: dict[str, Any]) -> dict[str, Any]:
    keep = ("dtype", "shape", "attrs", "sha256")
    arrays = {
        path: {key: entry[key] for key in keep} | {"dtype": np.dtype(entry["dtype"]).str}
        for path, entry in dump["arrays"].items()
    }
    return {"groups": dump["groups"], "arrays": arrays}


@pytest.mark.parametrize("compressed", [True, False])
def test_reference_opens_our_v2_archives(tmp_path: Path, compressed: bool) -> None:
    path = tmp_path / "ours.itar"
    with IndexedTarZarrStore(path, mode="w") as store:
        write_hierarchy(store, 2, compressed=compressed, consolidate=True)
    ours = dump_ours(IndexedTarZarrStore(path).open_root_group().zarr)
    assert len(ours["arrays"]) >= 10
    assert comparable(run_reference("dump-zarr", str(path), "--consolidated")) == ours
    assert comparable(run_reference("dump-zarr", str(path))) == ours


@pytest.mark.parametrize("consolidated", [True, False])
def test_we_open_reference_v2_archives(tmp_path: Path, consolidated: bool) -> None:
    path = tmp_path / "theirs.itar"
    theirs = run_reference("write-zarr", str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. no "unknown object" warning for the consolidated record
        ours = dump_ours(IndexedTarZarrStore(path).open_root_group(consolidated).zarr)
    assert comparable(theirs) == ours


def test_walking_a_remote_hierarchy_without_consolidated_metadata_reads_its_metadata_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # nvidia-ncore writes node metadata among the chunks (ours keeps it for the end of the
    # file, inside the tail read): without a consolidated record, every node's metadata is a
    # request of its own.
    import base64
    import json

    from ncore_like.cli import main
    from tests.support.servers import max_in_flight, start_http

    zarray = {"shape": [], "chunks": [], "dtype": "|S4096", "fill_value": None, "order": "C", "filters": None,
              "compressor": None, "zarr_format": 2}  # fmt: skip
    records = [(".zgroup", b'{"zarr_format": 2}'), (".zattrs", b"{}"), ("frames/.zgroup", b'{"zarr_format": 2}')]
    for number in range(60):
        key = f"frames/{number:03d}"
        records += [(f"{key}/.zarray", json.dumps(zarray).encode()), (f"{key}/0", bytes([number]) * 4096)]
    records += [("padding", bytes(2 << 20))]  # the metadata lies outside the tail read
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"records": [[key, base64.b64encode(data).decode()] for key, data in records]}))
    run_reference("write-records", str(tmp_path / "seq.itar"), str(spec))
    assert main(["tree", "--limit", "100", str(tmp_path / "seq.itar")]) == 0
    local = capsys.readouterr().out
    with start_http(tmp_path, latency=0.1) as server:
        url = f"{server.endpoint}/seq.itar"
        server.clear_requests()
        assert main(["tree", "--limit", "100", url]) == 0
        assert capsys.readouterr().out.replace(url, str(tmp_path / "seq.itar")) == local
        requests = server.requests()
        # Every metadata record read once, many at a time (not one round trip per node).
        assert len(requests) <= 1 + 63 and max_in_flight(requests) >= 8  # the tail, 63 metadata records
