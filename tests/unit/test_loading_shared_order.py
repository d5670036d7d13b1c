"""Epoch orders are computed once in the main process and mapped (shared) by the workers."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
from pathlib import Path

import numpy as np
import pytest
from loading_helpers import write_test_dataset

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader
from platform_lib.loading.mixing import EpochOrders
from platform_lib.loading.shared_order import SharedOrders

pytestmark = pytest.mark.skipif(
    "fork" not in mp.get_all_start_methods() or not Path("/proc/self/smaps_rollup").exists(),
    reason="needs fork and /proc/PID/smaps_rollup (Linux)",
)

_ROWS = 1_000_000


def _uss() -> int:
    """Private_Clean + Private_Dirty of this process, in bytes (the pages only it maps)."""
    fields = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        fields[name] = int(value.split()[0]) * 1024
    return fields["Private_Clean"] + fields["Private_Dirty"]


def _read_in_child(shared: SharedOrders, epoch: int, conn) -> None:
    before = _uss()
    source, unit = shared.get(epoch)
    digest = hashlib.sha256(source)  # reads every page, no copy
    digest.update(unit)
    touched = int(unit.sum())
    conn.send((_uss() - before, digest.hexdigest(), touched))
    conn.close()


def test_a_worker_maps_the_published_order_without_a_private_copy(tmp_path):
    orders = EpochOrders(
        unit_shards=[np.arange(_ROWS, dtype=np.int64) // 1000],
        weights=[1.0],
        seed=7,
        shuffle=True,
        shuffle_buffer=2048,
        total=_ROWS,
    )
    shared = SharedOrders(
        EpochOrders(**{k: v for k, v in orders.__dict__.items() if k != "_cache"}),
        shm_dir="/dev/shm",
    )
    try:
        shared.publish(3)
        ctx = mp.get_context("fork")
        receiver, sender = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_read_in_child, args=(shared, 3, sender))
        child.start()
        sender.close()
        growth, digest, touched = receiver.recv()
        child.join(timeout=30)
    finally:
        shared.close()
    source, unit = orders(3)  # computed afresh here: the same bytes as the published file
    assert digest == hashlib.sha256(source.tobytes() + unit.tobytes()).hexdigest()
    assert touched == _ROWS * (_ROWS - 1) // 2  # a permutation, every page read
    # A private (2, 1M) int64 order would be 16 MiB; mapped pages stay shared with the main process.
    assert growth < 4 * 2**20, f"the worker's private memory grew by {growth / 2**20:.1f} MiB"
    assert not os.path.exists(shared.path(3))


def test_workers_read_published_orders_and_the_files_go_with_the_loader(tmp_path):
    root = write_test_dataset(tmp_path / "ds", {"log-a": 6, "log-b": 5})
    shm = tmp_path / "shm"  # any folder works; /dev/shm is the default
    shm.mkdir()
    loader = build_loader(
        str(root),
        rank=0,
        world_size=1,
        batch_size=2,
        num_workers=2,
        seed=5,
        decode="none",
        config=LoaderConfig(shm_dir=str(shm), prefetch_depth=2),
    )
    try:
        for epoch in range(3):
            keys = [k for batch in loader for k in batch["__key__"]]
            order = loader.epoch_keys(epoch)
            assert keys == order + order[:1]  # 11 samples + 1 padded (the first again)
            published = sorted(p.name.rsplit("-", 1)[1] for p in shm.glob("drivetrain-order-*"))
            # the epoch consumed and the one the workers run ahead on; older ones unlinked
            assert published == [f"e{epoch}", f"e{epoch + 1}"]
    finally:
        loader.close()
    assert not list(shm.glob("drivetrain-order-*"))
