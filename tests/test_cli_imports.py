"""The command line starts fast: ``--help`` and the commands that read an archive's index
import only what they use (checked in fresh interpreters, where imports are visible)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np

from ncore_like import IndexedTarArchive
from ncore_like.cli import COMMANDS, build_parser

#: Top-level packages no command that only lists records needs.
HEAVY = ("zarr", "numcodecs", "fsspec", "upath", "asyncio", "aiohttp", "tqdm", "dask", "torch")


def modules_after(arguments: list[str]) -> set[str]:
    """The modules a fresh interpreter holds after running the command line with ``arguments``."""
    code = (
        "import sys\n"
        "from ncore_like.cli import main\n"
        "try:\n"
        f"    code = main({arguments!r})\n"
        "except SystemExit as exit_:\n"
        "    code = exit_.code\n"
        "print('\\n'.join(sys.modules), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    modules = set(result.stderr.split())
    assert "ncore_like.cli" in modules  # else the test would pass vacuously
    return modules


def heavy(modules: set[str]) -> list[str]:
    return sorted(module for module in modules if module.split(".")[0] in HEAVY)


def test_help_imports_no_command_module_and_nothing_heavy() -> None:
    modules = modules_after(["--help"])
    assert heavy(modules) == [] and "numpy" not in modules
    # Of the archive layer, --help needs what parses a location alone (not the reader,
    # the writer, tarfile or cbor2; argparse imports lzma through shutil).
    assert sorted(module for module in modules if module.startswith("ncore_like.archive.")) == [
        "ncore_like.archive._location"
    ]
    assert not {"tarfile", "cbor2", "crc32c_rs"} & modules
    assert (
        sorted(
            module
            for module in modules
            if module.startswith("ncore_like.cli._")
            and module != "ncore_like.cli._common"
            and module != "ncore_like.cli._signals"
        )
        == []
    )


def test_ls_imports_no_zarr_no_store_and_no_other_command(tmp_path: Path) -> None:
    with IndexedTarArchive(tmp_path / "a.itar", "w") as archive:
        for index in range(50):
            archive[f"c/{index}"] = bytes(index)
    modules = modules_after(["ls", "-l", str(tmp_path / "a.itar")])
    assert heavy(modules) == []
    assert "numpy" not in modules  # the record table decodes without it: ~60 ms less
    assert "ncore_like.store" not in modules and "ncore_like.nodes" not in modules
    assert "ncore_like.cli._ls" in modules and "ncore_like.cli._pack" not in modules
    # What only -v and a misspelt name need (~17 ms of the start-up together), and the
    # dataclasses module (with inspect, ~15 ms): the archive layer makes no dataclass.
    assert not {"logging", "difflib", "dataclasses"} & modules


def test_info_and_tree_load_no_packing_engine(tmp_path: Path) -> None:
    from ncore_like import IndexedTarZarrStore

    with IndexedTarZarrStore(tmp_path / "h.itar", mode="w") as store:
        root = store.create_root_group()
        root.create_array("poses", data=np.arange(12.0).reshape(3, 4))
    for command in ("info", "tree"):
        modules = modules_after([command, str(tmp_path / "h.itar")])
        # The hierarchy helpers they share with pack come without pack's engine.
        assert "ncore_like._pack._hierarchy" in modules and "ncore_like._pack._engine" not in modules, command
        assert not {"logging", "difflib", "dataclasses"} & modules, command  # see the ls test


def test_ls_without_numpy_lists_what_tar_finds(tmp_path: Path) -> None:
    # The record table decoded in pure Python (numpy not loaded) gives tar's offsets.
    with IndexedTarArchive(tmp_path / "a.itar", "w") as archive:
        for index in range(300):
            archive[f"c/{index}"] = bytes(index * 7)
        archive["long/" + "k" * 140] = b"a pax header before it"
    code = (
        "import sys\n"
        "from ncore_like.cli import main\n"
        f"code = main(['ls', '-l', {str(tmp_path / 'a.itar')!r}])\n"
        "assert 'numpy' not in sys.modules\n"
        "sys.exit(code)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    with tarfile.open(tmp_path / "a.itar") as tar:
        members = [(member.offset_data, member.size, member.name) for member in tar.getmembers()]
    listed = [line.split(maxsplit=2) for line in result.stdout.splitlines()]
    assert [(int(offset), int(size), key) for offset, size, key in listed] == members


def test_the_summaries_listed_without_their_modules_are_the_modules_own() -> None:
    def summaries(parser: argparse.ArgumentParser) -> dict[str, str | None]:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return {choice.dest: choice.help for choice in action._choices_actions}

    full = summaries(build_parser())
    assert full == {name: summary for name, (_, summary) in COMMANDS.items()}
    assert summaries(build_parser("ls")) == full
    # A command's own options are there when it runs.
    assert build_parser("ls").parse_args(["ls", "-l", "x.itar"]).long
