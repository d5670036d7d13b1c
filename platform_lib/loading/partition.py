"""Split an epoch's global order into equal per-rank batches and per-worker batch streams.

Global step g covers global positions [g * B * W, (g + 1) * B * W) for batch size B and
world size W; rank r takes the r-th block of B of them. Worker w of a rank produces the
rank's batches g = start + w, start + w + n, ... for n workers, which is the order in which
`torch.utils.data.DataLoader` collects them. Resuming after c consumed samples restarts at
step c / (B * W) with no replay, for any (W, n) that keeps B * W.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["EpochPlan", "plan_epoch", "positions_for_batch", "steps_for_worker"]


@dataclass(kw_only=True, frozen=True)
class EpochPlan:
    """How one epoch of `num_positions` global positions maps onto equal global batches."""

    num_positions: int
    """samples (units) in the epoch's global order"""
    global_batch: int
    """batch size x world size, in samples"""
    steps: int
    """batches every rank yields in the epoch"""
    padded: int
    """positions past the end that repeat samples from the start of the order (pad policy)"""
    dropped: int
    """samples at the end of the order left out (drop policy)"""


def plan_epoch(
    num_positions: int, *, batch_size: int, world_size: int, pad_policy: str
) -> EpochPlan:
    """Return the epoch plan.

    Raises:
        ValueError: no samples, or fewer samples than one global batch with pad_policy "drop".
    """
    global_batch = batch_size * world_size
    if num_positions < 1:
        raise ValueError("the dataset split has no samples; check `split` and the index")
    if pad_policy == "drop":
        steps = num_positions // global_batch
        if steps == 0:
            raise ValueError(
                f"{num_positions} samples < one global batch of {global_batch} (batch_size "
                f"{batch_size} x world_size {world_size}) with pad_policy='drop'; use 'pad'"
            )
        return EpochPlan(
            num_positions=num_positions,
            global_batch=global_batch,
            steps=steps,
            padded=0,
            dropped=num_positions - steps * global_batch,
        )
    steps = -(-num_positions // global_batch)
    return EpochPlan(
        num_positions=num_positions,
        global_batch=global_batch,
        steps=steps,
        padded=steps * global_batch - num_positions,
        dropped=0,
    )


def positions_for_batch(
    plan: EpochPlan, *, step: int, rank: int, batch_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Return (positions, padded) of rank `rank`'s batch at global step `step`.

    Returns:
        positions: (B,) int64 global positions in [0, num_positions).
        padded: (B,) bool, True where the position repeats a sample to fill the batch.
    """
    first = step * plan.global_batch + rank * batch_size
    raw = np.arange(first, first + batch_size, dtype=np.int64)
    return raw % plan.num_positions, raw >= plan.num_positions


def steps_for_worker(
    plan: EpochPlan, *, start_step: int, worker_id: int, num_workers: int
) -> range:
    """Return the global steps worker `worker_id` of `num_workers` produces, from `start_step`."""
    return range(start_step + worker_id, plan.steps, num_workers)
