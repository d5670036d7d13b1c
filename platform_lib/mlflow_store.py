"""MLflow tracking: where runs are stored, and logging params, step metrics and eval tables.

The store is `MLFLOW_TRACKING_URI` when set (a server, a Postgres URI), else the embedded
`sqlite:///$DRIVETRAIN_HOME/mlflow.db` with artifacts in `$DRIVETRAIN_HOME/mlartifacts/`
(README.md, "Where outputs go"). Every param and tag value and every artifact written through
this module is `platform_lib.redact`ed first (`redact_values`, `log_json`,
`log_redacted_file`): a config or lineage value may be a URL with a password.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from platform_lib.redact import redact

__all__ = [
    "DEFAULT_EXPERIMENT",
    "configure_mlflow",
    "flatten_params",
    "log_eval_table",
    "log_json",
    "log_params",
    "log_redacted_file",
    "log_step_metrics",
    "redact_values",
    "resolve_artifact_root",
    "resolve_drivetrain_home",
    "resolve_tracking_uri",
    "start_training_run",
]

DEFAULT_EXPERIMENT = "drivetrain"
_BATCH = 900  # metrics per log_batch call (MLflow caps a batch at 1000)
_PARAM_MAX = 6000  # characters MLflow keeps per param value


def resolve_drivetrain_home() -> Path:
    """Return `$DRIVETRAIN_HOME` (default `~/.drivetrain`), created if missing."""
    home = Path(os.environ.get("DRIVETRAIN_HOME") or "~/.drivetrain").expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    return home


def resolve_tracking_uri() -> str:
    """Return `MLFLOW_TRACKING_URI`, or the embedded `sqlite:///$DRIVETRAIN_HOME/mlflow.db`."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{resolve_drivetrain_home() / 'mlflow.db'}"


def resolve_artifact_root(tracking_uri: str | None = None) -> str | None:
    """Return the artifact root for experiments created on a local SQLite store.

    `mlartifacts/` beside the database file (for the default store:
    `$DRIVETRAIN_HOME/mlartifacts`), as a file URI; None for any other store (a tracking
    server chooses its own artifact root).
    """
    uri = tracking_uri or resolve_tracking_uri()
    if not uri.startswith("sqlite:///"):
        return None
    return (Path(uri.removeprefix("sqlite:///")).resolve().parent / "mlartifacts").as_uri()


def configure_mlflow(experiment: str = DEFAULT_EXPERIMENT) -> MlflowClient:
    """Point MLflow at the resolved store and make sure `experiment` exists.

    On a local SQLite store the experiment's artifacts go to `resolve_artifact_root()` beside
    the database (not `./mlruns` of the current folder); on a server its artifact root applies.
    A URI holding a password (`http://user:password@host`) turns off MLflow's own "View run
    at: <URI>" lines on stdout, which would print it.

    Returns:
        An `MlflowClient` bound to the tracking (and registry) URI.
    """
    uri = resolve_tracking_uri()
    if redact(uri) != uri:  # MLflow prints "View run at: <uri>/#/..." to stdout itself
        os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    mlflow.set_tracking_uri(uri)  # also exports MLFLOW_TRACKING_URI to child processes
    mlflow.set_registry_uri(uri)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    if client.get_experiment_by_name(experiment) is None:
        location = resolve_artifact_root(uri)
        try:
            client.create_experiment(experiment, artifact_location=location)
        except mlflow.exceptions.MlflowException:
            if client.get_experiment_by_name(experiment) is None:  # lost a creation race: fine
                raise
    mlflow.set_experiment(experiment)
    return client


