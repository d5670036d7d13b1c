"""Temporal windows and dataset mixing from a training config: the data section's fields, their
errors, the loader training builds from them, and a few steps of the temporal preset."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from platform_lib.models.catalog import build_model_transform
from platform_lib.shards.build import BuildConfig, write_dataset
from platform_lib.training.config import ConfigError, TrainConfig, hash_config
from platform_lib.training.data import build_train_loader, dataset_sources
from platform_lib.training.overrides import apply_overrides
from platform_lib.training.presets import get_preset
from tests.support.datasets import make_frame

MIX = [{"dataset": "s3://bucket/extra", "weight": 0.5}]


def _error(overrides: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        apply_overrides(get_preset("temporal"), overrides)
    line = str(caught.value)
    assert "\n" not in line
    return line


def test_window_and_mix_fields_reach_the_config_by_name_path_and_section():
    cfg = apply_overrides(
        get_preset("small"),
        {"model.name": "bev_fusion_temporal", "window_frames": 2, "data.window_stride": 3},
    )
    assert (cfg.data.window_frames, cfg.data.window_stride) == (2, 3)
    for overrides in ({"mix": MIX}, {"data.mix": MIX}, {"data": {"mix": MIX}}):
        mixed = apply_overrides(cfg, {**overrides, "dataset_weight": 2})
        assert [(m.dataset, m.weight) for m in mixed.data.mix] == [("s3://bucket/extra", 0.5)]
        assert mixed.data.dataset_weight == 2.0
        assert TrainConfig.from_dict(json.loads(json.dumps(mixed.to_dict()))) == mixed
        assert hash_config(mixed) != hash_config(cfg)


def test_the_added_fields_leave_records_of_configs_without_them_unchanged():
    """to_dict (golden files, MLflow params) and hash_config omit them at their defaults."""
    small = get_preset("small").to_dict()["data"]
    assert not {"window_frames", "window_stride", "dataset_weight", "mix"} & set(small)
    temporal = get_preset("temporal").to_dict()["data"]
    assert temporal["window_frames"] == 2 and "mix" not in temporal


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (
            {"mix": [{"dataset": "s3://b/ds", "weight": 0}]},
            "data.mix[0].weight=0 is invalid: Input should be greater than 0 (overrides): "
            'give data.mix as a list of {"dataset": a string, "weight": a number > 0.0}, at most 64',
        ),
        (
            {"mix": [{"dataset": "s3://b/ds", "wieght": 1}]},
            "data.mix[0].wieght=1 is invalid: Extra inputs are not permitted",
        ),
        ({"mix": [{"dataset": ""}]}, "data.mix[0].dataset='' is invalid: a dataset is"),
        (
            {"mix": [{"dataset": "https://me:secret@host/ds"}]},
            "is invalid: credentials in a URL are refused: they go in the environment",
        ),
        ({"mix": [{"dataset": "S 3://b"}]}, "is invalid: 'S 3' is not a URL scheme"),
        ({"mix": [{"dataset": "ds\n"}]}, "a dataset is a local path or URL of 1 to 4096"),
        (
            {"mix": [{"dataset": "s3://b/ds"}, {"dataset": "s3://b/ds/"}]},
            "data.mix ('s3://b/ds/' at position 1) names a dataset twice",
        ),
        ({"mix": "s3://b/ds"}, "data.mix='s3://b/ds' is of the wrong type (overrides)"),
        ({"dataset_weight": -1}, "data.dataset_weight=-1 is out of range (overrides)"),
        ({"window_frames": 0}, "data.window_frames=0 is out of range (overrides)"),
        ({"window_stride": 0}, "data.window_stride=0 is out of range (overrides)"),
        (
            {"window_frames": 3},
            "data.window_frames (3) must equal the temporal_frames (2) of model.name "
            "'bev_fusion_temporal'",
        ),
        (
            {"model.name": "bev_fusion_small"},
            "data.window_frames (2) must equal the temporal_frames (1) of model.name",
        ),
    ],
)
def test_bad_window_and_mix_values_are_one_line_naming_the_field(overrides, line):
    assert line in _error(overrides)


def test_the_runs_own_dataset_in_the_mix_is_refused(tmp_path):
    cfg = apply_overrides(get_preset("temporal"), {"mix": [{"dataset": f"{tmp_path}/ds/./"}]})
    with pytest.raises(ConfigError, match=r"data.mix\[0\].dataset=.* is the run's own dataset"):
        dataset_sources(tmp_path / "ds", cfg.data)
    assert dataset_sources(tmp_path / "ds", get_preset("temporal").data) == str(tmp_path / "ds")


def _moving_dataset(root: Path, log: str, frames: int) -> Path:
    """A dataset of one log whose ego drives 1 m forward along world x per frame."""
    poses = [np.eye(4) for _ in range(frames)]
    for i, pose in enumerate(poses):
        pose[0, 3] = 1000.0 + i
    rows = [dataclasses.replace(make_frame(log, i), ego_pose=poses[i]) for i in range(frames)]
    config = BuildConfig(split="by_log", val_fraction=0.0, progress=False)
    write_dataset(
        rows,
        root,
        config,
        source="synthetic",
        source_logs=[{"log_id": log, "content_hash": "0" * 64}],
    )
    return root


def _epoch_keys(cfg: TrainConfig, dataset: Path) -> tuple[list[str], list[int], list[np.ndarray]]:
    """Build the loader as training does (`build_train_loader`) and read one epoch."""
    transform = build_model_transform(cfg.model.name)
    keys, sources, motions = [], [], []
    with build_train_loader(
        dataset, cfg.data, transform, rank=0, world_size=1, seed=cfg.seed
    ) as loader:
        for batch in loader:
            assert batch["camera_images"].shape[1] == 2  # (B, T=2, N, 3, h, w)
            assert batch["lidar_bev"].shape[1] == 2 and batch["target"].ndim == 4
            keys += batch["__key__"]
            sources += [int(s) for s in batch["__source__"]]
            motions.append(batch["ego_motion"].numpy())
    return keys, sources, motions


def test_windows_and_mixing_reach_the_loader_from_a_training_config(tmp_path):
    """data.window_frames=2 and a 3:1 mix of two datasets, as the training loop receives them."""
    own = _moving_dataset(tmp_path / "own", "alpha", 13)  # 12 windows of 2 frames
    extra = _moving_dataset(tmp_path / "extra", "beta", 13)
    cfg = apply_overrides(
        get_preset("temporal"),
        {"batch_size": 4, "dataset_weight": 3.0, "mix": [{"dataset": str(extra), "weight": 1.0}]},
    )
    keys, sources, motions = _epoch_keys(cfg, own)
    assert len(keys) == 24  # an epoch: both datasets' windows, 24 positions shared 18 : 6
    assert Counter(k.split("_")[0] for k in keys) == {"alpha": 18, "beta": 6}
    assert [k.startswith("beta") for k in keys] == [s == 1 for s in sources]
    assert all(int(k.split("_")[1]) >= 1 for k in keys)  # a window's key is its last frame
    motion = np.concatenate(motions)  # the current ego origin is 1 m ahead in the previous frame
    np.testing.assert_allclose(motion[:, 0, 0, 3], 1.0, atol=1e-5)
    np.testing.assert_allclose(motion[:, 1], np.eye(4)[None].repeat(len(motion), 0), atol=1e-6)
    assert _epoch_keys(cfg, own)[0] == keys  # same seed, same order
    assert _epoch_keys(apply_overrides(cfg, {"seed": 1}), own)[0] != keys
