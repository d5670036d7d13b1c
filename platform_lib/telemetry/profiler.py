"""A window of steps captured with `torch.profiler`, saved as a Chrome / Perfetto trace.

`StepProfiler(first_step=20, num_steps=3, ...)` starts the profiler when step 20 begins and
stops it after step 22 ends, then writes `trace-rank-NNNNN.json` (Chrome trace event format:
open it in https://ui.perfetto.dev or chrome://tracing, or load it with Holistic Trace
Analysis). CPU activity always; CUDA activity when the run uses CUDA.
"""

from __future__ import annotations

import os
from pathlib import Path

from torch.profiler import ProfilerActivity, profile

__all__ = ["StepProfiler"]


class StepProfiler:
    """Profiles steps [first_step, first_step + num_steps) of one rank (recorder hooks)."""

    def __init__(
        self,
        output_dir: str | os.PathLike[str],
        *,
        rank: int,
        first_step: int,
        num_steps: int,
        cuda: bool = False,
    ) -> None:
        """Set up a profiling window (nothing runs until its first step).

        Args:
            output_dir: folder of the trace file (created when the trace is written).
            rank: this rank (names the file).
            first_step: first profiled step (1-based).
            num_steps: steps in the window.
            cuda: also record CUDA activity.

        Raises:
            ValueError: if `first_step` or `num_steps` < 1.
        """
        if first_step < 1 or num_steps < 1:
            raise ValueError(
                f"first_step and num_steps must be >= 1, got {first_step}, {num_steps}"
            )
        self.trace_path = Path(output_dir) / f"trace-rank-{rank:05d}.json"
        self.first_step, self.last_step = first_step, first_step + num_steps - 1
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        self._profile = profile(activities=activities, record_shapes=True, with_stack=False)
        self._running = False

    def on_step_begin(self, step: int) -> None:
        """Start the profiler when the window's first step begins."""
        if step == self.first_step and not self._running:
            self._profile.__enter__()
            self._running = True

    def on_step_end(self, step: int) -> None:
        """Stop the profiler after the window's last step and write the trace."""
        if self._running:
            self._profile.step()
            if step >= self.last_step:
                self.stop()

    @property
    def running(self) -> bool:
        """True while the window is being captured."""
        return self._running

    def stop(self) -> None:
        """Stop early (the run ended inside the window) and write what was captured."""
        if self._running:
            self._profile.__exit__(None, None, None)
            self._running = False
            self.trace_path.parent.mkdir(parents=True, exist_ok=True)
            self._profile.export_chrome_trace(str(self.trace_path))
