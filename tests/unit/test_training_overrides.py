"""Overrides: validated against TrainConfig, one line naming the field on any problem."""

from __future__ import annotations

import pytest

from platform_lib.training.config import ConfigError
from platform_lib.training.overrides import (
    apply_overrides,
    list_fields,
    parse_overrides,
    resolve_train_config,
)
from platform_lib.training.presets import get_preset


def _error(overrides) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        apply_overrides(get_preset("small"), overrides)
    assert "\n" not in str(info.value)
    return info.value


def test_a_field_by_name_path_or_section_replaces_only_that_field():
    base = get_preset("pandaset_smoke")
    for spelling in ({"max_steps": 8}, {"optimizer.max_steps": 8}, {"optimizer": {"max_steps": 8}}):
        cfg = apply_overrides(base, spelling)
        assert cfg.optimizer.max_steps == 8
        assert cfg.optimizer.lr == base.optimizer.lr and cfg.data == base.data
    assert apply_overrides(base, {}) == base
    assert resolve_train_config(
        "pandaset_smoke", '{"lr": 0.01, "batch_size": 1}', 3
    ) == apply_overrides(base, {"optimizer.lr": 0.01, "data.batch_size": 1, "seed": 3})


def test_unknown_field_names_it_and_lists_the_valid_ones():
    error = _error({"max_stepz": 5})
    assert str(error).startswith("unknown field 'max_stepz' (overrides): use one of ")
    assert all(path in str(error) for path in list_fields())
    assert "did you mean 'max_steps'" in str(error) and error.fields == ("max_stepz",)
    assert "'optimizer.bogus'" in str(_error({"optimizer": {"bogus": 1}}))
    assert "'model' is a section, not a field" in str(_error({"model": "bev_fusion_large"}))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"max_steps": "ten"},
            "optimizer.max_steps='ten' is of the wrong type (overrides): give an int >= 1",
        ),
        ({"max_steps": 2.5}, "optimizer.max_steps=2.5 is of the wrong type"),
        (
            {"mixed_precision": 1},
            "parallel.mixed_precision=1 is of the wrong type (overrides): give true or false",
        ),
        ({"lr": True}, "optimizer.lr=True is of the wrong type"),
        (
            {"max_steps": 99999999999999999999999},
            "optimizer.max_steps=99999999999999999999999 is out of range (overrides): give an int >= 1 and "
            "<= 9223372036854775807",
        ),
        ({"max_steps": 0}, "optimizer.max_steps=0 is out of range"),
        ({"lr": -1}, "optimizer.lr=-1 is out of range (overrides): give a number > 0.0"),
        (
            {"backend": "mpi"},
            "parallel.backend='mpi' is not one of the allowed values (overrides): give one of",
        ),
        ({"warmup_steps": 50}, "optimizer.warmup_steps (50) must be < optimizer.max_steps (12)"),
    ],
)
def test_wrong_type_and_out_of_range_name_the_field(overrides, message):
    assert message in str(_error(overrides))


def test_overrides_text_must_be_a_json_object():
    assert parse_overrides("") == {} and parse_overrides(' {"lr": 1} ') == {"lr": 1}
    with pytest.raises(ConfigError, match=r"^not valid JSON .*\(overrides\): give a JSON object"):
        parse_overrides("{max_steps: 5}")
    with pytest.raises(ConfigError, match=r"^list \[5\] is not a JSON object"):
        parse_overrides("[5]")


def test_preset_and_seed_errors_name_their_input():
    with pytest.raises(
        ConfigError, match=r"^unknown preset 'tiny' \(preset\): use one of base, large, "
    ):
        resolve_train_config("tiny", "", 0)
    with pytest.raises(ConfigError, match=r"^seed=-1 is out of range \(seed\)"):
        resolve_train_config("small", "", -1)


