"""The viewer's server without a browser: the access token, node names only, loopback by
default, read-only; frames read ahead by scans; the previews' values against numpy; bad
input; the command line (Ctrl-C, --host, a missing extra).

The page in a real browser is tested in ``tests/test_viewer.py``.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ncore_like import ArchiveFormatError, ChecksumError, IndexedTarArchive, IndexedTarZarrStore, Viewer, view
from ncore_like.viewer._catalog import Catalog
from ncore_like.viewer._frames import AHEAD_FRAMES, WINDOW_FRAMES, Frames
from ncore_like.viewer._previews import preview, preview_plan
from ncore_like.viewer._server import blob_type
from ncore_like.viewer._source import open_source
from tests.support.servers import loopback_env
from tests.test_viewer import FRAMES, frame_path, make_sequence

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sequence(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sequence(tmp_path_factory.mktemp("view-server"))


@pytest.fixture
def viewer(sequence: Path) -> Iterator[Viewer]:
    with view(sequence, open_browser=False) as running:
        yield running


def get(
    port: int, target: str, *, headers: dict[str, str] | None = None, method: str = "GET", host: str = "127.0.0.1"
) -> tuple[int, dict[str, str], bytes]:
    """One request with ``target`` sent as it is (no normalisation of ``..`` or escapes)."""
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request(method, target, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def authed(viewer: Viewer, target: str, **kwargs: Any) -> tuple[int, dict[str, str], bytes]:
    return get(viewer.port, target, headers={"Authorization": f"token {viewer.token}"}, **kwargs)


# -- the access token ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target", ["/", "/static/viewer.js", "/api/tree", "/api/node?path=", "/api/blob?path=cameras/front/00000"]
)
def test_a_request_without_the_token_is_refused(viewer: Viewer, target: str) -> None:
    status, _, body = get(viewer.port, target)
    assert status == 403 and b"token" in body
    wrong = "x" * len(viewer.token)
    assert get(viewer.port, f"{target}{'&' if '?' in target else '?'}token={wrong}")[0] == 403
    assert get(viewer.port, target, headers={"Authorization": f"token {wrong}"})[0] == 403
    assert get(viewer.port, target, headers={"Cookie": f"ncore_like_view_{viewer.port}={wrong}"})[0] == 403
    # The right token, in the cookie of another viewer (cookies don't tell ports apart).
    assert get(viewer.port, target, headers={"Cookie": f"ncore_like_view_1={viewer.token}"})[0] == 403
    assert authed(viewer, target)[0] == 200


def test_the_first_visit_keeps_the_token_in_a_cookie_and_leaves_the_address(viewer: Viewer) -> None:
    status, headers, _ = get(viewer.port, f"/?token={viewer.token}")
    assert status == 302 and headers["Location"] == "/"
    cookie = headers["Set-Cookie"]
    assert cookie.startswith(f"ncore_like_view_{viewer.port}={viewer.token};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    status, _, body = get(viewer.port, "/api/tree", headers={"Cookie": cookie.split(";")[0]})
    assert status == 200 and json.loads(body)["tree"]["kind"] == "group"


def test_every_answer_forbids_running_or_sniffing_what_it_serves(viewer: Viewer) -> None:
    for target in ("/", "/api/blob?path=cameras/front/00000", "/api/tree"):
        _, headers, _ = authed(viewer, target)
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert "script-src 'self'" in headers["Content-Security-Policy"]
        assert headers["Referrer-Policy"] == "no-referrer"
    _, headers, _ = get(viewer.port, "/api/tree")  # refusals too
    assert headers["X-Content-Type-Options"] == "nosniff"


def test_the_viewer_is_read_only(viewer: Viewer) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert authed(viewer, "/api/tree", method=method)[0] == 405


# -- names of nodes only -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        "/api/node?path=..",
        "/api/node?path=../../etc/passwd",
        "/api/node?path=/etc/passwd",
        "/api/blob?path=cameras/front/../../../../etc/passwd",
        "/api/blob?path=cameras/./front/00000",
        "/api/node?path=%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "/api/node?path=%2Fetc%2Fpasswd",
        "/api/node?path=cameras%5c..%5c..%5cpyproject.toml",
        "/api/node?path=cameras//front",
        "/api/preview?path=../poses&view=columns",
    ],
)
def test_traversal_is_refused_before_any_lookup(viewer: Viewer, target: str) -> None:
    status, _, body = authed(viewer, target)
    assert status == 400
    assert json.loads(body)["error"] == "InvalidPath"


@pytest.mark.parametrize(
    "target",
    [
        "/api/node?path=%252e%252e%252fetc%252fpasswd",  # decoded once: no node of that name
        "/api/node?path=etc/passwd",
        "/api/node?path=pyproject.toml",
        "/api/blob?path=.zmetadata",  # a record of the archive, not a node
        "/api/blob?path=cameras/front/00000/0",
        "/static/..%2f..%2fpyproject.toml",
        "/static/../../pyproject.toml",
        "/static/%2e%2e/%2e%2e/pyproject.toml",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/static/index.html%00.js",
    ],
)
def test_names_that_are_no_nodes_or_files_of_the_page_are_not_found(viewer: Viewer, target: str) -> None:
    status, _, body = authed(viewer, target)
    assert status in (400, 404), (status, body[:200])
    assert b"[project]" not in body and b"root:" not in body


def test_arrays_show_the_facts_the_tree_command_shows(viewer: Viewer, sequence: Path) -> None:
    from ncore_like._pack._hierarchy import compression_label
    from ncore_like.cli._tree import record_size_lookup, summarize_array

    root = IndexedTarZarrStore(sequence).open_root_group()
    for path in ("poses", "timestamps_us", "lidar/slab_001", "cameras/front/00002"):
        array = root.array(path)
        summary = summarize_array(array, record_size_lookup(root))
        details = json.loads(authed(viewer, f"/api/node?path={path}")[2])
        assert details["codecs"]["label"] == compression_label(array)
        assert details["codecs"]["chain"] == json.loads(json.dumps(list(array.codecs)))
        assert details["stored_bytes"] == summary.stored_bytes and details["nbytes"] == summary.nbytes
        assert (details["chunks_stored"], details["chunks_total"]) == (summary.chunks_stored, summary.chunks_total)
        assert details["shape"] == list(array.shape) and details["dtype"] == str(array.dtype)


def test_the_nodes_of_the_hierarchy_are_served(viewer: Viewer, sequence: Path) -> None:
    root = IndexedTarZarrStore(sequence).open_root_group()
    status, headers, body = authed(viewer, "/api/blob?path=cameras/rear/00003")
    assert status == 200 and headers["Content-Type"] == "image/jpeg"
    assert body == root.array(frame_path("rear", 3)).read_bytes()
    status, _, body = authed(viewer, "/api/node?path=lidar")
    assert json.loads(body)["attributes"] == dict(root.group("lidar").attributes)


# -- addresses -----------------------------------------------------------------------------------


def non_loopback_address() -> str:
    """An IPv4 address of this machine beyond loopback (skips where there is none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.254.254.254", 1))  # UDP: nothing is sent, the route picks the address
            address = str(probe.getsockname()[0])
        except OSError:
            address = ""
    if not address or address.startswith("127."):
        pytest.skip("this machine has no address beyond loopback")
    return address


def test_by_default_the_viewer_listens_on_loopback_only(viewer: Viewer) -> None:
    assert viewer.host == "127.0.0.1"
    assert viewer.url.startswith(f"http://127.0.0.1:{viewer.port}/?token=")
    address = non_loopback_address()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as client:
        client.settimeout(5)
        with pytest.raises(OSError):  # refused: nothing listens there
            client.connect((address, viewer.port))


def test_another_host_is_served_with_a_warning(sequence: Path) -> None:
    address = non_loopback_address()
    with (
        pytest.warns(UserWarning, match="beyond this machine"),
        view(sequence, host="0.0.0.0", open_browser=False) as v,
    ):
        status, _, _ = get(v.port, "/api/tree", headers={"Authorization": f"token {v.token}"}, host=address)
        assert status == 200
        assert get(v.port, "/api/tree", host=address)[0] == 403  # still the token


def test_a_taken_port_is_an_error(viewer: Viewer, sequence: Path) -> None:
    with pytest.raises(OSError):
        view(sequence, port=viewer.port, open_browser=False)


def test_the_port_asked_for_is_used(sequence: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with view(sequence, port=port, open_browser=False) as v:
        assert v.port == port and authed(v, "/api/tree")[0] == 200
    with pytest.raises(OSError):  # stopped: nothing listens any more
        get(port, "/")


# -- frames read ahead by scans ---------------------------------------------------------------


def test_a_frame_comes_with_the_frames_after_it_in_one_scan(sequence: Path) -> None:
    source = open_source(sequence)
    frames = Frames(Catalog(source))
    root = IndexedTarZarrStore(sequence).open_root_group()
    try:
        assert frames.read(frame_path("front", 0)) == root.array(frame_path("front", 0)).read_bytes()
        assert frames.scans == 1
        for index in range(1, WINDOW_FRAMES - AHEAD_FRAMES):
            assert frames.read(frame_path("front", index)) == root.array(frame_path("front", index)).read_bytes()
        assert frames.scans == 1  # all of them read with frame 0
        frames.read(frame_path("front", WINDOW_FRAMES - AHEAD_FRAMES))
        assert frames.scans == 2  # few frames left ahead: the next window
        frames.read(frame_path("front", FRAMES - 1))
        assert frames.scans == 3
        with pytest.raises(TypeError, match="no blob"):
            frames.read("poses")
    finally:
        frames.close()
        source.close()


def test_a_damaged_frame_is_an_error_and_its_neighbours_are_read(sequence: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.itar"
    damaged.write_bytes(sequence.read_bytes())
    root = IndexedTarZarrStore(sequence).open_root_group()
    key = root.array(frame_path("front", 2)).view.chunk_key(())  # type: ignore[union-attr]
    record = IndexedTarArchive(sequence).records[key]
    with damaged.open("r+b") as file:
        file.seek(record.offset + 100)
        file.write(b"\x00\x01\x02")
    source = open_source(damaged)
    frames = Frames(Catalog(source))
    try:
        assert frames.read(frame_path("front", 0)) == root.array(frame_path("front", 0)).read_bytes()
        with pytest.raises(ChecksumError, match=re.escape(key)):
            frames.read(frame_path("front", 2))
        for index in (1, 3, 4):
            assert frames.read(frame_path("front", index)) == root.array(frame_path("front", index)).read_bytes()
    finally:
        frames.close()
        source.close()


# -- previews: which plot, and its values ---------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "dtype", "views"),
    [
        ((), "f8", ["scalar"]),
        ((100,), "i8", ["series"]),
        ((24, 4, 4), "f8", ["columns"]),
        ((24, 7), "f4", ["columns"]),
        ((8, 20000, 4), "f4", ["points"]),
        ((50000, 3), "f4", ["points", "columns"]),
        ((200, 3), "f4", ["columns", "points"]),
        ((480, 640), "u2", ["image"]),
        ((10, 480, 640, 3), "u1", ["image"]),
        ((5,), "U8", ["text"]),
    ],
)
def test_the_plot_fits_the_shape(shape: tuple[int, ...], dtype: str, views: list[str]) -> None:
    assert list(preview_plan(shape, np.dtype(dtype), {})["views"]) == views


def unpack(payload: bytes) -> tuple[dict[str, Any], np.ndarray | None]:
    """A preview payload as the page reads it."""
    (length,) = struct.unpack_from("<I", payload)
    header = json.loads(payload[4 : 4 + length])
    assert (4 + length) % 8 == 0
    if "dtype" not in header:
        return header, None
    values = np.frombuffer(payload[4 + length :], dtype=np.dtype(header["dtype"]).newbyteorder("<"))
    return header, values.reshape(header["shape"])


def test_previews_carry_numpys_values_and_statistics(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    series = rng.normal(size=50_000)
    series[7] = np.nan
    image = rng.integers(0, 4000, size=(300, 500), dtype=np.uint16)
    table = rng.random((300, 3)).astype(np.float32)
    path = tmp_path / "values.itar"
    with IndexedTarZarrStore(path, "w") as store:
        root = store.create_root_group()
        root.create_array("series", series, chunks=(4096,))
        root.create_array("image", image)
        root.create_array("table", table, attributes={"fields": ["a", "b", "c"]})
        root.create_array("timestamps", 1_700_000_000_000_000 + np.arange(100, dtype=np.int64) * 100_000)
        store.consolidate()
    root = IndexedTarZarrStore(path).open_root_group()

    header, values = unpack(preview(root.array("series"), "series", 0, {}))
    assert header["stats"]["nan"] == 1 and header["stats"]["count"] == series.size
    assert header["stats"]["min"] == np.nanmin(series) and header["stats"]["max"] == np.nanmax(series)
    assert header["stats"]["mean"] == pytest.approx(np.nanmean(series))
    assert header["envelope"] and values is not None
    step = header["step"]
    expected_max = [np.nanmax(series[i : i + step]) for i in range(0, series.size, step)]
    np.testing.assert_allclose(values[1, :, 0], np.array(expected_max, dtype=np.float32))

    # Microseconds since 1970 keep their steps of 0.1 s (float32 would round them to minutes).
    header, values = unpack(preview(root.array("timestamps"), "series", 0, {}))
    np.testing.assert_array_equal(values[0, :, 0], root.array("timestamps").read())

    header, values = unpack(preview(root.array("image"), "image", 0, {}))
    np.testing.assert_array_equal(values, image.astype(np.float32))
    assert header["stats"]["max"] == int(image.max()) and isinstance(header["stats"]["max"], int)

    header, values = unpack(preview(root.array("table"), "columns", 0, {"fields": ["a", "b", "c"]}))
    np.testing.assert_array_equal(values[0], table)
    assert [stats["max"] for stats in header["column_stats"]] == pytest.approx(list(table.max(axis=0)))
    header, values = unpack(preview(root.array("table"), "points", 0, {}))
    np.testing.assert_array_equal(values, table)


def test_a_preview_that_does_not_fit_is_a_bad_request(viewer: Viewer) -> None:
    status, _, body = authed(viewer, "/api/preview?path=poses&view=points")
    assert status == 400 and json.loads(body)["error"] == "PreviewError"
    status, _, body = authed(viewer, "/api/preview?path=lidar/slab_000&view=points&index=8")
    assert status == 400 and "out of range" in json.loads(body)["message"]
    status, _, body = authed(viewer, "/api/preview?path=lidar/slab_000&view=points&index=x")
    assert status == 400
    status, _, body = authed(viewer, "/api/preview?path=cameras&view=series")
    assert status == 400


def test_blobs_are_typed_by_their_magic_bytes() -> None:
    assert blob_type(b"\xff\xd8\xff\xe0rest") == "image/jpeg"
    assert blob_type(b"\x89PNG\r\n\x1a\n....") == "image/png"
    assert blob_type(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert blob_type(b"<html><script>") == "application/octet-stream"
    assert blob_type(b"XXXX\x00\x00\x00\x00WEBP") == "application/octet-stream"


def test_other_blobs_come_as_bytes_for_a_hex_preview(tmp_path: Path) -> None:
    path = tmp_path / "blobs.itar"
    payload = b"<html><script>alert(1)</script>" + bytes(range(256)) * 40
    with IndexedTarZarrStore(path, "w") as store:
        store.create_root_group().create_bytes_array("notes", payload)
        store.consolidate()
    with view(path, open_browser=False) as v:
        status, headers, body = authed(v, "/api/blob?path=notes")
    assert status == 200 and headers["Content-Type"] == "application/octet-stream"
    assert headers["X-Blob-Size"] == str(len(payload)) and body == payload[:4096]


@pytest.mark.s3
def test_a_zarr_store_url_is_shown(sequence: Path, tmp_path: Path, s3_bucket: Any) -> None:
    from ncore_like.cli import main

    assert main(["extract", "--quiet", str(sequence), "-C", str(tmp_path / "sequence.zarr")]) == 0
    remote = s3_bucket / "sequence.zarr"
    remote.fs.put(str(tmp_path / "sequence.zarr"), remote.path, recursive=True)
    root = IndexedTarZarrStore(sequence).open_root_group()
    with view(remote, open_browser=False) as v:
        assert v.name.endswith("/sequence.zarr")
        tree = json.loads(authed(v, "/api/tree")[2])
        assert tree["archive"] is False
        assert [member["path"] for member in tree["tree"]["members"]] == ["cameras", "lidar", "poses", "timestamps_us"]
        status, _, body = authed(v, "/api/blob?path=cameras/front/00001")
        assert status == 200 and body == root.array(frame_path("front", 1)).read_bytes()
        _, values = unpack(authed(v, "/api/preview?path=poses&view=columns")[2])
        np.testing.assert_array_equal(values[0], root.array("poses").read().reshape(FRAMES, 16))


# -- bad input -----------------------------------------------------------------------------------


def test_what_is_no_archive_or_hierarchy_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing.itar"):
        view(tmp_path / "missing.itar", open_browser=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty: a folder without a zarr hierarchy"):
        view(tmp_path / "empty", open_browser=False)
    (tmp_path / "plain.bin").write_bytes(b"not an archive" * 100)
    with pytest.raises(ArchiveFormatError, match="plain.bin"):
        view(tmp_path / "plain.bin", open_browser=False)
    with IndexedTarArchive(tmp_path / "records.itar", "w") as archive:
        archive["a"] = b"x"
    with pytest.raises(ValueError, match="records.itar: no zarr hierarchy"):
        view(tmp_path / "records.itar", open_browser=False)


# -- the command line ----------------------------------------------------------------------------


def run_view(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``ncore-like view ARGS`` as a process of its own, with Ctrl-C (SIGINT) handled as in a
    terminal even where the test run itself ignores it (a job started in the background)."""
    return subprocess.Popen(
        [sys.executable, "-m", "ncore_like", "view", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or loopback_env(),
        cwd=REPO,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def printed_url(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        match = re.search(r"http://127\.0\.0\.1:\d+/\?token=\S+", line)
        if match:
            return match.group(0)
    process.kill()
    raise AssertionError(f"no URL printed; stderr: {process.communicate()[1]}")


def test_the_command_serves_until_ctrl_c_and_stops_cleanly(sequence: Path) -> None:
    process = run_view(str(sequence), "--no-browser")
    try:
        url = printed_url(process)
        port = int(url.split(":")[2].split("/")[0])
        token = url.split("token=")[1]
        status, _, body = get(port, "/api/tree", headers={"Authorization": f"token {token}"})
        assert status == 200 and json.loads(body)["name"] == str(sequence)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert "stopped" in stderr and "Traceback" not in stderr
    with pytest.raises(OSError):
        get(port, "/")


def test_the_command_stops_on_sigterm_too(sequence: Path) -> None:
    process = run_view(str(sequence), "--no-browser")
    try:
        port = int(printed_url(process).split(":")[2].split("/")[0])
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143 and "terminated" in stderr and "Traceback" not in stderr
    with pytest.raises(OSError):
        get(port, "/")


def test_the_command_warns_for_another_host(sequence: Path) -> None:
    process = run_view(str(sequence), "--no-browser", "--host", "0.0.0.0")
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "token=" not in process.stdout.readline():
            pass
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert "ncore-like: warning: the viewer listens on '0.0.0.0', beyond this machine" in stderr
    assert process.returncode == 0


def test_the_command_reports_bad_input_in_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ncore_like", "view", str(tmp_path / "missing.itar"), "--no-browser"],
        capture_output=True,
        text=True,
        timeout=60,
        env=loopback_env(),
    )
    assert result.returncode == 1
    assert result.stderr.startswith("ncore-like: error: ") and "missing.itar" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_command_names_the_address_it_cant_listen_on_not_the_archive(viewer: Viewer, sequence: Path) -> None:
    """A port in use was reported as an error of the archive (``sequence.itar: [Errno 98]``)."""
    result = subprocess.run(
        [sys.executable, "-m", "ncore_like", "view", str(sequence), "--no-browser", "--port", str(viewer.port)],
        capture_output=True,
        text=True,
        timeout=60,
        env=loopback_env(),
    )
    assert result.returncode == 1
    assert result.stderr.startswith(f"ncore-like: error: can't listen on 127.0.0.1:{viewer.port} (")
    assert str(sequence) not in result.stderr and "Traceback" not in result.stderr


def test_without_aiohttp_the_viewer_says_what_to_install(sequence: Path) -> None:
    # None in sys.modules: ``import aiohttp`` fails as if it were not installed.
    code = "import sys; sys.modules['aiohttp'] = None; from ncore_like.cli import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run(
        [sys.executable, "-c", code, "view", str(sequence), "--no-browser"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**loopback_env(), "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert result.returncode == 1
    assert "pip install 'ncore-like[view]'" in result.stderr and "Traceback" not in result.stderr
    code = "import sys; sys.modules['aiohttp'] = None; import ncore_like; ncore_like.view(sys.argv[1])"
    result = subprocess.run([sys.executable, "-c", code, str(sequence)], capture_output=True, text=True, timeout=60)
    assert "ImportError: ncore_like.view (ncore-like view) needs aiohttp" in result.stderr
