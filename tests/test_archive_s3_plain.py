"""The plain-HTTP S3 reader (``archive/_s3.py``): its signatures against botocore's, which
storage options it takes and which it leaves to s3fs, reads from a real S3 server (moto
behind a logging proxy) in a fresh process without botocore, in a forked child, and on a
connection the server closed."""

from __future__ import annotations

import datetime
import hashlib
import multiprocessing
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from upath import UPath

from ncore_like import IndexedTarArchive
from ncore_like.archive._s3 import S3RangeFileSystem, range_filesystem, sign_v4
from ncore_like.errors import RemoteStorageError
from tests.support.servers import ServerProcess
from tests.test_archive_remote import sample_records, write_records

pytestmark = pytest.mark.s3

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def botocore_signature(
    method: str, url: str, headers: dict[str, str], credentials: tuple[str, str, str | None], region: str, stamp: str
) -> str:
    """The Authorization header botocore's S3 SigV4 signer makes for the same request."""
    from botocore.auth import S3SigV4Auth  # type: ignore[import-untyped]
    from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]
    from botocore.credentials import Credentials  # type: ignore[import-untyped]

    request = AWSRequest(method=method, url=url, headers=headers)
    request.context["timestamp"] = stamp
    signer = S3SigV4Auth(Credentials(*credentials), "s3", region)
    canonical = signer.canonical_request(request)
    signature = signer.signature(signer.string_to_sign(request, canonical), request)
    return f"{signer.scope(request)}|{';'.join(sorted(signer.headers_to_sign(request)))}|{signature}"


@pytest.mark.parametrize(
    ("method", "host", "path", "query", "headers", "token", "region"),
    [
        ("GET", "127.0.0.1:9000", "/bucket/seq.itar", "", {"range": "bytes=0-511"}, None, "us-east-1"),
        ("GET", "bucket.s3.eu-west-1.amazonaws.com", "/a%20b/%E5%85%89%2B.itar", "", {"range": "bytes=-1048576"},
         "session-token/with+chars=", "eu-west-1"),
        ("HEAD", "s3.us-west-2.amazonaws.com", "/bucket/x.itar", "", {}, None, "us-west-2"),
        ("GET", "127.0.0.1:9000", "/bucket/", "list-type=2&max-keys=1&prefix=a%20folder%2F", {}, "t", "us-east-1"),
    ],
)  # fmt: skip
def test_signatures_match_botocore(
    method: str, host: str, path: str, query: str, headers: dict[str, str], token: str | None, region: str
) -> None:
    credentials = ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    now = datetime.datetime(2026, 12, 2, 13, 5, 7, tzinfo=datetime.UTC)
    ours = sign_v4(method, host, path, query, headers, credentials, region, now)
    authorization = ours["Authorization"]
    scope = authorization.split("Credential=", 1)[1].split(",", 1)[0]
    signed_headers = authorization.split("SignedHeaders=", 1)[1].split(",", 1)[0]
    signature = authorization.rsplit("Signature=", 1)[1]
    sent = {**headers, **{name: value for name, value in ours.items() if name != "Authorization"}}
    url = f"https://{host}{path}" + (f"?{query}" if query else "")
    assert f"{scope}|{signed_headers}|{signature}" == botocore_signature(
        method, url, sent, credentials, region, now.strftime("%Y%m%dT%H%M%SZ")
    )
    assert ours["x-amz-content-sha256"] == EMPTY_SHA256
    assert ("x-amz-security-token" in ours) is (token is not None)


def test_the_signing_key_is_kept_per_day_and_region() -> None:
    credentials = ("AKID", "secret", None)
    keys: dict[tuple[str, str, str], bytes] = {}
    day = datetime.datetime(2026, 12, 2, 1, tzinfo=datetime.UTC)
    first = sign_v4("GET", "h", "/b/k", "", {}, credentials, "us-east-1", day, keys)
    assert list(keys) == [("secret", "20261202", "us-east-1")]
    assert sign_v4("GET", "h", "/b/k", "", {}, credentials, "us-east-1", day, keys) == first
    # The next day derives (and keeps) a new key: a cached key of another day would sign wrongly.
    later = day + datetime.timedelta(days=1)
    assert sign_v4("GET", "h", "/b/k", "", {}, credentials, "us-east-1", later, keys) == sign_v4(
        "GET", "h", "/b/k", "", {}, credentials, "us-east-1", later
    )
    assert list(keys) == [("secret", "20261203", "us-east-1")]


