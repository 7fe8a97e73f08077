"""What the viewer costs on remote storage: time to first paint and to step through frames of
the demo's sequence on S3 with 20 ms per request, in round trips and requests.

S3 is moto on loopback behind the test proxy adding 20 ms to every request (and logging
them); the page is the machine's Chromium driven by Playwright. Measured, as medians of
``--repeat`` runs each with a new viewer (a new S3 client, as a new ``ncore-like view``):

* first paint: calling ``ncore_like.view()`` (the archive's opening) and then the page, from
  its navigation until it shows the tree (timed in the page: a new tab's own start is left
  out); then a click on a camera until its first frame shows (timed by the driver);
* a step to the next frame (read ahead with the one before; timed in the page), a jump to a
  frame not read yet (timed by the driver, its round trips included);
* playing 24 frames with the viewer's read-ahead against one read per frame (the read-ahead
  switched off), side by side: the ratio of their times and their requests.

Run from the repository root (~1 min)::

    .venv/bin/python -m scripts.bench_view [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from upath import UPath

import ncore_like.viewer._frames as frames_module
from ncore_like import view
from ncore_like.demo import write_sequence
from tests.support.browser import CHROMIUM_ARGS, find_chromium
from tests.support.servers import ServerProcess, s3_storage_options, start_moto, start_proxy

LATENCY = 0.02
FRAMES = 48


def gets(proxy: ServerProcess) -> int:
    time.sleep(0.2)  # the proxy logs a request as it sends its last byte
    return sum(1 for request in proxy.requests() if request["method"] == "GET")


#: Steps to the next frame, clicked in the page, each timed there until the frame is shown
#: (milliseconds): the viewer's own time, without the driver's round trips.
STEPS = """async (count) => {
  const times = [];
  for (let i = 0; i < count; i++) {
    const next = Number(document.querySelector('#frame').dataset.index) + 1;
    const started = performance.now();
    document.querySelector('#next').click();
    await new Promise((done) => {
      const shown = () => document.querySelector('#frame').dataset.index === String(next);
      const check = () => (shown() ? done() : setTimeout(check, 1));
      check();
    });
    times.push(performance.now() - started);
  }
  return times;
}"""


def steps(page: Any, proxy: ServerProcess, count: int) -> tuple[float, int]:
    """Seconds ``count`` steps to the next frame took (in the page) and the GETs they caused."""
    proxy.clear_requests()
    times = page.evaluate(STEPS, count)
    return sum(times) / 1e3, gets(proxy)


def one_run(page: Any, location: UPath, proxy: ServerProcess) -> dict[str, tuple[float, int]]:
    results: dict[str, tuple[float, int]] = {}
    proxy.clear_requests()
    started = time.perf_counter()
    viewer = view(location, open_browser=False)
    opened = time.perf_counter() - started
    results["open (view())"] = (opened, gets(proxy))
    try:
        page.goto(f"{viewer.url}#/")
        page.wait_for_selector("body[data-ready='1']")
        # The page's part: from its navigation to the tree painted, as the page timed it.
        painted = page.evaluate("() => performance.getEntriesByName('ncore-like-view:tree')[0].startTime") / 1e3
        results["first paint (tree)"] = (opened + painted, gets(proxy))
        proxy.clear_requests()
        started = time.perf_counter()
        page.click("#tree a[data-path='cameras/front']")
        page.wait_for_selector("#frame[data-index='0']")
        results["a camera's first frame"] = (time.perf_counter() - started, gets(proxy))
        page.fill("#frame-slider", "29")  # frame 29 and the frames after it, read now
        page.wait_for_selector("#frame[data-index='29']")
        results["step, read ahead"] = steps(page, proxy, 1)
        proxy.clear_requests()
        started = time.perf_counter()
        page.fill("#frame-slider", "40")
        page.wait_for_selector("#frame[data-index='40']")
        results["jump, not read yet"] = (time.perf_counter() - started, gets(proxy))
    finally:
        viewer.stop()
    return results


def play(page: Any, location: UPath, proxy: ServerProcess, window: int) -> tuple[float, int]:
    """Seconds and GETs to step through 24 frames as fast as they come, with read-ahead
    windows of ``window`` frames (1: one read per frame)."""
    frames_module.WINDOW_FRAMES = window
    try:
        with view(location, open_browser=False) as viewer:
            page.goto(f"{viewer.url}#/cameras/rear")
            page.wait_for_selector("#frame[data-index='0']")
            time.sleep(0.5)  # the frames read ahead with frame 0 have arrived
            return steps(page, proxy, 24)
    finally:
        frames_module.WINDOW_FRAMES = 8


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    chromium = find_chromium()
    if chromium is None:
        print("no Chromium on this machine", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as folder, start_moto() as moto, start_proxy(moto.endpoint) as fast:
        local = Path(folder) / "sequence.itar"
        demo = argparse.Namespace(frames=FRAMES, cameras=2, points=50_000, slab=8, workers=2)
        write_sequence(local, demo, np.random.default_rng(2026))
        import s3fs

        s3fs.S3FileSystem(**s3_storage_options(fast.endpoint)).call_s3("create_bucket", Bucket="bench")
        UPath("s3://bench/sequence.itar", **s3_storage_options(fast.endpoint)).write_bytes(local.read_bytes())
        size = local.stat().st_size
        with start_proxy(moto.endpoint, latency=LATENCY) as slow, sync_playwright() as playwright:
            location = UPath("s3://bench/sequence.itar", **s3_storage_options(slow.endpoint))
            browser = playwright.chromium.launch(executable_path=chromium, args=list(CHROMIUM_ARGS))
            runs: dict[str, list[tuple[float, int]]] = {}
            played: dict[int, list[tuple[float, int]]] = {8: [], 1: []}
            for _ in range(args.repeat):
                page = browser.new_page()
                for name, value in one_run(page, location, slow).items():
                    runs.setdefault(name, []).append(value)
                for window in (8, 1):  # side by side, alternating
                    played[window].append(play(page, location, slow, window))
                page.close()
            browser.close()
    print(f"the demo sequence ({FRAMES} frames x 2 cameras, {size / 1e6:.1f} MB) on S3 (moto), {LATENCY * 1e3:.0f} ms")
    print(f"per request; medians of {args.repeat} runs, each with a new viewer (a busy machine shows slower times)")
    print(f"{'':24} {'ms':>8} {'round trips':>12} {'GETs':>6}")
    for name, values in runs.items():
        seconds = statistics.median(v[0] for v in values)
        requests = statistics.median(v[1] for v in values)
        print(f"{name:24} {seconds * 1e3:8.0f} {seconds / LATENCY:12.1f} {requests:6.0f}")
    ahead, each = (statistics.median(v[0] for v in played[w]) for w in (8, 1))
    gets_ahead, gets_each = (statistics.median(v[1] for v in played[w]) for w in (8, 1))
    print(
        f"24 steps: read ahead {ahead * 1e3:.0f} ms ({gets_ahead:.0f} GETs), one read per frame "
        f"{each * 1e3:.0f} ms ({gets_each:.0f} GETs): {each / ahead:.2f}x faster with read-ahead"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
