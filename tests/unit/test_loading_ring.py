"""The loader's shared-memory ring in one process: extents sized by each batch's bytes, pages
allocated lazily and reused, a full ring that waits for releases, and the budget check.

Real /dev/shm files; the allocated bytes are read from the file's block count (`fstat`).
"""

from __future__ import annotations

import gc
import os
import threading
import time

import numpy as np
import pytest

from platform_lib.loading.errors import RingError
from platform_lib.loading.ring import (
    Ring,
    SlotWriter,
    _cgroup_memory_limit,
    check_budget,
    node_shm_budget,
    unpack_batch,
)

MiB = 2**20


def _allocated(ring: Ring) -> int:
    """Bytes /dev/shm holds for the ring file (tmpfs pages)."""
    return os.fstat(ring._fd).st_blocks * 512


def _reserve(ring: Ring, worker: int, nbytes: int, *, timeout_s: float = 5):
    """Reserve for the next step of the ring's iteration, as worker `worker`."""
    step = int(ring.control[6])  # _NEXT_STEP
    generation = ring.enter(worker)
    return ring.reserve(worker, step, nbytes, generation=generation, timeout_s=timeout_s)


def _batch(ring: Ring, worker: int, nbytes: int, fill: int, *, timeout_s: float = 5) -> dict:
    """Write one batch of `nbytes` raw bytes through the ring and deliver it (main side)."""
    extent = _reserve(ring, worker, nbytes, timeout_s=timeout_s)
    assert extent is not None
    writer = SlotWriter(ring, extent, raw_bytes=nbytes)
    raw = np.frombuffer(writer.raw_buffer(nbytes, what="x"), dtype=np.uint8)
    raw[:] = fill
    packed = writer.pack({"x": raw})
    return unpack_batch(packed, ring)


def test_pages_are_allocated_by_the_bytes_written_not_by_the_budget():
    ring = Ring(num_workers=2, slots_per_worker=3, budget_bytes=2**30, batch_bytes=MiB)
    try:
        assert _allocated(ring) == ring.header_bytes == ring.shm_bytes()  # 1 GiB budget, sparse
        batch = _batch(ring, 0, 300_000, 7)
        assert _allocated(ring) == ring.shm_bytes() == MiB  # the file's first step
        assert ring.in_use() == 300_032 and ring.peak_in_use == 300_032
        assert np.all(batch["x"] == 7) and batch["x"].nbytes == 300_000
        _batch(ring, 1, 3 * MiB, 1)
        assert _allocated(ring) == ring.shm_bytes() == 4 * MiB
    finally:
        ring.close()


def test_released_extents_are_reused_first_and_sizes_vary():
    ring = Ring(num_workers=1, slots_per_worker=4, budget_bytes=64 * MiB, batch_bytes=MiB)
    try:
        first = _batch(ring, 0, 2 * MiB, 1)
        second = _batch(ring, 0, 500_000, 2)
        start = ring.header_bytes
        assert first["x"].ctypes.data - ring._base == start
        assert second["x"].ctypes.data - ring._base == start + 2 * MiB  # right after it
        grown = ring.shm_bytes()
        del first
        gc.collect()
        third = _batch(ring, 0, MiB, 3)  # smaller: takes the first gap, where `first` was
        assert third["x"].ctypes.data - ring._base == start
        assert np.all(second["x"] == 2) and np.all(third["x"] == 3)  # nothing overwritten
        del second, third
        gc.collect()
        for epoch in range(3):  # epochs of variable-size batches: no page is added
            ring.begin_iteration()
            kept = [_batch(ring, 0, n, epoch) for n in (MiB, 600_000, 900_000)]
            assert all(np.all(b["x"] == epoch) for b in kept)
            del kept
            gc.collect()
        assert ring.shm_bytes() == grown == _allocated(ring)
        assert ring.in_use() == 0
    finally:
        ring.close()


def test_a_full_region_waits_for_a_release_and_gives_up_at_its_deadline():
    ring = Ring(num_workers=1, slots_per_worker=4, budget_bytes=3 * MiB, batch_bytes=MiB)
    try:
        held = _batch(ring, 0, 2 * MiB, 1)
        started = time.monotonic()
        assert _reserve(ring, 0, 2 * MiB, timeout_s=0.3) is None  # no room: the deadline holds
        assert 0.3 <= time.monotonic() - started < 2
        releaser = threading.Timer(0.3, lambda: held.clear())  # the loop drops its batch
        releaser.start()
        started = time.monotonic()
        late = _batch(ring, 0, 2 * MiB, 2, timeout_s=10)  # waits instead of overrunning
        assert 0.25 <= time.monotonic() - started < 5
        assert np.all(late["x"] == 2) and ring.shm_bytes() <= ring.header_bytes + 3 * MiB
        releaser.join()
    finally:
        ring.close()


