"""Loader features over real shards: decode modes, sample_transform stacking, temporal windows,
dataset mixing, and the input-wait meter."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from loading_helpers import write_test_dataset

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.input_wait import InputWaitMeter
from platform_lib.loading.loader import build_loader

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return write_test_dataset(
        tmp_path_factory.mktemp("feat") / "data", {"loga": 8, "logb": 5, "logc": 3}
    )


def _to_fixed(sample):
    """Picklable transform: fixed-size tensors out of one decoded sample."""
    return {
        "image": torch.as_tensor(sample["cameras"]["front_camera"]).permute(2, 0, 1).float() / 255,
        "num_points": torch.tensor(len(sample["lidar"])),
    }


def test_decode_cpu_gives_rgb_arrays_and_none_gives_jpeg_bytes(dataset):
    cpu = next(
        iter(build_loader(str(dataset), rank=0, world_size=1, batch_size=4, num_workers=1, seed=0))
    )
    raw = next(
        iter(
            build_loader(
                str(dataset),
                rank=0,
                world_size=1,
                batch_size=4,
                num_workers=1,
                seed=0,
                decode="none",
            )
        )
    )
    assert cpu["__key__"] == raw["__key__"] and len(cpu["lidar"]) == 4
    image = cpu["cameras"][0]["front_camera"]
    assert isinstance(image, np.ndarray) and image.shape == (16, 24, 3) and image.dtype == np.uint8
    jpeg = raw["cameras"][0]["front_camera"]
    assert (
        isinstance(jpeg, memoryview) and jpeg.readonly and jpeg[:2] == b"\xff\xd8"
    )  # a view of the ring
    assert cpu["lidar"][0].shape == (40, 4) and cpu["lidar"][0].dtype == np.float32
    assert cpu["__padded__"].dtype == torch.bool and cpu["__padded__"].shape == (4,)
    assert cpu["pose"][0]["log_id"] == cpu["__key__"][0].split("_")[0]


def test_sample_transform_outputs_are_stacked(dataset):
    loader = build_loader(
        str(dataset),
        rank=0,
        world_size=1,
        batch_size=5,
        num_workers=2,
        seed=0,
        config=LoaderConfig(sample_transform=_to_fixed),
    )
    batches = list(loader)
    assert (
        batches[0]["image"].shape == (5, 3, 16, 24)
        and batches[0]["num_points"].tolist() == [40] * 5
    )
    assert (
        sum(len(b["__key__"]) for b in batches) == 20
        and len({k for b in batches for k in b["__key__"]}) == 16
    )


def test_temporal_windows_are_consecutive_frames_of_one_log(dataset):
    cfg = LoaderConfig(window_frames=3)
    loader = build_loader(
        str(dataset), rank=0, world_size=1, batch_size=2, num_workers=2, seed=0, config=cfg
    )
    windows = [w for b in loader for w in b["__keys__"]]
    assert len(set(map(tuple, windows))) == 6 + 3 + 1  # 8, 5 and 3 frames give 6, 3 and 1 windows
    for keys in windows:
        logs = {k.split("_")[0] for k in keys}
        frames = [int(k.split("_")[1]) for k in keys]
        assert len(logs) == 1 and frames == list(range(frames[0], frames[0] + 3))
    batch = next(iter(loader))
    assert [f["__key__"] for f in batch["frames"][0]] == batch["__keys__"][0]
    assert batch["__key__"][0] == batch["__keys__"][0][-1]
    strided = build_loader(
        str(dataset),
        rank=0,
        world_size=1,
        batch_size=2,
        num_workers=0,
        seed=0,
        config=LoaderConfig(window_frames=3, window_stride=3),
    )
    firsts = sorted(w[0] for b in strided for w in b["__keys__"])
    assert set(firsts) == {"loga_000000", "loga_000003", "logb_000000", "logc_000000"}


def test_mixing_two_datasets_realises_the_weights(dataset, tmp_path):
    other = write_test_dataset(tmp_path / "other", {"xlog": 6})
    cfg = LoaderConfig(mix_epoch_samples=200)
    mixed = [(str(dataset), 0.75), (str(other), 0.25)]
    loader = build_loader(
        mixed, rank=0, world_size=2, batch_size=4, num_workers=2, seed=3, config=cfg
    )
    keys = [k for b in loader for k in b["__key__"]]
    peer = build_loader(
        mixed, rank=1, world_size=2, batch_size=4, num_workers=0, seed=3, config=cfg
    )
    keys += [k for b in peer for k in b["__key__"]]
    share = Counter(k.startswith("xlog") for k in keys)
    assert len(keys) == 200 and share[True] == 50
    again = build_loader(
        mixed, rank=0, world_size=2, batch_size=4, num_workers=0, seed=3, config=cfg
    )
    assert [k for b in again for k in b["__key__"]] == keys[:100]


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
