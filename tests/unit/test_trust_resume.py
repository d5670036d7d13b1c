"""Resume identity: a loader state resumes only the split, layout and dataset it was saved on."""

from __future__ import annotations

from pathlib import Path

import pytest
from loading_helpers import write_test_dataset

from platform_lib.loading.errors import ResumeStateError
from platform_lib.loading.loader import build_loader

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    # train (loga) and val (logb) hold the same number of samples: only the split tells them apart
    return write_test_dataset(
        tmp_path_factory.mktemp("trust") / "data", {"loga": 6, "logb": 6}, val_logs=("logb",)
    )


def _loader(dataset, *, split="train", world=1, batch=2, workers=0):
    return build_loader(
        str(dataset),
        rank=0,
        world_size=world,
        batch_size=batch,
        num_workers=workers,
        seed=3,
        split=split,
    )


def _state(dataset, *, steps=1, **layout):
    loader = _loader(dataset, **layout)
    iterator = iter(loader)
    for _ in range(steps):
        next(iterator)
    return loader.state_dict()


def test_a_train_split_state_does_not_resume_the_val_split(dataset):
    state = _state(dataset, split="train")
    val = _loader(dataset, split="val")
    with pytest.raises(ResumeStateError, match=r"'split' is 'train', this loader has 'val'"):
        val.load_state_dict(state)
    train = _loader(dataset, split="train")
    train.load_state_dict(state)  # the same split resumes where it stopped
    assert train.state_dict()["consumed_samples"] == 2


@pytest.mark.parametrize(
    "saved,resumed,named",
    [
        ({"world": 2, "batch": 1}, {"world": 3, "batch": 1}, "world_size 2 -> 3"),
        ({"world": 1, "batch": 2}, {"world": 1, "batch": 3}, "batch_size 2 -> 3"),
    ],
)
def test_a_layout_that_breaks_the_position_names_the_field_and_both_values(
    dataset, saved, resumed, named
):
    state = _state(dataset, **saved)  # 2 consumed samples: not a multiple of 3
    with pytest.raises(ResumeStateError, match=named):
        _loader(dataset, **resumed).load_state_dict(state)


def test_same_layout_refuses_another_worker_layout_naming_both_values(dataset):
    state = _state(dataset, workers=0)
    assert state["num_workers"] == 0
    with pytest.raises(ResumeStateError, match="num_workers 0 -> 2"):
        _loader(dataset, workers=2).load_state_dict(state, same_layout=True)


@pytest.mark.parametrize(
    "change",
    [
        lambda s: None,
        lambda s: [s],
        lambda s: "state",
        lambda s: {**s, "consumed_samples": None},
        lambda s: {**s, "consumed_samples": "2"},
        lambda s: {**s, "epoch": [0]},
        lambda s: {k: v for k, v in s.items() if k != "epoch"},
        lambda s: {k: v for k, v in s.items() if k != "consumed_samples"},
        lambda s: {**s, "global_batch": 0, "consumed_samples": 2},
    ],
    ids=[
        "none",
        "list",
        "str",
        "consumed-none",
        "consumed-str",
        "epoch-list",
        "no-epoch",
        "no-consumed",
        "global-batch-0",
    ],
)
def test_a_malformed_state_is_a_resume_state_error(dataset, change):
    state = _state(dataset)
    with pytest.raises(ResumeStateError):
        _loader(dataset).load_state_dict(change(state))
