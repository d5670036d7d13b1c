"""Per-frame BEV occupancy counts (TP/FP/FN per class and range band) and the metrics from them.

Shapes (N frames, G class groups, H x W BEV cells, B range bands + 1 for "all"): pred, target
(N, G, H, W) bool; band_masks (B + 1, H, W) bool, index 0 "all"; counts (N, G, B + 1, 3) int64
TP, FP, FN. IoU = TP / (TP + FP + FN), precision = TP / (TP + FP), recall = TP / (TP + FN),
NaN when the denominator is 0. A cell's range is the distance of its centre from the ego
origin in the BEV plane, in m (ego frame); band [lo, hi) holds lo <= range < hi. Counts stay
per frame so that intervals come from resampling counts, never from re-running the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from platform_lib.models.targets import BEVGrid
from schemas.classes import CLASS_GROUPS

__all__ = [
    "ALL_BANDS",
    "CountAccumulator",
    "FrameCounts",
    "MetricSpec",
    "MetricsConfig",
    "band_names",
    "count_frames",
    "log_of_key",
    "metric_values",
    "range_band_masks",
    "select_metric",
]

#: Name of the band that holds every cell of the grid.
ALL_BANDS = "all"
#: Metrics computed from TP/FP/FN counts.
MetricName = Literal["iou", "precision", "recall"]

TP, FP, FN = 0, 1, 2


class MetricsConfig(BaseModel):
    """Range bands of the evaluation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    range_bands_m: tuple[tuple[float, float], ...] = Field(
        default=((0.0, 20.0), (20.0, 35.0), (35.0, 50.0)),
        min_length=1,
        description="range bands [lo, hi) of the cell centre's distance from ego, in m",
    )

    @model_validator(mode="after")
    def _check_bands(self) -> MetricsConfig:
        for lo, hi in self.range_bands_m:
            if not 0.0 <= lo < hi:
                raise ValueError(f"range_bands_m: band [{lo}, {hi}) needs 0 <= lo < hi (m)")
        return self


def band_names(config: MetricsConfig) -> tuple[str, ...]:
    """Return the band names, "all" first, then e.g. "0-20m", "20-35m" (numbers as `%g`)."""
    return (ALL_BANDS, *(f"{lo:g}-{hi:g}m" for lo, hi in config.range_bands_m))


def range_band_masks(grid: BEVGrid, config: MetricsConfig) -> np.ndarray:
    """Return the (B + 1, H, W) bool cell masks of "all" and each range band of `config`."""
    x, y = grid.cell_centres()
    distance = np.hypot(x, y)
    bands = [np.ones_like(distance, dtype=bool)]
    bands += [(distance >= lo) & (distance < hi) for lo, hi in config.range_bands_m]
    return np.stack(bands)


def count_frames(pred: np.ndarray, target: np.ndarray, band_masks: np.ndarray) -> np.ndarray:
    """Return the (N, G, B + 1, 3) int64 TP, FP, FN of each frame, class and band.

    Args:
        pred: (N, G, H, W) bool predicted occupancy.
        target: (N, G, H, W) bool target occupancy.
        band_masks: (B + 1, H, W) bool from `range_band_masks`.

    Raises:
        ValueError: shapes that do not match.
    """
    pred, target = np.asarray(pred, dtype=bool), np.asarray(target, dtype=bool)
    if pred.shape != target.shape or pred.ndim != 4 or pred.shape[2:] != band_masks.shape[1:]:
        raise ValueError(
            f"pred {pred.shape}, target {target.shape} and band masks {band_masks.shape} must "
            "be (N, G, H, W), (N, G, H, W) and (B + 1, H, W)"
        )
    n, g = pred.shape[:2]
    masks = band_masks.reshape(band_masks.shape[0], -1).T.astype(np.int64)  # (H*W, B + 1)
    kinds = (pred & target, pred & ~target, ~pred & target)
    per_kind = [k.reshape(n * g, -1).astype(np.int64) @ masks for k in kinds]  # (N*G, B + 1)
    return np.stack(per_kind, axis=-1).reshape(n, g, band_masks.shape[0], 3)


def log_of_key(key: str) -> str:
    """Return the log id of a sample key `<log_id>_<frame:06d>`."""
    return key.rsplit("_", 1)[0]


