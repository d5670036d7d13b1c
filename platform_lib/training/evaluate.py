"""Evaluation: per-class BEV IoU of a trained model next to the training-set occupancy prior.

IoU of class c over a split = sum over samples of |pred_c AND target_c| / sum of
|pred_c OR target_c| (cells pooled over the split), a cell predicted occupied when its logit is
> 0; None for a class whose union is empty; mean IoU averages the classes that have one. The
prior: per-cell mean occupancy of each class over the training split, thresholded per class at
the value in {0.05, ..., 0.95} with the best training-split IoU. Deterministic (fp32 on CPU,
samples in index order, each key once), so the same weights give the same numbers exactly.
The model's counts are kept per frame, class and range band (`evaluation.metrics.
CountAccumulator`, written as frame_counts.json); the pooled IoU is their sum over the split.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from platform_lib.evaluation.metrics import ALL_BANDS, CountAccumulator, FrameCounts
from platform_lib.models.catalog import build_model, build_model_transform
from platform_lib.models.presets import get_model_config
from platform_lib.models.targets import rasterise_cuboids
from platform_lib.shards.reader import open_dataset
from platform_lib.training.checkpoint import load_weights
from platform_lib.training.config import TrainConfig
from platform_lib.training.data import build_eval_loader, split_keys
from platform_lib.training.loop import resolve_batch_keys, run_model
from schemas.classes import CLASS_GROUPS

__all__ = ["FRAME_COUNTS_JSON", "EvalResult", "compute_prior", "count_model_frames", "evaluate"]

#: File name of the per-frame counts (`FrameCounts.to_dict` + the split) beside the table.
FRAME_COUNTS_JSON = "frame_counts.json"

PRIOR_THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(1, 20))


@dataclass(kw_only=True, frozen=True)
class EvalResult:
    """Validation metrics of one model and of the prior baseline (plain numbers and paths)."""

    split: str
    """split evaluated"""
    num_samples: int
    """samples evaluated"""
    iou: dict[str, float | None]
    """model IoU per class group (None: empty union)"""
    mean_iou: float
    """model mean IoU over classes with an IoU"""
    baseline_iou: dict[str, float | None]
    """prior baseline IoU per class group"""
    baseline_mean_iou: float
    """prior baseline mean IoU"""
    baseline_thresholds: dict[str, float]
    """prior threshold per class, chosen on the training split"""
    metrics_json: str
    """path of the metrics table as JSON"""
    metrics_csv: str
    """path of the metrics table as CSV (one row per class + "mean")"""
    frame_counts_json: str = ""
    """path of the per-frame TP/FP/FN by class and range band (`FrameCounts.to_dict`)"""


def _iou(inter: np.ndarray, union: np.ndarray) -> list[float | None]:
    return [float(i) / float(u) if u > 0 else None for i, u in zip(inter, union, strict=True)]


def _mean(values: list[float | None]) -> float:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else math.nan


def compute_prior(
    dataset_dir: str | os.PathLike[str], split: str, grid
) -> tuple[np.ndarray, dict[str, float]]:
    """Return the (3, H, W) mean occupancy over `split` and the per-class IoU-maximising thresholds."""
    reader = open_dataset(Path(dataset_dir))
    targets = np.stack(
        [
            rasterise_cuboids(json.loads(reader.read_member(key, "cuboids.json")), grid)
            for key in split_keys(reader, split)
        ]
    )
    prior = targets.mean(axis=0)
    thresholds = {}
    for c, name in enumerate(CLASS_GROUPS):
        best = (-1.0, PRIOR_THRESHOLDS[-1])
        for t in PRIOR_THRESHOLDS:
            pred = prior[c] >= t
            union = np.logical_or(pred, targets[:, c] > 0).sum()
            iou = np.logical_and(pred, targets[:, c] > 0).sum() / union if union else 0.0
            best = max(best, (float(iou), -t))
        thresholds[name] = -best[1] if best[0] > 0 else PRIOR_THRESHOLDS[-1]
    return prior, thresholds


def _count_split(
    model: torch.nn.Module,
    cfg: TrainConfig,
    dataset_dir: str,
    split: str,
    on_targets: Callable[[np.ndarray], None] | None = None,
) -> FrameCounts:
    """Run `model` over `split` once; return its per-frame counts.

    `on_targets` receives the (n, G, H, W) bool targets of each batch's fresh samples (not
    the loader's pad repeats), in index order.
    """
    model_cfg = get_model_config(cfg.model.name)
    model.eval()
    _, target_key = resolve_batch_keys(model)
    accumulator = CountAccumulator(model_cfg.grid, classes=CLASS_GROUPS)
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.parallel.num_threads)
    try:
        loader = build_eval_loader(
            dataset_dir,
            split,
            build_model_transform(model_cfg),
            batch_size=cfg.data.batch_size,
            window_frames=model_cfg.temporal_frames,
        )
        seen: set[str] = set()
        with torch.no_grad():
            for batch in loader:
                keys = list(batch["__key__"])
                fresh = np.array([k not in seen for k in keys], dtype=bool)  # False: a pad repeat
                seen.update(keys)
                pred = (run_model(model, batch) > 0).numpy()
                target = batch[target_key].numpy() > 0
                accumulator.add(keys, pred, target)
                if on_targets is not None and fresh.any():
                    on_targets(target[fresh])
    finally:
        torch.set_num_threads(threads)
    return accumulator.finish()


def _load(weights_path: str, cfg: TrainConfig) -> torch.nn.Module:
    model = build_model(cfg.model.name)
    model.load_state_dict(load_weights(weights_path), strict=True)
    return model


def count_model_frames(
    weights_path: str, cfg: TrainConfig, dataset_dir: str, split: str = "val"
) -> FrameCounts:
    """Return the per-frame counts of safetensors weights of `cfg.model.name` on `split`.

    The counts of `evaluate` without the prior: what a paired comparison needs (frames in key
    order, range bands of `evaluation.metrics.MetricsConfig()`).

    Raises:
        FileNotFoundError: missing weights. ValueError: empty split. RuntimeError: weights
            that do not fit the model.
    """
    return _count_split(_load(weights_path, cfg), cfg, dataset_dir, split)


def evaluate(
    weights_path: str,
    cfg: TrainConfig,
    dataset_dir: str,
    split: str = "val",
    output_dir: str | None = None,
) -> EvalResult:
    """Evaluate safetensors weights of `cfg.model.name` on `split` and write the metrics table.

    One dataset, single frames; a temporal model (`temporal_frames` T > 1) reads windows of T
    frames (stride 1) and scores each window's last frame, so the first T - 1 frames of each
    log are not scored (`num_samples` counts the scored frames). `data.mix` is not used.
    Writes eval_metrics.json, eval_metrics.csv and frame_counts.json (per-frame TP/FP/FN by
    class and range band; the pooled IoU is their sum over the frames in band "all").

    Args:
        weights_path: safetensors file written by `train()` (loaded without unpickling).
        cfg: the training config (model preset, train split for the prior, threads).
        dataset_dir: published dataset folder.
        split: split to evaluate.
        output_dir: where the files go; default: the folder of `weights_path`.

    Raises:
        FileNotFoundError: missing weights. ValueError: empty split. RuntimeError: weights
            that do not fit the model (message lists missing / unexpected keys).
    """
    model = _load(weights_path, cfg)
    n = len(CLASS_GROUPS)
    b_inter, b_union = np.zeros(n, np.int64), np.zeros(n, np.int64)
    prior, thresholds = compute_prior(
        dataset_dir, cfg.data.train_split, get_model_config(cfg.model.name).grid
    )
    prior_pred = np.stack([prior[c] >= thresholds[g] for c, g in enumerate(CLASS_GROUPS)])

    def add_baseline(target: np.ndarray) -> None:
        b_inter[:] += np.logical_and(prior_pred[None], target).sum(axis=(0, 2, 3))
        b_union[:] += np.logical_or(prior_pred[None], target).sum(axis=(0, 2, 3))

    counts = _count_split(model, cfg, dataset_dir, split, on_targets=add_baseline)
    pooled = counts.counts[:, :, counts.bands.index(ALL_BANDS)].sum(axis=0)  # (G, 3)
    inter, union = pooled[:, 0], pooled.sum(axis=1)  # TP; TP + FP + FN
    iou, b_iou = _iou(inter, union), _iou(b_inter, b_union)
    out = Path(output_dir) if output_dir else Path(weights_path).parent
    out.mkdir(parents=True, exist_ok=True)
    result = EvalResult(
        split=split,
        num_samples=len(counts.keys),
        iou=dict(zip(CLASS_GROUPS, iou, strict=True)),
        mean_iou=_mean(iou),
        baseline_iou=dict(zip(CLASS_GROUPS, b_iou, strict=True)),
        baseline_mean_iou=_mean(b_iou),
        baseline_thresholds=thresholds,
        metrics_json=str(out / "eval_metrics.json"),
        metrics_csv=str(out / "eval_metrics.csv"),
        frame_counts_json=str(out / FRAME_COUNTS_JSON),
    )
    Path(result.frame_counts_json).write_text(json.dumps({"split": split, **counts.to_dict()}))
    _write_table(result, inter, union, b_inter, b_union)
    return result


def _write_table(result: EvalResult, inter, union, b_inter, b_union) -> None:
    rows = [
        {
            "class": g,
            "iou": result.iou[g],
            "baseline_iou": result.baseline_iou[g],
            "baseline_threshold": result.baseline_thresholds[g],
            "intersection": int(inter[c]),
            "union": int(union[c]),
            "baseline_intersection": int(b_inter[c]),
            "baseline_union": int(b_union[c]),
        }
        for c, g in enumerate(CLASS_GROUPS)
    ]
    rows.append({"class": "mean", "iou": result.mean_iou, "baseline_iou": result.baseline_mean_iou})
    with open(result.metrics_csv, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    payload = {**asdict(result), "table": rows}
    Path(result.metrics_json).write_text(json.dumps(_finite(payload), indent=2, sort_keys=True))


def _finite(value):
    """Replace NaN floats by None (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
