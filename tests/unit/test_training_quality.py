"""On synthetic logs, validated on a held-out log, the model beats the occupancy prior clearly.

Fast variant: one process, 60 steps (~20 s). Slow variant: the pipeline's default preset
(`synthetic_default`) on 2 gloo ranks through `launch_local` (~2-3 min on 2 cores).
"""

from __future__ import annotations

import pytest

from platform_lib.shards.build import BuildConfig, build_dataset
from platform_lib.shards.manifest import load_manifest
from platform_lib.training.evaluate import evaluate
from platform_lib.training.launch import launch_local
from platform_lib.training.overrides import apply_overrides
from platform_lib.training.presets import synthetic_default
from platform_lib.training.train import train


@pytest.fixture(scope="module")
def synthetic_dataset(synthetic_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("quality") / "dataset"
    build_dataset("synthetic", synthetic_root, out, BuildConfig(progress=False))
    splits = load_manifest(out).splits
    assert splits.method == "by_log" and splits.params["val_logs"]  # held-out logs
    return out


def _check_beats_prior(result, cfg, dataset, margin):
    report = evaluate(result.weights_path, cfg, str(dataset), split=cfg.data.val_split)
    assert report.num_samples > 0
    assert result.final_loss < 0.5 * result.first_loss
    assert report.iou["vehicle"] > 0.15
    assert report.mean_iou > report.baseline_mean_iou + margin, report


def test_model_beats_the_prior_fast(synthetic_dataset, tmp_path):
    cfg = apply_overrides(
        synthetic_default(), {"max_steps": 60, "warmup_steps": 6, "num_workers": 0}
    )
    result = train(cfg, str(synthetic_dataset), str(tmp_path))
    _check_beats_prior(result, cfg, synthetic_dataset, margin=0.05)


@pytest.mark.slow
@pytest.mark.distributed
def test_default_preset_on_two_ranks_beats_the_prior(synthetic_dataset, tmp_path):
    cfg = synthetic_default()
    result = launch_local(cfg, str(synthetic_dataset), str(tmp_path), nproc=2)
    assert result.world_size == 2
    _check_beats_prior(result, cfg, synthetic_dataset, margin=0.08)
