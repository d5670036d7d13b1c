"""The Flyte entities as a cluster would receive them: cache versions, retries, elastic spec.

Serialises with flytekit's own `get_serializable` (what `pyflyte register` does) and runs
`pyflyte --pkgs workflows package` for real.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path

import pytest
from flytekit.configuration import Image, ImageConfig, SerializationSettings
from flytekit.tools.translator import get_serializable

from platform_lib.training.launch import DISABLE_SHARED_STORE
from tasks.data import build_log_part, hash_raw_logs, list_raw_logs
from tasks.image import PINNED, TASK_IMAGE
from tasks.placement import QUEUE_LABEL, Placement, PlacementError, placement_from_env
from tasks.placement import main as check_placement
from tasks.train import build_train_task
from workflows.training_pipeline import training_pipeline

REPO = Path(__file__).resolve().parents[2]
SETTINGS = SerializationSettings(
    image_config=ImageConfig(
        default_image=Image(name="default", fqn="localhost/drivetrain", tag="dev")
    ),
    project="drivetrain",
    domain="development",
    version="test",
)
#: I/O tasks: they touch storage, so they retry transient errors on a cluster.
IO_TASKS = {
    "materialize_raw_logs",
    "hash_raw_logs",
    "list_raw_logs",
    "map_build_log_part",
    "merge_dataset",
    "choose_training_view",
    "build_training_view",
    "train_model",
    "evaluate_model",
    "register_model",
}
#: Cache versions bumped when a task's output type changed (older cached literals no longer load).
#: evaluate_model returns the evaluation folder (with per-frame counts) and register_model
#: takes it: both keys changed with the champion gate. train_model's run folder no longer holds
#: the finished goodput report (register_model finishes it).
CACHE_VERSIONS = {
    "resolve_config": "2",
    "train_model": "2",
    "evaluate_model": "2",
    "register_model": "2",
}


def _short(name: str) -> str:
    """Task name without module, map tasks without their hash suffix."""
    return re.sub(r"^(map_.+)_[0-9a-f]{32}-arraynode$", r"\1", name.split(".")[-1])


def _tasks() -> dict:
    return {_short(node.flyte_entity.name): node.flyte_entity for node in training_pipeline.nodes}


def _spec(entity):
    return get_serializable(OrderedDict(), SETTINGS, entity)


def test_every_task_is_cached_with_a_version_and_retries() -> None:
    tasks = _tasks()
    assert set(tasks) == IO_TASKS | {
        "check_fault_switch",
        "check_model_name",
        "check_promotion",
        "resolve_config",
        "dataset_config",
        "warn_skipped_faults",
    }
    for name, entity in tasks.items():
        meta = _spec(entity).template.metadata
        assert meta.retries.retries >= (2 if name in IO_TASKS else 1), name
        if name in ("check_fault_switch", "warn_skipped_faults"):  # read each run's environment
            assert not meta.discoverable
            continue
        if entity in (hash_raw_logs, list_raw_logs):  # the change probes: never cached
            assert not meta.discoverable
            continue
        assert meta.discoverable, f"{name} is not cached"
        assert meta.discovery_version == CACHE_VERSIONS.get(name, "1"), name


def test_dataset_build_cache_key_excludes_raw_location() -> None:
    meta = _spec(build_log_part).template.metadata
    assert list(meta.cache_ignore_input_vars) == ["log"]
    assert set(build_log_part.python_interface.inputs) == {"source", "log", "log_hash", "config"}
    mapped = _spec(_tasks()["map_build_log_part"]).template
    assert mapped.metadata.discoverable and list(mapped.metadata.cache_ignore_input_vars) == ["log"]


def test_evaluation_cache_key_is_model_version_dataset_hash_and_spec() -> None:
    from tasks.evaluation import evaluate_version, hash_dataset, resolve_model, resolve_slice_spec

    meta = _spec(evaluate_version).template.metadata
    assert meta.discoverable and list(meta.cache_ignore_input_vars) == ["dataset"]
    assert set(evaluate_version.python_interface.inputs) == {
        "model_version",
        "dataset",
        "dataset_hash",
        "spec",
        "split",
    }
    for probe in (resolve_model, hash_dataset, resolve_slice_spec):  # alias, location, file
        assert not _spec(probe).template.metadata.discoverable, probe.name


def test_training_view_is_keyed_by_the_dataset_and_the_view_and_feeds_training_only() -> None:
    tasks = _tasks()
    build = _spec(tasks["build_training_view"]).template.metadata
    assert build.discoverable and not list(build.cache_ignore_input_vars)
    # no TrainConfig and no path in the key: the dataset's hash and the view's parameters
    assert set(tasks["build_training_view"].python_interface.inputs) == {"dataset", "view"}
    by_id = {node.id: _short(node.flyte_entity.name) for node in training_pipeline.nodes}
    sources = {  # task -> {input: the task whose output it is}
        _short(node.flyte_entity.name): {
            b.var: by_id[b.binding.promise.node_id]
            for b in node.bindings
            if b.binding.promise and b.binding.promise.node_id in by_id
        }
        for node in training_pipeline.nodes
    }
    assert sources["build_training_view"] == {
        "dataset": "merge_dataset",
        "view": "choose_training_view",
    }
    assert sources["train_model"]["dataset"] == "build_training_view"
    # evaluation and registration read the full-size dataset, the source of truth
    assert (
        sources["evaluate_model"]["dataset"]
        == sources["register_model"]["dataset"]
        == ("merge_dataset")
    )


def test_single_node_training_is_a_plain_pod() -> None:
    from flytekitplugins.kfpytorch.task import PytorchElasticFunctionTask

    train_model = _tasks()["train_model"]
    assert isinstance(train_model, PytorchElasticFunctionTask)
    assert (train_model.task_config.nnodes, train_model.task_config.nproc_per_node) == (1, 2)
    template = _spec(train_model).template
    assert template.type == "python-task"
    assert template.task_type_version == 1


def test_multi_node_training_becomes_an_elastic_pytorch_job() -> None:
    placement = Placement(team="planning", accelerator="a100-80gb", accelerator_count=16)
    template = _spec(build_train_task(placement)).template
    assert template.type == "pytorch"
    assert template.custom["workerReplicas"] == {"replicas": 2}
    elastic = template.custom["elasticConfig"]
    assert elastic == {
        "rdzvBackend": "c10d",
        "minReplicas": 2,
        "maxReplicas": 2,
        "nprocPerNode": 8,
        "maxRestarts": 1,
    }
    assert template.metadata.discovery_version == "2" and template.metadata.retries.retries == 2
    # the queue label rides on the task metadata, which Flyte copies onto the PyTorchJob
    assert dict(template.metadata.k8s_object_metadata.labels) == {QUEUE_LABEL: "planning"}
    pod = template.k8s_pod.pod_spec
    (container,) = pod["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "80", "memory": "880Gi", "gpu": "8"},
        "limits": {"memory": "880Gi", "gpu": "8"},
    }
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    # the pod rebuilds the same task from its environment
    env = {e["name"]: e["value"] for e in container["env"]}
    assert placement_from_env(env) == placement
    assert env[DISABLE_SHARED_STORE] == "1"  # the elastic agent's fresh store per restart


def test_single_node_placement_is_one_pod_with_all_accelerators() -> None:
    template = _spec(
        build_train_task(Placement(accelerator="h100-80gb", accelerator_count=4))
    ).template
    assert template.type == "python-task" and not template.custom
    assert dict(template.metadata.k8s_object_metadata.labels) == {QUEUE_LABEL: "perception"}
    resources = template.k8s_pod.pod_spec["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "88", "memory": "880Gi", "gpu": "4"}


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"team": "robotics"}, "team", "team='robotics': unknown queue"),
        (
            {"team": "mapping", "accelerator": "h100-80gb", "accelerator_count": 8},
            "team",
            "team='mapping' has no quota for accelerator='h100-80gb'",
        ),
        ({"accelerator": "tpu-v5"}, "accelerator", "unknown accelerator type"),
        (
            {"accelerator": "a100-80gb", "accelerator_count": 12},
            "accelerator_count",
            "accelerator_count=12 does not divide into a100-80gb nodes of 8",
        ),
        ({"accelerator_count": 0}, "accelerator_count", "must be a positive integer"),
    ],
)
def test_impossible_placements_fail_naming_the_field(kwargs, field, message) -> None:
    with pytest.raises(PlacementError, match=message) as info:
        Placement(**kwargs)
    assert info.value.field == field


def test_registration_check_refuses_a_namespace_without_the_teams_queue(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRIVETRAIN_TEAM", "mapping")  # LocalQueue in development+staging only
    assert check_placement(["--project", "drivetrain", "--domain", "development"]) == 0
    assert check_placement(["--project", "drivetrain", "--domain", "production"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: team='mapping': unknown queue") and err.count("\n") == 1
    assert "does not exist in namespace 'drivetrain-production'" in err


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"DRIVETRAIN_TEAM": "mapping", "DRIVETRAIN_ACCELERATOR": "a100-80gb"},
            "DRIVETRAIN_TEAM: team='mapping' has no quota for accelerator='a100-80gb'",
        ),
        (
            {"DRIVETRAIN_ACCELERATOR": "a100-80gb", "DRIVETRAIN_ACCELERATOR_COUNT": "12"},
            "DRIVETRAIN_ACCELERATOR_COUNT: accelerator_count=12 does not divide into a100-80gb nodes of 8",
        ),
        (
            {"DRIVETRAIN_ACCELERATOR_COUNT": "eight"},
            "DRIVETRAIN_ACCELERATOR_COUNT='eight': not an integer",
        ),
    ],
)
def test_placement_settings_are_checked_when_the_task_is_built(env, message) -> None:
    """What `pyflyte package/register` runs when it imports tasks.train (see the test above)."""
    with pytest.raises(PlacementError) as info:
        placement_from_env(env)
    assert message in str(info.value)


def test_task_image_pins_every_runtime_dependency_within_its_range() -> None:
    import tomllib

    from packaging.requirements import Requirement

    declared = {
        Requirement(r).name: Requirement(r)
        for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    pins = {Requirement(p).name: Requirement(p) for p in PINNED}
    assert set(pins) == set(declared)
    for name, pin in pins.items():
        (spec,) = pin.specifier
        assert spec.operator == "==", pin
        assert declared[name].specifier.contains(spec.version), f"{pin} outside {declared[name]}"
    assert TASK_IMAGE.packages == list(PINNED) and TASK_IMAGE.python_version == "3.11"


def test_transient_storage_errors_become_retryable_user_errors_do_not(
    tmp_path, monkeypatch
) -> None:
    import errno

    monkeypatch.setenv("DRIVETRAIN_HOME", str(tmp_path))

    from flytekit.exceptions.user import FlyteRecoverableException

    from platform_lib.errors import UserError
    from tasks.errors import PipelineInputError, task_errors

    with pytest.raises(FlyteRecoverableException, match="while reading raw_logs s3://b/logs"):
        with task_errors("reading raw_logs", "s3://b/logs"):
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
    with pytest.raises(FileNotFoundError):  # not a user error we can name: the traceback stays
        with task_errors("reading raw_logs"):
            raise FileNotFoundError("raw_logs missing")
    with pytest.raises(
        PipelineInputError, match=r"^error: disk full while writing .*\(/out/x\): free space"
    ):
        with task_errors("building"):
            raise OSError(errno.ENOSPC, "No space left on device", "/out/x")
    with pytest.raises(
        PipelineInputError, match=r"^error: bad \(input\): fix \[traceback: .*errors.log\]$"
    ) as info:
        with task_errors("building"):
            raise UserError("bad", "input", "fix")
    assert info.value.exit_code == 2
    assert "raise UserError" in (tmp_path / "logs" / "errors.log").read_text()


def test_the_training_config_has_a_flyte_literal_type_without_warnings(caplog) -> None:
    """flytekit logs a warning for every config field it cannot type (a tuple of models did)."""
    import logging

    from flytekit.core.type_engine import TypeEngine

    from platform_lib.training.config import TrainConfig

    with caplog.at_level(logging.WARNING):
        TypeEngine.to_literal_type(TrainConfig)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
