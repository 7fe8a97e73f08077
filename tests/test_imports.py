"""What importing ncore_like costs: the archive layer alone imports no zarr-python (nor
numcodecs, fsspec, universal-pathlib, asyncio or numpy), public names are imported on first
use, and lazily imported names behave exactly like eager ones."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import ncore_like
import ncore_like.archive
import ncore_like.nodes
import ncore_like.store
from ncore_like.archive import IndexedTarArchive, Location

HEAVY = ("zarr", "numcodecs", "fsspec", "upath", "asyncio", "numpy", "crc32c")


def imported_modules(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    listing = "\nimport sys\nprint('\\n'.join(sys.modules))"
    result = subprocess.run([sys.executable, "-c", code + listing], capture_output=True, text=True, check=True)
    return set(result.stdout.split())


def importtime_modules(code: str) -> set[str]:
    """The modules ``python -X importtime`` reports for ``code`` (import statements only:
    ``importlib.import_module`` is not reported)."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True
    )
    modules = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "ncore_like" in modules, result.stderr  # else the test would pass vacuously
    return modules


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def test_the_archive_layer_imports_no_zarr_and_nothing_heavy() -> None:
    code = "from ncore_like.archive import IndexedTarArchive"
    # The package's names are lazy (importlib.import_module, which -X importtime doesn't
    # report): that the archive module is there is what sys.modules says.
    assert "ncore_like.archive._archive" in imported_modules(code)
    for modules in (importtime_modules(code), imported_modules(code)):
        assert heavy(modules) == []


def test_reading_a_local_archive_imports_no_zarr_fsspec_or_universal_pathlib(tmp_path: Path) -> None:
    path = tmp_path / "a.itar"
    with IndexedTarArchive(path, "w") as archive:
        archive["k"] = b"payload"
    code = (
        "from ncore_like.archive import IndexedTarArchive\n"
        f"archive = IndexedTarArchive({str(path)!r})\n"
        "assert archive['k'] == b'payload'\n"
    )
    modules = imported_modules(code)
    # numpy checks the index entries; nothing else heavy is needed for a local read.
    assert [m for m in heavy(modules) if not m.startswith("numpy")] == []


def test_import_ncore_like_imports_its_names_on_first_use() -> None:
    modules = imported_modules("import ncore_like")
    assert heavy(modules) == []
    assert "ncore_like.nodes" not in modules and "ncore_like.store" not in modules
    modules = imported_modules("import ncore_like; ncore_like.Group")
    assert {"ncore_like.nodes", "ncore_like.store"} <= modules
    # zarr-python comes with its first use, not with the layers (reading needs none).
    assert "zarr" not in modules and "ncore_like._compat.zarr3" not in modules
    modules = imported_modules("from ncore_like.store import ItarZarrStore")
    assert "zarr" in modules


@pytest.mark.parametrize("package", [ncore_like, ncore_like.archive, ncore_like.store, ncore_like.nodes])
def test_every_exported_name_resolves_and_is_listed(package: object) -> None:
    names = package.__all__  # type: ignore[attr-defined]
    for name in names:
        assert getattr(package, name) is not None, name
    assert set(names) <= set(dir(package))
    with pytest.raises(AttributeError, match="no_such_name"):
        package.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def test_subpackages_are_attributes_after_a_bare_import() -> None:
    code = "import ncore_like; assert ncore_like.store.IndexedTarZarrStore; assert ncore_like.archive.verify_archive"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_public_stores_return_typed_groups_and_the_store_layer_never_loads_them(tmp_path: Path) -> None:
    path = tmp_path / "s.itar"
    code = (
        "import sys\n"
        "import ncore_like.store as layer\n"
        f"with layer.IndexedTarZarrStore({str(path)!r}, 'w') as store:\n"
        "    store.create_zarr_root_group({'layer': 'store'}, 2)\n"
        "    store.consolidate()\n"
        f"group = layer.IndexedTarZarrStore({str(path)!r}).open_zarr_root_group()\n"
        "assert dict(group.attrs) == {'layer': 'store'}, dict(group.attrs)\n"
        "assert 'ncore_like.nodes' not in sys.modules, 'the store layer loaded the typed layer'\n"
        "from ncore_like import IndexedTarZarrStore\n"
        f"with IndexedTarZarrStore({str(path)!r}, 'w') as store:\n"
        "    root = store.create_root_group()\n"
        "    root.create_array('x', [1, 2, 3])\n"
        "    store.consolidate()\n"
        f"store = IndexedTarZarrStore({str(path)!r})\n"
        "assert isinstance(store, layer.IndexedTarZarrStore) and isinstance(store, layer.Store)\n"
        "group = store.open_root_group()\n"
        "assert type(group).__name__ == 'Group', type(group)\n"
        "assert group.array('x').read().tolist() == [1, 2, 3]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_locations_of_local_paths_need_no_fsspec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = Location("x.itar")
    assert relative.local == str(tmp_path / "x.itar")
    assert Location(Path("x.itar")).local == relative.local
    assert Location(f"file://{tmp_path}/x.itar").local == relative.local  # a file URL is a local path
    assert Location(relative.upath).local == relative.local
    assert pickle.loads(pickle.dumps(relative)).local == relative.local


def test_locations_of_urls_keep_their_storage_options() -> None:
    from upath import UPath

    remote = Location(UPath("memory://bucket/x.itar", skip_instance_cache=True))
    assert remote.local is None
    assert remote.name == "memory://bucket/x.itar"
    assert remote.storage_options == {"skip_instance_cache": True}
    again = pickle.loads(pickle.dumps(remote))
    assert (again.name, again.storage_options) == (remote.name, remote.storage_options)
    assert Location("s3://bucket/x.itar").local is None
