"""Persistent workers start the next epoch as soon as the current one is received: the first
batch of epoch e + 1 is made while the training loop still works on epoch e's last batches."""

from __future__ import annotations

import time
from pathlib import Path

from loading_helpers import write_test_dataset

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader


class _StampTransform:
    """Appends "<key> <time>" per sample to a file (the transform runs in the workers)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, sample: dict) -> dict:
        with open(self.path, "a") as f:
            f.write(f"{sample['__key__']} {time.time()}\n")
        return {"n": len(sample["lidar"])}


def _stamps(path: Path) -> list[tuple[str, float]]:
    return [(k, float(t)) for k, t in (line.split() for line in path.read_text().splitlines())]


def test_next_epoch_is_made_while_the_last_batches_are_consumed(tmp_path):
    root = write_test_dataset(tmp_path / "ds", {"log-a": 4})
    stamps = tmp_path / "stamps.txt"
    loader = build_loader(
        str(root),
        rank=0,
        world_size=1,
        batch_size=2,
        num_workers=1,
        seed=0,
        decode="none",
        config=LoaderConfig(sample_transform=_StampTransform(stamps)),
    )
    with loader:
        first = [b["__key__"] for b in loader]  # epoch 0, every batch consumed
        assert len(first) == 2 and loader.state_dict()["epoch"] == 1
        time.sleep(1.0)  # the training loop's last step of epoch 0
        asked = time.time()
        assert loader.state_dict() == {**loader.state_dict(), "epoch": 1, "consumed_samples": 0}
        second = [b["__key__"] for b in loader]  # epoch 1
    made = _stamps(stamps)
    assert len(made) >= 8
    epoch1_first = sorted(second[0])
    made_epoch1 = made[4:6]  # the 5th and 6th transformed samples: epoch 1's first batch
    assert sorted(k for k, _ in made_epoch1) == epoch1_first
    assert all(t < asked for _, t in made_epoch1), (
        "epoch 1's first batch was made only when asked for"
    )


def test_a_different_position_restarts_the_workers_there(tmp_path):
    root = write_test_dataset(tmp_path / "ds", {"log-a": 6})
    loader = build_loader(
        str(root), rank=0, world_size=1, batch_size=2, num_workers=1, seed=0, decode="none"
    )
    reference = build_loader(
        str(root), rank=0, world_size=1, batch_size=2, num_workers=0, seed=0, decode="none"
    )
    with loader:
        list(loader)  # epoch 0; the workers start epoch 1 ahead
        loader.set_epoch(5)  # ... but the loop wants epoch 5
        reference.set_epoch(5)
        assert [b["__key__"] for b in loader] == [b["__key__"] for b in reference]
        state = {**loader.state_dict(), "epoch": 2, "consumed_samples": 2}
        loader.load_state_dict(state)
        reference.load_state_dict(state)
        assert [b["__key__"] for b in loader] == [b["__key__"] for b in reference]
