"""Step-time anomalies and per-rank straggler scores.

Anomalies follow Google's ml-goodput-measurement (`compute_ideal_step_time`,
`get_anomalous_and_normal_step_times`): steps shorter than a minimum are left out, then with
the median and the unscaled median absolute deviation (MAD, `scipy.stats.median_abs_deviation`
with scale=1) of the rest, a step is anomalous when it is longer than median + 3 MAD; the
ideal step time is the mean of the normal steps. ml-goodput-measurement's minimum is 1 s;
here it is a setting (`MetricsConfig.anomaly_min_step_s`) because small CPU steps are shorter.

Straggler score, after NVIDIA's resiliency extension (relative performance score): a rank's
median step time against the fastest rank's, `fastest median / rank median` in (0, 1]; a rank
is flagged below `straggler_threshold` (0.7 by default).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from platform_lib.telemetry.timeline import StepRecord

__all__ = [
    "DEFAULT_MIN_STEP_S",
    "DEFAULT_STRAGGLER_THRESHOLD",
    "compute_ideal_step_time",
    "find_step_anomalies",
    "score_stragglers",
]

DEFAULT_MIN_STEP_S = 1.0
DEFAULT_STRAGGLER_THRESHOLD = 0.7
MAD_FACTOR = 3.0


def _median_mad(values: Sequence[float]) -> tuple[float, float]:
    median = statistics.median(values)
    return median, statistics.median(abs(v - median) for v in values)


def compute_ideal_step_time(
    step_times_s: Sequence[float], min_step_s: float = DEFAULT_MIN_STEP_S
) -> float | None:
    """Return the ideal step time: mean of the steps within median + 3 MAD, in s.

    Args:
        step_times_s: step wall times, in s.
        min_step_s: steps shorter than this are left out first (ml-goodput-measurement: 1 s).

    Returns:
        The ideal step time, or None when no step is at least `min_step_s` long.
    """
    times = [t for t in step_times_s if t >= min_step_s]
    if not times:
        return None
    median, mad = _median_mad(times)
    normal = [t for t in times if t <= median + MAD_FACTOR * mad]
    return statistics.fmean(normal) if normal else None


def find_step_anomalies(
    steps: Sequence[StepRecord], min_step_s: float = DEFAULT_MIN_STEP_S
) -> dict:
    """Flag steps longer than median + 3 MAD of the kept steps' wall times.

    Args:
        steps: one rank's kept steps, without the first step of each attempt (its start-up
            cost is training-prep badput, not an anomaly).
        min_step_s: steps shorter than this are left out (see module docstring).

    Returns:
        {"ideal_step_s", "median_step_s", "mad_s", "threshold_s", "min_step_s",
        "anomalies": [{"step", "wall_s", "extra_s", "cause"}], "extra_s"}; cause is
        "checkpoint", "input" or "compute": the part of the step that exceeds its share of
        the ideal step the most. Times in s; None when no step qualifies.
    """
    considered = [s for s in steps if s.wall_s >= min_step_s]
    out: dict[str, Any] = {
        "ideal_step_s": None,
        "median_step_s": None,
        "mad_s": None,
        "threshold_s": None,
        "min_step_s": min_step_s,
        "anomalies": [],
        "extra_s": 0.0,
    }
    if not considered:
        return out
    median, mad = _median_mad([s.wall_s for s in considered])
    threshold = median + MAD_FACTOR * mad
    normal = [s for s in considered if s.wall_s <= threshold]
    ideal = statistics.fmean(s.wall_s for s in normal)
    mean_wait = statistics.fmean(s.input_wait_s for s in normal)
    mean_ckpt = statistics.fmean(s.checkpoint_s for s in normal)
    anomalies: list[dict[str, Any]] = []
    for s in considered:
        if s.wall_s <= threshold:
            continue
        excess = {
            "checkpoint": s.checkpoint_s - mean_ckpt,
            "input": s.input_wait_s - mean_wait,
            "compute": s.compute_s - (ideal - mean_wait - mean_ckpt),
        }
        anomalies.append(
            {
                "step": s.step,
                "wall_s": s.wall_s,
                "extra_s": s.wall_s - ideal,
                "cause": max(excess, key=excess.__getitem__),
            }
        )
    out.update(
        ideal_step_s=ideal,
        median_step_s=median,
        mad_s=mad,
        threshold_s=threshold,
        anomalies=anomalies,
        extra_s=sum(a["extra_s"] for a in anomalies),
    )
    return out


def score_stragglers(
    median_step_s_by_rank: dict[int, float], threshold: float = DEFAULT_STRAGGLER_THRESHOLD
) -> dict[int, dict]:
    """Return per rank {"median_step_s", "score", "straggler"}; score = fastest median / rank median.

    Raises:
        ValueError: a median is not > 0.
    """
    bad = {r: m for r, m in median_step_s_by_rank.items() if not m > 0}
    if bad:
        raise ValueError(f"median step times must be > 0, got {bad}")
    if not median_step_s_by_rank:
        return {}
    fastest = min(median_step_s_by_rank.values())
    return {
        rank: {"median_step_s": m, "score": fastest / m, "straggler": fastest / m < threshold}
        for rank, m in sorted(median_step_s_by_rank.items())
    }
