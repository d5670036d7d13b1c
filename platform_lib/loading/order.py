"""The global sample order of an epoch: a function of (seed, epoch) only.

Shard-aware block shuffle: shuffle the shard order, lay the units (samples or temporal
windows) of the shards out in that order, then shuffle within consecutive windows of
`shuffle_buffer` units. A window spans few shards, so reads stay near-sequential, and the
order never depends on world size or worker count, which is what makes resumption on a
different world size exact.
"""

from __future__ import annotations

import numpy as np

__all__ = ["build_epoch_order", "derive_rng"]

_ORDER_STREAM = 0x0D7A
_SHARD_STREAM = 0x5A4D


def derive_rng(seed: int, epoch: int, stream: int, *extra: int) -> np.random.Generator:
    """Return a generator seeded by (seed, epoch, stream, *extra); independent streams per purpose."""
    return np.random.default_rng(
        [int(seed) & 0xFFFFFFFF, int(seed) >> 32, int(epoch), stream, *extra]
    )


def build_epoch_order(
    unit_shard: np.ndarray, *, seed: int, epoch: int, shuffle: bool, shuffle_buffer: int
) -> np.ndarray:
    """Return the epoch's permutation of unit ids.

    Args:
        unit_shard: (U,) int64 shard id of each unit, units in natural (shard, offset) order.
        seed: global seed.
        epoch: epoch number; each epoch gets a different order.
        shuffle: False returns the natural order.
        shuffle_buffer: window of the within-window shuffle, in units.

    Returns:
        (U,) int64: unit id at each global position of the epoch.
    """
    num_units = len(unit_shard)
    natural = np.arange(num_units, dtype=np.int64)
    if not shuffle or num_units == 0:
        return natural
    num_shards = int(unit_shard.max()) + 1
    shard_rank = derive_rng(seed, epoch, _SHARD_STREAM).permutation(num_shards)
    # Stable sort keeps each shard's units contiguous and in file order.
    laid_out = natural[np.argsort(shard_rank[unit_shard], kind="stable")]
    window = np.arange(num_units, dtype=np.int64) // shuffle_buffer
    noise = derive_rng(seed, epoch, _ORDER_STREAM).random(num_units)
    return laid_out[np.lexsort((noise, window))]
