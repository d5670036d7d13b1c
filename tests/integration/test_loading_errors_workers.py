"""Loader errors raised in worker processes: a truncated tar, a worker's exception and death, and
the workers stopping after an error; the in-process error tests are in
tests/unit/test_loading_errors.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.errors import ShardFormatError
from platform_lib.loading.loader import build_loader
from tests.support.datasets import write_test_dataset

pytestmark = pytest.mark.timeout(120)
SKIP = LoaderConfig(error_policy="skip")


@pytest.fixture()
def dataset(tmp_path_factory) -> Path:
    return write_test_dataset(tmp_path_factory.mktemp("bad") / "data", {"loga": 6, "logb": 6})


def _keys(loader) -> list[str]:
    return [k for b in loader for k in b["__key__"]]


def _index(root: Path):
    return pq.read_table(root / "index.parquet").to_pylist(), pq.read_schema(root / "index.parquet")


def test_truncated_tar_names_shard_member_and_offset_or_is_skipped(dataset):
    rows, _ = _index(dataset)
    victim = rows[-1]
    shard = dataset / victim["shard"]
    cut = victim["members"][2]["offset"] + 10  # inside the third member of the shard's last sample
    with open(shard, "r+b") as f:
        f.truncate(cut)
    loader = build_loader(str(dataset), rank=0, world_size=1, batch_size=4, num_workers=2, seed=0)
    with pytest.raises(ShardFormatError) as info:
        _keys(loader)
    message = str(info.value)
    assert "truncated" in message and victim["shard"] in message and str(cut) in message
    assert f"{victim['key']}.{victim['members'][2]['name']}" in message
    # raised in a worker, re-raised here as itself: one line, no worker traceback
    assert "\n" not in message and "Traceback" not in message
    skip = build_loader(
        str(dataset), rank=0, world_size=1, batch_size=4, num_workers=2, seed=0, config=SKIP
    )
    keys = _keys(skip)
    assert victim["key"] not in keys and len(set(keys)) == 11
    assert skip.stats.skipped == 1 and skip.stats.skipped_samples[0][0] == victim["key"]


def _raise_in_transform(sample):
    raise RuntimeError(f"transform exploded on {sample['__key__']}")


def _exit_in_transform(sample):
    os._exit(3)


def test_worker_exception_and_worker_death_surface_in_the_main_process(dataset):
    cfg = LoaderConfig(sample_transform=_raise_in_transform)
    loader = build_loader(
        str(dataset), rank=0, world_size=1, batch_size=4, num_workers=2, seed=0, config=cfg
    )
    with pytest.raises(RuntimeError) as info:
        _keys(loader)
    assert "transform exploded on" in str(info.value) and "_raise_in_transform" in str(info.value)
    assert "DataLoader worker process" in str(info.value)
    dead = build_loader(
        str(dataset),
        rank=0,
        world_size=1,
        batch_size=4,
        num_workers=2,
        seed=0,
        config=LoaderConfig(sample_transform=_exit_in_transform),
    )
    with pytest.raises(RuntimeError, match="exited unexpectedly"):
        _keys(dead)


def test_workers_stop_when_a_worker_error_is_raised(dataset):
    """No worker processes outlive a failed epoch (torch keeps the iterator in a reference
    cycle, so without an explicit shutdown they live until a cyclic GC, maybe in a forked child)."""
    import gc
    import multiprocessing

    cfg = LoaderConfig(sample_transform=_raise_in_transform)
    loader = build_loader(
        str(dataset), rank=0, world_size=1, batch_size=4, num_workers=2, seed=0, config=cfg
    )
    gc.collect()  # loaders of earlier tests left in reference cycles stop their (persistent) workers
    gc.disable()
    try:
        with pytest.raises(RuntimeError, match="transform exploded"):
            _keys(loader)
        assert multiprocessing.active_children() == []
    finally:
        gc.enable()
