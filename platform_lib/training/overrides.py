"""Overrides: a preset plus the fields a run changes, validated against `TrainConfig`.

An override mapping names a field alone when its name is unique (`{"max_steps": 5}`), by
dotted path (`{"optimizer.max_steps": 5}`) or nested by section
(`{"optimizer": {"max_steps": 5}}`). An unknown field, a wrong type or an out-of-range value
fails at once with one `ConfigError` line naming the field and the allowed fields or values.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Mapping
from typing import Any

from platform_lib.training.config import (
    SECTIONS,
    ConfigError,
    TrainConfig,
    check_value,
    describe_bounds,
    field_type,
)
from platform_lib.training.presets import get_preset, list_presets

__all__ = ["apply_overrides", "list_fields", "parse_overrides", "resolve_train_config"]


def list_fields() -> dict[str, dataclasses.Field[Any]]:
    """Return every settable field of TrainConfig by dotted path ("seed", "optimizer.lr", ...)."""
    paths: dict[str, dataclasses.Field[Any]] = {}
    for f in dataclasses.fields(TrainConfig):
        if f.name in SECTIONS:
            paths.update({f"{f.name}.{g.name}": g for g in dataclasses.fields(SECTIONS[f.name])})
        else:
            paths[f.name] = f
    return paths


def parse_overrides(text: str, *, culprit: str = "overrides") -> dict[str, Any]:
    """Parse a JSON object of overrides ("" or "{}" for none).

    Raises:
        ConfigError: the text is not a JSON object (names `culprit`).
    """
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"not valid JSON ({exc.msg} at character {exc.pos})",
            culprit,
            'give a JSON object such as {"max_steps": 5}',
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(
            f"{type(value).__name__} {value!r} is not a JSON object",
            culprit,
            'give a JSON object such as {"max_steps": 5}',
        )
    return value


def _flatten(overrides: Mapping[str, Any], culprit: str) -> dict[str, Any]:
    """Return {dotted path: value}; nested sections are flattened, bare names resolved."""
    fields = list_fields()
    by_name: dict[str, list[str]] = {}
    for path in fields:
        by_name.setdefault(path.rsplit(".", 1)[-1], []).append(path)
    flat: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in overrides.items():
        if key in SECTIONS and not isinstance(value, Mapping):
            raise ConfigError(
                f"{key!r} is a section, not a field",
                culprit,
                f'name one of its fields, e.g. {{"{key}.{dataclasses.fields(SECTIONS[key])[0].name}": ...}}; '
                f"fields: {', '.join(p for p in fields if p.startswith(key + '.'))}",
                fields=(key,),
            )
        if key in SECTIONS:
            nested = {f"{key}.{k}": v for k, v in value.items()}
            unknown += [k for k in nested if k not in fields]
            flat.update({k: v for k, v in nested.items() if k in fields})
        elif key in fields:
            flat[key] = value
        elif len(by_name.get(key, [])) == 1:
            flat[by_name[key][0]] = value
        elif len(by_name.get(key, [])) > 1:
            raise ConfigError(
                f"field name {key!r} is ambiguous",
                culprit,
                f"name it by its path, one of {', '.join(by_name[key])}",
                fields=(key,),
            )
        else:
            unknown.append(str(key))
    if unknown:
        hints = [m for k in unknown for m in difflib.get_close_matches(k, [*fields, *by_name], n=1)]
        hint = f"; did you mean {', '.join(repr(h) for h in hints)}?" if hints else ""
        raise ConfigError(
            f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(repr(k) for k in unknown)}",
            culprit,
            f"use one of {', '.join(fields)}{hint}",
            fields=tuple(unknown),
        )
    return flat


def apply_overrides(
    base: TrainConfig, overrides: Mapping[str, Any], *, culprit: str = "overrides"
) -> TrainConfig:
    """Return `base` with the fields in `overrides` replaced, every value checked first.

    Args:
        base: the config to start from (a preset).
        overrides: {field or dotted path: value} or nested {section: {field: value}}.
        culprit: the input named in errors (e.g. "overrides", "--overrides").

    Raises:
        ConfigError: an unknown or ambiguous field (listing the valid ones), a value of the
            wrong type or out of range (naming the field and what it allows), or a
            combination that breaks a cross-field rule (naming every field involved).
    """
    fields = list_fields()
    changes: dict[str, dict[str, Any]] = {}
    for path, value in _flatten(overrides, culprit).items():
        coerced, problem = check_value(fields[path], value)
        if problem:
            allowed = (
                "one of the allowed values"
                if "choices" in fields[path].metadata.get("bounds", {})
                else ""
            )
            what = (
                ("not " + allowed if allowed else "out of range")
                if _has_kind(fields[path], value)
                else ("of the wrong type")
            )
            raise ConfigError(
                f"{path}={value!r} is {what}",
                culprit,
                f"give {describe_bounds(fields[path])}",
                fields=(path,),
            )
        section, _, name = path.rpartition(".")
        changes.setdefault(section, {})[name] = coerced
    top = changes.pop("", {})
    try:
        sections = {s: dataclasses.replace(getattr(base, s), **v) for s, v in changes.items()}
        return dataclasses.replace(base, **top, **sections)
    except ConfigError as exc:
        raise ConfigError(exc.what, culprit, exc.fix, fields=exc.fields) from None


def _has_kind(f: dataclasses.Field[Any], value: Any) -> bool:
    """True when `value` has the kind of field `f` (so only its range or choice is off)."""
    kind = field_type(f)
    if kind is bool or isinstance(value, bool):
        return kind is bool and isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind is float:
        return isinstance(value, int | float)
    return kind is None or isinstance(value, kind)


def resolve_train_config(preset: str, overrides: str | Mapping[str, Any], seed: int) -> TrainConfig:
    """Return the training config of `preset` with `overrides` and `seed` applied.

    Args:
        preset: a name of `platform_lib.training.presets.list_presets()`.
        overrides: JSON object text or mapping (see `apply_overrides`); "" for none.
        seed: training seed.

    Raises:
        ConfigError: unknown preset (culprit "preset", listing the presets), bad overrides
            (culprit "overrides") or a bad seed (culprit "seed").
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
    config = apply_overrides(base, values)
    return apply_overrides(config, {"seed": seed}, culprit="seed")
