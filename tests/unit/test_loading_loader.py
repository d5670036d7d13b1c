"""Loader features over real shards: decode modes, sample_transform stacking, temporal windows,
dataset mixing, and the input-wait meter."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from platform_lib.loading.input_wait import InputWaitMeter
from tests.support.datasets import write_test_dataset

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return write_test_dataset(
        tmp_path_factory.mktemp("feat") / "data", {"loga": 8, "logb": 5, "logc": 3}
    )


def test_input_wait_meter_measures_an_injected_stall_within_10_percent():
    stall_s, step_s = 0.2, 0.01

    def batches():
        for i in range(20):
            if i == 10:
                time.sleep(stall_s)
            yield i

    meter = InputWaitMeter()
    for _ in meter.wrap(batches()):
        time.sleep(step_s)
    assert len(meter.waits_s) == 20
    assert abs(meter.waits_s[10] - stall_s) < 0.1 * stall_s
    assert np.median(meter.waits_s) < 0.005
    summary = meter.summary()
    assert summary["max_wait_s"] == meter.waits_s[10] and 0.4 < summary["input_wait_fraction"] < 0.6


def test_large_arrays_travel_through_one_shared_memory_arena_unchanged():
    from platform_lib.loading.transport import ARENA_KEY, pack_arrays, unpack_arrays

    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, size=(64, 96, 3), dtype=np.uint8)
    points = rng.normal(size=(5000, 4)).astype(np.float32)
    small = np.eye(3)
    batch = {
        "cameras": [{"front": image}],
        "lidar": [points, points[::2]],
        "calib": [small],
        "__key__": ["k"],
    }
    packed = pack_arrays(batch)
    assert packed[ARENA_KEY].is_shared() and packed["calib"][0] is small  # small arrays stay put
    assert not isinstance(packed["lidar"][0], np.ndarray)
    restored = unpack_arrays(packed)
    assert np.array_equal(restored["cameras"][0]["front"], image)
    assert np.array_equal(restored["lidar"][0], points) and np.array_equal(
        restored["lidar"][1], points[::2]
    )
    assert restored["lidar"][1].dtype == np.float32 and restored["__key__"] == ["k"]


def test_small_tensors_travel_by_value_and_an_unpacked_batch_is_not_walked():
    import torch

    from platform_lib.loading.transport import ARENA_KEY, pack_arrays, unpack_arrays

    packed = pack_arrays({"padded": [torch.tensor([1, 2])], "__key__": ["k"]})
    assert packed[ARENA_KEY] is None  # packed, nothing large: no arena
    restored = unpack_arrays(packed)
    assert torch.equal(restored["padded"][0], torch.tensor([1, 2])) and ARENA_KEY not in restored
    read_here = {"lidar": [np.zeros(3)], "__key__": ["k"]}  # read in the main process
    assert unpack_arrays(read_here) is read_here
