"""Overrides: a preset plus the fields a run changes, validated against `TrainConfig`.

An override mapping names a field alone when its name is unique (`{"max_steps": 5}`), by
dotted path (`{"optimizer.max_steps": 5}`) or nested by section
(`{"optimizer": {"max_steps": 5}}`). Bare names are resolved to their paths, the result is
laid over the preset's nested dict and `TrainConfig.model_validate` checks it; any problem is
one `ConfigError` line naming the field and the allowed fields or values
(`platform_lib.training.config.config_error`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from platform_lib.training.config import (
    SECTIONS,
    ConfigError,
    TrainConfig,
    config_error,
    list_fields,
    show_value,
)
from platform_lib.training.presets import get_preset, list_presets

__all__ = [
    "MAX_DEPTH",
    "MAX_TEXT_CHARS",
    "WORKFLOW_INPUTS",
    "apply_overrides",
    "list_fields",
    "parse_overrides",
    "resolve_train_config",
]

#: Deepest nesting of objects and arrays accepted in overrides ({"section": {"field": 1}} is 2).
MAX_DEPTH = 16
#: Longest overrides text accepted, in characters.
MAX_TEXT_CHARS = 65_536
#: Config fields that are workflow inputs of their own: field -> its option.
WORKFLOW_INPUTS = {"preset": "--preset", "seed": "--seed"}
_EXAMPLE = 'give a JSON object such as {"max_steps": 5}'


def parse_overrides(text: str, *, culprit: str = "overrides") -> dict[str, Any]:
    """Parse a JSON object of overrides ("" or "{}" for none).

    Raises:
        ConfigError: the text is longer than `MAX_TEXT_CHARS`, not JSON, nested deeper than
            `MAX_DEPTH` or not a JSON object (names `culprit`).
    """
    if not text.strip():
        return {}
    if len(text) > MAX_TEXT_CHARS:
        raise ConfigError(
            f"{len(text)} characters of JSON, more than {MAX_TEXT_CHARS}", culprit, _EXAMPLE
        )
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"not valid JSON ({exc.msg} at character {exc.pos})", culprit, _EXAMPLE
        ) from None
    except RecursionError:  # deeper than the interpreter parses
        raise _too_deep(culprit) from None
    except ValueError:  # an integer of more digits than int() reads (sys.get_int_max_str_digits)
        raise ConfigError("not valid JSON (a number too long to read)", culprit, _EXAMPLE) from None
    _check_depth(value, culprit)
    if not isinstance(value, dict):
        raise ConfigError(
            f"{type(value).__name__} {show_value(value)} is not a JSON object", culprit, _EXAMPLE
        )
    return value


def _check_depth(value: Any, culprit: str) -> None:
    """Raise `ConfigError` when `value` nests objects/arrays deeper than `MAX_DEPTH`."""
    level, depth = [value], 0
    while containers := [v for v in level if isinstance(v, Mapping | list | tuple)]:
        depth += 1
        if depth > MAX_DEPTH:
            raise _too_deep(culprit)
        level = [c for v in containers for c in (v.values() if isinstance(v, Mapping) else v)]


def _too_deep(culprit: str) -> ConfigError:
    return ConfigError(
        f"JSON nested more than {MAX_DEPTH} levels deep",
        culprit,
        'nest at most a section and its fields, e.g. {"optimizer": {"lr": 0.01}}',
    )


def apply_overrides(
    base: TrainConfig, overrides: Mapping[str, Any], *, culprit: str = "overrides"
) -> TrainConfig:
    """Return `base` with the fields in `overrides` replaced, every value checked.

    Args:
        base: the config to start from (a preset).
        overrides: {field or dotted path: value} or nested {section: {field: value}}.
        culprit: the input named in errors (e.g. "overrides", "--overrides").

    Raises:
        ConfigError: an unknown field (listing the valid ones), a value of the wrong type or
            out of range (naming the field and what it allows), a combination that breaks
            a cross-field rule, or nesting deeper than `MAX_DEPTH`.
    """
    _check_depth(overrides, culprit)
    fields = list_fields()
    by_name = {path.rsplit(".", 1)[-1]: path for path in fields}  # names are unique
    values, order = base.to_dict(), []
    for key, value in overrides.items():
        key = str(key)
        items = (
            [(f"{key}.{k}", v) for k, v in value.items()]
            if key in SECTIONS and isinstance(value, Mapping)
            else [(key if key in fields or key in SECTIONS else by_name.get(key, key), value)]
        )
        for path, v in items:
            section, _, name = path.rpartition(".")
            if section in SECTIONS and isinstance(values[section], dict):
                values[section][name] = v  # a field, or an unknown name, of a section
            else:
                values[path] = v
            order.append(path)
    try:
        return TrainConfig.model_validate(values)
    except ValidationError as exc:
        raise config_error(exc, culprit, order) from None


def resolve_train_config(preset: str, overrides: str | Mapping[str, Any], seed: int) -> TrainConfig:
    """Return the training config of `preset` with `overrides` and `seed` applied.

    The preset and the seed are workflow inputs of their own: overrides that name either
    are an error (naming both inputs), so the config that runs is the one asked for.

    Args:
        preset: a name of `platform_lib.training.presets.list_presets()`.
        overrides: JSON object text or mapping (see `apply_overrides`); "" for none.
        seed: training seed.

    Raises:
        ConfigError: unknown preset (culprit "preset", listing the presets), bad overrides
            or overrides naming the preset or the seed (culprit "overrides"), or a bad seed
            (culprit "seed").
    """
    try:
        base = get_preset(preset)
    except KeyError:
        raise ConfigError(
            f"unknown preset {preset!r}",
            "preset",
            f"use one of {', '.join(list_presets())}",
            fields=("preset",),
        ) from None
    values = parse_overrides(overrides) if isinstance(overrides, str) else dict(overrides)
    for name, option in WORKFLOW_INPUTS.items():
        if name in values:
            given = preset if name == "preset" else seed
            raise ConfigError(
                f"{name}={show_value(values[name])} in the overrides conflicts with the {name} "
                f"input ({given!r})",
                "overrides",
                f"give the {name} once, with {option}, not in the overrides",
                fields=(name,),
            )
    config = apply_overrides(base, values)
    return apply_overrides(config, {"seed": seed}, culprit="seed")
