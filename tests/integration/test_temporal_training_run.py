"""A few training steps of the temporal preset (windows of 2 frames, ego-motion-aligned BEV
history) on the synthetic golden dataset: deterministic, finite, evaluable. In-process
torch.distributed (world size 1) and two full runs: ~20 s, so not a unit test."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from platform_lib.training.evaluate import evaluate
from platform_lib.training.overrides import apply_overrides
from platform_lib.training.presets import get_preset
from platform_lib.training.train import train
from platform_lib.zoo.dataset import build_golden_dataset


def test_a_few_steps_of_the_temporal_preset_repeat_exactly_and_evaluate(tmp_path):
    """Train the temporal preset twice on the synthetic golden dataset (moving ego): same seed,
    bitwise the same losses; evaluation scores each val window's last frame (2 logs x 2 val
    frames: one window per log)."""
    dataset = str(build_golden_dataset(tmp_path))
    cfg = apply_overrides(
        get_preset("temporal"), {"max_steps": 5, "warmup_steps": 1, "mlflow_interval": 0}
    )
    losses = []
    for run in ("a", "b"):
        result = train(cfg, dataset, str(tmp_path / run))
        rows = Path(result.metrics_path).read_text().splitlines()
        losses.append([json.loads(row)["loss"] for row in rows])
    assert losses[0] == losses[1] and len(losses[0]) == 5
    assert all(np.isfinite(losses[0])) and losses[0][-1] < losses[0][0]
    report = evaluate(result.weights_path, cfg, dataset, split=cfg.data.val_split)
    assert report.num_samples == 2 and np.isfinite(report.mean_iou)
