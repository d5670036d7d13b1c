"""Training tasks: resolve the config, then elastic distributed training.

`train_model` runs `platform_lib.training.train.train` in `nproc_per_node` torch elastic
workers (`Elastic`: one pod for nnodes=1, a PyTorchJob beyond), placed by `tasks.placement`.
Rank 0 returns a handle on the run folder, never tensors; `max_restarts` restarts the worker
group in place from the last checkpoint, task `retries` apply on a cluster only. The task's
own process publishes the goodput Deck while the workers exit
(`platform_lib.registry.goodput.GoodputFinisher`). See docs/pipeline.md and docs/goodput.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flytekit import Cache, Deck, PodTemplate, Resources, task
from flytekit.configuration import SerializationSettings
from flytekit.core.python_function_task import PythonFunctionTask
from flytekit.deck import DeckField
from flytekit.exceptions.user import FlyteRecoverableException, FlyteUserRuntimeException
from flytekit.extend import TaskPlugins
from flytekit.types.directory import FlyteDirectory
from flytekitplugins.kfpytorch import Elastic
from flytekitplugins.kfpytorch.task import PytorchElasticFunctionTask
from kubernetes.client import V1PodSpec, V1Toleration
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from platform_lib.registry.goodput import GoodputFinisher, MlflowMetricsStream, hand_off_run
from platform_lib.shards.manifest import load_manifest
from platform_lib.telemetry.publish import GOODPUT_HTML
from platform_lib.training.checkpoint import make_run_dir
from platform_lib.training.config import TrainConfig, hash_config
from platform_lib.training.launch import DISABLE_SHARED_STORE
from platform_lib.training.overrides import resolve_train_config
from platform_lib.training.train import train
from tasks.errors import download_input, task_errors
from tasks.image import TASK_IMAGE
from tasks.placement import Placement, placement_from_env
from tasks.secrets import MLFLOW_SECRETS, mlflow_credentials
from tasks.triage import explain_training_failure

__all__ = [
    "build_train_task",
    "resolve_config",
    "resolve_run_dir",
    "train_model",
]

# The elastic agent runs in this task's process: give each restart a fresh rendezvous store
# (pytorch#135712; see `platform_lib.training.launch.DISABLE_SHARED_STORE`, docs/faults.md).
os.environ.setdefault(DISABLE_SHARED_STORE, "1")

#: Placement of `train_model` (default: 2 CPU workers, the 2-core dev machines). Read when the
#: module is imported (package/register time, and in the pod from the task's environment).
PLACEMENT = placement_from_env()
#: How often the elastic agent polls its workers, in s. The agent notices the workers'
#: end at its next poll, so this bounds the idle tail after the last step (0.1 s is
#: torchrun's own `--monitor-interval` default; the plugin's 5 s: docs/performance.md).
MONITOR_INTERVAL_S = float(os.environ.get("DRIVETRAIN_ELASTIC_MONITOR_INTERVAL_S", "0.1"))


@task(container_image=TASK_IMAGE, cache=Cache(version="2"), retries=1)
def resolve_config(preset: str, overrides: str, seed: int) -> TrainConfig:
    """Return the preset's TrainConfig with `overrides` (a JSON object) and `seed` applied.

    Fails at once, in one line naming the field, on an unknown field, a wrong type or an
    out-of-range value (`platform_lib.training.overrides`).
    """
    with task_errors("resolving the training config"):
        return resolve_train_config(preset, overrides, seed)


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
    with task_errors("training on the dataset", str(dataset.remote_source or dataset.path)):
        local = download_input(dataset, "merge_dataset")
        dataset_hash = load_manifest(local).dataset_hash
        run_dir = resolve_run_dir(dataset_hash, hash_config(config))
        with mlflow_credentials():  # rank 0 streams metrics to MLflow
            stream = None
            if int(os.environ.get("RANK", "0")) == 0 and config.metrics.mlflow_interval:
                stream = MlflowMetricsStream(
                    run_name=f"train-{config.preset}-{hash_config(config)[:8]}",
                    tags={"dataset_hash": dataset_hash, "preset": config.preset},
                )
            if train(config, local, str(run_dir), sink=stream) is not None:
                hand_off_run(run_dir, dataset_hash=dataset_hash, stream=stream)  # rank 0
    return FlyteDirectory(str(run_dir))


_TRAIN_FUNCTION = train_model


@dataclass
class PlacedElastic(Elastic):
    """`Elastic` plus the `Placement` it was derived from (checked again at registration)."""

    placement: Placement | None = None


class PlacedElasticTask(PytorchElasticFunctionTask):
    """Elastic task that checks its team's LocalQueue exists in the target namespace.

    It also publishes the goodput report of a finished launch (baseline comparison, MLflow,
    the "Goodput" Deck), and explains a failed one (triage verdict as error message and
    MLflow tags; retried when the restart policy says so: `tasks.triage`).
    """

    def get_config(self, settings: SerializationSettings) -> dict[str, Any] | None:
        self.task_config.placement.check_namespace(settings.project, settings.domain)
        return super().get_config(settings)

    def _execute(self, **kwargs: Any) -> Any:
        config, dataset = kwargs.get("config"), kwargs.get("dataset")
        with mlflow_credentials():  # the workers inherit it; the finisher thread needs it
            finisher = GoodputFinisher(_agent_run_dir(dataset, config)[0], config=config)
            try:
                run = super()._execute(**kwargs)
            except (FlyteRecoverableException, FlyteUserRuntimeException) as error:
                finisher.stop()
                failure = error.__context__  # the plugin raises these handling ChildFailedError
                if not isinstance(failure, ChildFailedError):
                    raise
                run_dir, tags = _agent_run_dir(dataset, config)
                folder = config.checkpoint.folder if config is not None else None
                raise explain_training_failure(
                    failure,
                    checkpoint_folder=folder or (str(run_dir / "checkpoints") if run_dir else None),
                    tags=tags,
                ) from failure
            except BaseException:
                finisher.stop()
                raise
            with task_errors("publishing the goodput report", run.path):
                finisher.result(run.path)  # finished while the workers exited
            Deck("Goodput", (Path(run.path) / GOODPUT_HTML).read_text(encoding="utf-8"))
        return run


def _agent_run_dir(
    dataset: FlyteDirectory | None, config: TrainConfig | None
) -> tuple[Path | None, dict[str, str]]:
    """Return (the run folder of this agent's workers, MLflow tags), as the agent sees them.

    Best effort: without a readable dataset manifest there is no run folder (None).
    """
    if config is None:
        return None, {}
    tags = {"preset": config.preset, "config_hash": hash_config(config)}
    try:
        tags["dataset_hash"] = load_manifest(
            str(dataset.remote_source or dataset.path)
        ).dataset_hash
    except Exception:  # noqa: BLE001 - no dataset, no run folder: triage still runs
        return None, tags
    return resolve_run_dir(tags["dataset_hash"], tags["config_hash"], agent_pid=os.getpid()), tags


TaskPlugins.register_pythontask_plugin(PlacedElastic, PlacedElasticTask)


def build_train_task(placement: Placement) -> PythonFunctionTask:
    """Return the elastic training task placed by `placement`.

    One worker process per accelerator; `placement.nnodes > 1` serialises to a PyTorchJob
    (task type "pytorch") with an elastic config (c10d rendezvous, min = max = nnodes). The
    Kueue queue label goes on the task (`labels=`), which Flyte copies onto the Pod or the
    PyTorchJob; node selector and tolerations go into the pod template.

    Raises:
        PlacementError: (at serialisation) when the team's LocalQueue is not in the Flyte
            project-domain's namespace.
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
        container_image=TASK_IMAGE,
        task_config=PlacedElastic(
            nnodes=placement.nnodes,
            nproc_per_node=placement.nproc_per_node,
            max_restarts=1,
            increase_shared_mem=False,
            placement=placement,
            monitor_interval=MONITOR_INTERVAL_S,
        ),
        enable_deck=True,
        # no "Dependencies" deck: flytekit runs `pip list` and `pip freeze` for it after the
        # task body, in the post-training tail; the task image pins the environment
        deck_fields=(DeckField.SOURCE_CODE, DeckField.TIMELINE, DeckField.INPUT, DeckField.OUTPUT),
        cache=Cache(version="1"),
        retries=2,
        requests=Resources(cpu=res["cpu"], mem=res["memory"], gpu=gpus),
        limits=Resources(mem=res["memory"], gpu=gpus),
        labels=placement.labels,
        environment=placement.environment,
        pod_template=PodTemplate(pod_spec=pod_spec),
        secret_requests=MLFLOW_SECRETS,  # a failed launch's triage verdict goes to MLflow (tasks.triage)
        shared_memory=True,  # /dev/shm for the loader workers' tensors
    )


train_model = build_train_task(PLACEMENT)  # noqa: F811 - the task wraps the function
