"""TrainConfig sections, their validation, the named presets and `hash_config`."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from platform_lib.training.config import (
    SECTIONS,
    ConfigError,
    DataConfig,
    ModelConfig,
    OptimizerConfig,
    ParallelConfig,
    TrainConfig,
    hash_config,
    list_fields,
    replace,
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
    assert list_presets() == sorted(
        ["small", "synthetic_default", "pandaset_smoke", "large", "temporal", "base"]
    )


@pytest.mark.parametrize(
    ("section", "changes", "message"),
    [
        (
            DataConfig,
            {"batch_size": 0},
            "data.batch_size=0 is out of range (config): give an int >= 1 and <= 9223372036854775807",
        ),
        (
            OptimizerConfig,
            {"lr": -1.0},
            "optimizer.lr=-1.0 is out of range (config): give a number > 0.0",
        ),
        (
            OptimizerConfig,
            {"max_steps": 0, "warmup_steps": -1},
            "optimizer.max_steps=0 is out of range",
        ),
        (
            OptimizerConfig,
            {"warmup_steps": 50, "max_steps": 10},
            "invalid training config: optimizer.warmup_steps (50) must be < optimizer.max_steps (10) "
            "(config): change the preset or the overrides so that each field is in range",
        ),
        (OptimizerConfig, {"grad_clip": -0.5}, "optimizer.grad_clip=-0.5 is out of range"),
        (OptimizerConfig, {"lr": float("nan")}, "optimizer.lr=nan is out of range"),
        (DataConfig, {"num_workers": -1}, "data.num_workers=-1 is out of range"),
        (
            DataConfig,
            {"val_split": "train"},
            "invalid training config: data.train_split ('train') and data.val_split ('train') must "
            "be distinct, non-empty split names (config)",
        ),
        (
            ParallelConfig,
            {"backend": "mpi"},
            "parallel.backend='mpi' is not one of the allowed values (config): give one of 'auto', "
            "'gloo', 'nccl'",
        ),
        (
            ModelConfig,
            {"name": "resnet50"},
            "model.name='resnet50' is not one of the allowed values (config): give one of "
            "'bev_fusion_base', 'bev_fusion_large', 'bev_fusion_small'",
        ),
        (DataConfig, {"batch_size": "4"}, "data.batch_size='4' is of the wrong type (config)"),
        (TrainConfig, {"seed": -1}, "seed=-1 is out of range (config): give an int >= 0 and"),
        (TrainConfig, {"optimizer": {"lr": -1.0}}, "optimizer.lr=-1.0 is out of range (config)"),
    ],
)
def test_replace_checks_every_value_and_names_the_field(section, changes, message):
    with pytest.raises(ConfigError) as info:
        replace(section(), **changes)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_sections_are_frozen_strict_and_refuse_unknown_fields():
    with pytest.raises(ValidationError):
        DataConfig(batch_size="4")  # no "4" for 4
    with pytest.raises(ValidationError):
        ParallelConfig(mixed_precision=1)  # no 1 for true
    with pytest.raises(ValidationError):
        OptimizerConfig(max_stepz=5)
    with pytest.raises(ValidationError):
        TrainConfig().seed = 3  # frozen
    assert OptimizerConfig(max_steps=20.0).max_steps == 20  # an integral float is an int
    assert isinstance(OptimizerConfig(lr=1).lr, float)


def test_field_names_are_unique_and_every_int_has_a_lower_bound():
    """Bare names resolve to one path; an int without `ge` could leave int64 (a Flyte literal)."""
    paths = list_fields()
    names = [p.rsplit(".", 1)[-1] for p in paths]
    assert len(names) == len(set(names))
    for path, info in paths.items():
        if info.annotation is int:
            assert any(type(m).__name__ in ("Ge", "Gt") for m in info.metadata), path


def test_hashes_of_the_presets_are_those_of_the_dataclass_configs():
    """Recorded from the dataclass configs (before pydantic): lineage and run folders keep them."""
    from platform_lib.training.overrides import apply_overrides

    assert {name: hash_config(get_preset(name)) for name in list_presets()} == {
        "base": "805a782d8a68f34a5cf27e50a40058eecbb14da7f25488a14df3a584222da6d6",
        "large": "dd33ddcd93ca03001bb53307976c3015be827e9af1929f9f4b5a937638c85273",
        "pandaset_smoke": "96344341a72ec33925ed1d71ffd445d773d55d4273746845494ade5ab8c6ea32",
        "small": "d3968486e3a06f17c7dcae41caf41fb1290e457b924e147a7c42b448ca7e896d",
        "synthetic_default": "367112aec4ef9f5ad6918d79bf1e803f048ff79b415406821e78191b21c5b4a3",
        # pinned when it was added (the others hash as before data.window_frames/mix existed)
        "temporal": "b37f536a332c8cb3239e4c35f75837d3d0702a5330bdd461082873deb51b14f8",
    }
    small_lr1 = "211a0f9b6d99f2dea6cb8a47514f279a13b68a607543fe2c2a3f34798d2d81ce"
    assert hash_config(apply_overrides(get_preset("small"), {"lr": 1})) == small_lr1
    assert hash_config(TrainConfig()) == (
        "0def5abfe1a4806ac56290c206128c6f73835f1048671ae014ad9cc3831cb105"
    )


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
        for name in cls.model_fields:
            assert (cls.__name__, name) in documented, f"{cls.__name__}.{name} has no docstring"


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


def test_sections_are_scalar_models_for_flyte_and_mlflow():
    for section in TrainConfig().to_dict().values():
        values = section.values() if isinstance(section, dict) else [section]
        assert all(isinstance(v, bool | int | float | str) for v in values)


def test_config_imports_no_other_training_module():
    """config.py is the bottom of training/: overrides and presets import it, never the other
    way round (no import circle, not even a function-local one)."""
    import ast
    import inspect

    from platform_lib.training import config as module

    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(inspect.getsource(module)))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not {m for m in imported if m and m.startswith("platform_lib.training")}, imported


def test_retired_batch_delay_field_loads_at_zero_and_keeps_hashes():
    """`data.batch_delay_s` left for the `batch_delay` fault; records written before still load."""
    small = get_preset("small")
    assert "batch_delay_s" not in small.to_dict()["data"]
    old = small.to_dict()
    old["data"] = {**old["data"], "batch_delay_s": 0.0}
    assert TrainConfig.from_dict(old) == small
    assert hash_config(old) == hash_config(small)  # the pinned preset hashes above hold too
    old["data"]["batch_delay_s"] = 1.0
    with pytest.raises(ConfigError, match="batch_delay_s"):
        TrainConfig.from_dict(old)
    with pytest.raises(ConfigError, match="batch_delay_s"):
        apply_overrides(small, {"batch_delay_s": 1.0})
