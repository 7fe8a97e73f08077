"""Reading needs no zarr-python: opening a store, looking nodes up, reading arrays and blobs
(sync, async, out=, batches), ArchiveCollection and the read-only commands run on the
metadata views, the backend and the Blosc bindings alone; zarr-python comes with what asks for it
(``.zarr``, writing, a selection the fast planner doesn't cover). Each path runs in a fresh
interpreter, where imports are visible."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ncore_like import BloscCompression, IndexedTarZarrStore
from tests.support.zarr_version import ZARR_MAJOR


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("zarr-free") / "h.itar"
    with IndexedTarZarrStore(path, "w") as store:
        root = store.create_root_group({"a": 1})
        group = root.create_group("g")
        group.create_array("rows", np.arange(600, dtype=np.float32).reshape(20, 30), chunks=(1, 30),
                           compression=BloscCompression())  # fmt: skip
        group.create_array("block", np.arange(64, dtype=np.int16).reshape(8, 8), chunks=(4, 4), compression=None)
        root.create_bytes_array("blob", b"some bytes")
        store.consolidate()
    return path


def zarr_imported(code: str) -> bool:
    """Whether a fresh interpreter imported zarr-python running ``code`` (which must work)."""
    script = f"import sys\n{code}\nprint('zarr' in sys.modules, file=sys.__stdout__)\n"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()[-1] == "True"


OPEN = (
    "import asyncio\nimport numpy as np\nfrom ncore_like import IndexedTarZarrStore\n"
    "store = IndexedTarZarrStore({path!r})\n"
)

READS = {
    "rows by int and numpy int": "a = store.open_root_group().group('g').array('rows')\n"
    "assert a.read(3)[0] == 90 and a[np.int64(-1)][1] == 571",
    "a block, out=": "a = store.open_root_group().group('g').array('block')\n"
    "out = np.empty((2, 8), np.int16)\na.read(np.s_[3:5], out=out)\nassert out[0, 0] == 24",
    "a batch of rows": "a = store.open_root_group().group('g').array('rows')\nassert a.read([1, 5, 9])[2, 0] == 270",
    "async": "a = store.open_root_group().group('g').array('rows')\nassert asyncio.run(a.read_async(2))[0] == 60",
    "a blob": "assert store.open_root_group().array('blob').read_bytes() == b'some bytes'",
    "unconsolidated": "assert store.open_root_group(False).group('g').array('rows').read(1)[0] == 30",
    "members and attributes": "root = store.open_root_group()\nassert root.attributes['a'] == 1 and 'g' in root",
    "a collection": "from ncore_like import ArchiveCollection\n"
    "collection = ArchiveCollection([{path!r}])\nassert len(collection) == 1",
}


@pytest.mark.parametrize("name", sorted(READS))
def test_reading_imports_no_zarr(archive: Path, name: str) -> None:
    assert not zarr_imported(OPEN.format(path=str(archive)) + READS[name].format(path=str(archive)))


@pytest.mark.parametrize(
    "code",
    [
        "store.open_root_group().group('g').array('rows').zarr",  # asked for
        "store.open_root_group().group('g').array('rows')[::2, 3]",  # a step: zarr-python's indexers
    ],
)
def test_zarr_comes_with_what_asks_for_it(archive: Path, code: str) -> None:
    assert zarr_imported(OPEN.format(path=str(archive)) + code)


def test_writing_imports_zarr(tmp_path: Path) -> None:
    code = (
        "from ncore_like import IndexedTarZarrStore\n"
        f"with IndexedTarZarrStore({str(tmp_path / 'w.itar')!r}, 'w') as store:\n"
        "    store.create_root_group({})\n"
    )
    assert zarr_imported(code)


@pytest.mark.parametrize("command", [["ls"], ["info"], ["tree"], ["cat", "g/rows[2]"], ["verify"]])
def test_read_only_commands_import_no_zarr(archive: Path, command: list[str]) -> None:
    arguments = [command[0], str(archive), *command[1:]]
    code = (
        "import os\n"
        "from ncore_like.cli import main\n"
        "sys.stdout = open(os.devnull, 'w')\n"
        f"assert main({arguments!r}) == 0\n"
    )
    assert not zarr_imported(code)


def imported_beyond(code: str, baseline: str, modules: tuple[str, ...]) -> set[str]:
    """Which of ``modules`` a fresh interpreter running ``code`` (which must work) imports
    that one running ``baseline`` doesn't (what numpy and numcodecs import is theirs)."""
    listing = f"print(sorted(m for m in {modules!r} if m in sys.modules), file=sys.__stdout__)\n"
    found = []
    for script in (code, baseline):
        command = [sys.executable, "-c", "import sys\n" + script + listing]
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        found.append(set(eval(result.stdout)))
    return found[0] - found[1]


