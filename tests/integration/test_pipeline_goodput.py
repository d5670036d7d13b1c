"""Goodput end to end: a normal run records the workload's baseline; the same run with an
injected per-batch loader delay is input-bound, measures the delay, and is flagged.

Runs `training_pipeline` in this process twice (tiny synthetic logs, preset small, 2 elastic
workers, 12 steps) against an isolated flytekit cache and MLflow store. The second run injects
the delay on every rank (the `batch_delay` fault of DRIVETRAIN_FAULTS) and changes only the
seed (so training is not a cache hit); the dataset is a cache hit and the workload (model,
dataset hash, world size, device, precision) is the same: its baseline is the first run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from platform_lib.faults import ENV_VAR
from platform_lib.sources.synthetic import SyntheticConfig, write_synthetic_logs

pytestmark = pytest.mark.distributed  # ~2 min: two pipeline runs; in `make test` (CI) on purpose

TINY = SyntheticConfig(
    num_logs=3,
    frames_per_log=4,
    image_width=64,
    image_height=48,
    lidar_beams=8,
    lidar_azimuth_bins=64,
)
STEPS = {
    "max_steps": 12,
    "warmup_steps": 0,
    "checkpoint.interval": 6,
    "batch_size": 1,
    "num_workers": 0,
    "metrics.mlflow_interval": 5,
}
DELAY_S = 1.0  # several times a step: the step-time flag holds on a loaded machine too


def _run(raw_logs: str, seed: int) -> str:
    from workflows.training_pipeline import training_pipeline

    return training_pipeline(
        source="synthetic",
        raw_logs=raw_logs,
        preset="small",
        overrides=json.dumps(STEPS),
        seed=seed,
        model_name="goodput-test",
    )


def _run_dir(tmp: Path, seed: int) -> Path:
    for run in (tmp / "tmp").glob("drivetrain-train-*/*"):
        config = json.loads((run / "train_result.json").read_text())["config"]
        if config["seed"] == seed:
            return run
    raise AssertionError(f"no run folder with seed={seed}")


def test_loader_delay_is_input_bound_measured_and_flagged(
    local_flyte: Path, registry_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    from platform_lib.mlflow_store import resolve_tracking_uri

    raw = tmp_path / "raw"
    write_synthetic_logs(TINY, raw, progress=False)
    assert _run(str(raw), seed=0) == "models:/goodput-test/1"
    normal = json.loads((_run_dir(tmp_path, 0) / "goodput.json").read_text())
    assert (
        normal["baseline"]["runs"] == 0 and normal["baseline"]["flags"] == {}
    )  # the first: no baseline yet
    assert normal["steps"]["kept"] == 12 and normal["steps"]["checkpoints"] == 2

    delay = [{"kind": "batch_delay", "step": 1, "rank": r, "seconds": DELAY_S} for r in (0, 1)]
    monkeypatch.setenv(ENV_VAR, json.dumps(delay))  # the elastic workers inherit it
    assert _run(str(raw), seed=1) == "models:/goodput-test/2"
    run = _run_dir(tmp_path, 1)
    delayed = json.loads((run / "goodput.json").read_text())
    assert delayed["input"]["verdict"] == "input-bound"
    # every steady-state step waited the injected delay plus the loader's own (small) time
    wait = delayed["input"]["mean_wait_s"]
    assert DELAY_S <= wait <= 1.1 * DELAY_S, wait
    for stats in delayed["ranks"].values():
        assert DELAY_S <= stats["mean_input_wait_s"] <= 1.1 * DELAY_S, stats
    baseline = delayed["baseline"]
    assert baseline["runs"] == 1 and baseline["workload_key"] == normal["baseline"]["workload_key"]
    assert {"step_time", "input_wait"} <= set(baseline["flags"]), (
        normal["steps"],
        delayed["steps"],
        baseline,
    )
    assert baseline["baseline"]["median_step_s"] == pytest.approx(normal["steps"]["median_step_s"])

    # the flags are tags of the MLflow run that training streamed to and registration continued
    client = MlflowClient(tracking_uri=resolve_tracking_uri())
    run_id = json.loads((run / "mlflow_run.json").read_text())["run_id"]
    mlflow_run = client.get_run(run_id)
    assert mlflow_run.data.tags["goodput.regression.step_time"] == baseline["flags"]["step_time"]
    assert mlflow_run.data.tags["goodput.input_verdict"] == "input-bound"
    assert client.get_model_version("goodput-test", "2").run_id == run_id
    streamed = client.get_metric_history(run_id, "telemetry/input_wait_fraction")
    assert [m.step for m in sorted(streamed, key=lambda m: m.step)] == [5, 10, 12]
    assert max(m.value for m in streamed) > 0.5  # steps 6-10: mostly waiting for the loader
    assert mlflow_run.data.metrics["goodput_input_adjusted"] == pytest.approx(
        delayed["goodput"]["input_adjusted"]
    )
    page = (run / "goodput.html").read_text()
    assert page.count("<img ") == 6 and "step_time" in page and "input-bound" in page
    # the training task published it as its Flyte Deck (flytekit writes local decks to deck.html)
    decks = [p.read_text() for p in (local_flyte / "flyte-sandbox").rglob("deck.html")]
    published = [d for d in decks if 'id="plot-step_time"' in d and "input-bound" in d]
    assert published, f"no Goodput deck among {len(decks)} deck.html files"
