"""Telemetry: step recorder, goodput and badput, step anomalies, stragglers, MFU, baselines (README.md)."""

from platform_lib.telemetry.anomaly import (
    compute_ideal_step_time,
    find_step_anomalies,
    score_stragglers,
)
from platform_lib.telemetry.baseline import (
    MlflowBaselineStore,
    Workload,
    aggregate_baseline,
    compare_with_baseline,
    summarize_run,
)
from platform_lib.telemetry.goodput import (
    build_segments,
    input_verdict,
    summarize_segments,
    window_breakdown,
)
from platform_lib.telemetry.publish import load_run_telemetry, write_run_report
from platform_lib.telemetry.recorder import StepRecorder
from platform_lib.telemetry.report import build_report, format_report
from platform_lib.telemetry.timeline import Event, StepRecord, Timeline, load_timeline

__all__ = [
    "Event",
    "MlflowBaselineStore",
    "StepRecord",
    "StepRecorder",
    "Timeline",
    "Workload",
    "aggregate_baseline",
    "build_report",
    "build_segments",
    "compare_with_baseline",
    "compute_ideal_step_time",
    "find_step_anomalies",
    "format_report",
    "input_verdict",
    "load_run_telemetry",
    "load_timeline",
    "score_stragglers",
    "summarize_run",
    "summarize_segments",
    "window_breakdown",
    "write_run_report",
]
