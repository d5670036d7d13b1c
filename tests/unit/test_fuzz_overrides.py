"""Fuzz `--overrides`: any text or nested shape ends as a config or one `ConfigError` line.

Arbitrary text, arbitrary JSON values (field names, section names and junk as keys) and
deep nests go through `resolve_train_config`, the path of the `resolve_config` task and of
`training.node`; nothing else may come out (no RecursionError, TypeError, ValueError from
int parsing, pydantic's ValidationError), and each case takes bounded time.
"""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from platform_lib.training.config import SECTIONS, ConfigError, TrainConfig, hash_config
from platform_lib.training.overrides import list_fields, resolve_train_config

FIELDS = list(list_fields())
KEYS = st.sampled_from([*FIELDS, *(p.rsplit(".", 1)[-1] for p in FIELDS), *SECTIONS]) | st.text(
    max_size=12
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=12,
)
OVERRIDES = st.dictionaries(KEYS, VALUES, max_size=6)


def _resolve(overrides: object) -> None:
    """Resolve; a config must be whole and hashable, an error one line."""
    try:
        config = resolve_train_config("small", overrides, 0)  # type: ignore[arg-type]
    except ConfigError as error:
        assert "\n" not in str(error) and len(str(error)) < 3_000
        return
    assert isinstance(config, TrainConfig) and config.preset == "small" and config.seed == 0
    assert math.isfinite(config.optimizer.lr) and len(hash_config(config)) == 64


@settings(max_examples=200, deadline=500)
@given(st.text(max_size=200))
def test_any_text_is_a_config_or_one_line(text: str) -> None:
    _resolve(text)


@settings(max_examples=200, deadline=500)
@given(OVERRIDES)
def test_any_json_object_is_a_config_or_one_line(overrides: dict) -> None:
    _resolve(json.dumps(overrides))  # NaN/Infinity included: Python's json reads them
    _resolve(overrides)


@settings(max_examples=40, deadline=2_000)
@given(
    st.integers(min_value=1, max_value=20_000),
    st.sampled_from(["[", '{"a": ', '{"optimizer": ', '{"lr": [']),
)
def test_deep_nests_are_one_line(depth: int, opener: str) -> None:
    closer = {"[": "]", '{"a": ': "}", '{"optimizer": ': "}", '{"lr": [': "]}"}[opener]
    _resolve(opener * depth + "1" + closer * depth)
