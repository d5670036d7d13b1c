"""Global order, partition, mixing and window units: pure functions of (seed, epoch)."""

from __future__ import annotations

import numpy as np
import pytest

from platform_lib.loading.mixing import allocate_counts, build_mixed_order
from platform_lib.loading.order import build_epoch_order
from platform_lib.loading.partition import plan_epoch, positions_for_batch, steps_for_worker


def _unit_shards(samples_per_shard: list[int]) -> np.ndarray:
    return np.repeat(np.arange(len(samples_per_shard)), samples_per_shard).astype(np.int64)


def test_order_is_a_permutation_that_depends_on_seed_and_epoch_only():
    shards = _unit_shards([7] * 30)
    a = build_epoch_order(shards, seed=3, epoch=0, shuffle=True, shuffle_buffer=16)
    assert sorted(a.tolist()) == list(range(len(shards)))
    assert np.array_equal(
        a, build_epoch_order(shards, seed=3, epoch=0, shuffle=True, shuffle_buffer=16)
    )
    assert not np.array_equal(
        a, build_epoch_order(shards, seed=3, epoch=1, shuffle=True, shuffle_buffer=16)
    )
    assert not np.array_equal(
        a, build_epoch_order(shards, seed=4, epoch=0, shuffle=True, shuffle_buffer=16)
    )
    natural = build_epoch_order(shards, seed=3, epoch=0, shuffle=False, shuffle_buffer=16)
    assert np.array_equal(natural, np.arange(len(shards)))


def test_order_is_shard_aware_each_window_touches_few_shards():
    shards = _unit_shards([10] * 40)
    buffer = 20
    order = build_epoch_order(shards, seed=1, epoch=5, shuffle=True, shuffle_buffer=buffer)
    for start in range(0, len(order), buffer):
        touched = set(shards[order[start : start + buffer]].tolist())
        assert len(touched) <= buffer // 10 + 1  # a window spans at most 3 consecutive shards
    # ...and the shard order itself is shuffled.
    first_seen = list(dict.fromkeys(shards[order].tolist()))
    assert first_seen != sorted(first_seen)


@pytest.mark.parametrize("world,batch", [(1, 8), (2, 4), (4, 2), (8, 1)])
def test_partition_covers_every_position_once_plus_padding(world, batch):
    plan = plan_epoch(21, batch_size=batch, world_size=world, pad_policy="pad")
    assert plan.steps == 3 and plan.padded == 3
    seen = []
    for step in range(plan.steps):
        for rank in range(world):
            positions, padded = positions_for_batch(plan, step=step, rank=rank, batch_size=batch)
            seen.extend(positions[~padded].tolist())
            assert (positions[padded] < plan.padded).all()  # padding repeats the start of the order
    assert sorted(seen) == list(range(21))


def test_drop_policy_counts_the_dropped_tail_and_refuses_too_small_data():
    plan = plan_epoch(21, batch_size=4, world_size=2, pad_policy="drop")
    assert (plan.steps, plan.dropped, plan.padded) == (2, 5, 0)
    with pytest.raises(ValueError, match="pad_policy='drop'"):
        plan_epoch(5, batch_size=4, world_size=2, pad_policy="drop")
    with pytest.raises(ValueError, match="no samples"):
        plan_epoch(0, batch_size=4, world_size=2, pad_policy="pad")


def test_workers_split_a_rank_batches_round_robin_from_the_resume_step():
    plan = plan_epoch(100, batch_size=2, world_size=2, pad_policy="pad")
    streams = [
        list(steps_for_worker(plan, start_step=7, worker_id=w, num_workers=3)) for w in range(3)
    ]
    assert sorted(s for st in streams for s in st) == list(range(7, plan.steps))
    assert streams[0][:2] == [7, 10] and streams[1][:2] == [8, 11]


def test_mixing_realises_weights_deterministically():
    orders = [np.arange(50), np.arange(500), np.arange(5)]
    weights = [0.5, 0.3, 0.2]
    source, unit = build_mixed_order(orders, weights, seed=9, epoch=2, total=1000)
    counts = np.bincount(source, minlength=3) / 1000
    assert np.allclose(counts, weights, atol=1e-3)
    # Over any 200 consecutive positions the mix is within a few percent of the weights.
    window = np.bincount(source[400:600], minlength=3) / 200
    assert np.allclose(window, weights, atol=0.1)
    again = build_mixed_order(orders, weights, seed=9, epoch=2, total=1000)
    assert np.array_equal(source, again[0]) and np.array_equal(unit, again[1])
    other = build_mixed_order(orders, weights, seed=9, epoch=3, total=1000)
    assert not np.array_equal(source, other[0])
    # Oversampled source 2 (5 units, 200 positions) cycles through its own order.
    assert np.bincount(unit[source == 2], minlength=5).tolist() == [40] * 5
    assert allocate_counts([1, 1, 1], 10).tolist() == [4, 3, 3]
    with pytest.raises(ValueError, match="weights"):
        allocate_counts([0, 0], 10)
