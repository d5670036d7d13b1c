"""Fuzz `StreamingLoader.load_state_dict`: any shape of state ends as a `ResumeStateError` or a resume."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loading_helpers import write_test_dataset

from platform_lib.loading.errors import ResumeStateError
from platform_lib.loading.loader import build_loader

pytestmark = pytest.mark.timeout(60)

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def loader(tmp_path_factory):
    root: Path = write_test_dataset(tmp_path_factory.mktemp("fuzz") / "data", {"loga": 5})
    return build_loader(str(root), rank=0, world_size=1, batch_size=2, num_workers=0, seed=1)


def _check(loader, state) -> None:
    try:
        loader.load_state_dict(state)
    except ResumeStateError:
        return
    assert 0 <= loader.state_dict()["consumed_samples"] <= 2 * len(loader)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(state=_JSON)
def test_any_json_value_as_state_is_a_resume_state_error(loader, state):
    _check(loader, state)


@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_valid_state_with_fields_replaced_or_removed_is_a_resume_state_error(loader, data):
    state = dict(loader.state_dict())
    for name in data.draw(st.lists(st.sampled_from(sorted(state)), max_size=3, unique=True)):
        if data.draw(st.booleans()):
            del state[name]
        else:
            state[name] = data.draw(_JSON)
    _check(loader, state)
