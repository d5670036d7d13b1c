"""Training tasks: resolve the config, then elastic distributed training.

`train_model` runs `platform_lib.training.train.train` in `nproc_per_node` worker processes
started by torch elastic (`Elastic`): with nnodes=1 it is one pod (locally: one machine), with
nnodes>1 Flyte submits a PyTorchJob to the training operator (set `DRIVETRAIN_NNODES` when
packaging/registering). Workers are spawned processes that import `tasks.train` from the
installed package. Only rank 0's return value comes back; it is a handle on the run folder
(distributed checkpoint, model.safetensors, metrics.jsonl), never tensors. `max_restarts`
restarts the worker group in place (locally too) and the run resumes from its last
distributed checkpoint; task `retries` apply on a cluster only.
"""

from __future__ import annotations

import os

from flytekit import Cache, Resources, task
from flytekit.core.python_function_task import PythonFunctionTask
from flytekit.types.directory import FlyteDirectory
from flytekitplugins.kfpytorch import Elastic

from platform_lib import pipeline
from platform_lib.shards import load_manifest
from platform_lib.training.config import TrainConfig, hash_config
from platform_lib.training.overrides import resolve_train_config
from platform_lib.training.train import train
from tasks.errors import recoverable_storage_errors, user_errors

__all__ = ["build_train_task", "resolve_config", "train_model"]

#: Nodes and worker processes per node of `train_model` (2 ranks on the 2-core dev machines;
#: GPUs per node on a cluster). Read when the module is imported (package/register time).
NNODES = int(os.environ.get("DRIVETRAIN_NNODES", "1"))
NPROC_PER_NODE = int(os.environ.get("DRIVETRAIN_NPROC_PER_NODE", "2"))


@task(cache=Cache(version="2"), retries=1)
def resolve_config(preset: str, overrides: str, seed: int) -> TrainConfig:
    """Return the preset's TrainConfig with `overrides` (a JSON object) and `seed` applied.

    Fails at once, in one line naming the field, on an unknown field, a wrong type or an
    out-of-range value (`platform_lib.training.overrides`).
    """
    with user_errors():
        return resolve_train_config(preset, overrides, seed)


def train_model(dataset: FlyteDirectory, config: TrainConfig) -> FlyteDirectory:
    """Train on `dataset` in every elastic worker; return the run folder (rank 0's)."""
    with recoverable_storage_errors(f"reading dataset {dataset.remote_source or dataset.path}"):
        local = dataset.download()
        dataset_hash = load_manifest(local)["dataset_hash"]
    run_dir = pipeline.resolve_train_dir(dataset_hash, hash_config(config))
    train(config, str(local), str(run_dir))
    return FlyteDirectory(str(run_dir))


_TRAIN_FUNCTION = train_model


def build_train_task(nnodes: int = 1, nproc_per_node: int = 2) -> PythonFunctionTask:
    """Return the elastic training task for `nnodes` x `nproc_per_node` workers."""
    return task(
        _TRAIN_FUNCTION,
        task_config=Elastic(
            nnodes=nnodes, nproc_per_node=nproc_per_node, max_restarts=1, increase_shared_mem=False
        ),
        cache=Cache(version="1"), retries=2, requests=Resources(cpu="2", mem="8Gi"),
        shared_memory=True,  # /dev/shm for the loader workers' tensors
    )


train_model = build_train_task(NNODES, NPROC_PER_NODE)  # noqa: F811 - the task wraps the function
