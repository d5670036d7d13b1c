"""Registration task: MLflow run (params, step metrics, eval table) + model version + aliases.

MLflow credentials (an `mlflow server --app-name basic-auth` tracking server) come from the
environment (MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN)
or, on a cluster, from the Flyte secrets `mlflow/username` and `mlflow/password` (a Kubernetes
secret mounted by Flyte; locally flytekit reads them from `_FSEC_MLFLOW_USERNAME` /
`_FSEC_MLFLOW_PASSWORD`). They exist only in this task's process environment while it talks to
MLflow: never in task inputs, outputs, tags, logs or the serialised spec (which names the
secret, not its value).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from flytekit import Cache, Secret, current_context, task
from flytekit.types.directory import FlyteDirectory
from flytekit.types.file import FlyteFile

from platform_lib.registry.lineage import resolve_code_version
from platform_lib.registry.record import record_training_run
from platform_lib.training.config import TrainConfig
from tasks.errors import download_input, task_errors
from tasks.image import TASK_IMAGE

__all__ = ["MLFLOW_SECRETS", "mlflow_credentials", "register_model"]

#: Flyte secrets holding the MLflow login (group "mlflow"); requested by the task.
MLFLOW_SECRETS = [Secret(group="mlflow", key="username"), Secret(group="mlflow", key="password")]
_ENV_OF_KEY = {"username": "MLFLOW_TRACKING_USERNAME", "password": "MLFLOW_TRACKING_PASSWORD"}
#: The folder these tasks were imported from: its git commit is the run's code version when it
#: is a work tree (an editable install); in an image, `$DRIVETRAIN_CODE_VERSION` or the version.
CHECKOUT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def mlflow_credentials() -> Iterator[None]:
    """Expose the Flyte secrets `mlflow/*` to MLflow's client for the duration of the block.

    Environment variables already set win (a laptop, CI); secrets that are not mounted are
    skipped (an MLflow store without auth needs none). The variables are removed afterwards.
    """
    added = []
    if "MLFLOW_TRACKING_TOKEN" not in os.environ:
        secrets = current_context().secrets
        for secret in MLFLOW_SECRETS:
            variable = _ENV_OF_KEY[secret.key]
            if variable in os.environ:
                continue
            try:
                os.environ[variable] = secrets.get(secret.group, secret.key)
            except ValueError:  # not mounted: no auth
                continue
            added.append(variable)
    try:
        yield
    finally:
        for variable in added:
            os.environ.pop(variable, None)


@task(container_image=TASK_IMAGE, cache=Cache(version="1"), retries=3, secret_requests=MLFLOW_SECRETS)
def register_model(
    model_name: str,
    source: str,
    raw_logs_hash: str,
    dataset: FlyteDirectory,
    run: FlyteDirectory,
    eval_table: FlyteFile,
    config: TrainConfig,
) -> str:
    """Register the run's model with lineage tags; return `models:/<name>/<version>`.

    `model_name` "" registers as "drivetrain-bev-<source>".
    """
    with task_errors("logging to MLflow"), mlflow_credentials():
        registration = record_training_run(
            model_name=model_name or f"drivetrain-bev-{source}",
            run_dir=download_input(run, "train_model"),
            dataset_dir=download_input(dataset, "merge_dataset"),
            eval_json=download_input(eval_table, "evaluate_model"), config=config,
            raw_logs_hash=raw_logs_hash, execution_id=current_context().execution_id.name or "local",
            code_version=resolve_code_version(CHECKOUT),
        )
    return registration.model_uri
