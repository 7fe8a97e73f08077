"""Long commands on a remote archive show progress: every command that reads much of an
archive on S3 (the local server) draws a progress bar on standard error when it is a
terminal, and none when standard error is a pipe or with ``-q``.

The command line runs as a real subprocess whose standard error is a pseudo-terminal (what a
user's shell gives it) or a pipe; its standard output goes to a file, as ``cat ... > file``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import s3fs  # type: ignore[import-untyped,unused-ignore]

from ncore_like import BloscCompression, IndexedTarArchive, IndexedTarZarrStore
from tests.support import servers
from tests.support.servers import ServerProcess

BIG_BLOB = 12 << 20  # above the 8 MiB from which cat reads remote payloads in pieces
TIMEOUT = 120.0


def build(path: Path) -> None:
    """A sequence: small frames, one large blob, a Blosc array of 16 MiB in 16 chunks."""
    rng = np.random.default_rng(0)
    with IndexedTarZarrStore(path, "w") as store:
        root = store.create_root_group({"sequence": "progress"})
        front = root.create_group("cameras").create_group("front")
        for index in range(20):
            front.create_bytes_array(f"{index:05d}", rng.bytes(100_000), attributes={"t": index})
        root.create_group("blobs").create_bytes_array("big", rng.bytes(BIG_BLOB))
        points = rng.standard_normal((64, 16384, 4), dtype=np.float32)
        root.create_array("lidar", points, chunks=(4, 16384, 4), compression=BloscCompression())
        store.consolidate()


@dataclass(frozen=True)
class Remote:
    """The sequence on S3 (through the proxy)."""

    url: str
    options: dict[str, Any]

    @property
    def arguments(self) -> list[str]:
        """The storage options as ``-o KEY=VALUE`` arguments (strings as they are, the rest JSON)."""
        return [
            part
            for key, value in self.options.items()
            for part in ("-o", f"{key}={value if isinstance(value, str) else json.dumps(value)}")
        ]


@pytest.fixture(scope="module")
def remote(s3_proxy: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Remote]:
    options = servers.s3_storage_options(s3_proxy.endpoint)
    filesystem = s3fs.S3FileSystem(**options)
    bucket = f"progress-{uuid.uuid4().hex[:12]}"
    filesystem.call_s3("create_bucket", Bucket=bucket)
    path = tmp_path_factory.mktemp("progress") / "seq.itar"
    build(path)
    filesystem.put_file(str(path), f"{bucket}/seq.itar")
    yield Remote(f"s3://{bucket}/seq.itar", options)
    filesystem.rm(bucket, recursive=True)


#: Each long command, and the descriptions of the bars it must show (``tqdm``: "desc:  40%|").
COMMANDS: dict[str, tuple[list[str], list[str]]] = {
    "verify": (["verify", "{url}"], ["tar headers", "records", "arrays"]),
    "extract": (["extract", "{url}", "-C", "{tmp}/extracted"], ["extract"]),
    "pack": (["pack", "{url}", "{tmp}/copy.itar"], ["pack"]),
    "pack re-encoding": (["pack", "--compression", "zstd:3", "{url}", "{tmp}/zstd.itar"], ["pack"]),
    "cat of a large record": (["cat", "{url}", "blobs/big/0"], ["cat"]),
    "cat of a large blob": (["cat", "{url}", "blobs/big"], ["cat"]),
    "cat of a large array": (["cat", "{url}", "lidar"], ["cat"]),
}


def command(name: str, remote: Remote, tmp: Path, *extra: str) -> list[str]:
    argv = [part.format(url=remote.url, tmp=tmp) for part in COMMANDS[name][0]]
    return [sys.executable, "-m", "ncore_like", *argv[:1], *extra, *argv[1:], *remote.arguments]


def run_on_terminal(argv: list[str], tmp: Path) -> tuple[int, str]:
    """Runs ``argv`` with standard error on a pseudo-terminal of 100 columns; its exit code
    and what it wrote there."""
    main, terminal = os.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    with (tmp / "stdout").open("wb") as stdout:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=terminal)
    os.close(terminal)
    written = bytearray()
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 1.0)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                data = os.read(main, 65536)
            except OSError:  # EIO: the child closed its end of the terminal
                break
            if not data:
                break
            written += data
    finally:
        os.close(main)
        if process.poll() is None:
            process.kill()
    return process.wait(timeout=10), written.decode("utf-8", errors="replace")


def bars(text: str) -> list[str]:
    """The progress bar descriptions in ``text``, as tqdm draws them ("desc:  40%|...")."""
    return re.findall(r"([\w ]+):\s+\d+%\|", text)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_long_remote_commands_show_progress_on_a_terminal(name: str, remote: Remote, tmp_path: Path) -> None:
    code, stderr = run_on_terminal(command(name, remote, tmp_path), tmp_path)
    assert code == 0, stderr
    shown = {desc.strip() for desc in bars(stderr)}
    assert set(COMMANDS[name][1]) <= shown, f"bars {shown} in {stderr!r}"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_no_progress_bar_when_stderr_is_a_pipe(name: str, remote: Remote, tmp_path: Path) -> None:
    completed = subprocess.run(
        command(name, remote, tmp_path), stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT
    )
    stderr = completed.stderr.decode("utf-8", errors="replace")
    assert completed.returncode == 0, stderr
    assert not bars(stderr) and "\r" not in stderr, stderr


@pytest.mark.parametrize("name", list(COMMANDS))
def test_no_progress_bar_with_quiet(name: str, remote: Remote, tmp_path: Path) -> None:
    code, stderr = run_on_terminal(command(name, remote, tmp_path, "-q"), tmp_path)
    assert code == 0, stderr
    assert not bars(stderr) and "\r" not in stderr, stderr


def test_cat_of_a_large_remote_payload_is_exact(remote: Remote, tmp_path: Path) -> None:
    """The pieces read under the bar make up the payload, and the slabs the array."""
    with IndexedTarArchive(remote.url, storage_options=remote.options) as archive:
        blob = archive["blobs/big/0"]
    with IndexedTarZarrStore(remote.url, storage_options=remote.options) as store:
        values = store.open_root_group().array("lidar").read()
    for key in ("blobs/big/0", "blobs/big", "lidar"):
        argv = [sys.executable, "-m", "ncore_like", "cat", remote.url, key, *remote.arguments]
        code, stderr = run_on_terminal(argv, tmp_path)
        assert code == 0, stderr
        if key == "lidar":
            assert np.array_equal(np.load(tmp_path / "stdout"), values)
        else:
            assert (tmp_path / "stdout").read_bytes() == blob
