"""Goodput and badput of a run from its timeline: where every accelerator-second went.

The job's wall time is cut into labelled segments (productive, queue, program_startup, ...,
unaccounted), so whole-run figures and any window (`window_breakdown`) sum the same segments.
Goodput `compatible` = (productive + data_loading_input_wait) / wall (Google's
ml-goodput-measurement), `input_adjusted` = productive / wall. A pipelined run's idle share of
forward + backward is `pipeline_bubble`: (p - 1) / (v m + p - 1) for p stages, m microbatches,
v stages per rank (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM", sec. 2.2). Every segment and figure: docs/goodput.md.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from platform_lib.telemetry.timeline import Event, StepRecord, Timeline

__all__ = [
    "BADPUT_CATEGORIES",
    "INPUT_BOUND_AT",
    "INPUT_LIMITED_AT",
    "PIPELINE_BUBBLE",
    "Segment",
    "badput_categories",
    "build_segments",
    "goodput_figures",
    "input_verdict",
    "pipeline_bubble_fraction",
    "split_lost_steps",
    "summarize_segments",
    "window_breakdown",
]

BADPUT_CATEGORIES = (
    "queue",
    "program_startup",
    "checkpoint_restore",
    "training_prep",
    "data_loading_first_load",
    "data_loading_input_wait",
    "checkpoint_save",
    "lost_work",
    "recovery",
    "evaluation",
    "post_training",
    "unaccounted",
)
PRODUCTIVE = "productive"
#: Badput of pipelined runs only (a layout with pp > 1), listed after the input wait.
PIPELINE_BUBBLE = "pipeline_bubble"

#: Input wait shares (steady-state wait / step time) of the input verdict.
INPUT_LIMITED_AT = 0.05
INPUT_BOUND_AT = 0.20


@dataclass(frozen=True)
class Segment:
    """A labelled interval of the job's wall time (POSIX seconds)."""

    start: float
    end: float
    category: str

    @property
    def length_s(self) -> float:
        """Duration, in s."""
        return self.end - self.start


def pipeline_bubble_fraction(stages: int, microbatches: int, stages_per_rank: int = 1) -> float:
    """Return the idle share of a pipeline schedule's forward + backward, unitless in [0, 1).

    (p - 1) / (v m + p - 1) for p = `stages` pipeline ranks, m = `microbatches` and
    v = `stages_per_rank` (1: 1F1B; 2 or more: interleaved 1F1B), Narayanan et al. 2021 sec. 2.2.

    Raises:
        ValueError: if a count is < 1.
    """
    if min(stages, microbatches, stages_per_rank) < 1:
        raise ValueError(
            f"stages, microbatches and stages_per_rank must be >= 1, got "
            f"{stages}, {microbatches}, {stages_per_rank}"
        )
    return (stages - 1) / (stages_per_rank * microbatches + stages - 1)


def _bubble_of(meta: dict[str, Any]) -> float:
    """Return the bubble fraction of the layout in a timeline's meta (0.0 without pipelining)."""
    layout = meta.get("layout") or {}
    if int(layout.get("pp", 1)) <= 1:
        return 0.0
    return pipeline_bubble_fraction(
        int(layout["pp"]), int(layout["pp_microbatches"]), int(layout.get("stages_per_rank", 1))
    )


def badput_categories(meta: dict[str, Any]) -> tuple[str, ...]:
    """Return the badput categories of a run: `BADPUT_CATEGORIES`, with `PIPELINE_BUBBLE` when pipelined."""
    if not _bubble_of(meta):
        return BADPUT_CATEGORIES
    at = BADPUT_CATEGORIES.index("data_loading_input_wait") + 1
    return (*BADPUT_CATEGORIES[:at], PIPELINE_BUBBLE, *BADPUT_CATEGORIES[at:])


def split_lost_steps(steps: Iterable[StepRecord]) -> tuple[list[StepRecord], list[StepRecord]]:
    """Split one rank's steps into (kept, lost).

    A step number recorded again later (a restart resumed from an older checkpoint) makes
    the earlier records of that step and of every later step number lost work: their
    progress did not reach the final model. Kept steps are the last record of each number.
    """
    latest: dict[int, StepRecord] = {}
    lost: list[StepRecord] = []
    for record in sorted(steps, key=lambda s: (s.start, s.step)):
        for number in [n for n in latest if n >= record.step]:
            lost.append(latest.pop(number))
        latest[record.step] = record
    return sorted(latest.values(), key=lambda s: s.start), sorted(lost, key=lambda s: s.start)


