"""A failed training task, explained: triage verdict -> MLflow tags, error message, retry or not.

An exception leaving a rank becomes its verdict, raised from the rank (`explain_failures`,
`explain_training_failure`: evidence, attempt history, a FAILED MLflow run, then
`FlyteRecoverableException` when the policy restarts, else `TrainingFailedError`). A rank
killed by a signal raises nothing; the workflow's failure node (`record_pipeline_failure`,
`on_failure=`) classifies torchelastic's summary and records it in MLflow. Limits and
details: docs/faults.md, "Failed launches".
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import traceback
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

from flytekit import task
from flytekit.exceptions.user import FlyteRecoverableException
from flytekit.types.error import FlyteError

from platform_lib.redact import redact
from platform_lib.sources.synthetic import SyntheticConfig
from platform_lib.training.checkpoint import find_latest_checkpoint
from platform_lib.triage.attempt import assess_failure, evidence_from_child_failure, failure_message
from platform_lib.triage.classifier import classify
from platform_lib.triage.logs import Evidence, ProcessExit
from platform_lib.triage.record import record_verdict
from tasks.errors import PipelineInputError
from tasks.image import TASK_IMAGE
from tasks.secrets import MLFLOW_SECRETS

__all__ = [
    "HISTORY_FILE",
    "TrainingFailedError",
    "explain_failures",
    "explain_pipeline_failure",
    "explain_training_failure",
    "record_pipeline_failure",
]

#: Attempt history of a run, next to its checkpoints (object storage when they are).
HISTORY_FILE = "triage_history.json"
#: torchelastic's failure summary (`ChildFailedError.format_msg`): an elastic launch failed.
ELASTIC_SUMMARY = "Root Cause (first observed failure)"
#: A line of every rank's own verdict (`failure_message`): the failure is classified already.
VERDICT_LINE = "restart policy:"


class TrainingFailedError(RuntimeError):
    """Training failed and the restart policy says not to retry; the message is the verdict."""


def _checkpoint_step(folder: str | None) -> int | None:
    latest = find_latest_checkpoint(folder) if folder else None
    return int(latest.rstrip("/").rsplit("-", 1)[-1]) if latest else None


def _record_in_mlflow(verdict, evidence, tags: Mapping[str, str]) -> str | None:
    """Create a FAILED MLflow run of this attempt with the verdict; return its id (None if MLflow failed)."""
    try:
        from platform_lib.mlflow_store import configure_mlflow, start_training_run
        from tasks.secrets import mlflow_credentials

        with mlflow_credentials():
            client = configure_mlflow()
            run_id = start_training_run(
                client,
                run_name=f"failed-{tags.get('preset', 'train')}",
                tags={**tags, "drivetrain.outcome": "failed"},
            )
            record_verdict(client, run_id, verdict, evidence)
            client.set_terminated(run_id, status="FAILED")
        return run_id
    except Exception as error:  # noqa: BLE001 - recording must never hide the training failure
        warnings.warn(
            redact(f"triage verdict not recorded in MLflow ({type(error).__name__}: {error})"),
            stacklevel=2,
        )
        return None


def explain_training_failure(
    failure: BaseException,
    *,
    checkpoint_folder: str | None,
    tags: Mapping[str, str] | None = None,
    rank: int | None = None,
    record: bool = True,
) -> Exception:
    """Classify a failed elastic launch or rank; return the exception the task should raise.

    Args:
        failure: torchelastic's `ChildFailedError`, or the exception leaving rank `rank`.
        checkpoint_folder: the run's checkpoint folder (local path or URL); the attempt
            history is kept beside it. None: no history, no checkpoint progress.
        tags: MLflow tags of the failed-attempt run (dataset hash, preset, config hash).
        rank: the global rank `failure` left (its traceback and pid are the evidence); None
            for a launcher's `ChildFailedError`.
        record: record the attempt (history, MLflow run); False only classifies.

    Returns:
        FlyteRecoverableException when the restart policy retries, else TrainingFailedError.
    """
    evidence = evidence_from_child_failure(
        failure,
        extra_logs=None
        if rank is None
        else {f"rank-{rank}": "".join(traceback.format_exception(failure))},
    )
    if rank is not None:  # the rank exits with status 1 once the exception leaves it
        evidence = dataclasses.replace(evidence, exits=(ProcessExit(rank, 1, os.getpid()),))
    history = (
        f"{checkpoint_folder.rstrip('/')}/{HISTORY_FILE}" if checkpoint_folder and record else None
    )
    if history and "://" not in history:
        Path(history).parent.mkdir(parents=True, exist_ok=True)
    verdict, decision = assess_failure(
        evidence, checkpoint_step=_checkpoint_step(checkpoint_folder), history_path=history
    )
    run_id = _record_in_mlflow(verdict, evidence, tags or {}) if record else None
    message = redact(failure_message(verdict, decision))
    if run_id:
        message += f"\n  MLflow run of this attempt: {run_id} (tags triage.*, artifacts triage/)"
    print(message, file=sys.stderr, flush=True)
    if decision.restart:
        return FlyteRecoverableException(message)
    return TrainingFailedError(message)


@contextlib.contextmanager
def explain_failures(
    run_dir: Path, *, checkpoint_folder: str | None, tags: Mapping[str, str]
) -> Iterator[None]:
    """Raise an exception leaving this rank's body as its triage verdict (module docstring).

    User errors and retryable storage errors (`tasks.errors.task_errors`: their own one-line
    messages) pass unchanged. The first rank of the elastic attempt to fail (a claim file in
    `run_dir`, per `TORCHELASTIC_RESTART_COUNT`) records the attempt.

    Raises:
        FlyteRecoverableException | TrainingFailedError: the verdict, from the exception.
    """
    try:
        yield
    except (PipelineInputError, FlyteRecoverableException):
        raise
    except Exception as failure:
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        try:
            os.close(os.open(run_dir / f"triage-attempt-{attempt}.claim", os.O_CREAT | os.O_EXCL))
            first = True
        except OSError:
            first = False
        raise explain_training_failure(
            failure,
            checkpoint_folder=checkpoint_folder,
            tags=tags,
            rank=int(os.environ.get("RANK", "0")),
            record=first,
        ) from failure


def explain_pipeline_failure(message: str, tags: Mapping[str, str]) -> str | None:
    """Classify an elastic launch's failure that no rank explained; record it in MLflow.

    Args:
        message: the failed node's error message (Flyte's `FlyteError.message`).
        tags: MLflow tags of the failed run (preset, source).

    Returns:
        The verdict as printed (rank, pid, signal, root line, action), or None when the
        message is not an elastic launch's failure (a user error's one line) or already holds
        a rank's verdict. Never raises: a failure handler must not hide the failure it handles.
    """
    if ELASTIC_SUMMARY not in message or VERDICT_LINE in message:
        return None
    try:
        evidence = Evidence(logs={"training task": message})
        verdict = classify(evidence)
        run_id = _record_in_mlflow(
            verdict, evidence, {**tags, "triage.recorded_by": "failure node"}
        )
    except Exception as error:  # noqa: BLE001 - the workflow's own error is what the user sees
        warnings.warn(
            redact(f"failure not classified ({type(error).__name__}: {error})"), stacklevel=2
        )
        return None
    text = redact(verdict.describe())
    if run_id:
        text += f"\n  MLflow run of this failure: {run_id} (tags triage.*, artifacts triage/)"
    print(text, file=sys.stderr, flush=True)
    return text


@task(container_image=TASK_IMAGE, secret_requests=MLFLOW_SECRETS)
def record_pipeline_failure(
    source: str,
    raw_logs: str,
    preset: str,
    overrides: str,
    seed: int,
    model_name: str,
    synthetic: SyntheticConfig,
    split: str,
    quarantine: bool,
    promotion: str,
    err: FlyteError | None = None,
) -> None:
    """The training pipeline's failure node (`on_failure=`): takes the workflow's inputs and the error.

    Classifies a training failure no rank explained (a rank killed by a signal) and records it
    in MLflow (`explain_pipeline_failure`); any other failure passes untouched.
    """
    if err is not None:
        explain_pipeline_failure(err.message, tags={"preset": preset, "source": source})
