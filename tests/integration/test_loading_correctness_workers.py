"""Mixed batches from worker processes carry the source of each sample; the in-process
correctness tests are in tests/unit/test_loading_correctness.py.
"""

from __future__ import annotations

import pytest

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader
from tests.support.datasets import write_test_dataset

pytestmark = pytest.mark.timeout(120)


def test_mixed_batches_carry_the_source_of_each_sample(tmp_path):
    first = write_test_dataset(tmp_path / "a", {"log": 6})
    second = write_test_dataset(tmp_path / "b", {"log": 6})  # the very same keys
    mixed = [(str(first), 0.5), (str(second), 0.5)]
    loader = build_loader(
        mixed,
        rank=0,
        world_size=1,
        batch_size=4,
        num_workers=1,
        seed=0,
        config=LoaderConfig(mix_epoch_samples=12),
    )
    sources, keys = [], []
    for batch in loader:
        assert len(batch["__source__"]) == len(batch["__key__"])
        sources += batch["__source__"].tolist()
        keys += batch["__key__"]
    source, unit = loader.epoch_order(0)
    assert sources == [int(s) for s in source]
    assert sorted(set(sources)) == [0, 1] and len(set(keys)) < len(keys)  # keys collide
