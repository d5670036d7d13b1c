"""Synthetic step timelines for telemetry tests (plain functions).

The main timeline (rank 0, times in s):

    95        queued
    100       process_start (attempt 0)
    104-107   step 1: 1.0 first load, compute 2.0 (0.85 of it training prep)
    107-109   steps 2, 3: 0.25 input wait + 0.75 compute each
    109-110.5 step 4: 0.25 wait, 0.75 compute, 0.5 checkpoint save
    110.5-113.5 step 5: slow (2.75 compute), lost
    113.5-114.5 step 6: lost            (failure; the checkpoint of step 4 survives)
    120       process_start (attempt 1); 122-123 checkpoint restore of step 4
    124-126   step 5: 0.5 first load, 1.5 compute (0.75 prep)
    126-129.5 steps 6, 7 (1.0 each), step 8 (1.5 with a 0.5 checkpoint)
    130-130.5 evaluation
    131       job_end
"""

from __future__ import annotations

from platform_lib.telemetry.timeline import Event, StepRecord, Timeline


def step(
    n: int,
    start: float,
    wall: float,
    wait: float = 0.25,
    ckpt: float = 0.0,
    *,
    attempt: int = 0,
    rank: int = 0,
) -> StepRecord:
    fwd = wall - wait - ckpt
    return StepRecord(
        step=n,
        rank=rank,
        attempt=attempt,
        start=start,
        wall_s=wall,
        input_wait_s=wait,
        forward_backward_s=fwd,
        checkpoint_s=ckpt,
        samples=4,
        peak_memory_bytes=1000 + n,
    )


def restart_timeline(rank: int = 0) -> Timeline:
    steps = [
        step(1, 104.0, 3.0, wait=1.0),
        step(2, 107.0, 1.0),
        step(3, 108.0, 1.0),
        step(4, 109.0, 1.5, ckpt=0.5),
        step(5, 110.5, 3.0),
        step(6, 113.5, 1.0),
        step(5, 124.0, 2.0, wait=0.5, attempt=1),
        step(6, 126.0, 1.0, attempt=1),
        step(7, 127.0, 1.0, attempt=1),
        step(8, 128.0, 1.5, ckpt=0.5, attempt=1),
    ]
    steps = [StepRecord(**{**s.__dict__, "rank": rank}) for s in steps]
    events = [
        Event(kind="queued", time=95.0, rank=rank),
        Event(kind="process_start", time=100.0, rank=rank),
        Event(kind="checkpoint_save", time=110.0, duration_s=0.5, step=4, rank=rank),
        Event(kind="process_start", time=120.0, attempt=1, rank=rank),
        Event(kind="checkpoint_restore", time=122.0, duration_s=1.0, step=4, attempt=1, rank=rank),
        Event(kind="evaluation", time=130.0, duration_s=0.5, attempt=1, rank=rank),
        Event(kind="job_end", time=131.0, attempt=1, rank=rank),
    ]
    return Timeline(steps=steps, events=events, meta={"world_size": 1, "device_type": "cpu"})
