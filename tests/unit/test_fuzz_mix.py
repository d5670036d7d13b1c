"""Fuzz `data.mix` in overrides: any list of entries ends as a config or one `ConfigError` line
naming data.mix; an accepted mix survives the JSON round trip of a recorded config."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from platform_lib.training.config import ConfigError, TrainConfig, hash_config
from platform_lib.training.overrides import resolve_train_config

URLS = st.one_of(
    st.text(max_size=30),
    st.builds(
        "{}://{}{}".format,
        st.sampled_from(["s3", "gs", "file", "S3", "1x", "", "a b", "https"]),
        st.sampled_from(["", "user:pw@", "@", "host"]),
        st.text(max_size=12),
    ),
)
WEIGHTS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5), st.booleans(), st.none()
)
ENTRIES = st.one_of(
    st.fixed_dictionaries({"dataset": URLS}, optional={"weight": WEIGHTS}),
    st.dictionaries(st.sampled_from(["dataset", "weight", "wieght", ""]), URLS | WEIGHTS),
    URLS,
    WEIGHTS,
)


@settings(max_examples=200, deadline=500)
@given(st.lists(ENTRIES, max_size=4), st.sampled_from(["mix", "data.mix"]))
def test_any_mix_is_a_config_or_one_line_naming_it(mix: list, key: str) -> None:
    try:
        config = resolve_train_config("temporal", {key: mix}, 0)
    except ConfigError as error:
        assert "\n" not in str(error) and len(str(error)) < 3_000
        assert error.fields == ("data.mix",), str(error)
        return
    assert len(config.data.mix) == len(mix)
    for entry in config.data.mix:
        assert entry.dataset == entry.dataset.strip() and entry.dataset
        assert math.isfinite(entry.weight) and entry.weight > 0
    recorded = json.loads(json.dumps(config.to_dict()))
    assert TrainConfig.from_dict(recorded) == config and len(hash_config(config)) == 64
