"""The evaluation workflow: a rerun is a cache hit, a changed spec is not; bad input is one line.

Runs `workflows.evaluation.evaluate_model` in this process against an isolated flytekit
local cache and MLflow store, on a real registered version (random weights of the small
preset) and the fixed synthetic golden dataset, counting real executions of each task.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from safetensors.torch import save_file

from platform_lib.mlflow_store import configure_mlflow, start_training_run
from platform_lib.models.catalog import build_model
from platform_lib.registry.lineage import Lineage
from platform_lib.registry.register import register_model_version
from platform_lib.shards.manifest import load_manifest
from platform_lib.training.presets import get_preset
from platform_lib.zoo.dataset import build_golden_dataset

NAME = "eval-wf"


@pytest.fixture
def counted() -> collections.Counter:
    """Real executions (cache misses) of the evaluation workflow's tasks, by short name."""
    from workflows.evaluation import evaluate_model

    counts: collections.Counter = collections.Counter()
    with pytest.MonkeyPatch.context() as mp:
        for node in evaluate_model.nodes:
            entity = node.flyte_entity
            original, short = entity.sandbox_execute, entity.name.split(".")[-1]

            def run(ctx, inputs, _original=original, _name=short):
                counts[_name] += 1
                return _original(ctx, inputs)

            mp.setattr(entity, "sandbox_execute", run)
        yield counts


@pytest.fixture
def registered(local_flyte: Path, isolated_env: dict[str, str], mlflow_db) -> Path:
    """Register version 1 of NAME (champion) and build the golden dataset; return the dataset."""
    mlflow_db(Path(isolated_env["DRIVETRAIN_HOME"]) / "mlflow.db")
    dataset = build_golden_dataset(local_flyte / "golden")
    weights = local_flyte / "model.safetensors"
    state = build_model("bev_fusion_small").state_dict()
    save_file({k: v.contiguous() for k, v in state.items()}, str(weights))
    client = configure_mlflow()
    lineage = Lineage(
        dataset_hash=load_manifest(dataset).dataset_hash,
        val_split_hash="v",
        raw_logs_hash="r" * 64,
        source_log_hashes="{}",
        code_version="test",
        config_hash="c" * 64,
        seed=0,
        flyte_execution_id="local",
    )
    register_model_version(
        name=NAME,
        run_id=start_training_run(client, run_name=NAME, tags={}),
        weights_path=weights,
        train_config=get_preset("small"),
        lineage=lineage,
        mean_iou=0.0,
        client=client,
    )
    return dataset


def _evaluate(**inputs) -> str:
    from workflows.evaluation import evaluate_model

    return evaluate_model(**inputs)


def test_rerun_hits_the_cache_and_a_changed_spec_does_not(
    registered: Path, counted: collections.Counter, tmp_path: Path
) -> None:
    dataset_hash = load_manifest(registered).dataset_hash
    first = _evaluate(model_uri=f"models:/{NAME}@champion", dataset=str(registered))
    assert first.startswith(f"models:/{NAME}/1 on dataset {dataset_hash[:12]} (val, 4 frames)")
    assert counted["evaluate_version"] == 1, counted

    client = configure_mlflow()
    tags = client.get_model_version(NAME, "1").tags
    prefix = f"eval.{dataset_hash[:12]}."
    assert tags[prefix + "dataset_hash"] == dataset_hash and tags[prefix + "num_frames"] == "4"
    assert re.fullmatch(r"[0-9.]+ \(insufficient: 2 logs\)", tags[prefix + "all.iou/mean/all"])
    assert tags[prefix + "moving.iou/mean/all"]  # a built-in slice
    run_id = client.get_model_version(NAME, "1").run_id
    (folder,) = client.list_artifacts(run_id, "evaluations")
    (artifact,) = client.list_artifacts(run_id, folder.path)
    saved = json.loads(
        Path(client.download_artifacts(run_id, artifact.path, str(tmp_path))).read_text()
    )
    assert saved["model"] == f"models:/{NAME}/1" and len(saved["frame_counts"]["keys"]) == 4

    counted.clear()  # the same inputs, and the same dataset at another path: cache hits
    assert _evaluate(model_uri=f"models:/{NAME}/1", dataset=str(registered)) == first
    moved = shutil.copytree(registered, tmp_path / "moved")
    assert _evaluate(model_uri=f"models:/{NAME}@champion", dataset=str(moved)) == first
    assert counted["evaluate_version"] == 0 and counted["resolve_model"] == 2, counted

    spec = tmp_path / "spec.yaml"
    spec.write_text("slices:\n  - name: with_vehicles\n    where: {has_vehicle: true}\n")
    counted.clear()
    assert _evaluate(model_uri=f"models:/{NAME}/1", dataset=str(registered), spec=str(spec))
    assert counted["evaluate_version"] == 1, counted
    tags = client.get_model_version(NAME, "1").tags
    assert prefix + "with_vehicles.iou/mean/all" in tags
    spec.write_text("slices:\n  - name: with_vehicles\n    where: {num_vehicle: {min: 1}}\n")
    counted.clear()  # the same file with another content: a new key
    _evaluate(model_uri=f"models:/{NAME}/1", dataset=str(registered), spec=str(spec))
    assert counted["evaluate_version"] == 1, counted


