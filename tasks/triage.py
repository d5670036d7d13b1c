"""A failed training task, explained: triage verdict -> MLflow tags, error message, retry or not.

When the elastic workers fail for good, `explain_training_failure` gathers the launcher's
per-rank exits and error files, classifies them with the attempt history
(`platform_lib.triage.attempt.assess_failure`), records a FAILED MLflow run with the verdict
(best effort) and raises `FlyteRecoverableException` when the policy restarts, else
`TrainingFailedError`, the verdict as message. See docs/faults.md, "Failed launches".
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from pathlib import Path

from flytekit.exceptions.user import FlyteRecoverableException

from platform_lib.redact import redact
from platform_lib.training.checkpoint import find_latest_checkpoint
from platform_lib.triage.attempt import assess_failure, evidence_from_child_failure, failure_message
from platform_lib.triage.record import record_verdict

__all__ = ["HISTORY_FILE", "TrainingFailedError", "explain_training_failure"]

#: Attempt history of a run, next to its checkpoints (object storage when they are).
HISTORY_FILE = "triage_history.json"


class TrainingFailedError(RuntimeError):
    """Training failed and the restart policy says not to retry; the message is the verdict."""


def _checkpoint_step(folder: str | None) -> int | None:
    latest = find_latest_checkpoint(folder) if folder else None
    return int(latest.rstrip("/").rsplit("-", 1)[-1]) if latest else None


def _record_in_mlflow(verdict, evidence, tags: Mapping[str, str]) -> str | None:
    """Create a FAILED MLflow run of this attempt with the verdict; return its id (None if MLflow failed)."""
    try:
        from platform_lib.registry.mlflow_store import configure_mlflow, start_training_run
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
    failure: BaseException, *, checkpoint_folder: str | None, tags: Mapping[str, str] | None = None
) -> Exception:
    """Classify a failed elastic launch; return the exception the task should raise.

    Args:
        failure: torchelastic's `ChildFailedError` (or any exception of the launch).
        checkpoint_folder: the run's checkpoint folder (local path or URL); the attempt
            history is kept beside it. None: no history, no checkpoint progress.
        tags: MLflow tags of the failed-attempt run (dataset hash, preset, config hash).

    Returns:
        FlyteRecoverableException when the restart policy retries, else TrainingFailedError.
    """
    evidence = evidence_from_child_failure(failure)
    history = f"{checkpoint_folder.rstrip('/')}/{HISTORY_FILE}" if checkpoint_folder else None
    if history and "://" not in history:
        Path(history).parent.mkdir(parents=True, exist_ok=True)
    verdict, decision = assess_failure(
        evidence, checkpoint_step=_checkpoint_step(checkpoint_folder), history_path=history
    )
    run_id = _record_in_mlflow(verdict, evidence, tags or {})
    message = redact(failure_message(verdict, decision))
    if run_id:
        message += f"\n  MLflow run of this attempt: {run_id} (tags triage.*, artifacts triage/)"
    print(message, file=sys.stderr, flush=True)
    if decision.restart:
        return FlyteRecoverableException(message)
    return TrainingFailedError(message)
