"""Where archives live: one recogniser tells URLs (chained ones too) from paths, for the
library, the command line and archive collections alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncore_like import ArchiveCollection, IndexedTarArchive
from ncore_like.archive import Location, is_url
from ncore_like.cli import main
from tests.support.fixtures import HttpRoot


@pytest.mark.parametrize(
    ("text", "url"),
    [
        ("s3://bucket/seq.itar", True),
        ("file:///data/seq.itar", True),
        ("simplecache::s3://bucket/seq.itar", True),
        ("https://host/data/seq.itar", True),
        ("/data/seq.itar", False),
        ("relative/seq.itar", False),
        ("/data/a::b.itar", False),  # "::" inside a path is no protocol chain
        ("C:\\data\\seq.itar", False),  # a drive letter is no protocol
        ("c://seq.itar", False),
    ],
)
def test_urls_are_told_from_paths(text: str, url: bool) -> None:
    assert is_url(text) is url
    assert Location(text).is_remote is (url and not text.startswith("file:"))


def write(path: Path) -> dict[str, bytes]:
    payloads = {"frames/000": b"a" * 1000, "frames/001": b"b" * 2000}
    with IndexedTarArchive(path, "w") as archive:
        for key, payload in payloads.items():
            archive[key] = payload
    return payloads


def test_a_chained_url_opens_in_the_library_the_command_line_and_a_collection(
    http_root: HttpRoot, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    payloads = write(http_root.directory / "seq.itar")
    url = f"simplecache::{http_root.base_url}/seq.itar"
    assert IndexedTarArchive(url)["frames/001"] == payloads["frames/001"]
    assert main(["ls", url]) == 0
    assert capsys.readouterr().out.split() == list(payloads)
    collection = ArchiveCollection([url])
    assert collection.read(0, "frames/000") == payloads["frames/000"]


def test_the_command_line_gives_storage_options_to_urls_only(tmp_path: Path) -> None:
    local = Location.parse(str(tmp_path / "seq.itar"), [("anon", True)])
    assert local.local == str(tmp_path / "seq.itar") and local.storage_options == {}
    remote = Location.parse("s3://bucket/seq.itar", [("anon", True)])
    assert remote.is_remote and remote.storage_options == {"anon": True}
    assert remote.same_as(Location.parse("s3://bucket/seq.itar")) and not remote.same_as(local)
