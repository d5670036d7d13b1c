"""2 ranks x 2 workers with a real gloo process group: exactly once, equal batches, resume."""

from __future__ import annotations

import json
import socket
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from loading_helpers import write_test_dataset

from platform_lib.loading.loader import build_loader

WORLD, BATCH, WORKERS, SEED = 2, 3, 2, 7
pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_rank(
    rank: int, dataset: str, port: int, out: str, resume_at: int, foreign_state: dict
) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=60),
    )
    record: dict = {"len": None, "epochs": {}, "resumed": [], "steps": {}}
    loader = build_loader(
        dataset,
        rank=rank,
        world_size=WORLD,
        batch_size=BATCH,
        num_workers=WORKERS,
        seed=SEED,
        split="train",
    )
    record["len"] = len(loader)
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        batches = []
        for batch in loader:
            batches.append(batch["__key__"])
            count = torch.tensor([1])
            dist.all_reduce(count)  # every rank must reach every step, or this times out
        record["epochs"][epoch] = batches
        record["stats"] = {
            "padded": loader.stats.padded,
            "padded_global": loader.stats.padded_global,
        }
    # Interrupt epoch 2 after `resume_at` batches, then continue in a fresh loader.
    loader.set_epoch(2)
    iterator = iter(loader)
    for _ in range(resume_at):
        next(iterator)
    state = loader.state_dict()
    del iterator
    fresh = build_loader(
        dataset,
        rank=rank,
        world_size=WORLD,
        batch_size=BATCH,
        num_workers=WORKERS,
        seed=SEED,
        split="train",
    )
    fresh.load_state_dict(state)
    record["resumed"] = [b["__key__"] for b in fresh]
    full = build_loader(
        dataset,
        rank=rank,
        world_size=WORLD,
        batch_size=BATCH,
        num_workers=WORKERS,
        seed=SEED,
        split="train",
    )
    full.set_epoch(2)
    record["epoch2_full"] = [b["__key__"] for b in full]
    # A state saved by a 1-rank job with 3 workers and batch 6 (same global batch of 6).
    elastic = build_loader(
        dataset,
        rank=rank,
        world_size=WORLD,
        batch_size=BATCH,
        num_workers=WORKERS,
        seed=SEED,
        split="train",
    )
    elastic.load_state_dict(foreign_state)
    record["resumed_from_1_rank"] = [b["__key__"] for b in elastic]
    record["state"] = state
    dist.barrier()
    Path(out, f"rank{rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    # 23 train samples over ~12 shards, plus a val log the "train" split leaves out.
    root = tmp_path_factory.mktemp("ds") / "data"
    return write_test_dataset(
        root, {"loga": 9, "logb": 8, "logc": 6, "logv": 4}, val_logs=("logv",)
    )


def test_two_ranks_two_workers_exactly_once_equal_batches_and_resume(dataset, tmp_path):
    single = build_loader(
        str(dataset),
        rank=0,
        world_size=1,
        batch_size=WORLD * BATCH,
        num_workers=3,
        seed=SEED,
        split="train",
    )
    single.set_epoch(2)
    next(iter(single))  # one global batch consumed by a job of another shape
    foreign_state = single.state_dict()
    mp.spawn(
        _run_rank,
        args=(str(dataset), _free_port(), str(tmp_path), 2, foreign_state),
        nprocs=WORLD,
        join=True,
    )
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    train_keys = {
        f"log{log}_{i:06d}" for log, n in (("a", 9), ("b", 8), ("c", 6)) for i in range(n)
    }
    assert ranks[0]["len"] == ranks[1]["len"] == 4  # ceil(23 / 6)
    orders = []
    for epoch in ("0", "1"):
        per_rank = [r["epochs"][epoch] for r in ranks]
        assert [len(b) for b in per_rank] == [4, 4]
        assert all(len(batch) == BATCH for b in per_rank for batch in b)
        flat = [k for b in per_rank for batch in b for k in batch]
        assert set(flat) == train_keys  # exactly the train split, no val sample
        padded = ranks[0]["stats"]["padded_global"]
        assert padded == 4 * WORLD * BATCH - len(train_keys) == 1
        assert len(flat) == len(train_keys) + padded  # each key once, plus the reported padding
        # Global order: step g = rank 0's batch g then rank 1's batch g.
        orders.append([k for g in range(4) for r in range(WORLD) for k in per_rank[r][g]])
    assert orders[0] != orders[1]  # the order depends on the epoch
    for r in ranks:
        assert r["state"]["consumed_samples"] == 2 * WORLD * BATCH
        assert r["resumed"] == r["epoch2_full"][2:]  # exactly the unseen batches, same order
        assert r["resumed_from_1_rank"] == r["epoch2_full"][1:]  # other world size and workers
