"""``ncore-like view`` in a real browser (the machine's Chromium, driven by Playwright), on
the demo's sequence: the tree, frames as images of the right pixels, the timeline, plots,
point clouds, attributes and statistics checked against what the library and numpy read;
the same from the test S3 server with its requests counted.

Security and the server's edges (tokens, names, addresses, the command line) are in
``tests/test_viewer_server.py``.
"""

from __future__ import annotations

import argparse
import io
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from upath import UPath

from ncore_like import IndexedTarArchive, IndexedTarZarrStore, Viewer, view
from ncore_like.cli import main as cli_main
from ncore_like.demo import write_sequence
from tests.support.servers import ServerProcess, s3_storage_options, start_proxy

FRAMES = 24
POINTS = 20_000
DOCS_IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"

#: The centre pixel of every 8x8 block of the image ``#frame`` shows (the demo's frames
#: are drawn in blocks), as a flat list of RGB values.
READ_FRAME_PIXELS = """() => {
  const img = document.querySelector('#frame');
  const canvas = document.createElement('canvas');
  canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
  const ctx = canvas.getContext('2d');
  ctx.drawImage(img, 0, 0);
  const data = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
  const out = [];
  for (let y = 4; y < canvas.height; y += 8)
    for (let x = 4; x < canvas.width; x += 8) {
      const o = 4 * (y * canvas.width + x);
      out.push(data[o], data[o + 1], data[o + 2]);
    }
  return out;
}"""

#: Pixels of a canvas that differ from its first pixel (the background).
DRAWN_PIXELS = """(selector) => {
  const canvas = document.querySelector(selector);
  const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let count = 0;
  for (let i = 4; i < data.length; i += 4)
    if (data[i] !== data[0] || data[i + 1] !== data[1] || data[i + 2] !== data[2]) count++;
  return count;
}"""

#: A hash of a canvas's pixels (to tell two drawings apart).
CANVAS_DIGEST = """(selector) => {
  const canvas = document.querySelector(selector);
  const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let hash = 0;
  for (let i = 0; i < data.length; i++) hash = (hash * 31 + data[i]) | 0;
  return hash;
}"""


def make_sequence(folder: Path, frames: int = FRAMES) -> Path:
    """The demo's sequence (2 cameras, lidar slabs of 8 sweeps, poses, timestamps)."""
    path = folder / "sequence.itar"
    args = argparse.Namespace(frames=frames, cameras=2, points=POINTS, slab=8, workers=2)
    write_sequence(path, args, np.random.default_rng(2026))
    return path


