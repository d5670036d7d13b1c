"""History-aware restart policy: fingerprint the root cause, spend per-class retry budgets.

A restart is worth its cost only if the next attempt can get further than this one: the same
root-cause fingerprint recurring without checkpoint progress stops the retries, and each class
has a budget of restarts without progress (rules: `decide_restart`). History lives in a JSON
file next to the checkpoints (`load_history` / `append_attempt`, a local path or an
object-store URL), so it survives pod restarts and Flyte retries.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from platform_lib.storage import call_with_retries, resolve_fs
from platform_lib.triage.taxonomy import FailureClass

__all__ = [
    "DEFAULT_BUDGETS",
    "Attempt",
    "RestartDecision",
    "RestartPolicy",
    "append_attempt",
    "decide_restart",
    "load_history",
]

C = FailureClass

#: Restarts allowed per class without checkpoint progress (see module docstring).
DEFAULT_BUDGETS: Mapping[FailureClass, int] = {
    C.PREEMPTION_PLATFORM: 20,
    C.HARDWARE: 4,
    C.COMMUNICATION: 3,
    C.UNKNOWN: 2,
    C.DATA: 2,
    C.USER_CODE: 1,
    C.OOM_ACCELERATOR: 1,
    C.OOM_HOST: 1,
    C.CONFIGURATION: 0,
}


@dataclass(frozen=True)
class Attempt:
    """One failed attempt of a run, as the restart policy remembers it."""

    failure_class: FailureClass
    """Triage class of the failure."""
    fingerprint: str
    """Fingerprint of its root cause."""
    checkpoint_step: int | None
    """Newest committed checkpoint step when the attempt failed (None: no checkpoint yet)."""
    restarted: bool = True
    """Whether the policy allowed a restart after it."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        d = asdict(self)
        d["failure_class"] = str(self.failure_class)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Attempt:
        """Inverse of `to_dict`.

        Raises:
            ValueError: unknown class or missing field (names it).
        """
        try:
            return cls(
                FailureClass(d["failure_class"]),
                str(d["fingerprint"]),
                None if d.get("checkpoint_step") is None else int(d["checkpoint_step"]),
                bool(d.get("restarted", True)),
            )
        except (KeyError, ValueError) as exc:
            raise ValueError(f"bad attempt record {dict(d)!r}: {exc}") from exc


@dataclass(kw_only=True, frozen=True)
class RestartPolicy:
    """Retry budgets of the restart policy."""

    budgets: Mapping[FailureClass, int] = field(default_factory=lambda: dict(DEFAULT_BUDGETS))
    """Restarts allowed per class among attempts after which the checkpoint did not advance."""
    max_restarts: int = 100
    """Cap on restarts over the whole run, progress or not."""
    recurrence_exempt: frozenset[FailureClass] = frozenset({C.PREEMPTION_PLATFORM})
    """Classes whose recurrence without progress does not stop the run."""

    def __post_init__(self) -> None:
        missing = [str(c) for c in FailureClass if c not in self.budgets]
        bad = [f"{c}={n}" for c, n in self.budgets.items() if n < 0]
        if missing or bad or self.max_restarts < 0:
            raise ValueError(
                f"RestartPolicy: budgets missing for {missing}, negative {bad}, "
                f"max_restarts={self.max_restarts} (must be >= 0)"
            )


@dataclass(frozen=True)
class RestartDecision:
    """Whether to restart after a failure, and why."""

    restart: bool
    """True: restart from the last checkpoint (raise a recoverable error)."""
    reason: str
    """One sentence naming the rule that decided."""
    recurrences: int
    """Earlier attempts with the same fingerprint."""
    class_failures_without_progress: int
    """Earlier attempts of this class after which the checkpoint has not advanced."""
    budget: int
    """The class's budget."""


def _advanced(since: Attempt, checkpoint_step: int | None) -> bool:
    if checkpoint_step is None:
        return False
    return since.checkpoint_step is None or checkpoint_step > since.checkpoint_step


