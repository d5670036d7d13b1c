"""Weighted mixing of several datasets into one epoch order, deterministic per (seed, epoch).

Each source gets an exact share of the epoch's positions (largest-remainder rounding of the
weights), the sources are interleaved by a seeded shuffle, and the k-th position of source s
takes the k-th unit of s's own epoch order (wrapping when a source is oversampled).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from platform_lib.loading.order import build_epoch_order, derive_rng

__all__ = ["EpochOrders", "allocate_counts", "build_mixed_order"]

_MIX_STREAM = 0x313C


def allocate_counts(weights: list[float], total: int) -> np.ndarray:
    """Return per-source position counts summing to `total`, proportional to `weights`.

    Raises:
        ValueError: a weight is negative or all weights are zero.
    """
    w = np.asarray(weights, dtype=np.float64)
    if (w < 0).any() or w.sum() <= 0 or not np.isfinite(w).all():
        raise ValueError(f"mixing weights must be finite, >= 0 and not all 0, got {weights}")
    exact = w / w.sum() * total
    counts = np.floor(exact).astype(np.int64)
    remainder = total - counts.sum()
    counts[np.argsort(-(exact - counts), kind="stable")[:remainder]] += 1
    return counts


def build_mixed_order(
    orders: list[np.ndarray], weights: list[float], *, seed: int, epoch: int, total: int
) -> tuple[np.ndarray, np.ndarray]:
    """Interleave per-source epoch orders.

    Args:
        orders: per source, (U_s,) int64 unit ids in that source's epoch order.
        weights: per source, relative weight.
        seed: global seed.
        epoch: epoch number.
        total: positions in the mixed epoch.

    Returns:
        source: (total,) int64 source index per position.
        unit: (total,) int64 unit id (of that source) per position.
    """
    counts = allocate_counts(weights, total)
    source = np.repeat(np.arange(len(orders), dtype=np.int64), counts)
    source = source[derive_rng(seed, epoch, _MIX_STREAM).permutation(total)]
    unit = np.empty(total, dtype=np.int64)
    for s, order in enumerate(orders):
        where = np.flatnonzero(source == s)
        unit[where] = order[np.arange(len(where)) % len(order)]
    return source, unit


@dataclass(kw_only=True, eq=False)
class EpochOrders:
    """The global order of any epoch, (source, unit) per position; a function of (seed, epoch).

    Picklable and cheap to hold: persistent workers compute the order of the epoch they are
    told to run themselves (the last epoch's order is cached).
    """

    unit_shards: list[np.ndarray]
    """per source, (U_s,) int64 shard id of each unit's first frame"""
    weights: list[float]
    """per source, relative weight (one source: [1.0])"""
    seed: int
    """global seed"""
    shuffle: bool
    """False keeps the natural (shard, offset) order"""
    shuffle_buffer: int
    """window of the block shuffle, in units"""
    total: int
    """positions per epoch"""
    _cache: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def __call__(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Return (source, unit) per global position of `epoch`: (P,) int64 each."""
        if epoch not in self._cache:
            orders = [
                build_epoch_order(
                    shards,
                    seed=self.seed + s * 0x9E3779B1,
                    epoch=epoch,
                    shuffle=self.shuffle,
                    shuffle_buffer=self.shuffle_buffer,
                )
                for s, shards in enumerate(self.unit_shards)
            ]
            if len(orders) == 1:
                pair = (np.zeros(len(orders[0]), dtype=np.int64), orders[0])
            else:
                pair = build_mixed_order(
                    orders, self.weights, seed=self.seed, epoch=epoch, total=self.total
                )
            self._cache = {epoch: pair}  # keep only the latest epoch
        return self._cache[epoch]
