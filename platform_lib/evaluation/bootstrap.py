"""Confidence intervals of BEV metrics by a seeded bootstrap over logs (cluster bootstrap).

Frames of one log are correlated, so the resampling unit is the log (Davison & Hinkley,
"Bootstrap Methods and their Application" (1997), section 3.8); the interval is the percentile
interval (Efron & Tibshirani, "An Introduction to the Bootstrap" (1993), ch. 13). Paired
differences apply the same resample to both models. Resamples are rows of per-log
multiplicities (R, L) from `default_rng(seed)`, applied as one matrix product (R, L) @ (L, K).
A slice with fewer than `min_logs` logs is "insufficient" and gets no number; the reasons and
the coverage measured are in platform_lib/evaluation/README.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from platform_lib.evaluation.metrics import FrameCounts, MetricSpec, select_metric

__all__ = [
    "BootstrapConfig",
    "Interval",
    "draw_resamples",
    "interval_of",
    "paired_intervals",
    "per_log_sums",
    "summarize_slices",
]

Status = Literal["ok", "insufficient", "undefined"]


class BootstrapConfig(BaseModel):
    """How intervals are computed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_resamples: int = Field(default=1000, ge=100, le=100_000)
    """bootstrap resamples per interval"""
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    """two-sided confidence level of the percentile interval"""
    seed: int = Field(default=0, ge=0)
    """seed of the numpy Generator drawing the resamples"""
    min_logs: int = Field(default=5, ge=2)
    """fewest logs in a slice for an interval; fewer: "insufficient" """


@dataclass(frozen=True, kw_only=True)
class Interval:
    """A metric (or a difference) of a slice with its bootstrap interval (plain data)."""

    status: Status
    """ok; insufficient (fewer logs than min_logs); undefined (metric has no denominator)"""
    estimate: float | None
    """metric of the slice's pooled counts; None unless status is ok or insufficient"""
    low: float | None
    """lower bound of the interval; None unless status is ok"""
    high: float | None
    """upper bound of the interval; None unless status is ok"""
    num_logs: int
    """logs in the slice"""
    num_frames: int
    """frames in the slice"""
    undefined_resamples: int = 0
    """resamples left out of the quantiles because the metric was undefined in them"""

    def to_dict(self) -> dict:
        """Return the fields as a JSON-ready dict."""
        return asdict(self)


def per_log_sums(counts: np.ndarray, logs: tuple[str, ...]) -> np.ndarray:
    """Return the (L, ...) counts summed per log, logs in sorted order.

    Args:
        counts: (N, ...) per-frame counts.
        logs: (N,) log id of each frame.
    """
    names, inverse = np.unique(np.asarray(logs, dtype=object), return_inverse=True)
    out = np.zeros((len(names), *counts.shape[1:]), dtype=np.int64)
    np.add.at(out, inverse, counts)
    return out


def draw_resamples(num_logs: int, config: BootstrapConfig) -> np.ndarray:
    """Return (R, L) int64 multiplicities: row r counts how often each log is drawn in resample r.

    Each row draws `num_logs` logs uniformly with replacement (rows sum to `num_logs`).
    """
    rng = np.random.default_rng(config.seed)
    r = config.num_resamples
    drawn = rng.integers(0, num_logs, size=(r, num_logs))
    flat = drawn + np.arange(r)[:, None] * num_logs
    return np.bincount(flat.ravel(), minlength=r * num_logs).reshape(r, num_logs)


