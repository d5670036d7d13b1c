"""Goodput in MLflow: metrics streamed during training, the final report, baselines and flags.

`MlflowMetricsStream` is training's metrics sink (never on the training thread);
`finish_goodput` (the registration task, on a CPU pod) compares a finished run with its
workload's baseline and logs its figures, regression tags and report files;
`load_goodput_from_mlflow` reads a past run's report back for `drivetrain goodput RUN_ID`.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, TypeVar

from mlflow.entities import Metric, RunTag
from mlflow.tracking import MlflowClient
from mlflow.utils.async_logging.run_operations import RunOperations

from platform_lib.errors import UserError
from platform_lib.fsguard import read_regular
from platform_lib.mlflow_store import (
    configure_mlflow,
    log_redacted_file,
    start_training_run,
)
from platform_lib.redact import redact
from platform_lib.telemetry.baseline import (
    BASELINE_RUNS,
    DEFAULT_TOLERANCE,
    MlflowBaselineStore,
    Workload,
    aggregate_baseline,
    compare_with_baseline,
    summarize_run,
    workload_of,
)
from platform_lib.telemetry.publish import (
    GOODPUT_HTML,
    GOODPUT_JSON,
    TIMELINE_JSON,
    load_run_telemetry,
    write_json_atomic,
    write_run_report,
)
from platform_lib.telemetry.timeline import Timeline

__all__ = [
    "GOODPUT_ARTIFACTS",
    "MlflowMetricsStream",
    "compare_with_workload_baseline",
    "finish_goodput",
    "load_goodput_from_mlflow",
    "log_goodput",
    "load_streamed_run",
    "record_streamed_run",
]

logger = logging.getLogger(__name__)

GOODPUT_ARTIFACTS = "goodput"
#: File in the run folder naming the MLflow run that training streamed to (registration continues it).
MLFLOW_RUN_JSON = "mlflow_run.json"
REGRESSION_TAG = "goodput.regression."
#: Bound on drawing the goodput page (six plots; a fraction of a second), in s.
PAGE_TIMEOUT_S = 120.0
T = TypeVar("T")


class MlflowMetricsStream:
    """Callable sink `(step, metrics) -> None` logging to a new MLflow run, never on the training thread.

    The run is created by a one-thread executor (a fresh SQLite store takes seconds to
    migrate); metrics go out with MLflow's own asynchronous logging (`log_batch(...,
    synchronous=False)`). Points that arrive before the run exists wait in memory, at most
    `max_pending` of them (further ones are dropped and counted in `dropped`).

    Args:
        run_name: name of the MLflow run.
        tags: its tags.
        max_pending: points kept while the run is being created.
    """

    def __init__(
        self, *, run_name: str, tags: Mapping[str, str], max_pending: int = 10_000
    ) -> None:
        """Start creating the run."""
        self._run: Future[tuple[MlflowClient, str]] = _in_daemon_thread(
            _create_run, run_name, dict(tags)
        )
        self._pending: list[Metric] = []
        self._operations: list[RunOperations] = []
        self.max_pending, self.dropped = max_pending, 0
        self.run_id: str | None = None
        self.error: BaseException | None = None

    def __call__(self, step: int, metrics: dict[str, float]) -> None:
        """Log `metrics` of `step` (returns at once; dropped once the stream has failed)."""
        points = [Metric(k, float(v), 0, step) for k, v in sorted(metrics.items())]
        if self.error is not None:
            self.dropped += len(points)
        elif self._run.done():
            self._send(points)
        elif len(self._pending) + len(points) <= self.max_pending:
            self._pending.extend(points)
        else:
            self.dropped += len(points)

    def _send(self, points: list[Metric]) -> None:
        points, self._pending = self._pending + points, []
        try:
            client, self.run_id = self._run.result()
            operations = points and client.log_batch(self.run_id, metrics=points, synchronous=False)
            if operations:
                self._operations.append(operations)
        except Exception as exc:  # reported by close(); training goes on without MLflow
            self.error, self.dropped = exc, self.dropped + len(points)

    def close(self, timeout_s: float = 60.0) -> str | None:
        """Send what is pending, wait for MLflow to log it, return the run id (None: no run).

        Never fails a finished training run: a stream that failed, or did not drain within
        `timeout_s`, is logged as a warning and kept in `error`; the run id is returned when
        the run exists (its metrics may be incomplete).
        """
        deadline = time.monotonic() + timeout_s
        try:
            self._run.result(timeout=timeout_s)
        except Exception:  # noqa: BLE001 - _send records it
            pass
        if self._run.done():
            self._send([])
            drained = _in_daemon_thread(lambda: [op.wait() for op in self._operations])
            try:
                drained.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                self.error = self.error or TimeoutError(
                    f"MLflow metrics stream did not drain within {timeout_s} s"
                )
            except Exception as exc:
                self.error = self.error or exc
        else:
            self.error = self.error or TimeoutError(
                f"MLflow metrics stream did not drain within {timeout_s} s"
            )
        if self.error is not None or self.dropped:
            logger.warning(
                "MLflow metrics stream of run %s failed, its metrics are incomplete "
                "(%d points dropped): %r",
                self.run_id,
                self.dropped,
                self.error,
            )
        return self.run_id


def _in_daemon_thread(fn: Callable[..., T], *args: Any) -> Future[T]:
    """Run `fn(*args)` in a daemon thread (process exit does not wait for it); return its Future."""
    future: Future[T] = Future()

    def work() -> None:
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # handed to whoever asks for the result
            future.set_exception(exc)

    threading.Thread(
        target=work, name=f"goodput-{getattr(fn, '__name__', 'work')}", daemon=True
    ).start()
    return future


def _create_run(run_name: str, tags: dict[str, str]) -> tuple[MlflowClient, str]:
    client = configure_mlflow()
    return client, start_training_run(client, run_name=run_name, tags=tags)


def compare_with_workload_baseline(
    report: dict[str, Any],
    workload: Workload,
    *,
    client: MlflowClient | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    source_run_id: str = "",
) -> dict[str, Any]:
    """Compare a goodput report with its workload's baseline, then add the run to the baseline.

    Returns:
        {"workload_key", "runs" (summaries in the baseline), "baseline", "summary", "flags",
        "tolerance"}; with no earlier run the baseline is empty and there are no flags.
    """
    client = client or configure_mlflow()
    store = MlflowBaselineStore(client)
    key = workload.key()
    earlier = store.load(key, BASELINE_RUNS, exclude_run_id=source_run_id)
    summary = summarize_run(report)
    baseline = aggregate_baseline(earlier)
    flags = compare_with_baseline(summary, baseline, tolerance) if earlier else {}
    store.add(key, summary, source_run_id)
    return {
        "workload_key": key,
        "runs": len(earlier),
        "baseline": baseline,
        "summary": summary,
        "flags": flags,
        "tolerance": tolerance,
    }


def log_goodput(
    client: MlflowClient, run_id: str, run_dir: str | Path, report: dict[str, Any]
) -> None:
    """Log final goodput metrics, regression flags (tags) and the report files to `run_id`."""
    _log_figures(client, run_id, report)
    _log_report_files(client, run_id, Path(run_dir))


def _log_figures(client: MlflowClient, run_id: str, report: dict[str, Any]) -> None:
    metrics = {
        "goodput_compatible": report["goodput"]["compatible"],
        "goodput_input_adjusted": report["goodput"]["input_adjusted"],
        "input_wait_fraction": report["input"]["wait_fraction"],
        **{f"badput_s.{k}": v for k, v in report["badput_s"].items()},
    }
    if report["throughput"]["mfu"] is not None:
        metrics["mfu"] = report["throughput"]["mfu"]
    if report["steps"]["median_step_s"] is not None:
        metrics["median_step_time_s"] = report["steps"]["median_step_s"]
    baseline = report.get("baseline") or {}
    tags = {f"{REGRESSION_TAG}{k}": v for k, v in baseline.get("flags", {}).items()}
    tags["goodput.input_verdict"] = report["input"]["verdict"]
    if baseline:
        tags["goodput.workload_key"] = baseline["workload_key"]
    client.log_batch(
        run_id,
        metrics=[Metric(k, float(v), 0, 0) for k, v in sorted(metrics.items())],
        tags=[_tag(k, v) for k, v in sorted(tags.items())],
    )


def _log_report_files(client: MlflowClient, run_id: str, run_dir: Path) -> None:
    for name in (GOODPUT_JSON, GOODPUT_HTML, TIMELINE_JSON):
        if (run_dir / name).is_file():
            log_redacted_file(client, run_id, run_dir / name, GOODPUT_ARTIFACTS)


def _tag(key: str, value: str) -> RunTag:
    return RunTag(key, redact(value)[:5000])


def load_goodput_from_mlflow(
    run_id: str, client: MlflowClient | None = None
) -> tuple[Timeline, dict[str, Any] | None]:
    """Download a run's `goodput/` artifacts and return (timeline, report).

    Raises:
        FileNotFoundError: the run has no goodput artifacts (named).
    """
    client = client or configure_mlflow()
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(client.download_artifacts(run_id, GOODPUT_ARTIFACTS, tmp))
        if not (local / "timeline.json").is_file():
            raise FileNotFoundError(
                f"MLflow run {run_id} has no {GOODPUT_ARTIFACTS}/timeline.json artifact"
            )
        (local / "telemetry").mkdir(exist_ok=True)
        (local / "timeline.json").rename(local / TIMELINE_JSON)
        return load_run_telemetry(local)


def record_streamed_run(
    run_dir: str | Path,
    *,
    dataset_hash: str,
    stream: MlflowMetricsStream | None = None,
    timeout_s: float = 60.0,
) -> dict[str, Any]:
    """Rank 0, right after `train()`: close the metrics stream and write `run_dir/mlflow_run.json`.

    The record names the MLflow run the stream logged to (None when training did not stream
    or the stream could not create one), the dataset's hash and the stream's error, if any;
    `finish_goodput` and registration continue that run.

    Args:
        run_dir: the run folder.
        dataset_hash: the hash of the dataset trained on (part of the workload key).
        stream: the metrics stream training logged to, if any.
        timeout_s: bound on draining the stream, in s (`MlflowMetricsStream.close`).

    Returns:
        The record written.
    """
    record: dict[str, Any] = {
        "run_id": stream.close(timeout_s) if stream is not None else None,
        "dataset_hash": dataset_hash,
    }
    if stream is not None and stream.error is not None:
        record["stream_error"] = repr(stream.error)
    write_json_atomic(Path(run_dir) / MLFLOW_RUN_JSON, record)
    return record


#: Largest `mlflow_run.json` read back, in bytes.
MAX_RUN_RECORD_BYTES = 64 * 1024


def load_streamed_run(run_dir: str | Path) -> dict[str, Any] | None:
    """Return `run_dir/mlflow_run.json` (`record_streamed_run`), or None when it is absent.

    The file crosses from the training task to registration through the task-output store:
    a regular file of at most `MAX_RUN_RECORD_BYTES`, a JSON object whose `run_id` is None
    or an MLflow run id (32 hex digits).

    Raises:
        UserError: anything else, naming the file.
    """
    path = Path(run_dir) / MLFLOW_RUN_JSON
    if not path.exists():
        return None
    try:
        record = json.loads(read_regular(path, max_bytes=MAX_RUN_RECORD_BYTES))
    except (ValueError, RecursionError) as exc:
        raise UserError(
            f"not a streamed-run record: {exc}", str(path), "rerun the training task"
        ) from None
    run_id = record.get("run_id") if isinstance(record, dict) else "-"
    if run_id is not None and not (
        isinstance(run_id, str) and re.fullmatch("[0-9a-f]{32}", run_id)
    ):
        raise UserError(
            "not a streamed-run record: an object with run_id None or 32 hex digits expected",
            str(path),
            "rerun the training task",
        )
    return record


def finish_goodput(
    run_dir: str | Path, *, config: Any, tolerance: float | None = None
) -> dict[str, Any]:
    """After training, on a CPU pod: baseline comparison, MLflow logging, the plots page.

    Reads what training left in `run_dir`: `mlflow_run.json` (`record_streamed_run`: the
    MLflow run training streamed to, the dataset's hash) and `goodput.json`. Compares the
    report with its workload's baseline (and adds the run to it), logs the final figures, flags
    and report files to the streamed MLflow run (a new run when training did not stream),
    writes `goodput.json` / `goodput.html` again with the comparison, and rewrites
    `mlflow_run.json` with the run id and `finish_goodput_s`, so that registration continues
    the same MLflow run. The plots are drawn while MLflow stores the figures and flags.

    Args:
        run_dir: the run folder (`mlflow_run.json`, `goodput.json`, `telemetry/`).
        config: the run's TrainConfig (`metrics.baseline_tolerance`).
        tolerance: overrides the config's baseline tolerance (a fraction, 0.05 = 5 %).

    Returns:
        The report, with its "baseline" section filled in.

    Raises:
        FileNotFoundError: `mlflow_run.json` or `goodput.json` is missing (training did not
            finish).
        TimeoutError: drawing the page took longer than `PAGE_TIMEOUT_S`.
    """
    started = time.perf_counter()
    run_dir = Path(run_dir)
    record = load_streamed_run(run_dir)
    if record is None:
        raise FileNotFoundError(f"{run_dir / MLFLOW_RUN_JSON} is missing: train() did not finish")
    timeline, report = load_run_telemetry(run_dir)
    if report is None:
        raise FileNotFoundError(f"{run_dir / GOODPUT_JSON} is missing: train() did not finish")
    client = configure_mlflow()
    run_id = record.get("run_id") or start_training_run(
        client, run_name=f"train-{run_dir.name}", tags={}
    )
    report["baseline"] = compare_with_workload_baseline(
        report,
        workload_of(report, record["dataset_hash"]),
        client=client,
        source_run_id=run_id,
        tolerance=config.metrics.baseline_tolerance if tolerance is None else tolerance,
    )
    # the plots (CPU) are drawn while MLflow stores the figures and flags (I/O)
    page = _in_daemon_thread(write_run_report, run_dir, timeline, report)
    _log_figures(client, run_id, report)
    page.result(timeout=PAGE_TIMEOUT_S)
    _log_report_files(client, run_id, run_dir)
    write_json_atomic(
        run_dir / MLFLOW_RUN_JSON,
        {**record, "run_id": run_id, "finish_goodput_s": time.perf_counter() - started},
    )
    return report
