"""Registration's champion gate on real models, and its page in headless Chromium.

Three versions are registered with `record_training_run` on a synthetic dataset of 6 logs
with one val frame each (enough logs for intervals): a model predicting nothing (first:
champion), one predicting every cell occupied (better on every log: promoted), then the first
model again (kept). Each is evaluated for real (`training.evaluate`), and the gate evaluates
the champion for real on the same frames. The promoted version's page is rendered in Chromium:
both plots drawn in their boxes, and the decision and per-slice table in the rendered DOM.
Then through a real `mlflow server`: the MLflow UI's own model version page, rendered by
Chromium from the server, shows the version's description (decision and per-slice table).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from platform_lib.mlflow_store import configure_mlflow
from platform_lib.models.catalog import build_model
from platform_lib.registry.gate import PLOT_BOXES
from platform_lib.registry.record import record_training_run
from platform_lib.shards.build import BuildConfig, build_dataset
from platform_lib.sources.synthetic import write_synthetic_logs
from platform_lib.training.evaluate import evaluate
from platform_lib.training.presets import get_preset
from tests.integration.test_telemetry_deck import CHROMIUM_FLAGS, drawn_fraction, find_chromium
from tests.support.pipeline import tiny_synthetic
from tests.support.services import start_plain_mlflow, stop

NAME = "gate-real"
WINDOW = (2 * 640 + 3 * 20, 1100)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("gate-data")
    write_synthetic_logs(tiny_synthetic(num_logs=6), base / "raw", progress=False)
    out = base / "dataset"
    build_dataset(
        "synthetic",
        base / "raw",
        out,
        BuildConfig(split="by_frame_range", val_frames_per_log=1, progress=False),
    )
    return out


def _constant_run(tmp_path: Path, logit: float, dataset: Path) -> tuple[Path, Path]:
    """A run folder whose model outputs `logit` in every cell, evaluated on `dataset`'s val."""
    run_dir = tmp_path / f"run{logit:+g}"
    run_dir.mkdir(parents=True)
    state = {
        k: torch.zeros_like(v) for k, v in build_model("bev_fusion_small").state_dict().items()
    }
    state["head.bias"] = torch.full_like(state["head.bias"], logit)
    save_file(state, str(run_dir / "model.safetensors"))
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
    result = evaluate(
        str(run_dir / "model.safetensors"),
        get_preset("small"),
        str(dataset),
        output_dir=str(run_dir / "eval"),
    )
    return run_dir, Path(result.metrics_json)


def _record(tmp_path: Path, logit: float, dataset: Path, gate_dir: Path):
    run_dir, eval_json = _constant_run(tmp_path / gate_dir.name, logit, dataset)
    return record_training_run(
        model_name=NAME,
        run_dir=run_dir,
        dataset_dir=dataset,
        eval_json=eval_json,
        config=get_preset("small"),
        gate_dir=gate_dir,
    )


