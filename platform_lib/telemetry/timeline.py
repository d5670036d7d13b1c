"""The telemetry data model: step records and events of every rank, as JSON lines.

Times are POSIX seconds (`time.time()`, comparable across processes and restarts);
durations are seconds (`time.perf_counter()` differences). One file per rank,
`<run>/telemetry/rank-NNNNN.jsonl`, appended by every attempt (elastic restart) of that rank:

    {"type": "event", "kind": "process_start", "time": 1764583000.1, "rank": 0, "attempt": 0, ...}
    {"type": "step", "step": 1, "start": 1764583004.2, "wall_s": 0.41, "input_wait_s": 0.12, ...}
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "EVENT_KINDS",
    "Event",
    "StepRecord",
    "Timeline",
    "check_layout_meta",
    "load_rank_file",
    "load_timeline",
    "rank_file",
]

#: Event kinds the goodput computation understands (others are kept and shown, not counted).
EVENT_KINDS = (
    "queued",  # job submitted (time only; queue time = first process_start - queued)
    "process_start",  # a worker process of one attempt started
    "first_step",  # the first step of an attempt starts
    "checkpoint_save",  # blocking part of a save (duration_s), step = last step it holds
    "checkpoint_restore",  # restore before training (duration_s), step = restored step
    "restart",  # an attempt resumed from an earlier one (detail: restart count)
    "evaluation",  # evaluation outside the steps (duration_s)
    "job_end",  # the worker finished (after exporting weights)
)


@dataclass(kw_only=True, frozen=True)
class StepRecord:
    """One optimizer step of one rank."""

    step: int
    """1-based optimizer step number (a repeated number means the earlier one was lost)"""
    rank: int
    """global rank that ran it"""
    attempt: int
    """elastic attempt (0 = first start, 1 = after the first restart, ...)"""
    start: float
    """POSIX time the step started (before waiting for its batch), in s"""
    wall_s: float
    """whole step: start to end of logging, in s"""
    input_wait_s: float = 0.0
    """blocked waiting for the next batch, in s"""
    forward_backward_s: float = 0.0
    """forward + backward (CUDA-synchronised on GPUs), in s"""
    optimizer_s: float = 0.0
    """gradient clipping + optimizer step, in s"""
    checkpoint_s: float = 0.0
    """blocking part of a checkpoint save in this step, in s"""
    samples: int = 0
    """samples this rank processed in the step"""
    peak_memory_bytes: int = 0
    """peak memory so far (CUDA max allocated, else process max RSS), in bytes"""
    loss: float | None = None
    """local loss of the step (None when not recorded)"""

    @property
    def end(self) -> float:
        """POSIX time the step ended, in s."""
        return self.start + self.wall_s

    @property
    def compute_s(self) -> float:
        """Step time that is neither input wait nor checkpoint blocking, in s."""
        return self.wall_s - self.input_wait_s - self.checkpoint_s


@dataclass(kw_only=True, frozen=True)
class Event:
    """Something that happened once: process start, checkpoint save/restore, evaluation, end."""

    kind: str
    """one of EVENT_KINDS (others are kept but not counted)"""
    time: float
    """POSIX time the event started, in s"""
    rank: int = 0
    """global rank that recorded it"""
    attempt: int = 0
    """elastic attempt"""
    duration_s: float = 0.0
    """how long it blocked training, in s (0 for instants)"""
    step: int | None = None
    """step it refers to (checkpoint step, restored step), if any"""
    detail: dict[str, Any] = field(default_factory=dict)
    """free-form JSON-serialisable facts (paths, methods)"""


#: Keys of a run's `meta["layout"]` (`training.observe.layout_meta`): the degrees and the
#: pipeline schedule's microbatches and stages per rank, each an integer >= 1.
LAYOUT_META_INTS = ("pp", "dp_replicate", "dp_shard", "tp", "pp_microbatches", "stages_per_rank")
LAYOUT_SCHEDULES = ("1F1B", "Interleaved1F1B")


def check_layout_meta(layout: Any) -> dict[str, Any]:
    """Return `layout` (a run's `meta["layout"]`) when it is one the goodput report can read.

    Raises:
        ValueError: naming the key that is missing or out of range.
    """
    if not isinstance(layout, dict):
        raise ValueError(f"meta layout is {type(layout).__name__}, not an object")
    for key in LAYOUT_META_INTS:
        value = layout.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 2**20:
            raise ValueError(f"meta layout.{key}={value!r}: not an integer in 1..{2**20}")
    if layout.get("pp_schedule") not in LAYOUT_SCHEDULES:
        raise ValueError(
            f"meta layout.pp_schedule={layout.get('pp_schedule')!r}: one of {', '.join(LAYOUT_SCHEDULES)}"
        )
    return layout


@dataclass(kw_only=True)
class Timeline:
    """Every record of a run: per-rank steps and events plus run facts.

    `meta` holds world_size, device_type, batch_size, flops_per_sample, peak_flops and
    the method that measured it, workload key fields, when known.
    """

    steps: list[StepRecord] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def add(self, steps: list[StepRecord], events: list[Event], meta: dict[str, Any]) -> None:
        """Add one rank's records (`load_rank_file`); meta keys already set keep their value."""
        self.steps.extend(steps)
        self.events.extend(events)
        for key, value in meta.items():
            self.meta.setdefault(key, value)

    def ranks(self) -> list[int]:
        """Return the ranks that recorded anything, sorted."""
        return sorted({s.rank for s in self.steps} | {e.rank for e in self.events})

    def for_rank(self, rank: int) -> Timeline:
        """Return the records of one rank (same meta), each list sorted by time."""
        return Timeline(
            steps=sorted(
                (s for s in self.steps if s.rank == rank), key=lambda s: (s.start, s.step)
            ),
            events=sorted((e for e in self.events if e.rank == rank), key=lambda e: e.time),
            meta=dict(self.meta),
        )

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (inverse: `Timeline.from_json`)."""
        return {
            "meta": self.meta,
            "steps": [dataclasses.asdict(s) for s in self.steps],
            "events": [dataclasses.asdict(e) for e in self.events],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Timeline:
        """Build a timeline from `to_json` output.

        Raises:
            ValueError: a record lacks a required field (the message names it).
        """
        try:
            timeline = cls(
                steps=[StepRecord(**s) for s in data.get("steps", [])],
                events=[Event(**e) for e in data.get("events", [])],
                meta=dict(data.get("meta", {})),
            )
        except TypeError as exc:
            raise ValueError(f"bad telemetry record: {exc}") from exc
        if "layout" in timeline.meta:
            check_layout_meta(timeline.meta["layout"])
        return timeline


def rank_file(telemetry_dir: str | os.PathLike[str], rank: int) -> Path:
    """Return the JSON-lines file of `rank` under `telemetry_dir`."""
    return Path(telemetry_dir) / f"rank-{rank:05d}.jsonl"


def load_rank_file(
    path: str | os.PathLike[str],
) -> tuple[list[StepRecord], list[Event], dict[str, Any]]:
    """Read one rank's JSON-lines file; return (steps, events, meta merged over the lines).

    Raises:
        ValueError: a line is not JSON or not a known record type (names file and line).
    """
    steps: list[StepRecord] = []
    events: list[Event] = []
    meta: dict[str, Any] = {}
    path = Path(path)
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                kind = row.pop("type")
                if kind == "step":
                    steps.append(StepRecord(**row))
                elif kind == "event":
                    events.append(Event(**row))
                elif kind == "meta":
                    if "layout" in row:
                        check_layout_meta(row["layout"])
                    meta.update(row)
                else:
                    raise ValueError(f"unknown record type {kind!r}")
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                if line_no > 1 and not line.endswith("\n"):
                    break  # a torn last line of a killed attempt: the records before it stand
                raise ValueError(f"{path}:{line_no}: not a telemetry record ({exc})") from exc
    return steps, events, meta


def load_timeline(telemetry_dir: str | os.PathLike[str]) -> Timeline:
    """Read every `rank-*.jsonl` under `telemetry_dir` into one Timeline.

    Raises:
        FileNotFoundError: no rank file there (the run recorded no telemetry).
        ValueError: from `load_rank_file`.
    """
    files = sorted(Path(telemetry_dir).glob("rank-*.jsonl"))
    if not files:
        raise FileNotFoundError(f"{telemetry_dir} holds no rank-*.jsonl telemetry files")
    timeline = Timeline()
    for path in files:
        timeline.add(*load_rank_file(path))
    return timeline
