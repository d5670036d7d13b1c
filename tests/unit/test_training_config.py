"""TrainConfig validation and the named presets."""

from __future__ import annotations

import dataclasses

import pytest

from platform_lib.training.config import TrainConfig, hash_config
from platform_lib.training.presets import get_preset, list_presets


@pytest.mark.parametrize("name", ["small", "synthetic_default", "pandaset_smoke", "large"])
def test_presets_are_valid_and_named(name):
    cfg = get_preset(name)
    assert cfg.preset == name and cfg.max_steps > cfg.warmup_steps


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(KeyError, match="synthetic_default"):
        get_preset("huge")
    assert list_presets() == sorted(["small", "synthetic_default", "pandaset_smoke", "large"])


@pytest.mark.parametrize(
    ("changes", "fields"),
    [
        ({"batch_size": 0}, ["batch_size"]),
        ({"lr": -1.0}, ["lr"]),
        ({"max_steps": 0, "checkpoint_interval": 0}, ["max_steps", "checkpoint_interval"]),
        ({"warmup_steps": 50, "max_steps": 10}, ["warmup_steps"]),
        ({"grad_clip": -0.5}, ["grad_clip"]),
        ({"num_workers": -1}, ["num_workers"]),
        ({"backend": "mpi"}, ["backend"]),
        ({"model": "resnet50"}, ["model"]),
        ({"val_split": "train"}, ["train_split", "val_split"]),
        ({"pos_weight": 0.0}, ["pos_weight"]),
    ],
)
def test_impossible_values_fail_fast_naming_every_field(changes, fields):
    with pytest.raises(ValueError) as info:
        TrainConfig(**changes)
    for field in fields:
        assert field in str(info.value)


def test_round_trip_and_hash():
    cfg = get_preset("small")
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert hash_config(cfg) == hash_config(TrainConfig.from_dict(cfg.to_dict()))
    assert hash_config(cfg) != hash_config(dataclasses.replace(cfg, seed=1))
    with pytest.raises(ValueError, match="bogus"):
        TrainConfig.from_dict({**cfg.to_dict(), "bogus": 1})


def test_fields_are_flat_scalars_for_flyte_and_mlflow():
    assert all(isinstance(v, bool | int | float | str) for v in TrainConfig().to_dict().values())