def decide_restart(
    failure_class: FailureClass,
    fingerprint: str,
    checkpoint_step: int | None,
    history: Sequence[Attempt],
    policy: RestartPolicy | None = None,
) -> RestartDecision:
    """Decide whether to restart after a failure.

    - The root cause's fingerprint is its class, rule and root line with everything that
      varies between attempts removed (numbers, addresses, pids, ranks, times, hosts, paths of
      temporary folders): the same bug, OOM or bad shard gives the same fingerprint each time.
    - A fingerprint that recurs while the checkpoint step did not advance since its last
      occurrence stops the retries: the next attempt would resume from the same step and hit
      it again (NVIDIA resiliency extension's "same failure, no progress" rule).
    - Each class has a budget of restarts that saw no checkpoint progress (`RestartPolicy.
      budgets`): platform classes (preemption, hardware, communication) get many, user-owned
      ones few but not zero (a transient read error, a NaN from a rare batch or an OOM from
      fragmentation may pass from the last checkpoint); configuration errors get none.
    - Preemption is exempt from the recurrence rule (being preempted twice before the next
      checkpoint is not the job's fault) but not from its budget.

    Args:
        failure_class: triage class of this failure (`Verdict.failure_class`).
        fingerprint: of its root cause (`Verdict.fingerprint`).
        checkpoint_step: newest committed checkpoint step now (None: none yet).
        history: earlier failed attempts of the same run, oldest first.
        policy: budgets; default `RestartPolicy()`.

    Returns:
        The decision; the caller appends `Attempt(...)` for this failure to the history.
    """
    policy = policy or RestartPolicy()
    same = [a for a in history if a.fingerprint == fingerprint]
    stalled = [
        a for a in history if a.failure_class is failure_class and not _advanced(a, checkpoint_step)
    ]
    budget = policy.budgets[failure_class]

    def decide(restart: bool, reason: str) -> RestartDecision:
        return RestartDecision(restart, reason, len(same), len(stalled), budget)

    if len(history) >= policy.max_restarts:
        return decide(False, f"{len(history)} restarts already, the cap is {policy.max_restarts}")
    if (
        same
        and failure_class not in policy.recurrence_exempt
        and not _advanced(same[-1], checkpoint_step)
    ):
        return decide(
            False,
            f"the same root cause ({fingerprint}) recurred without checkpoint "
            f"progress (step {same[-1].checkpoint_step} -> {checkpoint_step}); "
            "a restart would fail the same way",
        )
    if len(stalled) >= budget:
        return decide(
            False,
            f"{failure_class} failures without checkpoint progress: "
            f"{len(stalled) + 1}, budget {budget} restart(s)",
        )
    return decide(
        True,
        f"restart {len(stalled) + 1} of {budget} for {failure_class} since the "
        f"checkpoint last advanced (now step {checkpoint_step})",
    )


def load_history(path: str | Path) -> list[Attempt]:
    """Read the attempt history (a JSON list) from a path or URL; absent = empty history.

    Object-store URLs (`s3://...`) go through `platform_lib.storage` (bounded retries).

    Raises:
        ValueError: the file is not a JSON list of attempts (names the file).
    """
    fs, root, _ = resolve_fs(path)
    url = os.fspath(path)
    if not call_with_retries(lambda: fs.exists(root), what="checking", url=url):
        return []
    text = call_with_retries(lambda: fs.cat_file(root), what="reading", url=url)
    try:
        return [Attempt.from_dict(d) for d in json.loads(text)]
    except (json.JSONDecodeError, TypeError, ValueError) as exc:
        raise ValueError(
            f"{url}: not a triage attempt history ({exc}); delete it to start a new history"
        ) from exc


def append_attempt(path: str | Path, attempt: Attempt) -> list[Attempt]:
    """Append `attempt` to the history at `path` atomically; return the new history.

    Local files: written to a temporary file beside it, then renamed. Object stores: one PUT
    of the whole file (atomic there). One writer per run (the failed task) is assumed.
    """
    history = [*load_history(path), attempt]
    data = json.dumps([a.to_dict() for a in history], indent=1).encode()
    fs, root, local = resolve_fs(path)
    if not local:
        call_with_retries(lambda: fs.pipe_file(root, data), what="writing", url=os.fspath(path))
        return history
    p = Path(root)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, p)
    return history
