"""Bad input fails fast, names the input, and registers nothing.

Each case runs `training_pipeline` in this process against an isolated cache and MLflow
store. "Fast" is checked by what ran: training never starts (no `train_model` execution).
"""

from __future__ import annotations

import collections
import shutil
from pathlib import Path

import pytest

from platform_lib.sources.synthetic import SyntheticConfig, write_synthetic_logs

TINY = dict(frames_per_log=2, image_width=64, image_height=48, lidar_beams=8, lidar_azimuth_bins=64)


def _registered_versions() -> int:
    from platform_lib.mlflow_store import configure_mlflow, resolve_drivetrain_home

    if not (resolve_drivetrain_home() / "mlflow.db").exists():
        return 0  # the registration step never even opened the store
    client = configure_mlflow()
    return sum(
        len(client.search_model_versions(f"name='{m.name}'"))
        for m in client.search_registered_models()
    )


def _fails(executions: collections.Counter, match: str, **inputs) -> None:
    from workflows.training_pipeline import training_pipeline

    with pytest.raises(Exception, match=match):  # noqa: B017 - flytekit wraps user errors
        training_pipeline(**inputs)
    assert executions["train_model"] == 0, executions
    assert executions["register_model"] == 0
    assert _registered_versions() == 0


def test_missing_raw_folder(local_flyte: Path, executions: collections.Counter) -> None:
    missing = local_flyte / "no-such-folder"
    _fails(
        executions,
        r"^error: raw-log folder does not exist or is not a folder \(.*no-such-folder\): "
        r"pass raw_logs a folder",
        source="pandaset",
        raw_logs=str(missing),
    )
    assert executions["merge_dataset"] == 0


def test_empty_raw_folder(local_flyte: Path, executions: collections.Counter) -> None:
    empty = local_flyte / "empty"
    empty.mkdir()
    _fails(
        executions,
        r"^error: raw-log folder is empty \(.*empty\)",
        source="pandaset",
        raw_logs=str(empty),
    )


def test_folder_without_logs_of_source(local_flyte: Path, executions: collections.Counter) -> None:
    junk = local_flyte / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("not a driving log")
    _fails(
        executions,
        r"^error: no pandaset logs found .*\(.*junk\): pass the PandaSet root or one sequence folder",
        source="pandaset",
        raw_logs=str(junk),
    )


def test_dataset_with_empty_val_split(local_flyte: Path, executions: collections.Counter) -> None:
    raw = local_flyte / "one-log"
    write_synthetic_logs(SyntheticConfig(num_logs=1, **TINY), raw, progress=False)
    _fails(
        executions,
        r"^error: dataset has no samples in split 'val' \(split by_log, counts \{'train': 2, 'val': 0\}\) "
        r"\(raw_logs\): pass --split by_frame_range",
        source="synthetic",
        raw_logs=str(raw),
    )
    assert executions["merge_dataset"] == 1


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        (
            {"overrides": '{"max_steps": -1}'},
            r"^error: optimizer.max_steps=-1 is out of range \(overrides\)",
        ),
        (
            {"overrides": '{"max_stepz": 5}'},
            r"^error: unknown field 'max_stepz' \(overrides\): use one of",
        ),
        ({"preset": "nope"}, r"^error: unknown preset 'nope' \(preset\): use one of"),
        (
            {"source": "kitti"},
            r"^error: unknown raw-log format 'kitti' \(source\): use one of pandaset, synthetic",
        ),
    ],
)
def test_impossible_config(
    local_flyte: Path, executions: collections.Counter, inputs, match
) -> None:
    _fails(executions, match, **inputs)
    assert executions["materialize_raw_logs"] == 0 or "source" in inputs
    assert executions["merge_dataset"] == 0


