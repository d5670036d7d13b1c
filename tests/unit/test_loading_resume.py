"""Resume on the same and on other world sizes / worker counts, and small or odd datasets."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from loading_helpers import add_empty_shard, write_test_dataset

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.errors import ResumeStateError
from platform_lib.loading.loader import build_loader

pytestmark = pytest.mark.timeout(120)


def _global_sequence(dataset, *, world, batch, workers, seed=5, epoch=0, state=None, config=None):
    """Run every rank of a world in this process; return the global key order and per-rank lengths."""
    per_rank = []
    for rank in range(world):
        loader = build_loader(
            str(dataset),
            rank=rank,
            world_size=world,
            batch_size=batch,
            num_workers=workers,
            seed=seed,
            config=config,
        )
        if state is not None:
            loader.load_state_dict(state)
        else:
            loader.set_epoch(epoch)
        per_rank.append([b["__key__"] for b in loader])
    steps = {len(b) for b in per_rank}
    assert len(steps) == 1, f"ranks yield unequal batch counts {[len(b) for b in per_rank]}"
    return [k for g in range(steps.pop()) for r in range(world) for k in per_rank[r][g]]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return write_test_dataset(
        tmp_path_factory.mktemp("resume") / "data", {"loga": 11, "logb": 10, "logc": 9}
    )


def _state_after(dataset, *, world, batch, workers, steps, epoch=1, seed=5):
    loader = build_loader(
        str(dataset), rank=0, world_size=world, batch_size=batch, num_workers=workers, seed=seed
    )
    loader.set_epoch(epoch)
    iterator = iter(loader)
    for _ in range(steps):
        next(iterator)
    return loader.state_dict()


@pytest.mark.parametrize("world,batch,workers", [(2, 2, 2), (1, 4, 3), (4, 1, 1), (4, 1, 0)])
def test_resume_continues_with_exactly_the_unseen_samples_in_order(dataset, world, batch, workers):
    full = _global_sequence(dataset, world=2, batch=2, workers=2, epoch=1)
    assert len(full) == 32 and len(set(full)) == 30  # 30 samples + 2 padded
    state = _state_after(dataset, world=2, batch=2, workers=2, steps=3)
    assert state["consumed_samples"] == 12
    resumed = _global_sequence(dataset, world=world, batch=batch, workers=workers, state=state)
    assert resumed == full[12:]


def test_resume_rejects_another_global_batch_or_seed(dataset):
    state = _state_after(dataset, world=2, batch=2, workers=1, steps=1)
    loader = build_loader(str(dataset), rank=0, world_size=1, batch_size=3, num_workers=0, seed=5)
    with pytest.raises(ResumeStateError, match="global batch"):
        loader.load_state_dict(state)
    other_seed = build_loader(
        str(dataset), rank=0, world_size=2, batch_size=2, num_workers=0, seed=6
    )
    with pytest.raises(ResumeStateError, match="'seed'"):
        other_seed.load_state_dict(state)


def test_resume_rejects_a_corrupt_position_and_a_negative_seed(dataset):
    state = _state_after(dataset, world=2, batch=2, workers=0, steps=1)
    loader = build_loader(str(dataset), rank=0, world_size=2, batch_size=2, num_workers=0, seed=5)
    for bad in ({"consumed_samples": -4}, {"epoch": -1}):
        with pytest.raises(ResumeStateError, match="corrupt"):
            loader.load_state_dict({**state, **bad})
    with pytest.raises(ValueError, match="seed must be >= 0"):
        build_loader(str(dataset), rank=0, world_size=1, batch_size=2, num_workers=0, seed=-1)


def test_an_empty_split_is_named_also_when_mixing(dataset):
    for spec in (str(dataset), [(str(dataset), 1.0), (str(dataset), 1.0)]):
        with pytest.raises(ValueError, match="no samples in split 'nope'"):
            build_loader(
                spec, rank=0, world_size=1, batch_size=2, num_workers=0, seed=0, split="nope"
            )


def test_resume_is_o1_it_never_reads_consumed_samples(dataset, tmp_path):
    copy = Path(shutil.copytree(dataset, tmp_path / "copy"))
    cfg = LoaderConfig()
    loader = build_loader(
        str(copy),
        rank=0,
        world_size=1,
        batch_size=5,
        num_workers=0,
        seed=5,
        shuffle=False,
        config=cfg,
    )  # 30 samples: 6 full batches, no padding
    iterator = iter(loader)
    seen = [k for _ in range(3) for k in next(iterator)["__key__"]]
    state = loader.state_dict()
    # Delete every shard whose samples were all consumed: a replaying loader would fail.
    view = loader.views[0]
    consumed_shards = {int(view.shard_id[i]) for i in range(len(view)) if view.key(i) in seen}
    live_shards = {int(view.shard_id[i]) for i in range(len(view)) if view.key(i) not in seen}
    for shard in consumed_shards - live_shards:
        (copy / view.shard_paths[shard]).unlink()
    assert consumed_shards - live_shards, "the test must delete at least one shard"
    fresh = build_loader(
        str(copy), rank=0, world_size=1, batch_size=5, num_workers=2, seed=5, shuffle=False
    )
    fresh.load_state_dict(state)
    rest = [k for b in fresh for k in b["__key__"]]
    assert len(rest) == 15 and not set(rest) & set(seen) and len(set(seen) | set(rest)) == 30


@pytest.mark.parametrize(
    "logs,extra",
    [({"solo": 3}, None), ({"loga": 2, "logb": 2}, None), ({"loga": 5, "logb": 6}, "empty_shard")],
)
def test_exactly_once_with_few_single_or_empty_shards(tmp_path, logs, extra):
    root = write_test_dataset(tmp_path / "d", logs, shard_size_mb=1.0 if len(logs) == 1 else 0.025)
    if extra == "empty_shard":
        add_empty_shard(root, position=2)
    expected = {f"{log}_{i:06d}" for log, n in logs.items() for i in range(n)}
    seq = _global_sequence(root, world=2, batch=2, workers=2)  # 2 ranks x 2 workers
    assert set(seq) == expected
    steps = -(-len(expected) // 4)
    assert len(seq) == steps * 4  # every rank got `steps` full batches; the rest is padding


def test_padding_is_flagged_and_drop_policy_reports_dropped(dataset):
    loader = build_loader(str(dataset), rank=3, world_size=4, batch_size=4, num_workers=0, seed=5)
    flags = [bool(f) for b in loader for f in b["__padded__"]]
    assert sum(flags) == loader.stats.padded == 2 and loader.stats.padded_global == 2
    drop = build_loader(
        str(dataset),
        rank=0,
        world_size=4,
        batch_size=4,
        num_workers=0,
        seed=5,
        config=LoaderConfig(pad_policy="drop"),
    )
    assert len(drop) == 1 and sum(len(b["__key__"]) for b in drop) == 4
    assert drop.stats.dropped_global == 14


def test_len_is_equal_on_every_rank_and_epochs_advance(dataset):
    lengths = {
        len(build_loader(str(dataset), rank=r, world_size=3, batch_size=4, num_workers=0, seed=1))
        for r in range(3)
    }
    assert lengths == {3}
    loader = build_loader(str(dataset), rank=0, world_size=1, batch_size=8, num_workers=0, seed=1)
    first = [k for b in loader for k in b["__key__"]]
    second = [k for b in loader for k in b["__key__"]]  # no set_epoch: the loader moves to epoch 1
    assert loader.epoch == 2 and set(first) == set(second) and first != second


def test_resume_at_an_epoch_boundary_does_not_repeat_an_epoch(dataset):
    """A state saved right after an epoch's last batch resumes at the next epoch's start."""
    from platform_lib.training.data import iterate_epochs

    def loader():
        return build_loader(
            str(dataset), rank=0, world_size=1, batch_size=10, num_workers=0, seed=5
        )

    reference = iterate_epochs(loader())
    full = [next(reference)["__key__"] for _ in range(9)]  # 3 epochs of 3 batches
    first = loader()
    stream = iterate_epochs(first)
    seen = [next(stream)["__key__"] for _ in range(3)]  # exactly one epoch
    state = first.state_dict()
    assert (state["epoch"], state["consumed_samples"]) == (1, 0)
    resumed = loader()
    resumed.load_state_dict({**state, "epoch": 0, "consumed_samples": 30})  # older states too
    assert (resumed.epoch, resumed.state_dict()["consumed_samples"]) == (1, 0)
    stream = iterate_epochs(resumed)
    assert seen + [next(stream)["__key__"] for _ in range(6)] == full
