"""Resume on the same and on other world sizes / worker counts, and small or odd datasets."""

from __future__ import annotations

from pathlib import Path

import pytest

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.errors import ResumeStateError
from platform_lib.loading.loader import build_loader
from tests.support.datasets import write_test_dataset

pytestmark = pytest.mark.timeout(120)


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
