"""`StepRecorder`: what the training loop calls every step, on every rank (usage: the class).

Records are appended to `rank-NNNNN.jsonl` every `flush_interval` steps and at every event,
so a killed attempt loses at most that many step records; `overhead_s` is the recorder's own
time. On CUDA, laps synchronise the device first, so forward/backward/optimizer times are
device times, not launch times.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from platform_lib.telemetry.timeline import Timeline, load_rank_file, rank_file

__all__ = ["LAPS", "StepRecorder", "process_start_time"]

#: Step phases `lap` accepts and the StepRecord field each fills.
LAPS = {
    "input_wait": "input_wait_s",
    "forward_backward": "forward_backward_s",
    "optimizer": "optimizer_s",
}

MetricsSink = Callable[[int, dict[str, float]], None]


def process_start_time() -> float:
    """Return when this worker's program started, POSIX s.

    Under torch elastic / torchrun (LOCAL_RANK and TORCHELASTIC_RUN_ID or RANK set) the
    worker process was started for this run: its start time (Linux /proc), so imports and
    process-group set-up count as program start-up. Otherwise (train() called inside a
    longer-lived process: tests, notebooks) now.
    """
    if "LOCAL_RANK" not in os.environ:
        return time.time()
    try:  # field 22 of /proc/self/stat: start time in clock ticks since boot (CLOCK_BOOTTIME)
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()


def _peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB


class StepRecorder:
    """Records this rank's steps and events to `telemetry_dir/rank-NNNNN.jsonl`.

    Usage, in the training loop::

        recorder = StepRecorder(out / "telemetry", rank=0, world_size=2, device=device, batch_size=4)
        recorder.record_restore(step=80, duration_s=0.7)           # after loading a checkpoint
        while step < max_steps:
            recorder.begin_step(step + 1)
            batch, wait_s = next_batch(...);  recorder.lap("input_wait", wait_s)
            loss = forward_backward(...);     recorder.lap("forward_backward")
            optimizer_step(...);              recorder.lap("optimizer")
            ... save -> recorder.record_checkpoint(step, blocking_s)
            recorder.end_step()
        recorder.close()                                         # job_end
        timeline = recorder.gather()                             # collective; rank 0 gets all ranks
    """

    def __init__(
        self,
        telemetry_dir: str | os.PathLike[str],
        *,
        rank: int,
        world_size: int,
        device: torch.device,
        batch_size: int,
        flush_interval: int = 20,
        sink: MetricsSink | None = None,
        sink_interval: int = 10,
        meta: dict[str, Any] | None = None,
        started: float | None = None,
        profiler: Any = None,
    ) -> None:
        """Open the rank file and record `process_start` (and `restart` for later attempts).

        Args:
            telemetry_dir: folder of the rank files (created).
            rank: this process's global rank.
            world_size: ranks in the run.
            device: where the model runs (CUDA laps synchronise it).
            batch_size: samples per rank per step.
            flush_interval: steps between appends to the rank file.
            sink: called on rank 0 every `sink_interval` steps with (step, metrics): mean step
                time, input wait fraction, samples/s over those steps (MLflow streaming).
            sink_interval: steps between sink calls.
            meta: run facts written once (world size, device type, workload fields).
            started: POSIX time of the process start; default: from /proc.
            profiler: an object with `on_step_begin(step)` / `on_step_end(step)` (StepProfiler).

        Raises:
            ValueError: if `flush_interval` or `sink_interval` < 1.
        """
        if flush_interval < 1 or sink_interval < 1:
            raise ValueError(
                f"flush_interval and sink_interval must be >= 1, got {flush_interval}, {sink_interval}"
            )
        self.path = rank_file(telemetry_dir, rank)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rank, self.world_size, self.batch_size = rank, world_size, batch_size
        self.device = device
        self.flush_interval, self.sink, self.sink_interval = flush_interval, sink, sink_interval
        self.profiler = profiler
        self.sync_cuda = device.type == "cuda"
        self.overhead_s = 0.0
        """seconds spent inside the recorder's own methods"""
        self._buffer: list[str] = []
        self._current: dict[str, Any] | None = None
        self._window: list[tuple[float, float]] = []
        self._last_step: int | None = None
        self.attempt = self._count_attempts()
        started = process_start_time() if started is None else started
        self._write(
            {
                "type": "meta",
                "world_size": world_size,
                "device_type": device.type,
                "batch_size": batch_size,
                **(meta or {}),
            }
        )
        self.event("process_start", time_=started, detail={"pid": os.getpid()})
        if self.attempt:
            self.event("restart", detail={"attempt": self.attempt})

    def _count_attempts(self) -> int:
        if not self.path.exists():
            return 0
        _, events, _ = load_rank_file(self.path)
        return sum(1 for e in events if e.kind == "process_start")

    def _write(self, row: dict[str, Any]) -> None:
        self._buffer.append(json.dumps(row, sort_keys=True))

    def flush(self) -> None:
        """Append the buffered records to the rank file."""
        if self._buffer:
            with self.path.open("a", encoding="utf-8") as f:
                f.write("\n".join(self._buffer) + "\n")
            self._buffer.clear()

    def event(
        self,
        kind: str,
        *,
        time_: float | None = None,
        duration_s: float = 0.0,
        step: int | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Record an event (`timeline.EVENT_KINDS`) and flush; `time_` defaults to now - duration_s."""
        t0 = time.perf_counter()
        now = time.time()
        self._write(
            {
                "type": "event",
                "kind": kind,
                "time": (now - duration_s) if time_ is None else time_,
                "rank": self.rank,
                "attempt": self.attempt,
                "duration_s": duration_s,
                "step": step,
                "detail": detail or {},
            }
        )
        self.flush()
        self.overhead_s += time.perf_counter() - t0

    def begin_step(self, step: int) -> None:
        """Start timing optimizer step `step` (1-based), before waiting for its batch."""
        if self._last_step is None and self._current is None:
            self.event("first_step", step=step)
        t0 = time.perf_counter()
        if self.profiler is not None:
            self.profiler.on_step_begin(step)
        now = time.perf_counter()
        self._current = {
            "step": step,
            "start": time.time(),
            "t0": now,
            "mark": now,
            "input_wait_s": 0.0,
            "forward_backward_s": 0.0,
            "optimizer_s": 0.0,
            "checkpoint_s": 0.0,
        }
        self.overhead_s += time.perf_counter() - t0

    def lap(self, phase: str, seconds: float | None = None) -> None:
        """Close phase `phase` (a key of LAPS) of the current step: time since the last lap, or `seconds`.

        Raises:
            KeyError: unknown phase.
            RuntimeError: no step begun.
        """
        if self._current is None:
            raise RuntimeError("lap() outside a step: call begin_step first")
        if self.sync_cuda:
            torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        self._current[LAPS[phase]] += (t0 - self._current["mark"]) if seconds is None else seconds
        self._current["mark"] = t0
        self.overhead_s += time.perf_counter() - t0

    def record_checkpoint(self, step: int, blocking_s: float, **detail: Any) -> None:
        """Record a checkpoint save: `blocking_s` seconds the training loop waited for it.

        Inside a step it counts as that step's checkpoint time (not compute); an event
        `checkpoint_save` is written either way (detail: e.g. path, asynchronous=True).
        """
        if self._current is not None:
            self._current["checkpoint_s"] += blocking_s
            self._current["mark"] = time.perf_counter()
        self.event("checkpoint_save", duration_s=blocking_s, step=step, detail=detail)

    def record_restore(self, step: int, duration_s: float, **detail: Any) -> None:
        """Record a checkpoint restore of `step` that took `duration_s` seconds (just finished)."""
        self.event("checkpoint_restore", duration_s=duration_s, step=step, detail=detail)

    def end_step(self, loss: float | None = None) -> None:
        """Finish the current step (after logging): write its record."""
        cur = self._current
        if cur is None:
            raise RuntimeError("end_step() without begin_step()")
        if self.sync_cuda:
            torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        wall = t0 - cur["t0"]
        self._write(
            {
                "type": "step",
                "step": cur["step"],
                "rank": self.rank,
                "attempt": self.attempt,
                "start": cur["start"],
                "wall_s": wall,
                "input_wait_s": cur["input_wait_s"],
                "forward_backward_s": cur["forward_backward_s"],
                "optimizer_s": cur["optimizer_s"],
                "checkpoint_s": cur["checkpoint_s"],
                "samples": self.batch_size,
                "peak_memory_bytes": _peak_memory_bytes(self.device),
                "loss": loss,
            }
        )
        self._window.append((wall, cur["input_wait_s"]))
        self._last_step = cur["step"]
        if len(self._buffer) >= self.flush_interval:
            self.flush()
        if self.sink is not None and len(self._window) >= self.sink_interval:
            self._push(cur["step"])
        if self.profiler is not None:
            self.profiler.on_step_end(cur["step"])
        self._current = None
        self.overhead_s += time.perf_counter() - t0

    def _push(self, step: int) -> None:
        assert self.sink is not None  # called only when a sink is set
        steps = len(self._window)
        wall = sum(w for w, _ in self._window)
        wait = sum(i for _, i in self._window)
        samples = self.batch_size * self.world_size * steps
        self.sink(
            step,
            {
                "telemetry/step_time_s": wall / steps,
                "telemetry/input_wait_fraction": wait / wall if wall > 0 else 0.0,
                "telemetry/samples_per_s": samples / wall if wall else 0.0,
                "telemetry/peak_memory_bytes": float(_peak_memory_bytes(self.device)),
            },
        )
        self._window.clear()

    def close(self) -> None:
        """Record `job_end` (the worker's work is done) and flush everything."""
        if self._window and self.sink is not None and self._last_step is not None:
            self._push(self._last_step)
        self.event("job_end")

    def gather(self) -> Timeline | None:
        """Collect every rank's records (collective when a process group is up); rank 0 gets them.

        Returns:
            The whole run's Timeline on rank 0 (all attempts of all ranks), None elsewhere.
        """
        self.flush()
        steps, events, meta = load_rank_file(self.path)
        mine = (steps, events, meta)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            parts: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(parts, mine)
        else:
            parts = [mine]
        if self.rank != 0:
            return None
        timeline = Timeline()
        for part in parts:
            timeline.add(*part)
        return timeline
