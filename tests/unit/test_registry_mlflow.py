"""MLflow store resolution and logging against a real SQLite-backed MLflow store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from platform_lib.mlflow_store import (
    configure_mlflow,
    flatten_params,
    log_eval_table,
    log_params,
    log_step_metrics,
    resolve_artifact_root,
    resolve_tracking_uri,
    start_training_run,
)


def test_default_store_is_sqlite_under_drivetrain_home(
    mlflow_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert resolve_tracking_uri() == f"sqlite:///{mlflow_home.resolve()}/mlflow.db"
    assert resolve_artifact_root() == (mlflow_home.resolve() / "mlartifacts").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert resolve_tracking_uri() == "http://127.0.0.1:5999"
    assert resolve_artifact_root() is None  # a server picks its own artifact root


def test_runs_and_artifacts_land_under_home(
    mlflow_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    client = configure_mlflow()
    run_id = start_training_run(client, run_name="r", tags={"dataset_hash": "abc"})
    client.log_dict(run_id, {"a": 1}, "x.json")
    home_store = MlflowClient(tracking_uri=f"sqlite:///{mlflow_home / 'mlflow.db'}")
    assert home_store.get_run(run_id).info.run_name == "r"  # the run is in the store under home
    assert list((mlflow_home / "mlartifacts").rglob("x.json"))
    assert not (tmp_path / "mlruns").exists()  # nothing in the current folder
    assert client.get_run(run_id).data.tags["dataset_hash"] == "abc"


def test_params_flattened_and_step_metrics_logged(mlflow_home: Path, tmp_path: Path) -> None:
    client = configure_mlflow()
    run_id = start_training_run(client, run_name="r", tags={})
    assert flatten_params({"train": {"lr": 0.1, "model": "m"}}) == {
        "train.lr": "0.1",
        "train.model": "m",
    }
    assert log_params(client, run_id, {"train": {"lr": 0.1, "model": "m"}, "seed": 3}) == 3
    metrics = tmp_path / "metrics.jsonl"
    rows = [
        {"step": s, "loss": 1.0 / s, "lr": 0.01, "world_size": 2, "note": "x"} for s in range(1, 6)
    ]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert log_step_metrics(client, run_id, metrics) == 15
    history = client.get_metric_history(run_id, "loss")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [
        (s, 1.0 / s) for s in range(1, 6)
    ]
    assert client.get_run(run_id).data.params == {
        "train.lr": "0.1",
        "train.model": "m",
        "seed": "3",
    }


def test_bad_metrics_line_names_file_and_line(mlflow_home: Path, tmp_path: Path) -> None:
    client = configure_mlflow()
    run_id = start_training_run(client, run_name="r", tags={})
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1, "loss": 1.0}\n{"loss": 2.0}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2 has no 'step'"):
        log_step_metrics(client, run_id, metrics)
    metrics.write_text('{"step": 1, "loss": 1.0}\nnot json\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2 is not a JSON object"):
        log_step_metrics(client, run_id, metrics)


def test_eval_table_logged_as_metrics_and_artifact(mlflow_home: Path, tmp_path: Path) -> None:
    client = configure_mlflow()
    run_id = start_training_run(client, run_name="r", tags={})
    table = {
        "iou": {"vehicle": 0.5, "pedestrian": None},
        "mean_iou": 0.5,
        "baseline_iou": {"vehicle": 0.1, "pedestrian": 0.0},
        "baseline_mean_iou": 0.05,
        "split": "val",
    }
    log_eval_table(client, run_id, table)
    metrics = client.get_run(run_id).data.metrics
    assert metrics == {
        "val_iou_vehicle": 0.5,
        "val_mean_iou": 0.5,
        "val_baseline_iou_vehicle": 0.1,
        "val_baseline_iou_pedestrian": 0.0,
        "val_baseline_mean_iou": 0.05,
    }
    local = client.download_artifacts(run_id, "eval/metrics.json", str(tmp_path))
    assert json.loads(Path(local).read_text()) == table
