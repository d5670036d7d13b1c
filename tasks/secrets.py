"""MLflow credentials for tasks that talk to an `mlflow server --app-name basic-auth`.

They come from the environment (MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD, or
MLFLOW_TRACKING_TOKEN) or, on a cluster, from the Flyte secrets `mlflow/username` and
`mlflow/password` (a Kubernetes secret Flyte mounts into the pod, elastic workers included;
locally flytekit reads `_FSEC_MLFLOW_USERNAME` / `_FSEC_MLFLOW_PASSWORD`). They exist only in
the process environment while the task talks to MLflow: never in task inputs, outputs, tags,
logs or the serialised spec (which names the secret, not its value): the password read from a
secret is registered with `platform_lib.redact`, which masks it in every later output.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from flytekit import Secret
from flytekit.core.context_manager import SecretsManager

from platform_lib.redact import register_secret

__all__ = ["MLFLOW_SECRETS", "mlflow_credentials"]

#: Flyte secrets holding the MLflow login (group "mlflow"); requested by the task.
MLFLOW_SECRETS = [Secret(group="mlflow", key="username"), Secret(group="mlflow", key="password")]
_ENV_OF_KEY = {"username": "MLFLOW_TRACKING_USERNAME", "password": "MLFLOW_TRACKING_PASSWORD"}


@contextlib.contextmanager
def mlflow_credentials() -> Iterator[None]:
    """Expose the Flyte secrets `mlflow/*` to MLflow's client for the duration of the block.

    Environment variables already set win (a laptop, CI); secrets that are not mounted are
    skipped (an MLflow store without auth needs none). The variables are removed afterwards.
    """
    added = []
    if "MLFLOW_TRACKING_TOKEN" not in os.environ:
        secrets = SecretsManager()
        for secret in MLFLOW_SECRETS:
            variable = _ENV_OF_KEY[secret.key]
            if variable in os.environ:
                continue
            try:
                value = secrets.get(secret.group, secret.key)
            except ValueError:  # not mounted: no auth
                continue
            if secret.key != "username":
                register_secret(value)  # masked in every later error, log line and tag
            os.environ[variable] = value
            added.append(variable)
    try:
        yield
    finally:
        for variable in added:
            os.environ.pop(variable, None)
