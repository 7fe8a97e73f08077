"""Remote failures are one clear line, never a traceback, and never show a credential: the
command line prints ``ncore-like: error: <url>: <what to do>`` and exits 1; the API raises a
named error (``RemoteStorageError``, ``MissingDependencyError``) with the same message."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
import s3fs
from upath import UPath

from ncore_like import ArchiveCollection, IndexedTarArchive, IndexedTarZarrStore
from ncore_like.errors import MissingDependencyError, RemoteStorageError
from tests.support.fixtures import HttpRoot
from tests.support.servers import MOTO_REGION, ServerProcess, s3_storage_options, start_http, start_moto

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
    # Reads through s3fs (the plain-HTTP reader needs none, and would look the bucket up on AWS).
    prelude = "import os, sys; sys.modules['s3fs'] = None; os.environ['NCORE_LIKE_S3_CLIENT'] = 's3fs'"
    result = cli(["ls", "s3://bucket/seq.itar"], prelude=prelude)
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


# -- errors of the Python API name the URL ----------------------------------------------------


def assert_names_url(error: BaseException, url: str) -> None:
    """The error carries the URL as ``filename`` and in its message, as the command line
    says it."""
    assert isinstance(error, OSError)
    assert error.filename == url, error.filename
    assert url in str(error), str(error)


def opening_ways(location: UPath, url: str) -> list[Callable[[], object]]:
    """Every way of opening (and reading) an archive of the Python API."""
    options = dict(location.storage_options) or None
    return [
        lambda: IndexedTarArchive(location),
        lambda: IndexedTarZarrStore(location, remote_range_reads=True),
        lambda: asyncio.run(IndexedTarArchive.open_async(location)),
        lambda: asyncio.run(IndexedTarZarrStore.open_async(location)),
        lambda: ArchiveCollection([url], storage_options=options).read(0, "a"),
    ]


def test_a_missing_remote_object_names_its_url(s3_bucket: UPath, http_root: HttpRoot) -> None:
    options = dict(s3_bucket.storage_options)
    for location in (
        s3_bucket / "missing.itar",
        UPath(f"s3://no-such-bucket-{s3_bucket.path}/missing.itar", **options),
        UPath(f"{http_root.base_url}/missing.itar"),
    ):
        url = f"{location.protocol}://{location.path}" if location.protocol == "s3" else str(location)
        for open_it in opening_ways(location, url):
            with pytest.raises(FileNotFoundError) as raised:
                open_it()
            assert_names_url(raised.value, url)
            assert "no such file or object" in str(raised.value)


def test_an_object_gone_after_opening_names_its_url_on_reads(s3_bucket: UPath) -> None:
    location = s3_bucket / "gone.itar"
    with IndexedTarArchive(location, mode="w") as archive:
        archive["big"] = bytes(1_500_000)  # before the tail read
        archive["small"] = b"in the tail"
    url = f"s3://{location.path}"
    readers = [IndexedTarArchive(location, remote_range_reads=range_reads) for range_reads in (False, True)]
    location.unlink()
    for reader in readers:
        with pytest.raises(FileNotFoundError) as raised:
            reader.read("big")
        assert_names_url(raised.value, url)
        with pytest.raises(FileNotFoundError) as raised:
            asyncio.run(reader.read_async("big"))
        assert_names_url(raised.value, url)
        assert reader.read("small") == b"in the tail"


def test_writing_to_a_missing_bucket_names_the_url(s3_bucket: UPath) -> None:
    location = UPath(f"s3://no-such-bucket-{s3_bucket.path}/new.itar", **s3_bucket.storage_options)
    url = f"s3://{location.path}"
    with pytest.raises(FileNotFoundError) as raised:
        with IndexedTarArchive(location, mode="w") as archive:
            archive["a"] = b"1"
    assert_names_url(raised.value, url)


def test_remote_storage_errors_carry_the_url_as_filename_also_when_pickled() -> None:
    from tests.support.servers import _free_port

    url = "s3://bucket/seq.itar"
    options = {"endpoint_url": f"http://127.0.0.1:{_free_port()}", **FAST_FAIL}
    with pytest.raises(RemoteStorageError, match="can't reach the storage") as raised:
        IndexedTarArchive(UPath(url, **options))
    assert_names_url(raised.value, url)
    again = pickle.loads(pickle.dumps(raised.value))  # as it comes back from a worker process
    assert isinstance(again, RemoteStorageError) and again.archive == url
    assert_names_url(again, url)


def test_a_persistent_failure_of_a_read_names_url_and_record(tmp_path: Path) -> None:
    with IndexedTarArchive(tmp_path / "seq.itar", "w") as archive:
        archive["frame"] = bytes(300_000)
    with start_http(tmp_path, faults={number: "503" for number in range(3, 40)}) as server:  # GETs 1-2 open it
        url = f"{server.endpoint}/seq.itar"
        reader = IndexedTarArchive(url, index_tail_read_size=None, remote_range_reads=True)
        with pytest.raises(RemoteStorageError, match=r"record 'frame'.*failed 5 times") as raised:
            reader["frame"]
    assert_names_url(raised.value, url)


def test_denied_access_names_the_url(aws_test_env: None) -> None:
    # A moto of its own that checks signatures (after 3 unauthenticated calls to set up a user).
    with start_moto(extra_env={"INITIAL_NO_AUTH_ACTION_COUNT": "3"}) as moto:
        iam = boto3.client("iam", endpoint_url=moto.endpoint, region_name=MOTO_REGION)
        iam.create_user(UserName="reader")
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="reader", PolicyName="all", PolicyDocument=json.dumps(policy))
        options = {
            **s3_storage_options(moto.endpoint),
            "key": key["AccessKeyId"],
            "secret": key["SecretAccessKey"],
            "skip_instance_cache": True,
        }
        s3fs.S3FileSystem(**options).call_s3("create_bucket", Bucket="private")
        url = "s3://private/seq.itar"
        with IndexedTarArchive(UPath(url, **options), mode="w") as archive:
            archive["frame"] = bytes(2_000_000)
        reader = IndexedTarArchive(UPath(url, **options), remote_range_reads=True)
        wrong = {**options, "secret": SECRET}
        with pytest.raises(RemoteStorageError, match="access denied") as raised:
            IndexedTarArchive(UPath(url, **wrong))
        assert_names_url(raised.value, url)
        assert SECRET not in str(raised.value)
        deny = {"Version": "2012-10-17", "Statement": [{"Effect": "Deny", "Action": "s3:GetObject", "Resource": "*"}]}
        as_reader = boto3.client(
            "iam",
            endpoint_url=moto.endpoint,
            region_name=MOTO_REGION,
            aws_access_key_id=key["AccessKeyId"],
            aws_secret_access_key=key["SecretAccessKey"],
        )
        as_reader.put_user_policy(UserName="reader", PolicyName="none", PolicyDocument=json.dumps(deny))
        with pytest.raises(RemoteStorageError, match="record 'frame': access denied") as raised:
            reader["frame"]
        assert_names_url(raised.value, url)