def test_a_batch_larger_than_the_budget_or_beyond_the_slots_takes_the_fallback_at_once():
    ring = Ring(num_workers=2, slots_per_worker=2, budget_bytes=4 * MiB, batch_bytes=MiB)
    try:
        started = time.monotonic()
        assert _reserve(ring, 1, 5 * MiB, timeout_s=10) is None
        kept = [_batch(ring, 1, 1000, 1) for _ in range(2)]  # the loop keeps both
        assert _reserve(ring, 1, 1000, timeout_s=10) is None  # worker 1 has no slot left
        assert _batch(ring, 0, 1000, 2)["x"][0] == 2  # worker 0 still has its own
        assert time.monotonic() - started < 1 and len(kept) == 2
    finally:
        ring.close()


def test_batches_reserve_in_step_order_and_a_restart_frees_abandoned_extents():
    ring = Ring(num_workers=2, slots_per_worker=3, budget_bytes=8 * MiB, batch_bytes=MiB)
    try:
        generation = ring.begin_iteration(4)
        for worker in (0, 1):
            ring.enter(worker)
        started = time.monotonic()  # step 5 waits for step 4's reservation: not its turn
        assert ring.reserve(1, 5, MiB, generation=generation, timeout_s=0.2) is None
        assert time.monotonic() - started >= 0.2
        first = ring.reserve(0, 4, 6 * MiB, generation=generation, timeout_s=1)
        second = ring.reserve(1, 5, MiB, generation=generation, timeout_s=1)
        assert first is not None and second is not None
        assert second.offset == first.offset + 6 * MiB  # after step 4's extent
        newer = ring.begin_iteration(0)  # a restart: steps 4 and 5 were never delivered
        ring.enter(1)  # worker 1 moved on; worker 0 may still be writing step 4's batch
        third = ring.reserve(1, 0, 2 * MiB, generation=newer, timeout_s=1)
        assert third is not None and third.offset == second.offset  # not over step 4's
        ring.enter(0)
        fourth = ring.reserve(0, 1, 6 * MiB, generation=newer, timeout_s=1)
        assert fourth is not None and fourth.offset == first.offset
        assert ring.reserve(0, 2, MiB, generation=generation, timeout_s=1) is None  # stale
    finally:
        ring.close()


def test_an_abandoned_iteration_stops_a_waiting_worker_and_leaves_the_next_one_alone():
    ring = Ring(num_workers=1, slots_per_worker=4, budget_bytes=3 * MiB, batch_bytes=MiB)
    try:
        held = _batch(ring, 0, 2 * MiB, 1)  # the loop holds it: no room for the next batch
        generation = ring.generation
        threading.Timer(0.2, ring.abandon, (generation,)).start()  # the loop leaves the pass
        started = time.monotonic()
        assert _reserve(ring, 0, 2 * MiB, timeout_s=30) is None
        assert time.monotonic() - started < 5 and not ring.is_current(generation)
        newer = ring.begin_iteration(0)
        ring.abandon(generation)  # late: a no-op for the newer iteration
        assert ring.is_current(newer) and np.all(held["x"] == 1)
        del held
        gc.collect()
        assert _batch(ring, 0, 2 * MiB, 2)["x"][0] == 2
    finally:
        ring.close()


def test_a_budget_too_small_for_one_sample_names_the_budget_and_the_sample():
    with pytest.raises(RingError) as info:
        check_budget(1000, batch_size=4, sample_bytes=5000, raw_bytes=3000)
    message = str(info.value)
    assert "\n" not in message
    assert "1000 bytes is too small for one sample (5000 bytes: 3000 read + 2000" in message
    assert "shm_budget_bytes to at least 20000 bytes" in message
    with pytest.raises(RingError, match=r"too small for one batch \(4 samples of up to 5000"):
        check_budget(19_999, batch_size=4, sample_bytes=5000, raw_bytes=3000)
    check_budget(20_000, batch_size=4, sample_bytes=5000, raw_bytes=3000)


def test_the_default_budget_is_this_ranks_share_of_the_node(monkeypatch):
    st = os.statvfs("/dev/shm")
    node = st.f_blocks * st.f_frsize
    limit = _cgroup_memory_limit()
    if limit is not None:
        node = min(node, limit // 4)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert node_shm_budget("/dev/shm") == min(node, 5 * 2**29)  # capped at 2.5 GiB
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "64")
    assert node_shm_budget("/dev/shm") == min(node // 64, 5 * 2**29)
