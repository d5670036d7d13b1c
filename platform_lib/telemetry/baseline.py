"""Per-workload baselines: every finished run's summary, and regression flags against them.

A workload is (model preset, dataset hash, world size, device type, precision, batch size and
the layout when it is not flat FSDP). Each finished run adds its summary to the baseline store
(the MLflow experiment `drivetrain-baselines`); a new run is compared with the median of its workload's last `BASELINE_RUNS` summaries and
flagged when step time, peak memory or checkpoint blocking per save exceed it by more than the
tolerance (default 5 %, as Megatron-LM's functional tests allow), or the input wait fraction
rises by more than the tolerance in absolute points. Flags become MLflow tags
`goodput.regression.<name>`. See docs/goodput.md, "Baselines and regression flags".
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from platform_lib.redact import redact

__all__ = [
    "BASELINE_EXPERIMENT",
    "BASELINE_RUNS",
    "DEFAULT_TOLERANCE",
    "MlflowBaselineStore",
    "Workload",
    "aggregate_baseline",
    "compare_with_baseline",
    "layout_key",
    "summarize_run",
    "workload_of",
]

BASELINE_EXPERIMENT = "drivetrain-baselines"
BASELINE_RUNS = 5
RECORDED_AT = "recorded_at"  # POSIX s the summary was added; orders the runs (start times tie)
DEFAULT_TOLERANCE = 0.05
SUMMARY_KEYS = (
    "median_step_s",
    "input_wait_fraction",
    "mfu",
    "checkpoint_s_per_save",
    "peak_memory_bytes",
    "goodput_compatible",
    "goodput_input_adjusted",
)


@dataclass(kw_only=True, frozen=True)
class Workload:
    """What must match for two runs' step times to be comparable, batch size per rank included."""

    model: str
    """model preset name (model zoo)"""
    dataset_hash: str
    """content hash of the dataset (manifest `dataset_hash`)"""
    world_size: int
    """ranks"""
    device_type: str
    """"cpu" or the CUDA device name"""
    precision: str
    """"bf16" (mixed precision) or "fp32" """
    batch_size: int
    """samples per rank per step"""
    layout: str = ""
    """the ranks' layout (`layout_key`); "" for flat FSDP, the layout of every run before layouts"""

    def key(self) -> str:
        """Return the key tagged on baseline runs, e.g. "bev_fusion_small/3f2a9c1d0b7e/ws2/cpu/bf16/b4".

        A layout other than flat FSDP adds a last part, e.g. ".../b4/pp2-dpr1-dps1-tp2-1F1B-m4".
        """
        key = (
            f"{self.model}/{self.dataset_hash[:12]}/ws{self.world_size}/{self.device_type}/"
            f"{self.precision}/b{self.batch_size}"
        )
        return f"{key}/{self.layout}" if self.layout else key


def layout_key(layout: dict[str, Any] | None) -> str:
    """Return the workload key part of a report's `job.layout` ("" for none: flat FSDP).

    Degrees in mesh order, then the pipeline schedule and microbatches when pipelined:
    "pp2-dpr1-dps2-tp1-1F1B-m4"; both change step time as much as the degrees do.
    """
    if not layout:
        return ""
    key = f"pp{layout['pp']}-dpr{layout['dp_replicate']}-dps{layout['dp_shard']}-tp{layout['tp']}"
    if int(layout["pp"]) > 1:
        key += f"-{layout['pp_schedule']}-m{layout['pp_microbatches']}"
    return key


def workload_of(report: dict[str, Any], dataset_hash: str) -> Workload:
    """Return the workload of a goodput report (`build_report`) trained on `dataset_hash`.

    Raises:
        ValueError: the report lacks the model, precision or batch size (recorded by
            `training.observe.build_recorder`).
    """
    job = report["job"]
    missing = [k for k in ("model", "precision", "batch_size") if not job.get(k)]
    if missing:
        raise ValueError(f"goodput report has no {missing}: cannot key its workload baseline")
    return Workload(
        model=job["model"],
        dataset_hash=dataset_hash,
        world_size=int(job["world_size"]),
        device_type=job.get("device_name") or job["device_type"] or "cpu",
        precision=job["precision"],
        batch_size=int(job["batch_size"]),
        layout=layout_key(job.get("layout")),
    )