def test_a_blocking_local_read_imports_neither_asyncio_nor_fsspec(archive: Path) -> None:
    read = (
        "from ncore_like import IndexedTarZarrStore\n"
        f"store = IndexedTarZarrStore({str(archive)!r})\n"
        "store.open_root_group().group('g').array('rows').read(3)\n"
    )
    # Older numcodecs import asyncio themselves.
    assert imported_beyond(read, "import numpy, numcodecs.blosc\n", ("asyncio", "fsspec", "upath", "zarr")) == set()


def test_a_fresh_process_reading_blosc_rows_imports_no_numcodecs(archive: Path) -> None:
    # Rows of one Blosc block are decoded by python-blosc: a DataLoader worker reading rows
    # never pays numcodecs' import (30-60 ms, every codec it registers).
    read = (
        "import numpy as np\n"
        "from ncore_like import IndexedTarZarrStore\n"
        f"rows = IndexedTarZarrStore({str(archive)!r}).open_root_group().group('g').array('rows')\n"
        "assert rows.read(3)[0] == 90 and rows.read(np.int64(-1), out=np.empty(30, np.float32))[1] == 571\n"
    )
    assert imported_beyond(read, "import numpy\n", ("numcodecs", "zarr")) == set()


def test_a_missing_blosc_binding_is_named_not_blamed_on_the_archive(archive: Path) -> None:
    code = (
        "import sys\n"
        "sys.modules['blosc'] = None  # as if python-blosc were not installed\n"
        "from ncore_like import IndexedTarZarrStore\n"
        f"rows = IndexedTarZarrStore({str(archive)!r}).open_root_group().group('g').array('rows')\n"
        "try:\n"
        "    rows.read(3)\n"
        "except ImportError as error:\n"
        "    print(type(error).__name__, error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ModuleNotFoundError") and "blosc" in result.stdout


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_fresh_process_reading_a_raw_record_imports_only_what_reading_needs(tmp_path: Path, zarr_format: int) -> None:
    # A new DataLoader worker opens an archive and reads a frame: codecs, logging, the
    # worker pool, the writer's tar headers and the record cache are for other paths, and
    # each costs milliseconds of the worker's start (numpy's own imports are numpy's).
    path = tmp_path / "frames.itar"
    with IndexedTarZarrStore(path, "w") as store:
        frames = store.create_root_group({}, zarr_format=zarr_format).create_group("frames")
        frames.create_array("00000", np.arange(5000, dtype=np.uint8), chunks="single", compression=None)
        store.consolidate()
    unwanted = ("numcodecs", "zarr", "logging", "concurrent.futures", "tarfile", "hashlib", "random", "asyncio",
                "importlib.metadata")  # fmt: skip
    read = (
        "from ncore_like import IndexedTarZarrStore\n"
        f"with IndexedTarZarrStore({str(path)!r}) as store:\n"
        "    frame = store.open_root_group().group('frames').array('00000').read()\n"
        "assert int(frame[4999]) == 4999 % 256\n"
    )
    assert imported_beyond(read, "import numpy\n", unwanted) == set()


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_an_unconsolidated_hierarchy_is_listed_as_zarr_python_lists_it_without_it(
    tmp_path: Path, zarr_format: int
) -> None:
    # As nvidia-ncore writes them: node metadata records among the chunks, no consolidated
    # record. Members come from the records' keys; zarr-python lists the same ones.
    if zarr_format == 3 and ZARR_MAJOR < 3:
        pytest.skip("zarr format 3 needs zarr-python 3")
    path = tmp_path / "plain.itar"
    with IndexedTarZarrStore(path, "w") as store:
        root = store.create_root_group(zarr_format=zarr_format)  # type: ignore[arg-type]
        cameras = root.create_group("cameras")
        for name in ("front", "rear"):
            cameras.create_group(name).create_bytes_array("00000", b"frame")
        root.create_array("poses", np.arange(12.0).reshape(3, 4))
        root.create_group("empty")
    with IndexedTarZarrStore(path) as store:
        root = store.open_root_group(consolidated=False)
        ours = {group: root.group(group).members() if group else root.members() for group in
                ("", "cameras", "cameras/front", "empty")}  # fmt: skip
        zarr_root = root.zarr
        theirs = {group: sorted(zarr_root[group].keys()) if group else sorted(zarr_root.keys()) for group in ours}
    assert ours == theirs and ours[""] == ["cameras", "empty", "poses"]
    for command in ("info", "tree"):
        code = (
            "import os\nfrom ncore_like.cli import main\nsys.stdout = open(os.devnull, 'w')\n"
            f"assert main([{command!r}, {str(path)!r}]) == 0\n"
        )
        assert not zarr_imported(code), command


def test_the_zarr_version_a_reader_checks_is_the_installed_distributions() -> None:
    from importlib.metadata import version

    from ncore_like import _compat

    assert _compat._version_file_of_zarr() == version("zarr")
    assert _compat.installed_zarr_major() == ZARR_MAJOR
