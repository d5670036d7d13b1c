"""Goodput in MLflow: metrics streamed during training, the final report, baselines and flags.

`MlflowMetricsStream` is the training loop's sink on rank 0 (the MLflow run is created and
metrics are logged in a background thread, so training never waits on MLflow);
`hand_off_run` (rank 0, after `train()`) and `finish_goodput` (the training task's own process,
in a `GoodputFinisher` thread while the workers exit) compare the run with its workload's
baseline and publish it (`log_goodput`: metrics, `goodput.regression.<name>` tags, report
artifacts under `goodput/`); `load_goodput_from_mlflow` reads a past run's report back.
"""

from __future__ import annotations

import json
import logging
import queue
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from platform_lib.redact import redact
from platform_lib.registry.mlflow_store import (
    configure_mlflow,
    log_redacted_file,
    resolve_tracking_uri,
    start_training_run,
)
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
    TELEMETRY_DIR,
    TIMELINE_JSON,
    load_run_telemetry,
    write_json_atomic,
    write_run_report,
)
from platform_lib.telemetry.timeline import Timeline, rank_file

__all__ = [
    "GOODPUT_ARTIFACTS",
    "MlflowMetricsStream",
    "compare_with_workload_baseline",
    "GoodputFinisher",
    "finish_goodput",
    "hand_off_run",
    "read_hand_off",
    "load_goodput_from_mlflow",
    "log_goodput",
    "warm_up_finish",
]

logger = logging.getLogger(__name__)

GOODPUT_ARTIFACTS = "goodput"
#: File in the run folder naming the MLflow run that training streamed to (registration continues it).
MLFLOW_RUN_JSON = "mlflow_run.json"
REGRESSION_TAG = "goodput.regression."


class MlflowMetricsStream:
    """Callable sink `(step, metrics) -> None` that logs to a new MLflow run off the training thread."""

    def __init__(self, *, run_name: str, tags: Mapping[str, str]) -> None:
        """Start the background thread that creates the run and then drains the queue."""
        self._queue: queue.Queue[tuple[int, dict[str, float]] | None] = queue.Queue()
        self._ready = threading.Event()
        self.run_id: str | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._work,
            args=(run_name, dict(tags)),
            daemon=True,
            name="mlflow-metrics-stream",
        )
        self._thread.start()

    def _work(self, run_name: str, tags: dict[str, str]) -> None:
        try:
            client = configure_mlflow()
            self.run_id = start_training_run(client, run_name=run_name, tags=tags)
        except BaseException as exc:  # reported by close(); training goes on without MLflow
            self.error = exc
            self._ready.set()
            return
        self._ready.set()
        while (item := self._queue.get()) is not None:
            if self.error is not None:  # after the first error the rest is dropped
                continue
            step, metrics = item
            points = [Metric(k, float(v), 0, step) for k, v in sorted(metrics.items())]
            try:
                client.log_batch(self.run_id, metrics=points)
            except Exception as exc:
                self.error = exc

    def __call__(self, step: int, metrics: dict[str, float]) -> None:
        """Queue `metrics` of `step` (returns at once; dropped once the stream has failed)."""
        if self.error is None:
            self._queue.put((step, dict(metrics)))

    def close(self, timeout_s: float = 60.0) -> str | None:
        """Flush the queue and return the run id (None if the run could not be created).

        Never fails a finished training run: a stream that failed, or did not drain within
        `timeout_s`, is logged as a warning and kept in `error`; the run id is returned when
        the run exists (its metrics may be incomplete).
        """
        self._queue.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.error = self.error or TimeoutError(
                f"MLflow metrics stream did not drain within {timeout_s} s"
            )
        if self.error is not None:
            logger.warning(
                "MLflow metrics stream of run %s failed, its metrics are incomplete: %r",
                self.run_id,
                self.error,
            )
        return self.run_id