BASE = {"endpoint_url": "http://127.0.0.1:9", "key": "k", "secret": "s"}


@pytest.mark.parametrize(
    ("options", "plain"),
    [
        (BASE, True),
        ({**BASE, "client_kwargs": {"region_name": "eu-west-1"}, "config_kwargs": {"max_pool_connections": 64}}, True),
        ({"endpoint_url": "http://127.0.0.1:9", "anon": True}, True),
        ({"endpoint_url": "http://127.0.0.1:9"}, True),  # credentials from the environment
        ({**BASE, "profile": "work"}, False),  # botocore reads the profile
        ({**BASE, "requester_pays": True}, False),
        ({**BASE, "s3_additional_kwargs": {"SSECustomerKey": "x"}}, False),
        ({**BASE, "client_kwargs": {"verify": False}}, False),
        ({**BASE, "config_kwargs": {"signature_version": "s3"}}, False),
        ({**BASE, "endpoint_url": "http://127.0.0.1:9/prefix"}, False),
        ({"key": "k", "secret": "s"}, True),  # the region from the environment
    ],
)
def test_which_options_the_plain_reader_takes(options: dict[str, Any], plain: bool) -> None:
    assert (range_filesystem("s3", options) is not None) is plain
    assert range_filesystem("gs", options) is None


def test_credentials_and_region_that_only_botocore_finds_go_to_s3fs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_PROFILE", "work")
    assert range_filesystem("s3", {"endpoint_url": "http://127.0.0.1:9"}) is None  # the profile's credentials
    assert range_filesystem("s3", BASE) is not None  # the options' credentials come first
    monkeypatch.delenv("AWS_PROFILE")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert range_filesystem("s3", {"endpoint_url": "http://127.0.0.1:9"}) is None  # files, SSO, instance roles
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert range_filesystem("s3", {"key": "k", "secret": "s"}) is None  # botocore finds the bucket's region
    monkeypatch.delenv("NO_PROXY")
    monkeypatch.delenv("no_proxy")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert range_filesystem("s3", BASE) is None  # botocore would go through the proxy
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert range_filesystem("s3", BASE) is not None


def test_addresses_follow_botocore() -> None:
    aws = S3RangeFileSystem(endpoint=None, region="eu-west-1", credentials=None)
    assert aws._address("fleet/seq 1.itar") == ("https", "fleet.s3.eu-west-1.amazonaws.com", 443, "/seq%201.itar")
    assert aws._address("fleet/k", "us-west-2") == ("https", "fleet.s3.us-west-2.amazonaws.com", 443, "/k")
    dotted = ("https", "s3.eu-west-1.amazonaws.com", 443, "/my.dotted.bucket/k")
    assert aws._address("s3://my.dotted.bucket/k") == dotted
    local = S3RangeFileSystem(endpoint="http://127.0.0.1:9000", region="us-east-1", credentials=None)
    assert local._address("fleet/a/b.itar") == ("http", "127.0.0.1", 9000, "/fleet/a/b.itar")


@pytest.fixture
def s3_archive(s3_bucket: UPath, s3_proxy: ServerProcess) -> Iterator[tuple[UPath, dict[str, bytes]]]:
    records = sample_records()
    location = s3_bucket / "a folder" / "seq+1.itar"
    write_records(location, records)
    s3_proxy.clear_requests()
    yield location, records


def read_in_fresh_process(location: UPath, keys: list[str], client: str = "") -> dict[str, Any]:
    code = f"""
        import hashlib, json, sys
        from ncore_like import IndexedTarArchive
        archive = IndexedTarArchive({str(location)!r}, storage_options={dict(location.storage_options)!r},
                                    remote_range_reads=True)
        digests = {{key: hashlib.sha256(archive[key]).hexdigest() for key in {keys!r}}}
        loaded = [name for name in ("s3fs", "botocore", "aiobotocore", "aiohttp") if name in sys.modules]
        print(json.dumps({{"digests": digests, "loaded": loaded}}))
    """
    env = {**os.environ, "NCORE_LIKE_S3_CLIENT": client}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr
    import json

    found: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return found