def summarize_run(report: dict[str, Any]) -> dict[str, float]:
    """Return the baseline summary of a goodput report (`build_report`): the SUMMARY_KEYS present."""
    steps = report["steps"]
    values = {
        "median_step_s": steps["median_step_s"],
        "input_wait_fraction": report["input"]["wait_fraction"],
        "mfu": report["throughput"]["mfu"],
        "checkpoint_s_per_save": steps["checkpoint_s"] / steps["checkpoints"]
        if steps["checkpoints"]
        else None,
        "peak_memory_bytes": report["memory"]["peak_bytes"] or None,
        "goodput_compatible": report["goodput"]["compatible"],
        "goodput_input_adjusted": report["goodput"]["input_adjusted"],
    }
    return {k: float(v) for k, v in values.items() if v is not None}


def aggregate_baseline(summaries: list[dict[str, float]]) -> dict[str, float]:
    """Return the per-key median of run summaries (keys missing in a run are skipped)."""
    out = {}
    for key in SUMMARY_KEYS:
        values = [s[key] for s in summaries if key in s]
        if values:
            out[key] = statistics.median(values)
    return out


def _relative(unit_fmt: str, value: float, base: float, tolerance: float) -> str | None:
    if base <= 0 or value <= base * (1 + tolerance):
        return None
    return (
        f"{unit_fmt.format(value)} vs baseline {unit_fmt.format(base)} "
        f"(+{value / base - 1:.1%}, tolerance {tolerance:.0%})"
    )


def compare_with_baseline(
    summary: dict[str, float], baseline: dict[str, float], tolerance: float = DEFAULT_TOLERANCE
) -> dict[str, str]:
    """Return the regression flags of a run summary against its baseline ({} when none).

    Keys: "step_time", "peak_memory", "checkpoint", "input_wait"; values say by how much.

    Raises:
        ValueError: if `tolerance` < 0.
    """
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    flags: dict[str, str | None] = {}
    checks = (
        ("step_time", "median_step_s", "{:.4f} s"),
        ("peak_memory", "peak_memory_bytes", "{:.0f} B"),
        ("checkpoint", "checkpoint_s_per_save", "{:.4f} s"),
    )
    for name, key, fmt in checks:
        if key in summary and key in baseline:
            flags[name] = _relative(fmt, summary[key], baseline[key], tolerance)
    key = "input_wait_fraction"
    if key in summary and key in baseline and summary[key] > baseline[key] + tolerance:
        flags["input_wait"] = (
            f"{summary[key]:.1%} vs baseline {baseline[key]:.1%} "
            f"(+{(summary[key] - baseline[key]) * 100:.1f} points, tolerance "
            f"{tolerance * 100:.0f} points)"
        )
    return {k: v for k, v in flags.items() if v}


class MlflowBaselineStore:
    """Baseline summaries as runs of one MLflow experiment, tagged `workload_key`."""

    def __init__(self, client: Any, experiment: str = BASELINE_EXPERIMENT) -> None:
        """Open (or create) the baseline experiment.

        Args:
            client: an `mlflow.tracking.MlflowClient`.
            experiment: experiment holding the summaries (created if missing).
        """
        self.client = client
        found = client.get_experiment_by_name(experiment)
        self.experiment_id = found.experiment_id if found else client.create_experiment(experiment)

    def load(
        self, workload_key: str, max_runs: int = BASELINE_RUNS, *, exclude_run_id: str = ""
    ) -> list[dict[str, float]]:
        """Return the summaries of the last `max_runs` runs of `workload_key`, newest first.

        `exclude_run_id`: leave out the summary of that training run (a retried registration
        compares the run with the others, not with itself).
        """
        escaped = workload_key.replace("'", "\\'")
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.workload_key = '{escaped}'",
            order_by=[f"metrics.{RECORDED_AT} DESC"],
            max_results=max_runs + 1,
        )
        kept = [
            r
            for r in runs
            if not exclude_run_id or r.data.tags.get("source_run_id") != exclude_run_id
        ]
        return [
            {k: v for k, v in run.data.metrics.items() if k in SUMMARY_KEYS}
            for run in kept[:max_runs]
        ]

    def add(self, workload_key: str, summary: dict[str, float], source_run_id: str = "") -> str:
        """Store one run's summary for `workload_key`; return the baseline run id.

        A training run already in the store (a retried registration) is not added twice.
        """
        from mlflow.entities import Metric

        if source_run_id:
            escaped = source_run_id.replace("'", "\\'")
            found = self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.source_run_id = '{escaped}'",
                max_results=1,
            )
            if found:
                return str(found[0].info.run_id)
        run = self.client.create_run(
            self.experiment_id,
            tags={"workload_key": redact(workload_key), "source_run_id": source_run_id},
        )
        values = {**summary, RECORDED_AT: time.time()}
        metrics = [Metric(k, float(v), 0, 0) for k, v in sorted(values.items())]
        self.client.log_batch(run.info.run_id, metrics=metrics)
        self.client.set_terminated(run.info.run_id)
        return run.info.run_id