def test_registration_records_the_paired_decision_and_its_page_renders(
    mlflow_home: Path, dataset: Path, tmp_path: Path
) -> None:
    first = _record(tmp_path, -10.0, dataset, tmp_path / "g1")
    better = _record(tmp_path, 10.0, dataset, tmp_path / "g2")
    worse = _record(tmp_path, -10.0, dataset, tmp_path / "g3")
    assert (first.decision, first.champion_version) == ("promoted:first", "1")
    assert (better.decision, better.champion_version) == ("promoted:better", "2")
    assert worse.decision in ("kept:worse_on_slice", "kept:not_better")
    assert worse.champion_version == "2"

    client = configure_mlflow()
    assert str(client.get_model_version_by_alias(NAME, "champion").version) == "2"
    tags = client.get_model_version(NAME, "2").tags
    assert tags["champion_decision"] == "promoted:better" and tags["compared_with"] == "1"
    low = re.fullmatch(r"\+[0-9.]+ \[\+([0-9.]+), \+[0-9.]+\]", tags["diff.all.iou/mean/all"])
    assert low is not None and float(low[1]) > 0, tags["diff.all.iou/mean/all"]
    assert "slice.all.iou/mean/all" in tags
    assert client.get_model_version(NAME, "3").tags["compared_with"] == "2"
    assert (
        client.get_model_version(NAME, "1")
        .tags["promotion_reasons"]
        .endswith("the first version becomes champion")
    )
    artifacts = {a.path for a in client.list_artifacts(better.run_id, "promotion")}
    assert artifacts == {
        "promotion/promotion.json",
        "promotion/promotion.html",
        "promotion/metric_by_range_band.png",
        "promotion/slice_differences.png",
    }
    record = json.loads((tmp_path / "g2" / "promotion.json").read_text())
    assert record["promote"] and record["compared_with"] == "1"
    assert {r["slice"] for r in record["rows"]} >= {"all"}

    page = Path(better.page)
    shot, profile = tmp_path / "shot.png", tmp_path / "profile"
    common = [find_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}"]
    done = subprocess.run(
        [
            *common,
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    for name, box in PLOT_BOXES.items():
        share, colours = drawn_fraction(pixels, box)
        assert share > 0.02 and colours > 20, f"{name}: {share:.3%} drawn, {colours} colours"
    dom = subprocess.run(
        [*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "decision: promoted:better" in dom.stdout
    assert "against champion version 1" in dom.stdout
    rows = re.findall(r"<tr><td>([a-z_]+)</td><td>(iou/mean/all)</td>", dom.stdout)
    assert ("all", "iou/mean/all") in rows and len(rows) == len(record["rows"])


def _render_ui_page(
    url: str, wanted: str, profile: Path, deadline_s: float = 240.0
) -> tuple[str, int]:
    """Return (DOM, virtual-time budget in ms) of the MLflow UI page `url` once `wanted` is in it.

    The UI is a single-page app that fetches the version from the server: Chromium runs it
    for a virtual-time budget (which does not advance while requests are pending), doubled
    until the DOM holds `wanted` or `deadline_s` passes.
    """
    budget, deadline, dom = 4000, time.monotonic() + deadline_s, ""
    while time.monotonic() < deadline:
        done = subprocess.run(
            [
                find_chromium(),
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                f"--virtual-time-budget={budget}",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=max(10.0, deadline - time.monotonic()),
        )
        assert done.returncode == 0, done.stderr[-2000:]
        dom = done.stdout
        if wanted in dom:
            return dom, budget
        budget *= 2
    pytest.fail(f"{url} did not show {wanted!r} within {deadline_s:g} s:\n{dom[-3000:]}")


def test_mlflow_ui_version_page_shows_the_decision_and_slice_table(
    mlflow_home: Path, mlflow_db, dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc, url = start_plain_mlflow(tmp_path, mlflow_db(tmp_path / "server.db"))
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        _record(tmp_path, -10.0, dataset, tmp_path / "g1")
        better = _record(tmp_path, 10.0, dataset, tmp_path / "g2")
        assert better.decision == "promoted:better"
        description = configure_mlflow().get_model_version(NAME, better.version).description
        assert description.startswith("**champion decision: promoted:better**")

        page = f"{url}/#/models/{NAME}/versions/{better.version}"
        dom, budget = _render_ui_page(page, "champion decision: promoted:better", tmp_path / "p")
        (tmp_path / "mlflow-version-page.html").write_text(dom)
        # the description as the UI rendered its Markdown (the note preview), tags dropped
        note = dom.split('data-testid="note-editor-preview-content">', 1)[-1].split("</table>")[0]
        text = " ".join(re.sub(r"<[^>]+>", " ", note).split())
        assert text.startswith("champion decision: promoted:better against champion version 1")
        row = re.search(r"<tr>\s*<td>all</td>\s*<td>iou/mean/all</td>(.*?)</tr>", note, re.S)
        assert row is not None, note[:3000]
        cells = [c.strip() for c in re.findall(r"<td>(.*?)</td>", row[1])]
        assert re.fullmatch(r"\+[0-9.]+ \[\+[0-9.]+, \+[0-9.]+\]", cells[2]), cells
        assert cells[3] == "better"

        shot = tmp_path / "mlflow-version-page.png"
        done = subprocess.run(
            [
                find_chromium(),
                *CHROMIUM_FLAGS,
                f"--user-data-dir={tmp_path / 'p'}",
                f"--virtual-time-budget={budget}",
                "--hide-scrollbars",
                "--force-device-scale-factor=1",
                "--window-size=1400,1400",
                f"--screenshot={shot}",
                page,
            ],
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
        share, colours = drawn_fraction(
            np.asarray(Image.open(shot).convert("RGB")), (0, 0, 1400, 1400)
        )
        assert share > 0.02 and colours > 20, f"{share:.3%} drawn, {colours} colours"
    finally:
        stop(proc)