DATASET_LINE = (
    r"is not a complete Drivetrain dataset: it has no manifest.json .* "
    r"rebuild it with `drivetrain data build \.\.\. --output"
)


@pytest.mark.parametrize(
    ("inputs", "spec_text", "message", "evaluated"),
    [
        (
            {"model_uri": f"models:/{NAME}/9"},
            None,
            rf"^error: model URI does not resolve: registered model '{NAME}' has no version 9 \(.*\) "
            r"\(model_uri\): use "
            r"models:/<name>/<version>",
            0,
        ),
        (
            {},
            "slices:\n  - name: fast\n    where: {speed: {min: 3}}\n",
            r"^error: unknown attribute 'slices.0.where.speed' \(.*spec.yaml\): use one of "
            r"\['log_id', 'ego_speed_mps'",
            0,
        ),
        (
            {},
            "slices:\n  - name: night\n    where: {time_of_day: [night]}\n",
            r"^error: slice 'night' needs attribute 'time_of_day', which this dataset lacks "
            r"\(slice spec\)",
            1,
        ),
        (
            {},
            "slices:\n  - name: nan\n    where: {ego_speed_mps: {min: .nan}}\n",
            r"^error: slices.0.where.ego_speed_mps.min: Input should be a finite number "
            r"\(.*spec.yaml\)",
            0,
        ),
        (
            {"spec": "{tmp}/nope.yaml"},
            None,
            r"^error: slice spec file does not exist \(.*nope.yaml\): pass a .yaml or .json",
            0,
        ),
        (
            {"spec": "{tmp}/empty"},
            None,
            r"^error: not a regular file: it is a directory \(.*empty\)",
            0,
        ),
        (
            {"split": "test"},
            None,
            r"^error: the dataset has no samples in split 'test' \(splits present: "
            r"\{'train': 8, 'val': 4\}\) \(split\): pick one of train, val",
            1,
        ),
        (
            {"dataset": "{tmp}/nope"},
            None,
            r"^error: dataset folder does not exist \(.*nope\): pass the --output folder of "
            r"`drivetrain data build`",
            0,
        ),
        ({"dataset": "{tmp}/empty"}, None, rf"^error: .*empty {DATASET_LINE}", 0),
        (
            {"dataset": "{tmp}/fifo"},
            None,
            r"^error: not a dataset folder \(a dataset is the folder `drivetrain data build` "
            r"wrote\) \(.*/fifo\): pass the --output folder",
            0,
        ),
        ({"dataset": "/etc"}, None, rf"^error: /etc {DATASET_LINE}", 0),
        (
            {"dataset": "https://user:hunter2@127.0.0.1:9/ds"},
            None,
            r"^error: reading the manifest of https://user:\*+@127.0.0.1:9/ds failed after 1 "
            r"attempts \(ClientConnectorError: .*\): check the endpoint and the network",
            0,
        ),
        (
            {"dataset": "s3://bucket/ds"},
            None,
            r"^error: reading the manifest of s3://bucket/ds failed after 1 attempts "
            r"\(EndpointConnectionError: .*\): check the endpoint and the network",
            0,
        ),
    ],
    ids=[
        "unresolved-model",
        "unknown-attribute",
        "dataset-lacks-attribute",
        "nan-bound",
        "spec-missing",
        "spec-folder",
        "split-absent",
        "dataset-missing",
        "dataset-empty-folder",
        "dataset-fifo",
        "dataset-etc",
        "dataset-https-unreachable",
        "dataset-s3-unreachable",
    ],
)
def test_bad_input_is_one_line(
    registered: Path,
    counted: collections.Counter,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    inputs: dict[str, str],
    spec_text: str | None,
    message: str,
    evaluated: int,
) -> None:
    monkeypatch.setenv("DRIVETRAIN_STORAGE_RETRIES", "0")  # an unreachable store: fail at once
    for name, value in {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",  # nothing listens on port 9 (discard)
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_MAX_ATTEMPTS": "1",
    }.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "empty").mkdir()
    os.mkfifo(tmp_path / "fifo")
    spec = ""
    if spec_text is not None:
        (tmp_path / "spec.yaml").write_text(spec_text)
        spec = str(tmp_path / "spec.yaml")
    given = {"model_uri": f"models:/{NAME}@champion", "dataset": str(registered), "spec": spec}
    given |= {k: v.format(tmp=tmp_path) for k, v in inputs.items()}
    with pytest.raises(Exception, match=message) as caught:  # noqa: B017 - flytekit wraps errors
        _evaluate(**given)
    assert "\n" not in str(caught.value).strip()
    assert "hunter2" not in str(caught.value)
    assert counted["evaluate_version"] == evaluated, counted
