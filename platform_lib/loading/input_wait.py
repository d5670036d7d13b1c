"""Input wait: wall time the training loop spends blocked on the next batch.

Wrap the loader; each `next()` is timed. Step time is measured from one batch's arrival to
the next's, so input wait % = wait / step time is the share of the step the accelerator
idled waiting for input.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import numpy as np

__all__ = ["InputWaitMeter"]

T = TypeVar("T")


class InputWaitMeter:
    """Records, per step, the time blocked in `next(batches)` and the whole step's wall time.

    Usage::

        meter = InputWaitMeter()
        for batch in meter.wrap(loader):
            train_step(batch)
            log(meter.last_wait_s)
        meter.summary()  # {"steps", "mean_wait_s", "p50_wait_s", ..., "input_wait_fraction"}
    """

    def __init__(self, *, skip_first: int = 0) -> None:
        """Start an empty meter.

        Args:
            skip_first: leading steps left out of `summary` (worker start-up), in steps.
        """
        self.skip_first = skip_first
        self.waits_s: list[float] = []
        """per step: seconds blocked waiting for the batch"""
        self.steps_s: list[float] = []
        """per step: seconds from the previous batch's arrival to this one's (the whole step)"""

    @property
    def last_wait_s(self) -> float:
        """Seconds the last step waited for its batch (0.0 before the first step)."""
        return self.waits_s[-1] if self.waits_s else 0.0

    def wrap(self, batches: Iterable[T]) -> Iterator[T]:
        """Yield from `batches`, timing each `next()`."""
        iterator = iter(batches)
        previous = time.perf_counter()
        while True:
            start = time.perf_counter()
            try:
                item = next(iterator)
            except StopIteration:
                return
            arrived = time.perf_counter()
            self.waits_s.append(arrived - start)
            self.steps_s.append(arrived - previous)
            previous = arrived
            yield item

    def record(self, *, wait_s: float, step_s: float) -> None:
        """Add one step measured elsewhere (seconds blocked, seconds of the whole step)."""
        self.waits_s.append(float(wait_s))
        self.steps_s.append(float(step_s))

    def summary(self) -> dict[str, Any]:
        """Return wait statistics over the recorded steps (after `skip_first`), seconds and fraction.

        Keys: steps, mean_wait_s, p50_wait_s, p90_wait_s, p99_wait_s, max_wait_s, total_wait_s,
        total_step_s, input_wait_fraction (total wait / total step time; 0 when no steps).
        """
        waits = np.asarray(self.waits_s[self.skip_first :], dtype=np.float64)
        steps = np.asarray(self.steps_s[self.skip_first :], dtype=np.float64)
        if len(waits) == 0:
            return {
                "steps": 0,
                "mean_wait_s": 0.0,
                "p50_wait_s": 0.0,
                "p90_wait_s": 0.0,
                "p99_wait_s": 0.0,
                "max_wait_s": 0.0,
                "total_wait_s": 0.0,
                "total_step_s": 0.0,
                "input_wait_fraction": 0.0,
            }
        p50, p90, p99 = np.percentile(waits, [50, 90, 99])
        total_step = float(steps.sum())
        return {
            "steps": len(waits),
            "mean_wait_s": float(waits.mean()),
            "p50_wait_s": float(p50),
            "p90_wait_s": float(p90),
            "p99_wait_s": float(p99),
            "max_wait_s": float(waits.max()),
            "total_wait_s": float(waits.sum()),
            "total_step_s": total_step,
            "input_wait_fraction": float(waits.sum() / total_step) if total_step > 0 else 0.0,
        }
