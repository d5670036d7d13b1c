"""Log-level bootstrap intervals: coverage of a known difference, insufficiency, determinism."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from platform_lib.evaluation.bootstrap import (
    BootstrapConfig,
    draw_resamples,
    interval_of,
    paired_intervals,
    per_log_sums,
    summarize_slices,
)
from platform_lib.evaluation.metrics import FrameCounts, MetricSpec

SPEC = MetricSpec(class_group="vehicle")


def _paired_counts(
    rng: np.random.Generator, num_logs: int, frames: int, delta: float
) -> tuple[FrameCounts, FrameCounts]:
    """Two models on the same frames; population IoU p (champion) and p + delta (challenger).

    Each log has its own difficulty p_l (mean 0.5) shared by both models, so frames of a log
    are correlated and the pairing matters. Per frame, both models face a union of u cells
    (u independent of p_l), of which Binomial(u, p_l) resp. Binomial(u, p_l + delta) are
    hits; the rest splits into FP and FN. The population IoU, E[TP] / E[union], is then
    E[p_l] = 0.5 and 0.5 + delta.
    """
    p_log = rng.uniform(0.3, 0.7, size=num_logs)
    p = np.repeat(p_log, frames)
    union = rng.integers(50, 150, size=p.size)
    out = []
    for shift in (0.0, delta):
        tp = rng.binomial(union, p + shift)
        fp = rng.binomial(union - tp, 0.5)
        counts = np.stack([tp, fp, union - tp - fp], axis=-1)[:, None, None, :]
        keys = tuple(f"log-{i // frames:03d}_{i % frames:06d}" for i in range(p.size))
        out.append(FrameCounts(keys, ("vehicle",), ("all",), counts.astype(np.int64)))
    return out[0], out[1]


def test_paired_interval_covers_the_known_difference_at_the_nominal_rate() -> None:
    delta, trials, covered = 0.05, 200, 0
    config = BootstrapConfig(num_resamples=400, confidence=0.95, seed=11)
    for trial in range(trials):
        a, b = _paired_counts(np.random.default_rng(trial), num_logs=100, frames=3, delta=delta)
        mask = np.ones(len(a.keys), dtype=bool)
        _, _, diff = paired_intervals(a, b, mask, SPEC, config)
        assert diff is not None and diff.status == "ok"
        covered += diff.low <= delta <= diff.high
    assert 0.90 <= covered / trials <= 0.99


def test_pairing_narrows_the_interval_of_the_difference() -> None:
    a, b = _paired_counts(np.random.default_rng(0), num_logs=30, frames=10, delta=0.05)
    mask = np.ones(len(a.keys), dtype=bool)
    ia, ib, diff = paired_intervals(a, b, mask, SPEC, BootstrapConfig())
    assert diff is not None and ib is not None
    assert diff.estimate == pytest.approx(ib.estimate - ia.estimate)
    assert diff.high - diff.low < (ia.high - ia.low)  # log difficulty cancels in the pair


def test_too_few_logs_is_insufficient_never_a_number() -> None:
    a, _ = _paired_counts(np.random.default_rng(0), num_logs=4, frames=10, delta=0.0)
    result = interval_of(a, np.ones(40, dtype=bool), SPEC, BootstrapConfig(min_logs=5))
    assert result.status == "insufficient" and result.low is None and result.high is None
    assert result.num_logs == 4 and result.num_frames == 40 and result.estimate is not None


def test_undefined_metric_has_no_estimate() -> None:
    a, _ = _paired_counts(np.random.default_rng(0), num_logs=6, frames=2, delta=0.0)
    empty = FrameCounts(a.keys, a.classes, a.bands, np.zeros_like(a.counts))
    result = interval_of(empty, np.ones(12, dtype=bool), SPEC, BootstrapConfig())
    assert result.status == "undefined" and result.estimate is None


def test_resamples_draw_whole_logs_and_are_seeded() -> None:
    config = BootstrapConfig(num_resamples=200, seed=3)
    weights = draw_resamples(7, config)
    assert weights.shape == (200, 7) and (weights.sum(axis=1) == 7).all()
    assert np.array_equal(weights, draw_resamples(7, config))
    assert not np.array_equal(weights, draw_resamples(7, config.model_copy(update={"seed": 4})))
    sums = per_log_sums(np.arange(6)[:, None], ("b", "a", "b", "c", "a", "a"))
    assert sums[:, 0].tolist() == [1 + 4 + 5, 0 + 2, 3]  # logs a, b, c


def test_same_seed_gives_the_same_interval() -> None:
    a, b = _paired_counts(np.random.default_rng(5), num_logs=8, frames=5, delta=0.02)
    mask = np.ones(len(a.keys), dtype=bool)
    first = paired_intervals(a, b, mask, SPEC, BootstrapConfig(seed=9))
    assert first == paired_intervals(a, b, mask, SPEC, BootstrapConfig(seed=9))


def test_bad_bootstrap_settings_are_refused() -> None:
    with pytest.raises(ValidationError):
        BootstrapConfig(confidence=1.5)
    with pytest.raises(ValidationError):
        BootstrapConfig(min_logs=1)


def test_one_model_table_has_a_row_per_slice_and_metric() -> None:
    a, _ = _paired_counts(np.random.default_rng(2), num_logs=6, frames=4, delta=0.0)
    masks = {"all": np.ones(24, dtype=bool), "two-logs": np.arange(24) < 8}
    specs = [SPEC, MetricSpec(metric="recall", class_group="vehicle")]
    rows = summarize_slices(a, masks, specs, BootstrapConfig())
    assert [(r["slice"], r["metric"], r["status"]) for r in rows] == [
        ("all", "iou/vehicle/all", "ok"),
        ("all", "recall/vehicle/all", "ok"),
        ("two-logs", "iou/vehicle/all", "insufficient"),
        ("two-logs", "recall/vehicle/all", "insufficient"),
    ]
    assert rows[0]["low"] <= rows[0]["estimate"] <= rows[0]["high"]