def test_a_fresh_process_reads_s3_without_botocore(
    s3_archive: tuple[UPath, dict[str, bytes]], s3_proxy: ServerProcess
) -> None:
    location, records = s3_archive
    keys = ["frames/003", "big", "unicode/光", "empty"]
    want = {key: hashlib.sha256(records[key]).hexdigest() for key in keys}
    found = read_in_fresh_process(location, keys)
    assert found == {"digests": want, "loaded": []}
    requests = [(r["method"], r["range"]) for r in s3_proxy.requests()]
    assert requests[0] == ("GET", "bytes=-1048576")  # the tail
    assert ("GET", None) not in requests and all(method == "GET" for method, _ in requests)
    # The same reads through s3fs, asked for by the environment variable.
    found = read_in_fresh_process(location, keys, client="s3fs")
    assert found["digests"] == want and "botocore" in found["loaded"]


def test_missing_objects_and_buckets_name_the_url(s3_bucket: UPath) -> None:
    for location in (s3_bucket / "nothing.itar", UPath("s3://no-such-bucket-here/x.itar", **s3_bucket.storage_options)):
        with pytest.raises(FileNotFoundError) as raised:
            IndexedTarArchive(location)
        assert str(location) in str(raised.value) and "no such file or object (HTTP 404 NoSuch" in str(raised.value)


def test_an_endpoint_that_refuses_connections_is_named() -> None:
    from tests.support.servers import _free_port

    port = _free_port()
    options = {"endpoint_url": f"http://127.0.0.1:{port}", "key": "k", "secret": "s"}
    with pytest.raises(RemoteStorageError, match="can't reach the storage") as raised:
        IndexedTarArchive("s3://bucket/seq.itar", storage_options=options)
    assert f"127.0.0.1:{port}" in str(raised.value) and raised.value.archive == "s3://bucket/seq.itar"


def _read_frame_in_child(location: str, options: dict[str, Any], queue: Any) -> None:
    archive = IndexedTarArchive(location, storage_options=options, remote_range_reads=True)
    queue.put(hashlib.sha256(archive["frames/001"]).hexdigest())


def test_a_forked_child_reads_on_its_own_connections(s3_archive: tuple[UPath, dict[str, bytes]]) -> None:
    location, records = s3_archive
    options = dict(location.storage_options)
    archive = IndexedTarArchive(str(location), storage_options=options, remote_range_reads=True)
    assert archive["frames/000"] == records["frames/000"]  # the parent's loop and connections are in use
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_read_frame_in_child, args=(str(location), options, queue))
    child.start()
    assert queue.get(timeout=60) == hashlib.sha256(records["frames/001"]).hexdigest()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert archive["frames/002"] == records["frames/002"]


class ScriptedServer:
    """An HTTP server on loopback: its ``n``-th connection answers its requests, in turn, with
    the raw responses of the ``n``-th script, then closes; a ``None`` in a script closes the
    connection without answering (as a server that dropped an idle keep-alive connection)."""

    def __init__(self, *scripts: list[bytes | None], tls: ssl.SSLContext | None = None) -> None:
        self.scripts = scripts
        self.tls = tls
        self.connections = 0
        self.requests: list[str] = []  # their heads
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        for script in self.scripts:
            connection, _ = self.listener.accept()
            self.connections += 1
            if self.tls is not None:
                try:
                    connection = self.tls.wrap_socket(connection, server_side=True)
                except OSError:  # the client refused the certificate
                    return
            with connection, connection.makefile("rb") as file:  # both: the file keeps the socket open
                for response in script:
                    head = []
                    while (line := file.readline()) not in (b"\r\n", b""):
                        head.append(line.decode("latin-1"))
                    self.requests.append("".join(head))
                    if response is None:
                        break
                    connection.sendall(response)

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.listener.close()

    def filesystem(
        self, credentials: tuple[str, str, str | None] | None = None, ca_bundle: str | None = None
    ) -> S3RangeFileSystem:
        endpoint = f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"
        return S3RangeFileSystem(endpoint=endpoint, region="us-east-1", credentials=credentials, ca_bundle=ca_bundle)


