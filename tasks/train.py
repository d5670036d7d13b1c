"""Training tasks: resolve the config, then elastic distributed training.

`train_model` runs `platform_lib.training.train_run.train_and_publish` in `nproc_per_node`
torch elastic workers (`Elastic`: one pod for nnodes=1, a PyTorchJob beyond), placed by
`tasks.placement`. Rank 0 returns a handle on the run folder, never tensors; its goodput report
is finished off the accelerators, by `register_model`. `max_restarts` restarts the worker group
in place from the last checkpoint, task `retries` apply on a cluster only; an exception leaving
a rank becomes its triage verdict (`tasks.triage.explain_failures`). See docs/pipeline.md and
docs/goodput.md.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from flytekit import Cache, PodTemplate, Resources, task
from flytekit.core.python_function_task import PythonFunctionTask
from flytekit.deck import DeckField
from flytekit.types.directory import FlyteDirectory
from flytekitplugins.kfpytorch import Elastic
from kubernetes.client import V1PodSpec, V1Toleration

from platform_lib.faults import check_faults, skipped_faults_warning
from platform_lib.shards.manifest import load_manifest
from platform_lib.training.checkpoint import make_run_dir
from platform_lib.training.config import TrainConfig, hash_config
from platform_lib.training.launch import DISABLE_SHARED_STORE
from platform_lib.training.overrides import resolve_train_config
from platform_lib.training.train_run import train_and_publish
from tasks.errors import download_input, task_errors
from tasks.image import TASK_IMAGE, task_image
from tasks.placement import Placement, placement_from_env
from tasks.secrets import MLFLOW_SECRETS, mlflow_credentials
from tasks.triage import explain_failures

__all__ = [
    "build_train_task",
    "check_fault_switch",
    "warn_skipped_faults",
    "resolve_config",
    "resolve_run_dir",
    "train_model",
]

#: Placement of `train_model` (default: 2 CPU workers, the 2-core dev machines). Read when the
#: module is imported (package/register time, and in the pod from the task's environment).
PLACEMENT = placement_from_env()
#: How often the elastic agent polls its workers, in s: it bounds the idle tail after the
#: last step (torchrun's own default, `--monitor-interval`; the plugin's default is 5 s).
MONITOR_INTERVAL_S = float(os.environ.get("DRIVETRAIN_ELASTIC_MONITOR_INTERVAL_S", "0.1"))
#: The elastic agent's environment in the pod: a fresh rendezvous store per restart
#: (pytorch#135712; `platform_lib.training.launch.DISABLE_SHARED_STORE`, docs/faults.md).
AGENT_ENVIRONMENT = {DISABLE_SHARED_STORE: "1"}


@task(container_image=TASK_IMAGE, cache=Cache(version="2"), retries=1)
def resolve_config(preset: str, overrides: str, seed: int) -> TrainConfig:
    """Return the preset's TrainConfig with `overrides` (a JSON object) and `seed` applied.

    Fails at once, in one line naming the field, on an unknown field, a wrong type or an
    out-of-range value (`platform_lib.training.overrides`).
    """
    with task_errors("resolving the training config"):
        return resolve_train_config(preset, overrides, seed)


@task(container_image=TASK_IMAGE, retries=1)
def check_fault_switch() -> float:
    """Refuse a bad DRIVETRAIN_FAULTS before anything is built; return when it ran (s since epoch).

    The training pipeline's first task: an invalid value (not a fault list, an unknown kind or
    field, a value out of range, a rank beyond the placement's world size) fails here in one
    line (`platform_lib.faults.check_faults`), not in every rank after an elastic restart. Not
    cached: it reads the environment of each run.
    """
    with task_errors("checking the fault switch"):
        check_faults(world_size=PLACEMENT.accelerator_count)
    return time.time()


@task(container_image=TASK_IMAGE, retries=1)
def warn_skipped_faults(run: FlyteDirectory, checked_at: float) -> None:
    """Warn in one line when DRIVETRAIN_FAULTS is set but `run` is a cached training output.

    `checked_at` is `check_fault_switch`'s output: a run folder trained before it (its
    `faults.json`) came from the cache, so no fault was injected (docs/faults.md).
    """
    with task_errors("checking whether faults were injected"):
        warning = skipped_faults_warning(str(run.remote_source or run.path), checked_at)
    if warning:
        print(warning, file=sys.stderr, flush=True)


def resolve_run_dir(dataset_hash: str, config_hash: str, agent_pid: int | None = None) -> Path:
    """Return the run folder shared by the ranks of one elastic launch.

    All ranks of a launch are children of the same elastic agent process, so the agent's pid
    (`os.getppid()` in a worker) plus the dataset and config hashes name a folder that every
    rank agrees on without communicating, and that an elastic restart (`max_restarts`) finds
    again to resume from its last checkpoint. It lives under `$TMPDIR/drivetrain-train-<uid>/`,
    private to the user (`make_run_dir`: mode 0700, refused when another user owns it or others
    can write it); the task uploads it as its output. The agent itself passes its own pid as
    `agent_pid`.
    """
    name = (
        f"{dataset_hash[:16]}-{config_hash[:16]}-{os.getppid() if agent_pid is None else agent_pid}"
    )
    return make_run_dir(name)


def train_model(dataset: FlyteDirectory, config: TrainConfig) -> FlyteDirectory:
    """Train on `dataset` in every elastic worker; return the run folder (rank 0's)."""
    with task_errors("laying out the training config on the placement"):
        config = PLACEMENT.apply_layout(config)  # the launch recipe's layout; fits the nodes
    with task_errors("training on the dataset", str(dataset.remote_source or dataset.path)):
        local = download_input(dataset, "build_training_view")
        dataset_hash = load_manifest(local).dataset_hash
        run_dir = resolve_run_dir(dataset_hash, hash_config(config))
    tags = {
        "preset": config.preset,
        "config_hash": hash_config(config),
        "dataset_hash": dataset_hash,
    }
    folder = config.checkpoint.folder or str(run_dir / "checkpoints")
    with explain_failures(run_dir, checkpoint_folder=folder, tags=tags):
        with task_errors("training on the dataset", local), mlflow_credentials():
            train_and_publish(config, local, run_dir, dataset_hash=dataset_hash)
    return FlyteDirectory(str(run_dir))


_TRAIN_FUNCTION = train_model


def build_train_task(placement: Placement) -> PythonFunctionTask:
    """Return the elastic training task placed by `placement`.

    One worker process per accelerator; `placement.nnodes > 1` serialises to a PyTorchJob
    (task type "pytorch") with an elastic config (c10d rendezvous, min = max = nnodes). The
    Kueue queue label goes on the task (`labels=`), which Flyte copies onto the Pod or the
    PyTorchJob; node selector and tolerations go into the pod template.

    The team's LocalQueue is checked against the target namespace at registration
    (`make register`: `python -m tasks.placement --project P --domain D`).
    """
    accel, res = placement.accelerator_type, placement.pod_resources
    gpus = res.get(accel.resource) if accel.resource else None
    pod_spec = V1PodSpec(
        containers=[],
        node_selector=dict(accel.node_labels),
        tolerations=[V1Toleration(**t) for t in accel.tolerations] or None,
    )
    return task(
        _TRAIN_FUNCTION,
        container_image=task_image(accel.resource),  # GPU nodes: with the `gpu` extra
        task_config=Elastic(
            nnodes=placement.nnodes,
            nproc_per_node=placement.nproc_per_node,
            max_restarts=1,
            increase_shared_mem=False,
            monitor_interval=MONITOR_INTERVAL_S,
        ),
        enable_deck=True,
        # no "Dependencies" deck: flytekit runs `pip list` and `pip freeze` for it after the
        # task body, in the post-training tail; the task image pins the environment
        deck_fields=(DeckField.SOURCE_CODE, DeckField.TIMELINE, DeckField.INPUT, DeckField.OUTPUT),
        # 2: the run folder's goodput report is finished downstream (`register_model`)
        cache=Cache(version="2"),
        retries=2,
        requests=Resources(cpu=res["cpu"], mem=res["memory"], gpu=gpus),
        limits=Resources(mem=res["memory"], gpu=gpus),
        labels=placement.labels,
        environment={**placement.environment, **AGENT_ENVIRONMENT},
        pod_template=PodTemplate(pod_spec=pod_spec),
        secret_requests=MLFLOW_SECRETS,  # metrics and a failed rank's verdict go to MLflow
        shared_memory=True,  # /dev/shm for the loader workers' tensors
    )


train_model = build_train_task(PLACEMENT)  # noqa: F811 - the task wraps the function