def compare_with_workload_baseline(
    report: dict[str, Any],
    workload: Workload,
    *,
    client: MlflowClient | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    source_run_id: str = "",
    record: bool = True,
) -> dict[str, Any]:
    """Compare a goodput report with its workload's baseline, then add the run to the baseline.

    Returns:
        {"workload_key", "runs" (summaries in the baseline), "baseline", "summary", "flags",
        "tolerance"}; with no earlier run the baseline is empty and there are no flags.
    """
    client = client or configure_mlflow()
    store = MlflowBaselineStore(client)
    key = workload.key()
    earlier = store.load(key, BASELINE_RUNS)
    summary = summarize_run(report)
    baseline = aggregate_baseline(earlier)
    flags = compare_with_baseline(summary, baseline, tolerance) if earlier else {}
    if record:
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
    run_dir = Path(run_dir)
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
    for name in (GOODPUT_JSON, GOODPUT_HTML, TIMELINE_JSON):
        if (run_dir / name).is_file():
            log_redacted_file(client, run_id, run_dir / name, GOODPUT_ARTIFACTS)


def _tag(key: str, value: str) -> Any:
    from mlflow.entities import RunTag

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


def hand_off_run(
    run_dir: str | Path, *, dataset_hash: str, stream: MlflowMetricsStream | None
) -> str | None:
    """Rank 0, right after `train()`: flush the metrics stream and record what `finish_goodput` needs.

    Writes `run_dir/mlflow_run.json` with the stream's MLflow run id (None without a stream
    or when the stream failed to create its run), the dataset hash (part of the workload
    key), a fresh `hand_off_id` (an elastic restart after a hand-off hands off again) and
    the stream's error, if any. Returns the run id.
    """
    run_id = stream.close() if stream is not None else None
    record = {"run_id": run_id, "dataset_hash": dataset_hash, "hand_off_id": uuid.uuid4().hex}
    if stream is not None and stream.error is not None:
        record["stream_error"] = repr(stream.error)
    write_json_atomic(Path(run_dir) / MLFLOW_RUN_JSON, record)
    return run_id


def read_hand_off(run_dir: str | Path) -> dict[str, Any] | None:
    """Return rank 0's hand-off record (`hand_off_run`) of `run_dir`, None when there is none."""
    try:
        return json.loads((Path(run_dir) / MLFLOW_RUN_JSON).read_text())
    except FileNotFoundError:
        return None


