"""Hook for a training task: evidence from a failed elastic launch -> verdict -> restart decision.

`evidence_from_child_failure` turns torchelastic's `ChildFailedError` into `Evidence`,
`assess_failure` gives the verdict and the history-aware restart decision, and
`failure_message` the task's error text; no Flyte or training imports here. How a task uses
them: the package README.md, "Hooking into a training task".
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from platform_lib.triage.classifier import Verdict, classify
from platform_lib.triage.logs import Evidence, LogFile, ProcessExit, load_evidence
from platform_lib.triage.policy import (
    Attempt,
    RestartDecision,
    RestartPolicy,
    append_attempt,
    decide_restart,
    load_history,
)

__all__ = ["assess_failure", "evidence_from_child_failure", "failure_message"]


def evidence_from_child_failure(
    exc: BaseException,
    *,
    log_dir: str | Path | None = None,
    pod_status: Mapping[str, Any] | None = None,
    extra_logs: Mapping[str, str] | None = None,
) -> Evidence:
    """Collect the evidence of a failed elastic launch.

    Args:
        exc: torchelastic's `ChildFailedError` (duck-typed: `.failures` maps global rank ->
            `ProcessFailure` with `pid`, `exitcode`, `message`); any other exception
            contributes its text only.
        log_dir: torchelastic `log_dir` (worker stdout/stderr, `error.json`), or any folder
            of logs; read with `load_evidence` (newest `attempt_N/` only).
        pod_status: Kubernetes Pod or Pod status, when the caller has it.
        extra_logs: more named log texts (e.g. the agent's own stderr).

    Returns:
        Evidence with the launcher summary as log `launcher`, per-rank exits and the logs.
    """
    logs: dict[str, str | LogFile] = {}
    exits: list[ProcessExit] = []
    notes: tuple[str, ...] = ()
    if log_dir is not None and Path(log_dir).exists():
        folder = load_evidence(log_dir)
        logs.update(folder.logs)
        exits.extend(folder.exits)
        pod_status = pod_status or folder.pod_status
        notes = folder.notes
    logs["launcher"] = f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"
    for rank, failure in (getattr(exc, "failures", None) or {}).items():
        exits.append(ProcessExit(int(rank), int(failure.exitcode), int(failure.pid)))
    logs.update(extra_logs or {})
    return Evidence(logs=logs, exits=tuple(exits), pod_status=pod_status, notes=notes)


def assess_failure(
    evidence: Evidence,
    *,
    checkpoint_step: int | None,
    history_path: str | Path | None = None,
    policy: RestartPolicy | None = None,
) -> tuple[Verdict, RestartDecision]:
    """Classify a failed attempt and decide whether to restart; record it in the history.

    Args:
        evidence: of the failed attempt.
        checkpoint_step: newest committed checkpoint step now (None: none yet).
        history_path: JSON history of earlier attempts of this run (created if absent; the
            attempt is appended atomically); None keeps no history (every failure is a first).
        policy: retry budgets; default `RestartPolicy()`.
    """
    verdict = classify(evidence)
    history = load_history(history_path) if history_path is not None else []
    decision = decide_restart(
        verdict.failure_class, verdict.fingerprint, checkpoint_step, history, policy
    )
    if history_path is not None:
        append_attempt(
            history_path,
            Attempt(verdict.failure_class, verdict.fingerprint, checkpoint_step, decision.restart),
        )
    return verdict, decision


def failure_message(verdict: Verdict, decision: RestartDecision) -> str:
    """The task's error message: verdict (rank, pid, signal, root line), then the decision."""
    then = "restarting from the last checkpoint" if decision.restart else "not restarting"
    return f"{verdict.describe()}\n  restart policy: {then}: {decision.reason}"