def test_deleted_cached_output_names_the_cache_and_the_command(
    local_flyte: Path, executions: collections.Counter
) -> None:
    """Run 1 generates synthetic logs (cached) and fails later; wipe the generated logs (what a
    TMPDIR clean-up does); run 2 gets the cached location and must say so, not blame raw_logs."""
    synthetic = SyntheticConfig(num_logs=1, **TINY)
    _fails(executions, r"no samples in split 'val'", source="synthetic", synthetic=synthetic)
    assert executions["materialize_raw_logs"] == 1
    generated = [
        p
        for p in (local_flyte / "flyte-raw").rglob("*")
        if p.is_dir() and p.parent.name == "flyte-raw"
    ]
    assert generated
    for folder in generated:
        shutil.rmtree(folder)
    executions.clear()
    _fails(
        executions,
        r"^error: the cached output of task materialize_raw_logs no longer exists .*"
        r"pyflyte local-cache clear` \(or `make clean-cache`\) and run again",
        source="synthetic",
        synthetic=synthetic,
    )
    assert executions["materialize_raw_logs"] == 0 and executions["merge_dataset"] == 0


def test_bad_jpeg_names_quarantine_and_the_quarantine_input_works(
    local_flyte: Path, executions: collections.Counter, pandaset_copy: Path
) -> None:
    jpeg = sorted((pandaset_copy / "camera" / "front_camera").glob("*.jpg"))[3]
    jpeg.write_bytes(b"not a jpeg")
    _fails(
        executions,
        r"^error: 1 bad frame\(s\) \(.*first: .*\) \(.*002\): fix or remove those files, "
        r"or rebuild with --quarantine",
        source="pandaset",
        raw_logs=str(pandaset_copy),
    )
    from platform_lib.shards.manifest import load_manifest
    from tasks.data import build_log_part, dataset_config, list_raw_logs, merge_dataset

    config = dataset_config(source="pandaset", split="", quarantine=True)
    present = list_raw_logs(source="pandaset", raw_logs=str(pandaset_copy))
    parts = [
        build_log_part(source="pandaset", log=log, log_hash=log_hash, config=config)
        for log, log_hash in zip(present.logs, present.log_hashes, strict=True)
    ]
    dataset = merge_dataset(source="pandaset", parts=parts, config=config)
    manifest = load_manifest(dataset.path)
    assert [q["key"] for q in manifest.quarantine] == ["002_000003"]
    assert manifest.splits.counts == {"train": 7, "val": 2}


def test_unknown_split_names_the_methods(
    local_flyte: Path, executions: collections.Counter
) -> None:
    _fails(
        executions,
        r"^error: unknown split method 'by_day' \(split\): use one of by_log, by_frame_range",
        source="synthetic",
        split="by_day",
    )


def test_model_name_mlflow_refuses_fails_before_any_work(
    local_flyte: Path, executions: collections.Counter
) -> None:
    _fails(
        executions,
        r"^error: model name 'a/../b' contains '/' \(model_name\): use a name without '/', ':' "
        r"or '@'",
        source="synthetic",
        model_name="a/../b",
    )
    assert executions["resolve_config"] == executions["materialize_raw_logs"] == 0, executions


@pytest.mark.parametrize(
    ("promotion", "match"),
    [
        ('{"margin": 2}', r"margin.*less than or equal to 1.*\(promotion\)"),
        ('{"gated_slices": ["all"], "slice_margins": {"moving": 0.1}}', r"not gated"),
        ('{"promotoin": {}}', r"promotoin"),
        ("[1, 2]", r"not a JSON object.*\(promotion\)"),
    ],
    ids=["margin-above-1", "margin-of-ungated-slice", "unknown-field", "not-an-object"],
)
def test_a_bad_promotion_rule_fails_before_any_work(
    local_flyte: Path, executions: collections.Counter, promotion: str, match: str
) -> None:
    _fails(executions, rf"^error: .*{match}", source="synthetic", promotion=promotion)
    assert executions["resolve_config"] == executions["materialize_raw_logs"] == 0, executions