def test_chunked_and_unsized_bodies_are_read_whole() -> None:
    document = b"<Error><Code>AccessDenied</Code><Message>Not yours</Message></Error>"
    chunked = b"".join(
        [
            b"HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"%x\r\n%s\r\n" % (20, document[:20]),
            b"%x;ext=1\r\n%s\r\n" % (len(document) - 20, document[20:]),
            b"0\r\n\r\n",
        ]
    )
    unsized = b"HTTP/1.1 206 Partial Content\r\nConnection: close\r\n\r\n" + b"x" * 100_000
    server = ScriptedServer([chunked, unsized])
    fs = server.filesystem()
    with pytest.raises(PermissionError, match="AccessDenied: Not yours"):
        fs.cat_file("bucket/key", start=0, end=10)
    assert fs.cat_file("bucket/key", start=0, end=100_000) == b"x" * 100_000  # on the same connection


def test_a_body_cut_short_is_a_transient_failure() -> None:
    from ncore_like.archive._retry import is_transient

    server = ScriptedServer([b"HTTP/1.1 206 Partial Content\r\nContent-Length: 1000\r\n\r\n" + b"y" * 400])
    with pytest.raises(ConnectionResetError, match="ended after 400 of 1000 bytes") as raised:
        server.filesystem().cat_file("bucket/key", start=0, end=1000)
    assert is_transient(raised.value)


def test_a_bucket_in_another_region_is_followed() -> None:
    document = b"<Error><Code>PermanentRedirect</Code><Message>Use the bucket's region</Message></Error>"
    moved = b"HTTP/1.1 301 Moved Permanently\r\nx-amz-bucket-region: eu-west-1\r\nContent-Length: %d\r\n\r\n%s" % (
        len(document),
        document,
    )
    answer = b"HTTP/1.1 206 Partial Content\r\nContent-Length: 4\r\n\r\nabcd"
    server = ScriptedServer([moved, answer, answer])
    fs = server.filesystem(credentials=("AKID", "secret", None))
    assert fs.cat_file("bucket/key", start=0, end=4) == b"abcd"
    assert fs.cat_file("bucket/key", start=4, end=8) == b"abcd"  # straight to the bucket's region
    scopes = [re.search(r"Credential=AKID/\d+/([a-z0-9-]+)/s3/", request) for request in server.requests]
    assert [scope.group(1) if scope else None for scope in scopes] == ["us-east-1", "eu-west-1", "eu-west-1"]


def test_https_verifies_the_certificate_with_the_trusted_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTPS, as on AWS: the server's certificate is checked against the system's authorities,
    or the bundle of AWS_CA_BUNDLE (as botocore does)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a certificate")
    certificate, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(certificate)],
        check=True, capture_output=True,
    )  # fmt: skip
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(certificate, key)
    answer = b"HTTP/1.1 206 Partial Content\r\nContent-Length: 5\r\n\r\nhello"
    with ScriptedServer([answer], tls=tls) as server:  # not trusted by the system
        with pytest.raises(ConnectionError, match=f"127.0.0.1:{server.port}: .*certificate verify failed"):
            server.filesystem().cat_file("bucket/key", start=0, end=5)
    with ScriptedServer([answer], tls=tls) as server:
        assert server.filesystem(ca_bundle=str(certificate)).cat_file("bucket/key", start=0, end=5) == b"hello"
    monkeypatch.setenv("AWS_CA_BUNDLE", str(certificate))
    plain = range_filesystem("s3", {"endpoint_url": "https://127.0.0.1:9", "anon": True})
    assert plain is not None and plain._ca_bundle == str(certificate)


def test_a_connection_the_server_closed_is_replaced() -> None:
    answer = b"HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\n\r\n0123456789"
    with ScriptedServer([answer, None], [answer]) as server:
        fs = server.filesystem()
        assert fs.cat_file("bucket/key", start=0, end=10) == b"0123456789"
        assert fs.cat_file("bucket/key", start=0, end=10) == b"0123456789"  # the first connection was dropped
        assert server.connections == 2
