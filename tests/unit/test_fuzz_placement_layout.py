"""Fuzz the layout setting of a placement: any text, any degrees end as a fitting layout or a
`PlacementError` naming a layout field, never another exception."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.placement import (
    ACCELERATORS,
    LAYOUT_FIELDS,
    Placement,
    PlacementError,
    placement_from_env,
)

_DEGREE = st.one_of(st.integers(-3, 20), st.booleans(), st.none(), st.text(max_size=3))


@settings(max_examples=300, deadline=None)
@given(
    text=st.one_of(
        st.text(max_size=80),
        st.lists(
            st.tuples(
                st.sampled_from([*LAYOUT_FIELDS, "cp", ""]), st.text("-0123456789x ", max_size=4)
            ),
            max_size=5,
        ).map(lambda parts: ",".join(f"{k}={v}" for k, v in parts)),
    ),
    count=st.sampled_from([1, 2, 4, 8, 16, 24]),
)
def test_any_layout_setting_is_a_fitting_layout_or_a_placement_error(text, count) -> None:
    env = {"DRIVETRAIN_ACCELERATOR": "a100-80gb", "DRIVETRAIN_ACCELERATOR_COUNT": str(count)}
    try:
        placement = placement_from_env({**env, "DRIVETRAIN_LAYOUT": text})
    except PlacementError as error:
        assert error.field.split(".")[0] == "layout"
        assert str(error).startswith("DRIVETRAIN_LAYOUT: ") and "\n" not in str(error)
        return
    layout = placement.layout
    assert layout is not None
    assert layout["pp"] * layout["dp_replicate"] * layout["dp_shard"] * layout["tp"] == count
    assert placement.nproc_per_node % layout["tp"] == 0


@settings(max_examples=300, deadline=None)
@given(
    degrees=st.dictionaries(st.sampled_from(LAYOUT_FIELDS), _DEGREE, max_size=4),
    accelerator=st.sampled_from(sorted(ACCELERATORS)),
    nodes=st.integers(1, 4),
)
def test_any_degrees_fit_or_fail_naming_the_field(degrees, accelerator, nodes) -> None:
    placement = Placement(
        accelerator=accelerator, accelerator_count=nodes * ACCELERATORS[accelerator].per_node
    )
    try:
        layout = placement.check_layout(degrees)
    except PlacementError as error:
        assert error.field.removeprefix("parallel.") in LAYOUT_FIELDS
        assert "valid" in str(error) or "positive integer" in str(error)
        return
    assert layout["pp"] * layout["dp_replicate"] * layout["dp_shard"] * layout["tp"] == (
        placement.accelerator_count
    )
