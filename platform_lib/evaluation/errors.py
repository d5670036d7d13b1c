"""Errors of the evaluation room: bad slice specs, promotion configs and unpaired comparisons.

Each is a `platform_lib.errors.UserError`, printed as one line
`error: <what> (<culprit>): <what to do>`.
"""

from __future__ import annotations

import typing

from pydantic import BaseModel, ValidationError

from platform_lib.errors import UserError

__all__ = ["EvaluationError", "PairingError", "SliceSpecError", "validation_error"]


class EvaluationError(UserError):
    """Bad evaluation input (a config field out of range, an unknown metric band)."""


class SliceSpecError(EvaluationError):
    """A slice spec that cannot be used: unknown attribute, empty slice, missing data."""


class PairingError(EvaluationError):
    """Champion and challenger were not evaluated on the same frames."""


def validation_error(
    exc: ValidationError,
    model: type[BaseModel],
    culprit: str,
    error_class: type[EvaluationError] = EvaluationError,
) -> EvaluationError:
    """Return the first problem of `model`'s pydantic error as one line naming the field path.

    An unknown field reads "unknown attribute <path>" and lists the names allowed there.
    """
    first = exc.errors()[0]
    loc = first["loc"]
    path = ".".join(str(part) for part in loc) or "<top level>"
    if first["type"] == "extra_forbidden":
        allowed = list(_model_at(model, loc[:-1]).model_fields)
        return error_class(f"unknown attribute {path!r}", culprit, f"use one of {allowed}")
    return error_class(f"{path}: {first['msg']}", culprit, "fix that field")


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel]:
    """Return the pydantic model that validates the value at `loc` below `model`."""
    for part in loc:
        if not isinstance(part, str) or part not in model.model_fields:
            continue  # a list index or a union member's tag
        annotation = model.model_fields[part].annotation
        candidates = [annotation, *_nested_args(annotation)]
        model = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), model
        )
    return model


def _nested_args(annotation: object) -> list[object]:
    out: list[object] = []
    for arg in typing.get_args(annotation):
        out += [arg, *_nested_args(arg)]
    return out
