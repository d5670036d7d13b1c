"""Fuzz slice specs and promotion configs: any document ends as a spec or one error line.

Arbitrary YAML/JSON text through `load_slice_spec` (a file, as a user hands it over), and
arbitrary nested values with real attribute names as keys through `parse_slice_spec`,
`slice_masks` and `parse_promotion_config`; only `SliceSpecError` / `EvaluationError` (both
`UserError`) may come out, never a traceback of pydantic, yaml, numpy or a RecursionError.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from platform_lib.errors import format_user_error
from platform_lib.evaluation.errors import EvaluationError, SliceSpecError
from platform_lib.evaluation.promotion import PromotionConfig, parse_promotion_config
from platform_lib.evaluation.slices import (
    FrameAttributes,
    SliceSpec,
    Where,
    load_slice_spec,
    parse_slice_spec,
    slice_masks,
)

KEYS = st.sampled_from(
    ["slices", "name", "where", "min", "max", *Where.model_fields, *PromotionConfig.model_fields]
) | st.text(max_size=10)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=16,
)
ATTRS = FrameAttributes(
    keys=("a_000000", "b_000000"),
    columns={
        "log_id": np.array(["a", "b"], dtype=object),
        "ego_speed_mps": np.array([3.0, np.nan]),
        "num_vehicle": np.array([0, 4]),
        "has_vehicle": np.array([False, True]),
    },
)


def _one_line(error: Exception) -> None:
    line = format_user_error(error)
    assert line.startswith("error: ") and "\n" not in line


@given(st.dictionaries(KEYS, VALUES, max_size=4) | VALUES)
def test_any_document_is_a_spec_or_one_line(data: object) -> None:
    try:
        spec = parse_slice_spec(data)
    except SliceSpecError as exc:
        _one_line(exc)
        return
    assert isinstance(spec, SliceSpec)
    try:
        masks = slice_masks(spec, ATTRS)
    except SliceSpecError as exc:
        _one_line(exc)
        return
    assert all(m.dtype == bool and m.any() for m in masks.values())


@given(st.dictionaries(KEYS, VALUES, max_size=4) | VALUES)
def test_any_promotion_config_is_valid_or_one_line(data: object) -> None:
    try:
        config = parse_promotion_config(data)
    except EvaluationError as exc:
        _one_line(exc)
        return
    assert 0.0 <= config.margin <= 1.0
    assert all(0.0 <= m <= 1.0 for m in config.slice_margins.values())


@given(
    st.binary(max_size=300) | st.text(max_size=300).map(str.encode),
    st.sampled_from([".yaml", ".json"]),
)
def test_any_file_bytes_are_a_spec_or_one_line(body: bytes, suffix: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"spec{suffix}"
        path.write_bytes(body)
        try:
            load_slice_spec(path)
        except SliceSpecError as exc:
            _one_line(exc)