def flatten_params(obj: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flatten a nested dict into dotted keys with string values (`model.resolution` -> "0.8")."""
    out: dict[str, str] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_params(value, prefix=f"{name}."))
        else:
            text = value if isinstance(value, str) else json.dumps(value)
            out[name] = text[:_PARAM_MAX]
    return out


def redact_values(values: Mapping[str, str]) -> dict[str, str]:
    """Return `values` (MLflow params or tags) with every value `redact`ed."""
    return {key: redact(str(value)) for key, value in values.items()}


def log_json(client: MlflowClient, run_id: str, obj: Any, artifact_file: str) -> None:
    """Log `obj` as the JSON artifact `artifact_file` (indented like `log_dict`), redacted."""
    client.log_text(run_id, redact(json.dumps(obj, indent=2)), artifact_file)


def log_redacted_file(
    client: MlflowClient, run_id: str, path: str | Path, artifact_path: str
) -> None:
    """Log the text file `path` as `<artifact_path>/<its name>`, its content redacted."""
    path = Path(path)
    text = redact(path.read_text(encoding="utf-8"))
    client.log_text(run_id, text, f"{artifact_path}/{path.name}")


def start_training_run(
    client: MlflowClient,
    *,
    experiment: str = DEFAULT_EXPERIMENT,
    run_name: str,
    tags: Mapping[str, str],
) -> str:
    """Create a run in `experiment` with `tags` and return its run id."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise ValueError(
            f"MLflow experiment {experiment!r} does not exist: call configure_mlflow first"
        )
    run = client.create_run(exp.experiment_id, run_name=run_name, tags=redact_values(tags))
    return run.info.run_id


def log_params(client: MlflowClient, run_id: str, params: Mapping[str, Any]) -> int:
    """Log a (nested) params dict flattened to dotted keys; return how many were logged."""
    flat = redact_values(flatten_params(params))
    items = [Param(k, v) for k, v in sorted(flat.items())]
    for start in range(0, len(items), 100):  # MLflow caps params per batch at 100
        client.log_batch(run_id, params=items[start : start + 100])
    return len(items)


def _iter_metric_rows(path: Path) -> Iterable[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"{path}:{line_no} is not a JSON object ({exc.msg}); the metrics file is corrupt"
                ) from exc
            if "step" not in row:
                raise ValueError(f"{path}:{line_no} has no 'step' field: {line.strip()[:200]}")
            yield row


def log_step_metrics(client: MlflowClient, run_id: str, metrics_jsonl: str | Path) -> int:
    """Log every numeric field of every row of a training metrics JSONL as a step metric.

    Args:
        client: MLflow client of the store.
        run_id: the MLflow run receiving the metrics.
        metrics_jsonl: one JSON object per line with an integer "step" and numeric fields
            (e.g. {"step": 3, "loss": 0.71, "lr": 0.001}); non-numeric fields are skipped.

    Returns:
        Number of metric points logged.

    Raises:
        ValueError: a line is not JSON or has no "step" (message names file and line).
    """
    points = []
    for row in _iter_metric_rows(Path(metrics_jsonl)):
        step = int(row["step"])
        stamp = int(row.get("time", 0) * 1000) if isinstance(row.get("time"), int | float) else 0
        for key, value in row.items():
            if key in ("step", "time") or isinstance(value, bool):
                continue
            if isinstance(value, int | float) and math.isfinite(value):
                points.append(Metric(key, float(value), stamp, step))
    for start in range(0, len(points), _BATCH):
        client.log_batch(run_id, metrics=points[start : start + _BATCH])
    return len(points)


def log_eval_table(
    client: MlflowClient, run_id: str, table: Mapping[str, Any], *, prefix: str = "val"
) -> None:
    """Log an evaluation table as metrics and as the artifact `eval/metrics.json`.

    Args:
        client: MLflow client of the store.
        run_id: the MLflow run receiving the table.
        prefix: metric name prefix, e.g. "val" gives `val_mean_iou`.
        table: {"per_class_iou": {cls: iou}, "mean_iou": float, "baseline_per_class_iou":
            {cls: iou}, "baseline_mean_iou": float, ...}; any other scalar fields are logged
            as metrics too.
    """
    metrics: dict[str, float] = {}
    for key, value in table.items():
        if isinstance(value, Mapping):
            for cls, v in value.items():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    metrics[f"{prefix}_{key}_{cls}"] = float(v)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            metrics[f"{prefix}_{key}"] = float(value)
    client.log_batch(run_id, metrics=[Metric(k, v, 0, 0) for k, v in sorted(metrics.items())])
    log_json(client, run_id, dict(table), "eval/metrics.json")
