"""Telemetry: step recorder, goodput and badput, step anomalies, stragglers, MFU, baselines (README.md).

Submodules are imported on first use (PEP 562): reading reports and baselines does not import
torch (the recorder does).
"""

from typing import TYPE_CHECKING

from platform_lib.lazy import lazy_exports

_EXPORTS = {
    "compute_ideal_step_time": "platform_lib.telemetry.anomaly",
    "find_step_anomalies": "platform_lib.telemetry.anomaly",
    "score_stragglers": "platform_lib.telemetry.anomaly",
    "MlflowBaselineStore": "platform_lib.telemetry.baseline",
    "Workload": "platform_lib.telemetry.baseline",
    "aggregate_baseline": "platform_lib.telemetry.baseline",
    "compare_with_baseline": "platform_lib.telemetry.baseline",
    "summarize_run": "platform_lib.telemetry.baseline",
    "build_segments": "platform_lib.telemetry.goodput",
    "input_verdict": "platform_lib.telemetry.goodput",
    "summarize_segments": "platform_lib.telemetry.goodput",
    "window_breakdown": "platform_lib.telemetry.goodput",
    "load_run_telemetry": "platform_lib.telemetry.publish",
    "write_run_report": "platform_lib.telemetry.publish",
    "StepRecorder": "platform_lib.telemetry.recorder",
    "build_report": "platform_lib.telemetry.report",
    "format_report": "platform_lib.telemetry.report",
    "Event": "platform_lib.telemetry.timeline",
    "StepRecord": "platform_lib.telemetry.timeline",
    "Timeline": "platform_lib.telemetry.timeline",
    "load_timeline": "platform_lib.telemetry.timeline",
}

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:  # the same names, imported explicitly for type checkers and IDEs
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
    from platform_lib.telemetry.publish import (
        load_run_telemetry,
        write_run_report,
    )
    from platform_lib.telemetry.recorder import (
        StepRecorder,
    )
    from platform_lib.telemetry.report import (
        build_report,
        format_report,
    )
    from platform_lib.telemetry.timeline import (
        Event,
        StepRecord,
        Timeline,
        load_timeline,
    )

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