@pytest.fixture(scope="module")
def sequence(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sequence(tmp_path_factory.mktemp("view"))


@pytest.fixture
def viewer(sequence: Path) -> Iterator[Viewer]:
    with view(sequence, open_browser=False) as running:
        yield running


def open_view(page: Any, viewer: Viewer, fragment: str = "/") -> None:
    """Opens the viewer's URL (token and all) at ``#fragment`` and waits for the tree."""
    page.goto(f"{viewer.url}#{fragment}")
    page.wait_for_selector("body[data-tree='1']")


def expected_pixels(location: Path | UPath, path: str) -> np.ndarray:
    """The centre pixels of the blocks of frame ``path``, decoded by Pillow from the bytes
    the library reads."""
    data = IndexedTarZarrStore(location).open_root_group().array(path).read_bytes()
    image = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    return image[4::8, 4::8].reshape(-1).astype(int)


def shown_frame(page: Any, index: int) -> np.ndarray:
    page.wait_for_selector(f"#frame[data-index='{index}']")
    return np.array(page.evaluate(READ_FRAME_PIXELS), dtype=int)


def stats_row(page: Any, label: str) -> list[str]:
    """The cells (count, min, max, mean, std, nan) of the statistics row of ``label``."""
    cells: list[str] = page.evaluate(
        """(label) => {
          const rows = [...document.querySelectorAll('#stats tr')];
          const row = rows.find(r => r.querySelector('th')?.textContent === label);
          return row ? [...row.querySelectorAll('td')].map(td => td.textContent) : null;
        }""",
        label,
    )
    assert cells is not None, f"no statistics row {label!r}"
    return cells


def frame_path(camera: str, index: int) -> str:
    return f"cameras/{camera}/{index:05d}"


#: The screenshots for the docs: a narrow window (the docs site shows them on phones too,
#: where a wider one would shrink its text below legibility), at twice the pixels.
SCREENSHOT_VIEWPORT = {"width": 380, "height": 660}
SCREENSHOT_SCALE = 2
#: The viewer's smallest text, CSS pixels (viewer.css and the canvases' labels).
SMALLEST_TEXT_CSS_PX = 12
#: The PNG text key under which images of the docs record their smallest text's height in
#: pixels (tests/test_docs_site.py checks it is legible as shown; as plot_performance.py).
SMALLEST_TEXT_KEY = "Smallest text px"


def save_screenshot(page: Any, name: str) -> None:
    """Keeps a screenshot for the docs (docs/images/NAME.png), with a margin of white around
    a thin frame and its smallest text's height recorded; written only when it changed."""
    from PIL.PngImagePlugin import PngInfo

    # Nothing is wider than the narrow window: no sideways scrolling of the page or the panel.
    assert page.evaluate("() => document.documentElement.scrollWidth") <= page.viewport_size["width"]
    assert page.eval_on_selector("#main", "main => main.scrollWidth - main.clientWidth") <= 0

    shot = Image.open(io.BytesIO(page.screenshot())).convert("RGB")
    margin, frame = 8 * SCREENSHOT_SCALE, SCREENSHOT_SCALE
    framed = Image.new("RGB", (shot.width + 2 * margin, shot.height + 2 * margin), "white")
    outline = (margin - frame, margin - frame, margin + shot.width + frame, margin + shot.height + frame)
    framed.paste((221, 225, 229), outline)
    framed.paste(shot, (margin, margin))
    info = PngInfo()
    info.add_text(SMALLEST_TEXT_KEY, f"{SMALLEST_TEXT_CSS_PX * SCREENSHOT_SCALE:.1f}")
    buffer = io.BytesIO()
    framed.save(buffer, format="PNG", pnginfo=info, optimize=True)
    DOCS_IMAGES.mkdir(exist_ok=True)
    target = DOCS_IMAGES / f"{name}.png"
    if not target.exists() or target.read_bytes() != buffer.getvalue():
        target.write_bytes(buffer.getvalue())


# -- the page, on a local archive -------------------------------------------------------------


def test_the_tree_lists_every_group_and_array(page: Any, viewer: Viewer, sequence: Path) -> None:
    open_view(page, viewer)
    root = IndexedTarZarrStore(sequence).open_root_group()
    groups, arrays = [], []

    def walk(group: Any) -> None:
        for _, node in group.items():
            if hasattr(node, "groups"):
                groups.append(node.path)
                walk(node)
            elif not node.path.startswith("cameras/"):
                arrays.append(node.path)

    walk(root)
    listed = page.eval_on_selector_all("#tree a[data-kind='group']", "links => links.map(a => a.dataset.path)")
    assert sorted(listed) == sorted(["", *groups])
    listed_arrays = page.eval_on_selector_all("#tree a[data-kind='array']", "links => links.map(a => a.dataset.path)")
    assert sorted(listed_arrays) == sorted(arrays)
    # The frames of a camera are counted, not listed one by one.
    assert page.inner_text("#tree li:has(> a[data-path='cameras/front']) .meta") == f"{FRAMES} frames"


def test_attributes_are_shown(page: Any, viewer: Viewer) -> None:
    open_view(page, viewer)
    page.wait_for_selector("body[data-shown='']")
    assert '"sequence": "demo-drive"' in page.inner_text("#details pre.attributes")
    page.click("#tree a[data-path='cameras/front']")
    page.wait_for_selector("body[data-shown='cameras/front']")
    text = page.inner_text("#details")
    assert '"fps": 10' in text and '"codec": "jpeg"' in text
    assert "attributes (2)" in text


def test_a_frame_renders_with_its_pixels_and_the_timeline_steps(page: Any, viewer: Viewer, sequence: Path) -> None:
    open_view(page, viewer, "/cameras/front")
    first = shown_frame(page, 0)
    size = page.eval_on_selector("#frame", "img => [img.naturalWidth, img.naturalHeight]")
    stored = IndexedTarZarrStore(sequence).open_root_group().array(frame_path("front", 0)).read_bytes()
    assert size == list(Image.open(io.BytesIO(stored)).size) == [640, 360]
    assert "640 \N{MULTIPLICATION SIGN} 360 px" in page.inner_text("#frame-info")
    np.testing.assert_allclose(first, expected_pixels(sequence, frame_path("front", 0)), atol=3)

    page.click("#next")
    second = shown_frame(page, 1)
    np.testing.assert_allclose(second, expected_pixels(sequence, frame_path("front", 1)), atol=3)
    assert np.abs(second - first).max() > 100  # the lane marks moved
    assert page.inner_text("#frame-label").startswith(f"2 / {FRAMES}")

    page.keyboard.press("ArrowRight")
    np.testing.assert_allclose(shown_frame(page, 2), expected_pixels(sequence, frame_path("front", 2)), atol=3)
    page.fill("#frame-slider", "20")  # the slider jumps
    np.testing.assert_allclose(shown_frame(page, 20), expected_pixels(sequence, frame_path("front", 20)), atol=3)
    page.click("#prev")
    shown_frame(page, 19)
    page.click("#first")
    np.testing.assert_allclose(shown_frame(page, 0), first, atol=0)


def test_play_runs_through_the_frames(page: Any, sequence: Path) -> None:
    with view(sequence, open_browser=False) as viewer:
        open_view(page, viewer, "/cameras/rear")
        shown_frame(page, 0)
        page.click("#play")
        page.wait_for_selector(f"#frame[data-index='{FRAMES - 1}']", timeout=20_000)
        page.wait_for_selector("#play:not(.active)")  # stops at the last frame


def test_the_pose_plot_draws_the_translation(page: Any, viewer: Viewer, sequence: Path) -> None:
    open_view(page, viewer, "/poses")
    page.wait_for_selector("#plot[data-drawn='3']")
    assert page.evaluate(DRAWN_PIXELS, "#plot") > 2000
    checked = page.eval_on_selector_all("#columns input:checked", "all => all.map(i => i.parentElement.textContent)")
    assert checked == ["[0,3]", "[1,3]", "[2,3]"]
    poses = IndexedTarZarrStore(sequence).open_root_group().array("poses").read()
    cells = stats_row(page, "[0,3]")
    assert int(cells[0]) == FRAMES
    assert float(cells[1]) == pytest.approx(poses[:, 0, 3].min(), rel=1e-5)
    assert float(cells[2]) == pytest.approx(poses[:, 0, 3].max(), rel=1e-5)
    assert float(cells[3]) == pytest.approx(poses[:, 0, 3].mean(), rel=1e-5)
    before = page.evaluate(CANVAS_DIGEST, "#plot")
    page.click("#columns input[data-column='0']")  # another column: drawn again, no request
    page.wait_for_selector("#plot[data-drawn='4']")
    assert page.evaluate(CANVAS_DIGEST, "#plot") != before


def test_the_lidar_draws_from_above_coloured_by_a_column(page: Any, viewer: Viewer, sequence: Path) -> None:
    open_view(page, viewer, "/lidar/slab_001")
    page.wait_for_selector("#points[data-drawn]")
    drawn = int(page.get_attribute("#points", "data-drawn") or 0)
    assert drawn > POINTS * 0.95  # nearly every point lands on the canvas
    assert page.evaluate(DRAWN_PIXELS, "#points") > 2000
    # The fields named by the lidar group, intensity chosen for the colour.
    assert page.eval_on_selector_all("#colour-column option", "o => o.map(x => x.textContent)") == [
        "x",
        "y",
        "z",
        "intensity",
    ]
    assert page.eval_on_selector("#colour-column", "s => s.selectedOptions[0].textContent") == "intensity"
    sweep = IndexedTarZarrStore(sequence).open_root_group().array("lidar/slab_001").read()[0]
    cells = stats_row(page, "intensity")
    assert int(cells[0]) == POINTS
    assert float(cells[1]) == sweep[:, 3].min() and float(cells[2]) == sweep[:, 3].max()
    before = page.evaluate(CANVAS_DIGEST, "#points")
    page.select_option("#colour-column", label="z")
    assert page.evaluate(CANVAS_DIGEST, "#points") != before
    page.click("#index-next")  # the next sweep of the slab
    page.wait_for_selector("#index-label:has-text('2 / 8')")
    cells = stats_row(page, "x")
    next_sweep = IndexedTarZarrStore(sequence).open_root_group().array("lidar/slab_001").read()[1]
    assert float(cells[1]) == pytest.approx(float(next_sweep[:, 0].min()))


def test_a_series_shows_numpys_statistics(page: Any, viewer: Viewer, sequence: Path) -> None:
    open_view(page, viewer, "/timestamps_us")
    page.wait_for_selector("#plot[data-drawn='1']")
    assert page.evaluate(DRAWN_PIXELS, "#plot") > 500
    values = IndexedTarZarrStore(sequence).open_root_group().array("timestamps_us").read()
    cells = stats_row(page, "all")
    assert [int(cells[0]), int(cells[1]), int(cells[2])] == [values.size, int(values.min()), int(values.max())]
    facts = page.inner_text("#details table.facts")
    assert "int64" in facts and "blosc lz4/5/shuffle" in facts and f"({FRAMES},)" in facts


def test_a_damaged_frame_shows_the_checksum_error_not_pixels(page: Any, sequence: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.itar"
    shutil.copyfile(sequence, damaged)
    key = IndexedTarZarrStore(sequence).open_root_group().array(frame_path("front", 5)).view.chunk_key(())  # type: ignore[union-attr]
    record = IndexedTarArchive(sequence).records[key]
    with damaged.open("r+b") as file:  # a byte of the entropy-coded image, near its end
        file.seek(record.offset + record.size - 20)
        byte = file.read(1)
        file.seek(-1, 1)
        file.write(bytes([byte[0] ^ 0xFF]))
    with view(damaged, open_browser=False) as viewer:
        open_view(page, viewer, "/cameras/front")
        shown_frame(page, 0)
        page.fill("#frame-slider", "4")
        np.testing.assert_allclose(shown_frame(page, 4), expected_pixels(sequence, frame_path("front", 4)), atol=3)
        page.click("#next")
        page.wait_for_selector("#frame-error .error")
        assert page.inner_text("#frame-error").startswith("ChecksumError: ")
        assert key in page.inner_text("#frame-error")
        assert page.eval_on_selector("#frame", "img => img.hidden && !img.getAttribute('src')")
        page.click("#next")  # the frames after it are fine
        np.testing.assert_allclose(shown_frame(page, 6), expected_pixels(sequence, frame_path("front", 6)), atol=3)
        assert page.inner_text("#frame-error") == ""


def test_a_zarr_directory_is_shown_like_its_archive(page: Any, sequence: Path, tmp_path: Path) -> None:
    folder = tmp_path / "sequence.zarr"
    assert cli_main(["extract", str(sequence), "-C", str(folder)]) == 0
    with view(folder, open_browser=False) as viewer:
        open_view(page, viewer, "/cameras/rear")
        np.testing.assert_allclose(shown_frame(page, 0), expected_pixels(sequence, frame_path("rear", 0)), atol=3)
        listed = page.eval_on_selector_all("#tree a[data-kind='group']", "links => links.map(a => a.dataset.path)")
        assert sorted(listed) == ["", "cameras", "cameras/front", "cameras/rear", "lidar"]
        page.goto(f"http://127.0.0.1:{viewer.port}/#/lidar/slab_000")
        page.wait_for_selector("#points[data-drawn]")
        assert page.evaluate(DRAWN_PIXELS, "#points") > 2000


def encoded(image: np.ndarray, kind: str) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format=kind, **({"lossless": True} if kind == "WEBP" else {}))
    return buffer.getvalue()


def test_png_webp_and_other_blobs_under_any_names(page: Any, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    pictures = [rng.integers(0, 255, size=(48, 80, 3), dtype=np.uint8) for _ in range(2)]
    path = tmp_path / "blobs.itar"
    with IndexedTarZarrStore(path, "w") as store:
        root = store.create_root_group()
        odd = root.create_group("odd 光 %20#?", attributes={"note": "a name to escape"})
        for i, picture in enumerate(pictures):
            odd.create_bytes_array(f"frame {i}", encoded(picture, "PNG"))
        root.create_bytes_array("cover", encoded(pictures[1], "WEBP"))
        root.create_bytes_array("notes", b"plain text, no image" + bytes(range(40)))
        store.consolidate()
    with view(path, open_browser=False) as viewer:
        open_view(page, viewer)
        page.click("#tree a[data-path='odd 光 %20#?']")
        page.wait_for_selector("#frame[data-index='0']")
        assert "a name to escape" in page.inner_text("#details")
        assert page.eval_on_selector("#frame", "img => [img.naturalWidth, img.naturalHeight]") == [80, 48]
        assert "image/png" in page.inner_text("#frame-info")
        page.click("#next")
        page.wait_for_selector("#frame[data-index='1']")
        page.reload()  # the address names the group, escaped
        page.wait_for_selector("#frame[data-index='0']")
        page.click("#tree a[data-path='cover']")
        # The blob's own image (named by its alt): the group's frame may still be on the page.
        page.wait_for_selector("#frame[alt='cover']:not([hidden])")
        assert page.eval_on_selector("#frame", "img => [img.naturalWidth, img.naturalHeight]") == [80, 48]
        page.click("#tree a[data-path='notes']")
        page.wait_for_selector("pre.hex:not([hidden])")
        dump = page.inner_text("pre.hex")
        assert dump.startswith("00000000  70 6c 61 69 6e 20 74 65 78 74 2c 20 6e 6f 20 69  plain text, no i\n")
        assert "\n00000010  6d 61 67 65 00 01 02 03" in dump


def test_screenshots_of_the_demo_sequence_for_the_docs(browser: Any, sequence: Path) -> None:
    context = browser.new_context(viewport=SCREENSHOT_VIEWPORT, device_scale_factor=SCREENSHOT_SCALE)
    page = context.new_page()
    try:
        with view(sequence, open_browser=False) as viewer:
            open_view(page, viewer, "/cameras/front")
            page.click("#next")
            shown_frame(page, 1)
            page.eval_on_selector("#details", "node => node.scrollIntoView({block: 'start'})")
            save_screenshot(page, "view-frames")
            page.goto(f"http://127.0.0.1:{viewer.port}/#/poses")
            page.wait_for_selector("#plot[data-drawn='3']")
            page.eval_on_selector("#preview", "node => node.scrollIntoView({block: 'start'})")
            save_screenshot(page, "view-poses")
            page.goto(f"http://127.0.0.1:{viewer.port}/#/lidar/slab_000")
            page.wait_for_selector("#points[data-drawn]")
            page.eval_on_selector("#preview", "node => node.scrollIntoView({block: 'start'})")
            save_screenshot(page, "view-lidar")
    finally:
        context.close()
    for name in ("view-frames", "view-poses", "view-lidar"):
        with Image.open(DOCS_IMAGES / f"{name}.png") as image:
            margin = 8 * SCREENSHOT_SCALE
            assert image.size == tuple(SCREENSHOT_SCALE * side + 2 * margin for side in SCREENSHOT_VIEWPORT.values())


# -- the page, on the test S3 server, requests counted ------------------------------------------


def gets(server: ServerProcess, settle: float = 0.3) -> list[dict[str, Any]]:
    """The GET requests the server logged (after a moment for the last records to land)."""
    time.sleep(settle)
    return [request for request in server.requests() if request["method"] == "GET"]


def range_bytes(request: dict[str, Any], file_size: int) -> int:
    """Bytes a logged range request asked for."""
    spec = request["range"].split("=", 1)[1]
    start, _, end = spec.partition("-")
    if not start:
        return int(end)
    return (int(end) if end else file_size - 1) - int(start) + 1


@pytest.fixture
def s3_sequence(s3_bucket: UPath, sequence: Path, s3_proxy: ServerProcess) -> UPath:
    location = s3_bucket / "sequence.itar"
    location.write_bytes(sequence.read_bytes())
    s3_proxy.clear_requests()
    return location


@pytest.mark.s3
def test_a_remote_archive_costs_its_tail_and_what_is_shown(
    page: Any, s3_sequence: UPath, s3_proxy: ServerProcess, sequence: Path
) -> None:
    file_size = sequence.stat().st_size
    with view(s3_sequence, open_browser=False) as viewer:
        opening = gets(s3_proxy)
        assert len(opening) == 1 and opening[0]["range"].startswith("bytes=-")  # the tail: index and metadata
        s3_proxy.clear_requests()

        open_view(page, viewer)
        page.wait_for_selector("body[data-ready='1']")
        page.click("#tree a[data-path='poses']")
        page.wait_for_selector("#plot[data-drawn='3']")
        assert gets(s3_proxy) == []  # the tree, the root's attributes and the poses come with the tail

        page.click("#tree a[data-path='cameras/front']")
        np.testing.assert_allclose(shown_frame(page, 0), expected_pixels(sequence, frame_path("front", 0)), atol=3)
        first = gets(s3_proxy)
        assert len(first) == 1  # frame 0 and the frames after it, one range request
        s3_proxy.clear_requests()
        page.click("#next")
        shown_frame(page, 1)
        assert gets(s3_proxy) == []  # read ahead
        page.fill("#frame-slider", "16")
        np.testing.assert_allclose(shown_frame(page, 16), expected_pixels(sequence, frame_path("front", 16)), atol=3)
        assert len(gets(s3_proxy)) == 1

        page.click("#tree a[data-path='lidar/slab_002']")
        page.wait_for_selector("#points[data-drawn]")
        s3_proxy.clear_requests()
        page.click("#index-next")
        page.wait_for_selector("#index-label:has-text('2 / 8')")
        assert len(gets(s3_proxy)) == 1  # one sweep, one chunk
    read = sum(range_bytes(request, file_size) for request in [*opening, *first])
    assert read < file_size / 4


@pytest.fixture
def slow_s3(moto_server: ServerProcess) -> Iterator[ServerProcess]:
    """The test S3 server behind a proxy that adds 20 ms to every request."""
    with start_proxy(moto_server.endpoint, latency=0.02) as proxy:
        yield proxy


@pytest.mark.s3
def test_first_paint_and_steps_with_20_ms_per_request(
    page: Any, s3_sequence: UPath, slow_s3: ServerProcess, sequence: Path
) -> None:
    slow = UPath(f"s3://{s3_sequence.path}", **s3_storage_options(slow_s3.endpoint))
    slow_s3.clear_requests()
    with view(slow, open_browser=False) as viewer:
        open_view(page, viewer, "/cameras/front")
        painted = gets(slow_s3)
        assert len(painted) <= 5  # first paint: at most 5 round trips (here: the tail alone)
        shown_frame(page, 0)
        slow_s3.clear_requests()
        page.click("#next")  # read ahead with frame 0
        shown_frame(page, 1)
        assert gets(slow_s3) == []
        page.fill("#frame-slider", "12")  # not read yet
        shown_frame(page, 12)
        assert len(gets(slow_s3)) <= 1
        slow_s3.clear_requests()
        page.click("#next")
        shown_frame(page, 13)
        assert gets(slow_s3) == []


def test_the_plan_of_a_very_wide_array_costs_no_label_per_column() -> None:
    """A (2, 2_000_000) array shows no columns view, yet its plan made a label for each of
    its 2,000,000 columns (~1.5 GB for 20,000,000): a click on it in the tree."""
    import tracemalloc

    from ncore_like.viewer._previews import preview_plan

    tracemalloc.start()
    plan = preview_plan((2, 2_000_000), np.dtype("f8"), {})
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "columns" not in plan["views"] and "image" in plan["views"]
    assert peak < 1 << 20, peak


def test_the_text_preview_reads_the_slab_that_holds_its_values(tmp_path: Path) -> None:
    """200 values of a (3, 1_000_000) datetime array read three whole rows (24 MB; 532 MB
    for 20,000,000 columns). The values are numpy's first 200 in C order."""
    import json
    import struct
    import tracemalloc

    from ncore_like import IndexedTarZarrStore
    from ncore_like.viewer._previews import preview

    values = np.arange(3 * 1_000_000).astype("M8[s]").reshape(3, 1_000_000)
    with IndexedTarZarrStore(tmp_path / "t.itar", mode="w") as store:
        store.create_root_group({}).create_array("t", values, chunks=(1, 10_000))
    array = IndexedTarZarrStore(tmp_path / "t.itar").open_root_group(consolidated=False).array("t")
    tracemalloc.start()
    payload = preview(array, "text", 0, {})
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    (length,) = struct.unpack_from("<I", payload)
    header = json.loads(payload[4 : 4 + length])
    assert header["values"] == [str(value) for value in values.reshape(-1)[:200]] and header["total"] == values.size
    assert peak < 4 << 20, peak