def finish_goodput(
    run_dir: str | Path,
    *,
    config: Any,
    tolerance: float | None = None,
    hand_off: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """After the workers of a run have returned: baseline comparison, MLflow logging, the plots page.

    Reads the run id and dataset hash that rank 0 recorded (`hand_off_run`), compares
    `run_dir/goodput.json` with its workload's baseline (and adds the run to it), logs the
    final figures, flags and report files to that MLflow run (a new run when training did
    not stream), writes `goodput.json` / `goodput.html` again with the comparison, and
    records the run id in `run_dir/mlflow_run.json` so that registration continues the same
    MLflow run. The training task runs it in its own process (`GoodputFinisher`).

    Args:
        run_dir: the run folder (`goodput.json`, `telemetry/`, `mlflow_run.json`).
        config: the run's TrainConfig (`metrics.baseline_tolerance`).
        tolerance: overrides the config's baseline tolerance (a fraction, 0.05 = 5 %).
        hand_off: the hand-off record already read (`read_hand_off`); read here when None.

    Returns:
        The report, with its "baseline" section filled in.

    Raises:
        FileNotFoundError: `goodput.json` or `mlflow_run.json` is missing (training or
            `hand_off_run` did not finish).
    """
    started = time.perf_counter()
    run_dir = Path(run_dir)
    timeline, report = load_run_telemetry(run_dir)
    handed = run_dir / MLFLOW_RUN_JSON
    hand_off = hand_off if hand_off is not None else read_hand_off(run_dir)
    if report is None or hand_off is None:
        missing = handed if report is not None else run_dir / GOODPUT_JSON
        raise FileNotFoundError(f"{missing} is missing: train() or hand_off_run() did not finish")
    client = configure_mlflow()
    run_id = hand_off["run_id"] or start_training_run(
        client, run_name=f"train-{run_dir.name}", tags={}
    )
    workload = workload_of(report, hand_off["dataset_hash"])
    report["baseline"] = compare_with_workload_baseline(
        report,
        workload,
        client=client,
        source_run_id=run_id,
        tolerance=config.metrics.baseline_tolerance if tolerance is None else tolerance,
    )
    write_run_report(run_dir, timeline, report)
    log_goodput(client, run_id, run_dir, report)
    write_json_atomic(
        handed,
        {**hand_off, "run_id": run_id, "finish_goodput_s": time.perf_counter() - started},
    )
    return report


def warm_up_finish() -> None:
    """Import what `finish_goodput` needs (matplotlib and its font cache, the MLflow store)."""
    from PIL import Image

    import platform_lib.telemetry.deck  # noqa: F401  (matplotlib, pyplot, font manager)

    Image.preinit()  # the image plugins PIL loads on the first save (PNG plots)
    if resolve_tracking_uri().split(":", 1)[0] not in ("http", "https", "databricks"):
        import alembic.command  # noqa: F401  (the store checks its schema on first use)
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401  (a database URI)


class GoodputFinisher:
    """Runs `finish_goodput` in the launching process as soon as rank 0 has handed off.

    The elastic agent (the training task's own process) only polls its workers while they
    train. A background thread waits until rank 0 has opened its telemetry file (warming up
    earlier would hold this process's GIL while it spawns the workers and delay the first
    one), imports what `finish_goodput` needs (`warm_up_finish`),
    then waits for `run_dir/mlflow_run.json` (`hand_off_run`, rank 0's last act) and
    finishes while the workers return their results and exit, so the post-training tail
    pays for the slower of the two, not for both (docs/performance-history.md). `result` joins it.

    Args:
        run_dir: the run folder the workers write (None when the launcher cannot tell:
            `result` then finishes in the calling thread).
        config: the run's TrainConfig (baseline tolerance).
        poll_s: how often the thread looks for the hand-off, in s.
    """

    def __init__(self, run_dir: str | Path | None, *, config: Any, poll_s: float = 0.02) -> None:
        """Start the thread (wait for the workers, warm up, wait for the hand-off)."""
        self.run_dir = None if run_dir is None else Path(run_dir)
        self._config, self._poll_s = config, poll_s
        self._started = time.time()  # a hand-off older than this is a past run's
        self._stop = threading.Event()
        self._finished_id: str | None = None  # hand_off_id the thread finished (or failed on)
        self._report: dict[str, Any] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="goodput-finisher", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        if self.run_dir is None:
            return
        handed = self.run_dir / MLFLOW_RUN_JSON
        rank_0 = rank_file(self.run_dir / TELEMETRY_DIR, 0)
        while not (handed.is_file() or rank_0.is_file()):  # the workers have started
            if self._stop.wait(0.25):
                return
        try:
            warm_up_finish()
        except Exception:  # noqa: BLE001 - best effort: finish_goodput imports them again
            logger.warning("warming up for the goodput report failed", exc_info=True)
        while not self._stop.wait(self._poll_s):
            try:
                if handed.stat().st_mtime < self._started:
                    continue
            except FileNotFoundError:
                continue
            hand_off = read_hand_off(self.run_dir)
            if hand_off is None:
                continue
            self._finished_id = hand_off.get("hand_off_id")
            try:
                self._report = finish_goodput(self.run_dir, config=self._config, hand_off=hand_off)
            except BaseException as exc:  # re-raised by result()
                self._error = exc
            return

    def stop(self) -> None:
        """Training failed: stop waiting for a hand-off, and wait for a finish in progress."""
        self._stop.set()
        self._thread.join()

    def result(self, run_dir: str | Path) -> dict[str, Any]:
        """Return the finished report of `run_dir` (the folder rank 0 returned).

        Finishes (again) in the calling thread when the background thread waited on another
        folder, could not know it, or finished an earlier hand-off than the last one (an
        elastic restart after rank 0 had handed off).

        Raises:
            Whatever `finish_goodput` raised, in either thread.
        """
        run_dir = Path(run_dir)
        self._stop.set()  # rank 0 has handed off: the thread is finishing it, or exits now
        self._thread.join()
        same_folder = self.run_dir is not None and self.run_dir.resolve() == run_dir.resolve()
        last = read_hand_off(run_dir) if same_folder else None
        if last is not None and self._finished_id is not None:
            if last.get("hand_off_id") == self._finished_id:
                if self._error is not None:
                    raise self._error
                assert self._report is not None
                return self._report
        return finish_goodput(run_dir, config=self._config)