@dataclass(frozen=True, eq=False)
class FrameCounts:
    """TP/FP/FN of one model per frame, class and range band, with the frames' keys and logs.

    Frames are in key order (sorted), so two evaluations of the same frames line up row by row.
    """

    keys: tuple[str, ...]
    """sample keys (N,), sorted"""
    classes: tuple[str, ...]
    """class groups (G,)"""
    bands: tuple[str, ...]
    """band names (B + 1,), "all" first"""
    counts: np.ndarray
    """(N, G, B + 1, 3) int64 TP, FP, FN"""

    @property
    def logs(self) -> tuple[str, ...]:
        """Log id of each frame (N,)."""
        return tuple(log_of_key(k) for k in self.keys)

    def to_dict(self) -> dict:
        """Return plain data (JSON-ready; counts as nested lists) for an artifact."""
        return {
            "keys": list(self.keys),
            "classes": list(self.classes),
            "bands": list(self.bands),
            "counts": self.counts.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict) -> FrameCounts:
        """Rebuild from `to_dict` output.

        Raises:
            ValueError: counts whose shape does not match the keys, classes and bands.
        """
        counts = np.asarray(data["counts"], dtype=np.int64)
        shape = (len(data["keys"]), len(data["classes"]), len(data["bands"]), 3)
        if counts.shape != shape:
            raise ValueError(f"counts of shape {counts.shape}, expected {shape}")
        return cls(tuple(data["keys"]), tuple(data["classes"]), tuple(data["bands"]), counts)


class CountAccumulator:
    """Collects per-frame counts batch by batch (an evaluation loop's sink).

    Args:
        grid: the model's BEV grid.
        config: range bands.
        classes: class groups of the target channels, in channel order.
    """

    def __init__(
        self,
        grid: BEVGrid,
        config: MetricsConfig | None = None,
        classes: tuple[str, ...] = CLASS_GROUPS,
    ) -> None:
        config = config or MetricsConfig()
        self._masks = range_band_masks(grid, config)
        self._bands = band_names(config)
        self._classes = tuple(classes)
        self._rows: dict[str, np.ndarray] = {}

    def add(self, keys: list[str], pred: np.ndarray, target: np.ndarray) -> None:
        """Count a batch; a key seen before (a loader's pad repeat) is ignored.

        Args:
            keys: (N,) sample keys.
            pred: (N, G, H, W) bool predicted occupancy.
            target: (N, G, H, W) bool target occupancy.
        """
        fresh = [i for i, k in enumerate(keys) if k not in self._rows]
        if not fresh:
            return
        counts = count_frames(np.asarray(pred)[fresh], np.asarray(target)[fresh], self._masks)
        for row, i in enumerate(fresh):
            self._rows.setdefault(keys[i], counts[row])

    def finish(self) -> FrameCounts:
        """Return the counts of every frame added, in key order.

        Raises:
            ValueError: nothing was added.
        """
        if not self._rows:
            raise ValueError("no frame was counted: the evaluated split is empty")
        keys = tuple(sorted(self._rows))
        counts = np.stack([self._rows[k] for k in keys])
        return FrameCounts(keys, self._classes, self._bands, counts)


def metric_values(counts: np.ndarray, metric: MetricName) -> np.ndarray:
    """Return `metric` of summed counts (..., 3) as float64 (...), NaN where undefined."""
    counts = np.asarray(counts, dtype=np.float64)
    tp, fp, fn = counts[..., TP], counts[..., FP], counts[..., FN]
    denominator = {"iou": tp + fp + fn, "precision": tp + fp, "recall": tp + fn}[metric]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, tp / np.where(denominator > 0, denominator, 1), np.nan)


class MetricSpec(BaseModel):
    """One number to gate on: a metric of one class (or the mean over classes) in one band."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: MetricName = "iou"
    """iou, precision or recall"""
    class_group: str = "mean"
    """a class group of `schemas.classes.CLASS_GROUPS`, or "mean": the mean over the classes
    whose metric is defined"""
    band: str = ALL_BANDS
    """range band name as `band_names` gives it ("all", "0-20m", ...)"""

    @field_validator("class_group")
    @classmethod
    def _known_class(cls, value: str) -> str:
        if value not in ("mean", *CLASS_GROUPS):
            raise ValueError(f"use one of {['mean', *CLASS_GROUPS]}")
        return value

    @property
    def label(self) -> str:
        """Short name, e.g. "iou/mean/all"."""
        return f"{self.metric}/{self.class_group}/{self.band}"


def select_metric(
    summed: np.ndarray, spec: MetricSpec, classes: tuple[str, ...], bands: tuple[str, ...]
) -> np.ndarray:
    """Return `spec`'s metric of summed counts (..., G, B + 1, 3) as float64 (...), NaN if undefined.

    Raises:
        ValueError: `spec` names a band or class the counts do not have.
    """
    if spec.band not in bands:
        raise ValueError(f"band {spec.band!r} is not one of the evaluated bands {list(bands)}")
    values = metric_values(summed[..., bands.index(spec.band), :], spec.metric)  # (..., G)
    if spec.class_group != "mean":
        if spec.class_group not in classes:
            raise ValueError(f"class {spec.class_group!r} is not one of {list(classes)}")
        return values[..., classes.index(spec.class_group)]
    defined = ~np.isnan(values)
    total = np.where(defined, values, 0.0).sum(axis=-1)
    number = defined.sum(axis=-1)
    return np.where(number > 0, total / np.maximum(number, 1), np.nan)