def _subtract(
    start: float, end: float, holes: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """Return [start, end] minus the `holes` intervals, as sorted pieces."""
    pieces = [(start, end)]
    for h0, h1 in sorted(holes):
        next_pieces = []
        for p0, p1 in pieces:
            if h1 <= p0 or h0 >= p1:
                next_pieces.append((p0, p1))
                continue
            if h0 > p0:
                next_pieces.append((p0, h0))
            if h1 < p1:
                next_pieces.append((h1, p1))
        pieces = next_pieces
    return [(a, b) for a, b in pieces if b > a]


def _first_step_prep(attempt_steps: list[StepRecord]) -> float:
    """Training-prep badput of an attempt: first step's compute minus the mean of the others."""
    if len(attempt_steps) < 2:
        return 0.0
    mean_compute = statistics.fmean(s.compute_s for s in attempt_steps[1:])
    return max(0.0, attempt_steps[0].compute_s - mean_compute)


def _step_segments(
    step: StepRecord, *, first: bool, prep_s: float, bubble: float = 0.0
) -> list[Segment]:
    t = step.start
    wait = Segment(
        t, t + step.input_wait_s, "data_loading_first_load" if first else "data_loading_input_wait"
    )
    t = wait.end
    out = [wait]
    if first and prep_s > 0:
        out.append(Segment(t, t + prep_s, "training_prep"))
        t += prep_s
    ckpt_start = step.end - step.checkpoint_s
    bubble_start = max(t, ckpt_start - bubble * step.forward_backward_s)
    out.append(Segment(t, bubble_start, PRODUCTIVE))
    out.append(Segment(bubble_start, ckpt_start, PIPELINE_BUBBLE))
    out.append(Segment(ckpt_start, step.end, "checkpoint_save"))
    return [s for s in out if s.length_s > 0]


def build_segments(timeline: Timeline) -> tuple[list[Segment], float, float]:
    """Cut one rank's timeline into labelled segments; return (segments, job start, job end).

    Args:
        timeline: records of ONE rank (`Timeline.for_rank`); rank 0 by convention. A
            pipelined layout in its meta (`layout`: pp, pp_microbatches, stages_per_rank)
            moves the bubble share of each kept step's forward + backward from productive
            to `pipeline_bubble` (`pipeline_bubble_fraction`).

    Returns:
        Segments sorted by start (gaps are `unaccounted`, not listed), the job start
        (first `queued` or `process_start` event, else the first step) and end (last
        `job_end`, else the end of the last record), POSIX seconds.

    Raises:
        ValueError: the timeline holds no steps and no events.
    """
    steps, events = timeline.steps, timeline.events
    if not steps and not events:
        raise ValueError("empty timeline: no steps and no events recorded")
    kept, lost = split_lost_steps(steps)
    lost_ids = {id(s) for s in lost}
    bubble = _bubble_of(timeline.meta)
    by_kind: dict[str, list[Event]] = {}
    for event in sorted(events, key=lambda e: e.time):
        by_kind.setdefault(event.kind, []).append(event)
    attempts = sorted({s.attempt for s in steps} | {e.attempt for e in events})
    starts = {e.attempt: e.time for e in reversed(by_kind.get("process_start", []))}

    record_ends = [s.end for s in steps] + [
        e.time + e.duration_s for e in events if e.kind != "job_end"
    ]
    job_end_events = by_kind.get("job_end", [])
    job_end = job_end_events[-1].time if job_end_events else max(record_ends)
    first_times = [s.start for s in steps] + [e.time for e in events]
    queued = by_kind.get("queued", [])
    job_start = queued[0].time if queued else (min(starts.values()) if starts else min(first_times))

    segments: list[Segment] = []
    if queued and starts:
        segments.append(Segment(queued[0].time, min(starts.values()), "queue"))
    restores = by_kind.get("checkpoint_restore", [])
    evaluations = by_kind.get("evaluation", [])
    eval_holes = [(e.time, e.time + e.duration_s) for e in evaluations]
    segments += [Segment(a, b, "evaluation") for a, b in eval_holes if b > a]
    previous_end: float | None = None
    for attempt in attempts:
        attempt_steps = sorted((s for s in steps if s.attempt == attempt), key=lambda s: s.start)
        process_start = starts.get(attempt, attempt_steps[0].start if attempt_steps else None)
        if previous_end is not None and process_start is not None and process_start > previous_end:
            segments.append(Segment(previous_end, process_start, "recovery"))
        if attempt_steps and process_start is not None:
            restore_holes = [
                (e.time, e.time + e.duration_s) for e in restores if e.attempt == attempt
            ]
            segments += [Segment(a, b, "checkpoint_restore") for a, b in restore_holes if b > a]
            for a, b in _subtract(
                process_start, attempt_steps[0].start, restore_holes + eval_holes
            ):
                segments.append(Segment(a, b, "program_startup"))
        prep_s = _first_step_prep(attempt_steps)
        for index, step in enumerate(attempt_steps):
            if id(step) in lost_ids:
                segments.append(Segment(step.start, step.end, "lost_work"))
            else:
                segments += _step_segments(step, first=index == 0, prep_s=prep_s, bubble=bubble)
        if attempt_steps:
            previous_end = attempt_steps[-1].end
    if kept:
        tail = _subtract(kept[-1].end, job_end, eval_holes)
        segments += [Segment(a, b, "post_training") for a, b in tail]
    return sorted(segments, key=lambda s: (s.start, s.end)), job_start, job_end


def summarize_segments(segments: list[Segment], start: float, end: float) -> dict[str, float]:
    """Return seconds per category within [start, end], `unaccounted` = the uncovered rest.

    Keys: "productive" and every name of BADPUT_CATEGORIES (0.0 when absent), plus "wall";
    `PIPELINE_BUBBLE` when a segment of it overlaps the window.
    """
    totals = dict.fromkeys((PRODUCTIVE, *BADPUT_CATEGORIES), 0.0)
    for seg in segments:
        overlap = min(seg.end, end) - max(seg.start, start)
        if overlap > 0:
            totals[seg.category] = totals.get(seg.category, 0.0) + overlap
    wall = end - start
    totals["unaccounted"] = wall - sum(v for k, v in totals.items() if k != "unaccounted")
    totals["wall"] = wall
    return totals


def goodput_figures(totals: dict[str, float]) -> dict[str, float]:
    """Return {"compatible", "input_adjusted"} goodput fractions of a `summarize_segments` dict."""
    wall = totals["wall"]
    if wall <= 0:
        return {"compatible": 0.0, "input_adjusted": 0.0}
    return {
        "compatible": (totals[PRODUCTIVE] + totals["data_loading_input_wait"]) / wall,
        "input_adjusted": totals[PRODUCTIVE] / wall,
    }


def window_breakdown(
    segments: list[Segment], start: float, end: float, window_s: float
) -> list[dict[str, float]]:
    """Goodput over consecutive windows of `window_s` seconds from `start` (the last may be shorter).

    Returns:
        One dict per window: start_s / end_s (seconds since `start`), goodput_compatible,
        goodput_input_adjusted, input_wait_share (steady input wait / window).

    Raises:
        ValueError: if `window_s` <= 0.
    """
    if window_s <= 0:
        raise ValueError(f"window_s must be > 0, got {window_s}")
    rows = []
    t = start
    while t < end - 1e-9:
        t1 = min(t + window_s, end)
        totals = summarize_segments(segments, t, t1)
        figures = goodput_figures(totals)
        rows.append(
            {
                "start_s": t - start,
                "end_s": t1 - start,
                "goodput_compatible": figures["compatible"],
                "goodput_input_adjusted": figures["input_adjusted"],
                "input_wait_share": totals["data_loading_input_wait"] / totals["wall"],
            }
        )
        t = t1
    return rows


def input_verdict(input_wait_fraction: float) -> str:
    """Return "input-bound" (>= 20 % input wait), "input-limited" (>= 5 %) or "not input-bound"."""
    if input_wait_fraction >= INPUT_BOUND_AT:
        return "input-bound"
    if input_wait_fraction >= INPUT_LIMITED_AT:
        return "input-limited"
    return "not input-bound"
