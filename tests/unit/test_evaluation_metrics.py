"""Per-frame BEV counts and metrics against hand-computed values on a 4 x 4 grid."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from platform_lib.evaluation.metrics import (
    CountAccumulator,
    FrameCounts,
    MetricsConfig,
    MetricSpec,
    band_names,
    count_frames,
    metric_values,
    range_band_masks,
    select_metric,
)
from platform_lib.models.targets import BEVGrid

# 4 x 4 cells of 1 m around ego: centres at +-0.5 and +-1.5 m. Cell ranges: the 4 inner cells
# 0.71 m, the 8 edge cells 1.58 m, the 4 corners 2.12 m.
GRID = BEVGrid(x_min=-2.0, x_max=2.0, y_min=-2.0, y_max=2.0, resolution=1.0)
BANDS = MetricsConfig(range_bands_m=((0.0, 1.0), (1.0, 2.0), (2.0, 3.0)))
INNER = [(1, 1), (1, 2), (2, 1), (2, 2)]
CORNERS = [(0, 0), (0, 3), (3, 0), (3, 3)]


def _grid(cells: list[tuple[int, int]]) -> np.ndarray:
    out = np.zeros((4, 4), dtype=bool)
    for r, c in cells:
        out[r, c] = True
    return out


def test_band_masks_split_cells_by_centre_distance() -> None:
    masks = range_band_masks(GRID, BANDS)
    assert masks.shape == (4, 4, 4)
    assert masks[0].all()
    assert np.array_equal(masks[1], _grid(INNER))
    assert masks[2].sum() == 8 and not (masks[2] & _grid(INNER + CORNERS)).any()
    assert np.array_equal(masks[3], _grid(CORNERS))
    assert band_names(BANDS) == ("all", "0-1m", "1-2m", "2-3m")


def test_counts_and_metrics_match_hand_computed_values() -> None:
    target = _grid(INNER + CORNERS[:2])
    pred = _grid(INNER[:2] + [(0, 1)] + CORNERS[:2])  # 2 inner hits, 1 edge false alarm
    counts = count_frames(pred[None, None], target[None, None], range_band_masks(GRID, BANDS))
    # (frame, class, band, TP/FP/FN): all, 0-1 m, 1-2 m, 2-3 m
    assert counts[0, 0].tolist() == [[4, 1, 2], [2, 0, 2], [0, 1, 0], [2, 0, 0]]
    iou = metric_values(counts[0, 0], "iou")
    precision = metric_values(counts[0, 0], "precision")
    recall = metric_values(counts[0, 0], "recall")
    assert iou.tolist() == pytest.approx([4 / 7, 0.5, 0.0, 1.0])
    assert precision.tolist() == pytest.approx([0.8, 1.0, 0.0, 1.0])
    assert recall[[0, 1, 3]].tolist() == pytest.approx([4 / 6, 0.5, 1.0])
    assert math.isnan(recall[2])  # no target cell in 1-2 m: recall undefined there


def test_default_bands_on_the_model_grid() -> None:
    grid = BEVGrid(x_min=-25.6, x_max=25.6, y_min=-25.6, y_max=25.6, resolution=0.8)
    masks = range_band_masks(grid, MetricsConfig())
    x, y = grid.cell_centres()
    r = np.hypot(x, y)
    assert band_names(MetricsConfig()) == ("all", "0-20m", "20-35m", "35-50m")
    assert masks[1].sum() == (r < 20).sum() and masks[3].sum() == ((r >= 35) & (r < 50)).sum()
    assert masks[1:].sum() == r.size  # every cell of this grid is within 50 m


def test_mean_over_classes_skips_undefined_classes() -> None:
    summed = np.zeros((2, 2, 3), dtype=np.int64)  # (G=2 classes, bands all + 1, 3)
    summed[0, 0] = [1, 1, 2]  # class 0: IoU 0.25; class 1: nothing at all
    classes, bands = ("vehicle", "pedestrian"), ("all", "0-20m")
    assert select_metric(summed, MetricSpec(), classes, bands) == pytest.approx(0.25)
    spec = MetricSpec(class_group="pedestrian")
    assert math.isnan(float(select_metric(summed, spec, classes, bands)))
    assert math.isnan(float(select_metric(summed, MetricSpec(band="0-20m"), classes, bands)))


def test_accumulator_orders_by_key_and_ignores_pad_repeats() -> None:
    acc = CountAccumulator(GRID, BANDS, classes=("vehicle",))
    full, empty = _grid(INNER), _grid([])
    acc.add(["b_000001", "a_000000"], np.array([[full], [empty]]), np.array([[full], [full]]))
    acc.add(["b_000001"], np.array([[empty]]), np.array([[full]]))  # a pad repeat
    counts = acc.finish()
    assert counts.keys == ("a_000000", "b_000001") and counts.logs == ("a", "b")
    assert counts.counts[:, 0, 0].tolist() == [[0, 0, 4], [4, 0, 0]]
    again = FrameCounts.from_dict(counts.to_dict())
    assert again.keys == counts.keys and np.array_equal(again.counts, counts.counts)


def test_bad_bands_and_metric_specs_are_refused() -> None:
    with pytest.raises(ValidationError, match="0 <= lo < hi"):
        MetricsConfig(range_bands_m=((20.0, 10.0),))
    with pytest.raises(ValidationError, match="use one of"):
        MetricSpec(class_group="truck")
    with pytest.raises(ValueError, match="shapes|must be"):
        count_frames(np.zeros((1, 1, 3, 3), bool), np.zeros((1, 1, 3, 3), bool), np.ones((1, 4, 4)))
