"""The training task's failure message is the triage verdict, through the real Flyte task.

Runs `training_pipeline` in this process (tiny synthetic logs, preset small, 2 elastic
workers) with a Python error injected on rank 1 at step 2 of both elastic attempts
(`max_restarts=1`): the kfpytorch plugin's error must carry the failing rank's verdict and
restart decision, and the first failing rank of each attempt records it in MLflow (a FAILED
run tagged `triage.*`) and in the run's attempt history.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from platform_lib.faults import ENV_VAR
from platform_lib.mlflow_store import configure_mlflow
from platform_lib.sources.synthetic import SyntheticConfig, write_synthetic_logs
from platform_lib.training.launch import DISABLE_SHARED_STORE
from tasks.triage import HISTORY_FILE

pytestmark = pytest.mark.distributed

TINY = SyntheticConfig(
    num_logs=3,
    frames_per_log=4,
    image_width=64,
    image_height=48,
    lidar_beams=8,
    lidar_azimuth_bins=64,
)
STEPS = {"max_steps": 4, "warmup_steps": 0, "batch_size": 1, "num_workers": 0}


def test_a_failed_rank_leaves_its_verdict_as_the_task_error(
    local_flyte: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workflows.training_pipeline import training_pipeline

    raw = local_flyte / "raw"
    write_synthetic_logs(TINY, raw, progress=False)
    client = configure_mlflow()  # the store exists (created concurrently by two ranks, it races)
    crash = [{"kind": "crash", "rank": 1, "step": 2, "attempt": n} for n in (0, 1)]
    monkeypatch.setenv(ENV_VAR, json.dumps(crash))
    # the agent is this process: what the pod's environment (and `make run`) give it; without
    # it torch 2.13's restarted workers fail in Gloo connectFullMesh (pytorch#135712)
    monkeypatch.setenv(DISABLE_SHARED_STORE, "1")
    with pytest.raises(Exception) as info:  # noqa: PT011 - the plugin's type; the text is checked
        training_pipeline(
            source="synthetic", raw_logs=str(raw), preset="small", overrides=json.dumps(STEPS)
        )
    text = str(info.value)
    assert "InjectedFault" in text and "restart policy:" in text, text[-3000:]
    experiment = client.get_experiment_by_name("drivetrain")
    failed = client.search_runs([experiment.experiment_id], "tags.`drivetrain.outcome` = 'failed'")
    assert len(failed) == 2  # one per elastic attempt, by its first failing rank
    assert {run.data.tags["triage.rank"] for run in failed} == {"1"}
    assert all(run.info.status == "FAILED" for run in failed)
    (history,) = (local_flyte / "tmp").rglob(HISTORY_FILE)
    assert len(json.loads(history.read_text())) == 2


def test_a_killed_rank_is_classified_by_the_failure_node(
    local_flyte: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workflows.training_pipeline import training_pipeline

    raw = local_flyte / "raw"
    write_synthetic_logs(TINY, raw, progress=False)
    client = configure_mlflow()
    kill = [{"kind": "kill", "rank": 1, "step": 2, "attempt": n} for n in (0, 1)]
    monkeypatch.setenv(ENV_VAR, json.dumps(kill))
    monkeypatch.setenv(DISABLE_SHARED_STORE, "1")
    with pytest.raises(Exception) as info:  # noqa: PT011 - the plugin's type; the text is checked
        training_pipeline(
            source="synthetic", raw_logs=str(raw), preset="small", overrides=json.dumps(STEPS)
        )
    assert "SIGKILL" in str(info.value) and "restart policy:" not in str(info.value)
    experiment = client.get_experiment_by_name("drivetrain")
    (run,) = client.search_runs(
        [experiment.experiment_id], "tags.`triage.recorded_by` = 'failure node'"
    )
    assert run.info.status == "FAILED" and run.data.tags["preset"] == "small"
    assert run.data.tags["triage.rank"] == "1" and run.data.tags["triage.signal"] == "SIGKILL"
