"""Bad input fails fast, names the input, and registers nothing.

Each case runs `training_pipeline` in this process against an isolated cache and MLflow
store. "Fast" is checked by what ran: training never starts (no `train_model` execution).
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from platform_lib.sources.synthetic import SyntheticConfig, write_synthetic_logs

TINY = dict(frames_per_log=2, image_width=64, image_height=48, lidar_beams=8, lidar_azimuth_bins=64)


def _registered_versions() -> int:
    from platform_lib.registry.mlflow_store import configure_mlflow, resolve_drivetrain_home

    if not (resolve_drivetrain_home() / "mlflow.db").exists():
        return 0  # the registration step never even opened the store
    client = configure_mlflow()
    return sum(len(client.search_model_versions(f"name='{m.name}'"))
               for m in client.search_registered_models())


def _fails(executions: collections.Counter, match: str, **inputs) -> None:
    from workflows.training_pipeline import training_pipeline

    with pytest.raises(Exception, match=match):  # noqa: B017 - flytekit wraps user errors
        training_pipeline(**inputs)
    assert executions["train_model"] == 0, executions
    assert executions["register_model"] == 0
    assert _registered_versions() == 0


def test_missing_raw_folder(local_flyte: Path, executions: collections.Counter) -> None:
    missing = local_flyte / "no-such-folder"
    _fails(executions, r"raw_logs '.*no-such-folder' does not exist", source="pandaset",
           raw_logs=str(missing))
    assert executions["merge_dataset"] == 0


def test_empty_raw_folder(local_flyte: Path, executions: collections.Counter) -> None:
    empty = local_flyte / "empty"
    empty.mkdir()
    _fails(executions, r"raw_logs '.*empty' is an empty folder", source="pandaset",
           raw_logs=str(empty))


def test_folder_without_logs_of_source(local_flyte: Path, executions: collections.Counter) -> None:
    junk = local_flyte / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("not a driving log")
    _fails(executions, r"junk.*no pandaset logs", source="pandaset", raw_logs=str(junk))


def test_dataset_with_empty_val_split(local_flyte: Path, executions: collections.Counter) -> None:
    raw = local_flyte / "one-log"
    write_synthetic_logs(SyntheticConfig(num_logs=1, **TINY), raw, progress=False)
    _fails(executions, r"no samples in split\(s\) \['val'\]", source="synthetic", raw_logs=str(raw))
    assert executions["merge_dataset"] == 1


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ({"overrides": '{"max_steps": -1}'}, r"^error: optimizer.max_steps=-1 is out of range \(overrides\)"),
        ({"overrides": '{"max_stepz": 5}'}, r"^error: unknown field 'max_stepz' \(overrides\): use one of"),
        ({"preset": "nope"}, r"^error: unknown preset 'nope' \(preset\): use one of"),
        ({"source": "kitti"}, r"input source='kitti' is not a known raw-log format"),
    ],
)
def test_impossible_config(local_flyte: Path, executions: collections.Counter, inputs, match) -> None:
    _fails(executions, match, **inputs)
    assert executions["materialize_raw_logs"] == 0 or "source" in inputs
    assert executions["merge_dataset"] == 0
