"""`data.camera_decode="device"` through 2 loader workers and the shared-memory ring, on the real
PandaSet sample: each batch's JPEGs arrive as one array plus offsets in the ring, and the
training process's decode (the CPU twin here) gives the batches of `camera_decode="worker"`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader
from platform_lib.models.bev_fusion.prepare import build_sample_transform
from platform_lib.models.presets import get_model_config
from platform_lib.shards.build import BuildConfig, build_dataset
from platform_lib.training.config import DataConfig
from platform_lib.training.data import camera_batch_decoder
from platform_lib.training.loop import next_batch
from platform_lib.training.overrides import apply_overrides
from platform_lib.training.presets import small
from platform_lib.training.train import train

pytestmark = pytest.mark.timeout(300)

CFG = get_model_config("bev_fusion_small")


@pytest.fixture(scope="module")
def pandaset_dataset(pandaset_root: Path, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pandaset-camera-decode") / "ds"
    build_dataset("pandaset", pandaset_root, root, BuildConfig(progress=False))
    return root


def _batches(root: Path, mode: str) -> tuple[list[dict], int]:
    """All batches of epoch 0 (2 workers, ring), host-side, and the ring fallbacks."""
    loader = build_loader(
        str(root),
        rank=0,
        world_size=1,
        batch_size=4,
        num_workers=2,
        seed=0,
        decode="none",
        config=LoaderConfig(
            sample_transform=build_sample_transform(CFG, mode), multiprocessing_context="fork"
        ),
    )
    decode = camera_batch_decoder(CFG, DataConfig(camera_decode=mode))
    try:
        batches, source = [], iter(loader)
        for _ in range(len(loader)):
            batch, _ = next_batch(source, torch.device("cpu"), decode)
            batches.append(batch)
        return batches, loader.stats.ring_fallbacks
    finally:
        loader.close()


def test_device_decode_gives_the_worker_batches(pandaset_dataset: Path):
    worker, _ = _batches(pandaset_dataset, "worker")
    device, fallbacks = _batches(pandaset_dataset, "device")
    assert fallbacks == 0  # the JPEG arrays went through the ring like the other arrays
    assert len(device) == len(worker) > 1
    for got, want in zip(device, worker, strict=True):
        assert got["__key__"] == want["__key__"]
        assert set(got) == set(want)
        images = got["camera_images"]
        assert images.shape == (4, CFG.max_cameras, 3, CFG.camera_height, CFG.camera_width)
        assert np.count_nonzero(images.abs().sum(dim=(2, 3, 4))) == 4 * 6  # 6 cameras each
        for key, value in want.items():
            if torch.is_tensor(value):
                assert torch.equal(got[key], value), key


def test_training_with_device_decode_has_the_losses_of_worker_decode(golden_dataset, tmp_path):
    """train() end to end, 2 loader workers: the CPU twin trains on exactly the same inputs."""
    overrides = {"optimizer.max_steps": 3, "data.num_workers": 2, "checkpoint.interval": 3}
    losses = {}
    for mode in ("worker", "device"):
        cfg = apply_overrides(small(), {**overrides, "data.camera_decode": mode})
        result = train(cfg, str(golden_dataset), str(tmp_path / mode))
        rows = Path(result.metrics_path).read_text().splitlines()
        losses[mode] = [json.loads(row)["loss"] for row in rows]
    assert len(losses["device"]) == 3 and losses["device"] == losses["worker"]
