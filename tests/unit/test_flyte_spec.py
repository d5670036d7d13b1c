"""The Flyte entities as a cluster would receive them: cache versions, retries, elastic spec.

Serialises with flytekit's own `get_serializable` (what `pyflyte register` does) and runs
`pyflyte --pkgs workflows package` for real.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from collections import OrderedDict
from pathlib import Path

import pytest
from flyteidl.admin.task_pb2 import TaskSpec
from flytekit.configuration import Image, ImageConfig, SerializationSettings
from flytekit.tools.translator import get_serializable

from tasks.data import build_dataset, hash_raw_logs
from tasks.train import build_train_task
from workflows.training_pipeline import training_pipeline

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/drivetrain:dev"
SETTINGS = SerializationSettings(
    image_config=ImageConfig(default_image=Image(name="default", fqn="localhost/drivetrain", tag="dev")),
    project="drivetrain", domain="development", version="test",
)
#: I/O tasks: they touch storage, so they retry transient errors on a cluster.
IO_TASKS = {"materialize_raw_logs", "hash_raw_logs", "build_dataset", "train_model",
            "evaluate_model", "register_model"}
#: Cache versions bumped when a task's output type changed (older cached literals no longer load).
CACHE_VERSIONS = {"resolve_config": "2"}


def _tasks() -> dict:
    return {node.flyte_entity.name.split(".")[-1]: node.flyte_entity for node in training_pipeline.nodes}


def _spec(entity):
    return get_serializable(OrderedDict(), SETTINGS, entity)


def test_every_task_is_cached_with_a_version_and_retries() -> None:
    tasks = _tasks()
    assert set(tasks) == IO_TASKS | {"resolve_config", "dataset_config"}
    for name, entity in tasks.items():
        meta = _spec(entity).template.metadata
        assert meta.retries.retries >= (2 if name in IO_TASKS else 1), name
        if entity is hash_raw_logs:  # the change probe: never cached, by design
            assert not meta.discoverable
            continue
        assert meta.discoverable, f"{name} is not cached"
        assert meta.discovery_version == CACHE_VERSIONS.get(name, "1"), name


def test_dataset_build_cache_key_excludes_raw_location() -> None:
    meta = _spec(build_dataset).template.metadata
    assert list(meta.cache_ignore_input_vars) == ["raw_logs"]
    assert set(build_dataset.python_interface.inputs) == {"source", "raw_logs", "raw_logs_hash", "config"}


def test_single_node_training_is_a_plain_pod() -> None:
    from flytekitplugins.kfpytorch.task import PytorchElasticFunctionTask

    train_model = _tasks()["train_model"]
    assert isinstance(train_model, PytorchElasticFunctionTask)
    assert (train_model.task_config.nnodes, train_model.task_config.nproc_per_node) == (1, 2)
    template = _spec(train_model).template
    assert template.type == "python-task"
    assert template.task_type_version == 1


def test_multi_node_training_becomes_an_elastic_pytorch_job() -> None:
    template = _spec(build_train_task(nnodes=2, nproc_per_node=4)).template
    assert template.type == "pytorch"
    assert template.custom["workerReplicas"] == {"replicas": 2}
    elastic = template.custom["elasticConfig"]
    assert elastic == {"rdzvBackend": "c10d", "minReplicas": 2, "maxReplicas": 2,
                       "nprocPerNode": 4, "maxRestarts": 1}
    assert template.metadata.discovery_version == "1" and template.metadata.retries.retries == 2


def test_pyflyte_package_serialises_every_entity(tmp_path: Path) -> None:
    out = tmp_path / "flyte-package.tgz"
    env = {**os.environ, "HOME": str(tmp_path), "DRIVETRAIN_NNODES": "2"}
    pyflyte = str(Path(sys.executable).parent / "pyflyte")
    result = subprocess.run(
        [pyflyte, "--pkgs", "workflows", "package", "--image", IMAGE, "--output", str(out), "--force"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with tarfile.open(out) as tar:
        names = sorted(tar.getnames())
        task_files = [n for n in names if "_tasks." in n]
        assert len(task_files) == 8
        assert sum("workflows.training_pipeline.training_pipeline" in n for n in names) == 2
        specs = {}
        for name in task_files:
            spec = TaskSpec()
            spec.ParseFromString(tar.extractfile(name).read())
            specs[spec.template.id.name.split(".")[-1]] = spec.template
    assert specs["train_model"].type == "pytorch"  # DRIVETRAIN_NNODES=2 at package time
    assert specs["train_model"].custom["elasticConfig"]["minReplicas"] == 2
    assert all(t.container.image == IMAGE for t in specs.values())
    assert {n for n, t in specs.items() if t.metadata.discoverable} == set(specs) - {"hash_raw_logs"}


def test_transient_storage_errors_become_retryable_user_errors_do_not() -> None:
    import errno

    from flytekit.exceptions.user import FlyteRecoverableException

    from platform_lib.pipeline import is_transient_storage_error
    from tasks.errors import recoverable_storage_errors

    assert is_transient_storage_error(ConnectionResetError(errno.ECONNRESET, "reset"))
    assert is_transient_storage_error(TimeoutError("read timed out"))
    assert is_transient_storage_error(OSError(errno.ETIMEDOUT, "timed out"))
    assert not is_transient_storage_error(FileNotFoundError(errno.ENOENT, "missing"))
    assert not is_transient_storage_error(OSError(errno.ENOSPC, "disk full"))
    assert not is_transient_storage_error(ValueError("bad frame"))
    with pytest.raises(FlyteRecoverableException, match="while reading raw_logs"):
        with recoverable_storage_errors("reading raw_logs"):
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
    with pytest.raises(FileNotFoundError):  # a user error stays one: no retry
        with recoverable_storage_errors("reading raw_logs"):
            raise FileNotFoundError("raw_logs missing")
