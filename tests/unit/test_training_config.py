"""TrainConfig sections, their validation, the named presets and `hash_config`."""

from __future__ import annotations

import dataclasses

import pytest

from platform_lib.training.config import (
    SECTIONS,
    ConfigError,
    DataConfig,
    OptimizerConfig,
    TrainConfig,
    hash_config,
)
from platform_lib.training.overrides import apply_overrides
from platform_lib.training.presets import get_preset, list_presets


@pytest.mark.parametrize("name", ["small", "synthetic_default", "pandaset_smoke", "large"])
def test_presets_are_valid_and_named(name):
    cfg = get_preset(name)
    assert cfg.preset == name and cfg.optimizer.max_steps > cfg.optimizer.warmup_steps


def test_presets_derive_from_the_base_changing_only_their_fields():
    small, smoke = get_preset("small"), get_preset("pandaset_smoke")
    assert smoke.model == small.model and smoke.metrics == small.metrics
    assert smoke.optimizer.weight_decay == small.optimizer.weight_decay
    assert (smoke.optimizer.max_steps, smoke.data.num_workers) == (30, 1)


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(KeyError, match="synthetic_default"):
        get_preset("huge")
    assert list_presets() == sorted(["small", "synthetic_default", "pandaset_smoke", "large"])


@pytest.mark.parametrize(
    ("section", "changes", "fields"),
    [
        (DataConfig, {"batch_size": 0}, ["data.batch_size"]),
        (OptimizerConfig, {"lr": -1.0}, ["optimizer.lr"]),
        (
            OptimizerConfig,
            {"max_steps": 0, "warmup_steps": -1},
            ["optimizer.max_steps", "optimizer.warmup_steps"],
        ),
        (
            OptimizerConfig,
            {"warmup_steps": 50, "max_steps": 10},
            ["optimizer.warmup_steps", "optimizer.max_steps"],
        ),
        (OptimizerConfig, {"grad_clip": -0.5}, ["optimizer.grad_clip"]),
        (OptimizerConfig, {"lr": float("nan")}, ["optimizer.lr"]),
        (DataConfig, {"num_workers": -1}, ["data.num_workers"]),
        (DataConfig, {"val_split": "train"}, ["data.train_split", "data.val_split"]),
    ],
)
def test_impossible_values_fail_fast_naming_every_field(section, changes, fields):
    with pytest.raises(ConfigError) as info:
        section(**changes)
    for field in fields:
        assert field in str(info.value)
    assert "\n" not in str(info.value)


def test_sections_check_types_and_choices():
    from platform_lib.training.config import ModelConfig, ParallelConfig

    with pytest.raises(
        ConfigError, match=r"parallel.backend must be one of 'auto', 'gloo', 'nccl'"
    ):
        ParallelConfig(backend="mpi")
    with pytest.raises(ConfigError, match=r"model.name must be one of 'bev_fusion_large'"):
        ModelConfig(name="resnet50")
    with pytest.raises(ConfigError, match=r"data.batch_size must be an int >= 1 .*got '4'"):
        DataConfig(batch_size="4")
    with pytest.raises(
        ConfigError, match=r"invalid training config: optimizer must be a OptimizerConfig"
    ):
        TrainConfig(optimizer={"lr": 1.0})
    with pytest.raises(ConfigError, match=r"seed must be an int >= 0"):
        TrainConfig(seed=-1)


def test_every_field_has_a_one_line_docstring_with_its_section():
    import ast
    import inspect

    from platform_lib.training import config as module

    tree = ast.parse(inspect.getsource(module))
    documented = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for a, b in zip(node.body, node.body[1:], strict=False):
                if (
                    isinstance(a, ast.AnnAssign)
                    and isinstance(b, ast.Expr)
                    and isinstance(b.value, ast.Constant)
                ):
                    assert "\n" not in b.value.value.strip() or node.name == "TrainConfig"
                    documented.add((node.name, a.target.id))
    for cls in [TrainConfig, *SECTIONS.values()]:
        for f in dataclasses.fields(cls):
            assert (cls.__name__, f.name) in documented, f"{cls.__name__}.{f.name} has no docstring"


def test_round_trip_and_hash():
    cfg = get_preset("small")
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert hash_config(cfg) == hash_config(TrainConfig.from_dict(cfg.to_dict()))
    assert hash_config(cfg) != hash_config(apply_overrides(cfg, {"seed": 1}))
    with pytest.raises(ConfigError, match="bogus"):
        TrainConfig.from_dict({**cfg.to_dict(), "bogus": 1})


def test_hash_is_stable_across_number_spellings_and_key_order():
    cfg = get_preset("small")
    assert hash_config(apply_overrides(cfg, {"lr": 1})) == hash_config(
        apply_overrides(cfg, {"lr": 1.0})
    )
    assert apply_overrides(cfg, {"lr": 1}).optimizer.lr == 1.0
    assert isinstance(apply_overrides(cfg, {"max_steps": 20.0}).optimizer.max_steps, int)
    as_dict = cfg.to_dict()
    reordered = {k: as_dict[k] for k in reversed(list(as_dict))}
    reordered["optimizer"] = {
        k: float(v) if isinstance(v, int) else v
        for k, v in reversed(list(as_dict["optimizer"].items()))
    }
    assert hash_config(reordered) == hash_config(as_dict) == hash_config(cfg)
    assert hash_config({"a": 1, "b": 2.5}) != hash_config({"a": 1, "b": 2})


def test_sections_are_scalar_dataclasses_for_flyte_and_mlflow():
    for section in TrainConfig().to_dict().values():
        values = section.values() if isinstance(section, dict) else [section]
        assert all(isinstance(v, bool | int | float | str) for v in values)
