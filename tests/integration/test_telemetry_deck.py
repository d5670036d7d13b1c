"""The goodput page renders in headless Chromium and every plot is drawn where the page puts it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from platform_lib.telemetry.deck import PLOT_BOXES, PLOTS, render_deck_html
from platform_lib.telemetry.report import build_report
from platform_lib.telemetry.timeline import StepRecord, Timeline
from tests.support.timelines import restart_timeline

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
WINDOW = (2 * 480 + 3 * 20, 60 + 3 * 320 + 20)


def find_chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip(
        "Debian's chromium is not installed (.ci/run installs it: apt-get install -y chromium)"
    )


def screenshot(html_path: Path, png_path: Path, profile: Path) -> np.ndarray:
    """Render `html_path` in a fresh headless Chromium profile; return the RGB pixels (H, W, 3)."""
    cmd = [
        find_chromium(),
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        f"--screenshot={png_path}",
        html_path.as_uri(),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and png_path.is_file(), done.stderr[-2000:]
    return np.asarray(Image.open(png_path).convert("RGB"))


def drawn_fraction(pixels: np.ndarray, box: tuple[int, int, int, int]) -> tuple[float, int]:
    """Return (share of non-white pixels, distinct colours) inside `box` (left, top, width, height)."""
    left, top, width, height = box
    region = pixels[top + 4 : top + height - 4, left + 4 : left + width - 4].reshape(-1, 3)
    non_white = (region < 245).any(axis=1).mean()
    return float(non_white), len(np.unique(region, axis=0))


@pytest.fixture(scope="module")
def deck_inputs() -> tuple[Timeline, dict, list[dict]]:
    fast = restart_timeline(rank=0)
    slow = [StepRecord(**{**s.__dict__, "rank": 1, "wall_s": s.wall_s * 1.1}) for s in fast.steps]
    timeline = Timeline(
        steps=fast.steps + slow,
        events=fast.events,
        meta={
            "world_size": 2,
            "device_type": "cpu",
            "flops_per_sample": 2e6,
            "peak_flops": 5e10,
            "peak_method": "test peak",
        },
    )
    report = build_report(timeline, min_step_s=0.0)
    report["baseline"] = {
        "workload_key": "bev_fusion_small/abc/ws2/cpu/bf16",
        "runs": 1,
        "tolerance": 0.05,
        "baseline": {"median_step_s": 0.8},
        "summary": {"median_step_s": 1.0},
        "flags": {"step_time": "1.0000 s vs baseline 0.8000 s (+25.0%, tolerance 5%)"},
    }
    rows = [{"step": n, "loss": 1.0 / n} for n in range(1, 9)]
    return timeline, report, rows


def test_every_plot_is_drawn_in_headless_chromium(tmp_path, deck_inputs):
    page = render_deck_html(*deck_inputs)
    assert page.count("<img ") == len(PLOTS) and "+25.0%" in page
    html_path = tmp_path / "goodput.html"
    html_path.write_text(page, encoding="utf-8")
    pixels = screenshot(html_path, tmp_path / "shot.png", tmp_path / "profile")
    assert pixels.shape[0] >= WINDOW[1] - 1 and pixels.shape[1] >= WINDOW[0] - 1
    for name, box in PLOT_BOXES.items():
        share, colours = drawn_fraction(pixels, box)
        assert share > 0.02 and colours > 20, (
            f"plot {name!r} looks blank: {share:.3%} drawn, {colours} colours"
        )
    gap = (
        PLOT_BOXES["loss"][0] + PLOT_BOXES["loss"][2] + 2,
        80,
        14,
        200,
    )  # the gutter between columns
    assert drawn_fraction(pixels, (gap[0] - 4, gap[1], gap[2] + 8, gap[3]))[0] == 0.0


def test_a_missing_plot_shows_as_blank(tmp_path, deck_inputs):
    page = render_deck_html(*deck_inputs)
    start = page.index('<img id="plot-ranks"')
    src = page.index('src="', start) + len('src="')
    broken = page[:src] + page[page.index('"', src) :]  # empty src: nothing drawn in that box
    html_path = tmp_path / "broken.html"
    html_path.write_text(broken, encoding="utf-8")
    pixels = screenshot(html_path, tmp_path / "shot.png", tmp_path / "profile")
    assert drawn_fraction(pixels, PLOT_BOXES["ranks"])[0] < 0.02
    assert drawn_fraction(pixels, PLOT_BOXES["loss"])[0] > 0.02