NAN, INF = float("nan"), float("inf")
#: Every error case of the dataclass-era `apply_overrides` (base: preset small) and its exact
#: line, recorded from main before pydantic; <FIELDS> stands for the list of every field path.
OLD_LINES = [
    (
        {"max_stepz": 5},
        "unknown field 'max_stepz' (overrides): use one of <FIELDS>; did you mean 'max_steps'?",
    ),
    (
        {"optimizer": {"bogus": 1}},
        "unknown field 'optimizer.bogus' (overrides): use one of <FIELDS>; did you mean 'optimizer.lr'?",
    ),
    (
        {"model": "bev_fusion_large"},
        "'model' is a section, not a field (overrides): name one of its fields, e.g. {\"model.name\": ...}; fields: model.name, model.pos_weight",
    ),
    (
        {"max_steps": "ten"},
        "optimizer.max_steps='ten' is of the wrong type (overrides): give an int >= 1 and <= 9223372036854775807",
    ),
    (
        {"max_steps": 2.5},
        "optimizer.max_steps=2.5 is of the wrong type (overrides): give an int >= 1 and <= 9223372036854775807",
    ),
    (
        {"mixed_precision": 1},
        "parallel.mixed_precision=1 is of the wrong type (overrides): give true or false",
    ),
    ({"lr": True}, "optimizer.lr=True is of the wrong type (overrides): give a number > 0.0"),
    (
        {"max_steps": 100000000000000000000000},
        "optimizer.max_steps=100000000000000000000000 is out of range (overrides): give an int >= 1 and <= 9223372036854775807",
    ),
    (
        {"max_steps": 0},
        "optimizer.max_steps=0 is out of range (overrides): give an int >= 1 and <= 9223372036854775807",
    ),
    ({"lr": -1}, "optimizer.lr=-1 is out of range (overrides): give a number > 0.0"),
    (
        {"backend": "mpi"},
        "parallel.backend='mpi' is not one of the allowed values (overrides): give one of 'auto', 'gloo', 'nccl'",
    ),
    (
        {"warmup_steps": 50},
        "invalid training config: optimizer.warmup_steps (50) must be < optimizer.max_steps (12) (overrides): change the preset or the overrides so that each field is in range",
    ),
    ({"a": 1, "b": 2}, "unknown fields 'a', 'b' (overrides): use one of <FIELDS>"),
    ({"lr": NAN}, "optimizer.lr=nan is out of range (overrides): give a number > 0.0"),
    ({"lr": INF}, "optimizer.lr=inf is out of range (overrides): give a number > 0.0"),
    (
        {"name": "resnet"},
        "model.name='resnet' is not one of the allowed values (overrides): give one of 'bev_fusion_base', 'bev_fusion_large', 'bev_fusion_small', 'bev_fusion_temporal', 'world_model_large', 'world_model_small'",
    ),
    (
        {"name": 5},
        "model.name=5 is of the wrong type (overrides): give one of 'bev_fusion_base', 'bev_fusion_large', 'bev_fusion_small', 'bev_fusion_temporal', 'world_model_large', 'world_model_small'",
    ),
    ({"folder": 5}, "checkpoint.folder=5 is of the wrong type (overrides): give a string"),
    (
        {"val_split": "train"},
        "invalid training config: data.train_split ('train') and data.val_split ('train') must be distinct, non-empty split names (overrides): change the preset or the overrides so that each field is in range",
    ),
    (
        {"train_split": ""},
        "invalid training config: data.train_split ('') and data.val_split ('val') must be distinct, non-empty split names (overrides): change the preset or the overrides so that each field is in range",
    ),
    (
        {"seed": -1},
        "seed=-1 is out of range (overrides): give an int >= 0 and <= 9223372036854775807",
    ),
    (
        {"seed": 1.5},
        "seed=1.5 is of the wrong type (overrides): give an int >= 0 and <= 9223372036854775807",
    ),
    ({"preset": 5}, "preset=5 is of the wrong type (overrides): give a string"),
    (
        {"straggler_threshold": 1.5},
        "metrics.straggler_threshold=1.5 is out of range (overrides): give a number > 0.0 and <= 1.0",
    ),
    (
        {"optimizer.lr": "x"},
        "optimizer.lr='x' is of the wrong type (overrides): give a number > 0.0",
    ),
    ({"foo.bar": 1}, "unknown field 'foo.bar' (overrides): use one of <FIELDS>"),
    (
        {"optimizer.bogus": 1},
        "unknown field 'optimizer.bogus' (overrides): use one of <FIELDS>; did you mean 'optimizer.lr'?",
    ),
    ({"lr": None}, "optimizer.lr=None is of the wrong type (overrides): give a number > 0.0"),
    ({"lr": [1]}, "optimizer.lr=[1] is of the wrong type (overrides): give a number > 0.0"),
    (
        {"batch_size": 0, "warmup_steps": 50},
        "data.batch_size=0 is out of range (overrides): give an int >= 1 and <= 9223372036854775807",
    ),
    (
        {"warmup_steps": 50, "batch_size": 0},
        "data.batch_size=0 is out of range (overrides): give an int >= 1 and <= 9223372036854775807",
    ),
    (
        {"lr": -1, "max_steps": 0},
        "optimizer.lr=-1 is out of range (overrides): give a number > 0.0",
    ),
    (
        {"max_steps": 0, "lr": -1},
        "optimizer.max_steps=0 is out of range (overrides): give an int >= 1 and <= 9223372036854775807",
    ),
    (
        {"bogus": 1, "model": 3},
        "'model' is a section, not a field (overrides): name one of its fields, e.g. {\"model.name\": ...}; fields: model.name, model.pos_weight",
    ),
    (
        {"optimizer": {"lr": -1}, "bogus": 2},
        "unknown field 'bogus' (overrides): use one of <FIELDS>",
    ),
    (
        {"max_steps": -9223372036854775809},
        "optimizer.max_steps=-9223372036854775809 is out of range (overrides): give an int >= 1 and <= 9223372036854775807",
    ),
    (
        {"seed": 9223372036854775808},
        "seed=9223372036854775808 is out of range (overrides): give an int >= 0 and <= 9223372036854775807",
    ),
    (
        {"max_steps": 5, "warmup_steps": 5},
        "invalid training config: optimizer.warmup_steps (5) must be < optimizer.max_steps (5) (overrides): change the preset or the overrides so that each field is in range",
    ),
    (
        {"data": {"batch_size": "1"}},
        "data.batch_size='1' is of the wrong type (overrides): give an int >= 1 and <= 9223372036854775807",
    ),
    (
        {"model": {"name": "x"}},
        "model.name='x' is not one of the allowed values (overrides): give one of 'bev_fusion_base', 'bev_fusion_large', 'bev_fusion_small', 'bev_fusion_temporal', 'world_model_large', 'world_model_small'",
    ),
    (
        {"model": None},
        "'model' is a section, not a field (overrides): name one of its fields, e.g. {\"model.name\": ...}; fields: model.name, model.pos_weight",
    ),
    (
        {"seed": True},
        "seed=True is of the wrong type (overrides): give an int >= 0 and <= 9223372036854775807",
    ),
    (
        {"num_workers": -1},
        "data.num_workers=-1 is out of range (overrides): give an int >= 0 and <= 9223372036854775807",
    ),
    (
        {"optimizer": []},
        "'optimizer' is a section, not a field (overrides): name one of its fields, e.g. {\"optimizer.lr\": ...}; fields: optimizer.lr, optimizer.weight_decay, optimizer.grad_clip, optimizer.max_steps, optimizer.warmup_steps",
    ),
    (
        {"mixed_precision": "true"},
        "parallel.mixed_precision='true' is of the wrong type (overrides): give true or false",
    ),
    (
        {"max_stepz": 5, "lr": -1},
        "unknown field 'max_stepz' (overrides): use one of <FIELDS>; did you mean 'max_steps'?",
    ),
    (
        {"lr": -1, "max_stepz": 5},
        "unknown field 'max_stepz' (overrides): use one of <FIELDS>; did you mean 'max_steps'?",
    ),
    (
        {"optimizer": {"max_stepz": 1}, "lr": "x"},
        "unknown field 'optimizer.max_stepz' (overrides): use one of <FIELDS>; did you mean 'optimizer.max_steps'?",
    ),
    (
        {"warmup_steps": 50, "val_split": "train"},
        "invalid training config: optimizer.warmup_steps (50) must be < optimizer.max_steps (12) (overrides): change the preset or the overrides so that each field is in range",
    ),
    (
        {"warmup_steps": 2.0, "max_steps": 2.0},
        "invalid training config: optimizer.warmup_steps (2) must be < optimizer.max_steps (2) (overrides): change the preset or the overrides so that each field is in range",
    ),
    (
        {"seed": 1e30},
        "seed=1e+30 is out of range (overrides): give an int >= 0 and <= 9223372036854775807",
    ),
    (
        {"max_steps": NAN},
        "optimizer.max_steps=nan is of the wrong type (overrides): give an int >= 1 and <= 9223372036854775807",
    ),
    ({"lr": "nan"}, "optimizer.lr='nan' is of the wrong type (overrides): give a number > 0.0"),
    (
        {"prefetch_depth": 0},
        "data.prefetch_depth=0 is out of range (overrides): give an int >= 1 and <= 9223372036854775807",
    ),
    (
        {"interval": 0},
        "checkpoint.interval=0 is out of range (overrides): give an int >= 1 and <= 9223372036854775807",
    ),
    (
        {"checkpoint": {"keep": 0}},
        "checkpoint.keep=0 is out of range (overrides): give an int >= 1 and <= 9223372036854775807",
    ),
    (
        {"async_save": None},
        "checkpoint.async_save=None is of the wrong type (overrides): give true or false",
    ),
    (
        {"name": None},
        "model.name=None is of the wrong type (overrides): give one of 'bev_fusion_base', 'bev_fusion_large', 'bev_fusion_small', 'bev_fusion_temporal', 'world_model_large', 'world_model_small'",
    ),
    (
        {"Max_steps": 1},
        "unknown field 'Max_steps' (overrides): use one of <FIELDS>; did you mean 'max_steps'?",
    ),
    ({"": 1}, "unknown field '' (overrides): use one of <FIELDS>"),
    (
        {"optimizer.": 1},
        "unknown field 'optimizer.' (overrides): use one of <FIELDS>; did you mean 'optimizer.lr'?",
    ),
    ({".lr": 1}, "unknown field '.lr' (overrides): use one of <FIELDS>; did you mean 'lr'?"),
]


