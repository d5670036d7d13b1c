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
    with pytest.raises(ConfigError, match=r"^unknown preset 'tiny' \(preset\): use one of large, "):
        resolve_train_config("tiny", "", 0)
    with pytest.raises(ConfigError, match=r"^seed=-1 is out of range \(seed\)"):
        resolve_train_config("small", "", -1)
