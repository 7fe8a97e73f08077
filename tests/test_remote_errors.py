"""Remote failures are one clear line, never a traceback, and never show a credential: the
command line prints ``ncore-like: error: <url>: <what to do>`` and exits 1; the API raises a
named error (``RemoteStorageError``, ``MissingDependencyError``) with the same message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from upath import UPath

from ncore_like import IndexedTarArchive, IndexedTarZarrStore
from ncore_like.errors import MissingDependencyError, RemoteStorageError
from tests.support.servers import ServerProcess

SECRET_KEY, SECRET = "AKIDRECOGNISABLE1234", "s3cr3t-recognisable-5678"
FAST_FAIL = {"config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 1}}


def cli(argv: list[str], *, env: dict[str, str] | None = None, prelude: str = "") -> subprocess.CompletedProcess[str]:
    code = f"{prelude}\nimport sys\nfrom ncore_like.cli import main\nsys.exit(main({argv!r}))"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env or dict(os.environ), timeout=120
    )


def options_argv(options: dict[str, Any]) -> list[str]:
    return [f"-o{key}={json.dumps(value) if not isinstance(value, str) else value}" for key, value in options.items()]


def assert_one_clean_line(result: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ncore-like: error: s3://"), result.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    assert SECRET not in result.stderr + result.stdout and SECRET_KEY not in result.stderr + result.stdout


def test_without_s3fs_the_message_names_the_extra() -> None:
    result = cli(["ls", "s3://bucket/seq.itar"], prelude="import sys; sys.modules['s3fs'] = None  # not installed")
    assert_one_clean_line(result, "s3fs", "pip install 'ncore-like[s3]'")


def test_without_credentials(s3_proxy: ServerProcess) -> None:
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent", AWS_EC2_METADATA_DISABLED="true"
    )
    argv = ["ls", "s3://bucket/seq.itar", f"-oendpoint_url={s3_proxy.endpoint}", *options_argv(FAST_FAIL)]
    assert_one_clean_line(cli(argv, env=env), "no credentials", "anon=true")


def test_an_endpoint_that_does_not_answer() -> None:
    from tests.support.servers import _free_port

    options = {"endpoint_url": f"http://127.0.0.1:{_free_port()}", "key": SECRET_KEY, "secret": SECRET, **FAST_FAIL}
    assert_one_clean_line(cli(["info", "s3://bucket/seq.itar", *options_argv(options)]), "can't reach the storage")
    with pytest.raises(RemoteStorageError, match="can't reach the storage") as raised:
        IndexedTarZarrStore(UPath("s3://bucket/seq.itar", **options))
    assert isinstance(raised.value, OSError) and raised.value.archive == "s3://bucket/seq.itar"
    assert SECRET not in str(raised.value) and SECRET not in repr(raised.value)


def test_a_storage_option_the_filesystem_does_not_take() -> None:
    result = cli(["ls", "s3://bucket/seq.itar", "-ono_such_option=1"])
    assert_one_clean_line(result, "storage option", "no_such_option")


def test_the_api_names_the_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gcsfs", None)
    with pytest.raises(MissingDependencyError, match="gcsfs") as raised:
        IndexedTarArchive("gs://bucket/seq.itar")
    assert isinstance(raised.value, ImportError)


def test_reprs_and_errors_of_remote_archives_show_no_credential(s3_bucket: UPath) -> None:
    options = {**s3_bucket.storage_options, "key": "testing", "secret": SECRET}  # moto accepts any secret
    location = UPath(str(s3_bucket / "seq.itar"), **options)
    with IndexedTarZarrStore(location, mode="w") as store:
        store.create_root_group({}).create_array("x", [1, 2, 3])
        store.consolidate()
        assert SECRET not in repr(store) + repr(store.archive) + repr(store.zarr)
    reader = IndexedTarZarrStore(location)
    shown = [repr(reader), repr(reader.archive), repr(reader.zarr), repr(reader.archive.location), reader.name]
    try:
        reader.archive.read("no/such/record")
    except KeyError as error:
        shown.append(str(error))
    assert all(SECRET not in text for text in shown), shown