@pytest.mark.parametrize(("overrides", "line"), OLD_LINES)
def test_every_error_line_of_the_old_overrides_is_unchanged(overrides, line):
    error = _error(overrides)
    assert str(error) == line.replace("<FIELDS>", ", ".join(list_fields()))
    assert len(error.fields) >= 1 and all(field in line for field in error.fields)


def test_stored_configs_and_seeds_keep_their_old_lines():
    from platform_lib.training.config import TrainConfig

    with pytest.raises(ConfigError) as info:
        TrainConfig.from_dict({"optimizer": {"warmup_steps": 500}})
    assert str(info.value) == (
        "invalid training config: optimizer.warmup_steps (500) must be < optimizer.max_steps "
        "(200) (config): change the preset or the overrides so that each field is in range"
    )
    with pytest.raises(ConfigError) as info:
        resolve_train_config("small", "", 2**63)
    assert str(info.value) == (
        "seed=9223372036854775808 is out of range (seed): give an int >= 0 and <= "
        "9223372036854775807"
    )
    with pytest.raises(ConfigError, match=r"^float inf is not a JSON object \(overrides\)"):
        parse_overrides("1e999")


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (
            '{"seed": 7}',
            "seed=7 in the overrides conflicts with the seed input (0) (overrides): give the seed "
            "once, with --seed, not in the overrides",
        ),
        (
            '{"preset": "large"}',
            "preset='large' in the overrides conflicts with the preset input ('small') "
            "(overrides): give the preset once, with --preset, not in the overrides",
        ),
        ({"seed": 0, "lr": 0.01}, "seed=0 in the overrides conflicts with the seed input (0)"),
    ],
)
def test_overrides_cannot_change_the_preset_or_the_seed(overrides, line):
    """Before: the seed input silently replaced the override, and a preset override
    relabelled the run without changing it."""
    with pytest.raises(ConfigError) as info:
        resolve_train_config("small", overrides, 0)
    assert str(info.value).startswith(line)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 30_000 + "]" * 30_000,  # past the interpreter's recursion limit
        '{"a": ' * 5_000 + "1" + "}" * 5_000,
        '{"lr": ' + "[" * 17 + "]" * 17 + "}",
    ],
)
def test_deep_json_is_one_line_not_a_recursion_error(text):
    with pytest.raises(ConfigError) as info:
        resolve_train_config("small", text, 0)
    assert str(info.value) == (
        "JSON nested more than 16 levels deep (overrides): nest at most a section and its "
        'fields, e.g. {"optimizer": {"lr": 0.01}}'
    )


def test_huge_numbers_and_texts_are_one_line_errors():
    with pytest.raises(ConfigError, match=r"^not valid JSON \(a number too long to read\)"):
        parse_overrides('{"seed": ' + "9" * 5_000 + "}")
    with pytest.raises(ConfigError, match=r"^70014 characters of JSON, more than 65536"):
        parse_overrides('{"folder": "' + "a" * 70_000 + '"}')
    error = _error({"seed": 10**5_000})  # past str()'s digit limit: the value is not printed
    assert str(error).startswith("seed=<int> is out of range (overrides)")
    assert len(str(_error({"folder": ["x" * 1000]}))) < 400
