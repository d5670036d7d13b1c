"""Preemption: SIGTERM -> a final checkpoint within the grace period -> a recoverable exit.

Every rank installs `PreemptionHandler`, whose signal handler only records the signal; at the
end of each step the ranks agree (`requested`, one tiny all-reduce), stop after the same step,
save a final checkpoint together (skipped when the previous save took longer than the grace
time left) and raise `PreemptedError`, which the task layer turns into a retryable failure.
Kubernetes, Kueue and torch elastic timing: docs/faults.md, "Preemption".
"""

from __future__ import annotations

import contextlib
import signal
import time
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["PreemptedError", "PreemptionHandler"]


class PreemptedError(RuntimeError):
    """Training stopped on a termination signal after its final checkpoint; restarting resumes."""

    def __init__(self, message: str, step: int, checkpoint: str | None, signal_name: str) -> None:
        super().__init__(message)
        self.step, self.checkpoint, self.signal_name = step, checkpoint, signal_name

    def __reduce__(self) -> Any:
        return type(self), (str(self), self.step, self.checkpoint, self.signal_name)


class PreemptionHandler:
    """Records SIGTERM on this rank; `requested()` tells every rank whether any rank got it.

    Args:
        grace_s: seconds from the signal within which the final checkpoint must be complete.
        device: device of the agreement all-reduce (cuda with nccl, cpu with gloo).

    Installs the handler only in the main thread (Python's rule); `close()` restores the
    previous one.
    """

    def __init__(self, grace_s: float, device: torch.device) -> None:
        self.grace_s, self.device = grace_s, device
        self.received: signal.Signals | None = None
        self.received_at: float | None = None
        self._previous: dict[signal.Signals, Any] = {}
        with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
            self._previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received, self.received_at = signal.Signals(signum), time.monotonic()

    def remaining_s(self) -> float:
        """Seconds of the grace period left (the whole period before any signal)."""
        if self.received_at is None:
            return self.grace_s
        return self.grace_s - (time.monotonic() - self.received_at)

    def requested(self) -> bool:
        """Return True on every rank when any rank received the signal.

        Collective: call it at the same point of every step on every rank.
        """
        flag = torch.tensor([1.0 if self.received is not None else 0.0], device=self.device)
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def close(self) -> None:
        """Restore the signal handlers that were installed before."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
