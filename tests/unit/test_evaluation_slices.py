"""Slice specs: validation (one line per bad input), frame masks, ego speed from real poses."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from platform_lib.errors import UserError, format_user_error
from platform_lib.evaluation.slices import (
    FrameAttributes,
    ego_speeds,
    load_frame_attributes,
    load_slice_spec,
    parse_slice_spec,
    slice_masks,
)
from platform_lib.fsguard import NotRegularFileError

ATTRS = FrameAttributes(
    keys=("a_000000", "a_000001", "b_000000", "b_000001"),
    columns={
        "log_id": np.array(["a", "a", "b", "b"], dtype=object),
        "ego_speed_mps": np.array([2.0, np.nan, 9.0, 12.0]),
        "num_vehicle": np.array([0, 3, 12, 15]),
        "has_vehicle": np.array([False, True, True, True]),
        "has_pedestrian": np.array([True, False, False, True]),
    },
)


def _spec(*slices: dict) -> dict:
    return {"slices": list(slices)}


def test_slices_select_frames_by_all_their_conditions() -> None:
    spec = parse_slice_spec(
        _spec(
            {"name": "busy", "where": {"num_vehicle": {"min": 10}}},
            {"name": "fast-ped", "where": {"ego_speed_mps": {"min": 8}, "has_pedestrian": True}},
            {"name": "log-a", "where": {"log_id": ["a"]}},
            {"name": "slow", "where": {"ego_speed_mps": {"max": 9.0}}},
        )
    )
    masks = slice_masks(spec, ATTRS)
    assert list(masks) == ["all", "busy", "fast-ped", "log-a", "slow"]
    assert masks["all"].tolist() == [True] * 4
    assert masks["busy"].tolist() == [False, False, True, True]
    assert masks["fast-ped"].tolist() == [False, False, False, True]
    assert masks["log-a"].tolist() == [True, True, False, False]
    assert masks["slow"].tolist() == [True, False, True, False]  # NaN speed matches no range


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            _spec({"name": "wet", "where": {"wether": ["rain"]}}),
            "unknown attribute 'slices.0.where.wether'",
        ),
        (_spec({"name": "nothing", "where": {}}), "has no condition (an empty slice)"),
        (_spec({"name": "all", "where": {"has_vehicle": True}}), "reserved"),
        (_spec({"name": "x", "where": {"num_vehicle": {}}}), "give min, max or both"),
        (_spec({"name": "x", "where": {"num_vehicle": {"min": 5, "max": 1}}}), "exceeds max"),
        (_spec(*[{"name": "x", "where": {"has_vehicle": True}}] * 2), "more than once"),
        ({"slice": []}, "unknown attribute 'slice'"),
    ],
)
def test_bad_specs_fail_with_one_line_naming_the_field(data: dict, message: str) -> None:
    with pytest.raises(UserError) as caught:
        parse_slice_spec(data)
    line = format_user_error(caught.value)
    assert message in line and "\n" not in line and line.startswith("error: ")


def test_unknown_attribute_lists_the_known_ones() -> None:
    with pytest.raises(UserError, match="use one of .*'ego_speed_mps'.*'weather'"):
        parse_slice_spec(_spec({"name": "wet", "where": {"wether": ["rain"]}}))


def test_slice_on_an_attribute_the_dataset_lacks_is_refused() -> None:
    spec = parse_slice_spec(_spec({"name": "night", "where": {"time_of_day": ["night"]}}))
    with pytest.raises(UserError, match="slice 'night' needs attribute 'time_of_day'"):
        slice_masks(spec, ATTRS)


def test_slice_without_frames_is_refused() -> None:
    spec = parse_slice_spec(_spec({"name": "crowd", "where": {"num_vehicle": {"min": 100}}}))
    with pytest.raises(UserError, match="slice 'crowd' selects no frame"):
        slice_masks(spec, ATTRS)


def test_spec_files_yaml_json_and_bad_ones(tmp_path: Path) -> None:
    body = _spec({"name": "busy", "where": {"num_vehicle": {"min": 10}}})
    (tmp_path / "s.json").write_text(json.dumps(body))
    (tmp_path / "s.yaml").write_text(
        "slices:\n  - name: busy\n    where: {num_vehicle: {min: 10}}\n"
    )
    assert load_slice_spec(tmp_path / "s.json") == load_slice_spec(tmp_path / "s.yaml")
    (tmp_path / "s.txt").write_text("{}")
    with pytest.raises(UserError, match="use .yaml or .json"):
        load_slice_spec(tmp_path / "s.txt")
    (tmp_path / "bad.yaml").write_text("slices: [\n")
    with pytest.raises(UserError, match="unparsable slice spec"):
        load_slice_spec(tmp_path / "bad.yaml")
    (tmp_path / "deep.json").write_text("[" * 100_000)
    with pytest.raises(UserError, match="unparsable slice spec"):
        load_slice_spec(tmp_path / "deep.json")
    os.mkfifo(tmp_path / "fifo.yaml")  # a FIFO without writer must not block the read
    with pytest.raises(NotRegularFileError):
        load_slice_spec(tmp_path / "fifo.yaml")


def test_ego_speed_from_poses() -> None:
    t = np.array([0.0, 0.1, 0.2, 0.3])
    positions = np.stack([10.0 * t, np.zeros(4), np.ones(4)], axis=1)
    assert ego_speeds(t, positions) == pytest.approx([10.0] * 4)
    assert np.isnan(ego_speeds(t[:1], positions[:1])).all()
    assert np.isnan(ego_speeds(np.zeros(4), positions)).all()  # no time between frames


def test_attributes_of_a_built_synthetic_dataset(synthetic_builds: Path) -> None:
    from platform_lib.shards.reader import open_dataset
    from platform_lib.sources.synthetic import SyntheticConfig
    from platform_lib.sources.synthetic_scene import sample_scene

    dataset = synthetic_builds / "ds-a"
    with open_dataset(dataset) as reader:
        keys = reader.split_keys("val") + reader.split_keys("train")
        index = reader.index.to_pydict()
    attrs = load_frame_attributes(dataset, keys)
    config = SyntheticConfig(num_logs=2, frames_per_log=3, seed=7)  # as the fixture builds
    speeds, logs = attrs.columns["ego_speed_mps"], attrs.columns["log_id"]
    for speed, log in zip(speeds, logs, strict=True):
        truth = sample_scene(config, int(log.rsplit("-", 1)[1])).ego_speed
        assert speed == pytest.approx(truth, rel=1e-2)  # chord of a gentle arc vs its speed
    row = {k: i for i, k in enumerate(index["key"])}
    assert attrs.columns["num_vehicle"].tolist() == [index["num_vehicle"][row[k]] for k in keys]
    assert attrs.columns["has_vehicle"].tolist() == [index["num_vehicle"][row[k]] > 0 for k in keys]
    with pytest.raises(UserError, match="not in the dataset"):
        load_frame_attributes(dataset, ["nope_000000"])