def _resampled(per_log: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Return (R, ...) sums of per-log counts (L, ...) under multiplicities (R, L)."""
    flat = per_log.reshape(per_log.shape[0], -1)
    return (weights @ flat).reshape(weights.shape[0], *per_log.shape[1:])


def _interval(
    estimate: float, samples: np.ndarray | None, num_logs: int, num_frames: int, confidence: float
) -> Interval:
    """Return `estimate` with the percentile interval of its resampled values `samples` (R,).

    Without bounds: "insufficient" when `samples` is None (fewer logs than `min_logs`),
    "undefined" when the estimate is NaN or no resample has a defined value.
    """
    defined = np.empty(0) if samples is None else samples[~np.isnan(samples)]
    if np.isnan(estimate) or samples is None or defined.size == 0:
        return Interval(
            status="insufficient" if samples is None and not np.isnan(estimate) else "undefined",
            estimate=None if np.isnan(estimate) else float(estimate),
            low=None,
            high=None,
            num_logs=num_logs,
            num_frames=num_frames,
        )
    alpha = 1.0 - confidence
    low, high = np.quantile(defined, [alpha / 2, 1 - alpha / 2])
    return Interval(
        status="ok",
        estimate=float(estimate),
        low=float(low),
        high=float(high),
        num_logs=num_logs,
        num_frames=num_frames,
        undefined_resamples=int(samples.size - defined.size),
    )


def interval_of(
    counts: FrameCounts, mask: np.ndarray, spec: MetricSpec, config: BootstrapConfig
) -> Interval:
    """Return `spec`'s metric over the frames of `mask` ((N,) bool) with its log-bootstrap interval.

    Raises:
        ValueError: `spec` names a band or class the counts do not have.
    """
    return paired_intervals(counts, None, mask, spec, config)[0]


def paired_intervals(
    champion: FrameCounts,
    challenger: FrameCounts | None,
    mask: np.ndarray,
    spec: MetricSpec,
    config: BootstrapConfig,
) -> tuple[Interval, Interval | None, Interval | None]:
    """Return the intervals of champion, challenger and challenger - champion on one slice.

    Both models' counts are resampled with the same log multiplicities (paired bootstrap).
    The caller checks that both hold the same frames (`promotion.check_paired`).

    Args:
        champion: per-frame counts of the reference model.
        challenger: per-frame counts of the new model on the same frames, or None.
        mask: (N,) bool, the frames of the slice.
        spec: the metric.
        config: resamples, confidence, seed, minimum logs.

    Returns:
        (champion, challenger, difference); the last two are None without a challenger.
    """
    mask = np.asarray(mask, dtype=bool)
    logs = tuple(log for log, keep in zip(champion.logs, mask, strict=True) if keep)
    num_logs, num_frames = len(set(logs)), int(mask.sum())
    models = [champion] if challenger is None else [champion, challenger]
    per_log = [per_log_sums(m.counts[mask], logs) for m in models]  # each (L, G, B + 1, 3)

    def metric(summed: np.ndarray) -> np.ndarray:
        return select_metric(summed, spec, champion.classes, champion.bands)

    estimates = [float(metric(p.sum(axis=0))) for p in per_log]
    if len(estimates) == 2:
        estimates.append(estimates[1] - estimates[0])
    samples: list[np.ndarray | None] = [None] * len(estimates)
    if num_logs >= config.min_logs:
        weights = draw_resamples(num_logs, config)
        resampled = [metric(_resampled(p, weights)) for p in per_log]
        if len(resampled) == 2:
            resampled.append(resampled[1] - resampled[0])
        samples = [*resampled]
    out = [
        _interval(e, s, num_logs, num_frames, config.confidence)
        for e, s in zip(estimates, samples, strict=True)
    ]
    if challenger is None:
        return out[0], None, None
    return out[0], out[1], out[2]


def summarize_slices(
    counts: FrameCounts,
    masks: dict[str, np.ndarray],
    specs: Sequence[MetricSpec],
    config: BootstrapConfig,
) -> list[dict]:
    """Return one model's table: a row per (slice, metric) with its interval (plain data).

    `masks` maps slice name -> (N,) bool (`slices.slice_masks`).

    Returns:
        [{"slice", "metric", **Interval.to_dict()}, ...], slices in `masks` order.
    """
    return [
        {"slice": name, "metric": spec.label, **interval_of(counts, mask, spec, config).to_dict()}
        for name, mask in masks.items()
        for spec in specs
    ]
