"""Camera decode in the training process (`data.camera_decode="device"`): the worker transform
sends JPEG bytes and the lift, the collate packs a batch's JPEGs into one array plus offsets,
and `decode_camera_batch` fills "camera_images" (CPU decoder here; nvJPEG on CUDA)."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
import torch
from PIL import Image

from platform_lib.imaging.decode import gpu_decode_available
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.dataset import BatchStream
from platform_lib.loading.loader import build_loader
from platform_lib.loading.ring import SlotWriter
from platform_lib.models.bev_fusion.prepare import (
    build_sample_transform,
    camera_resize,
    prepare_sample,
)
from platform_lib.models.presets import get_model_config
from platform_lib.training.config import ConfigError, DataConfig, TrainConfig, hash_config
from platform_lib.training.data import (
    build_train_transform,
    camera_batch_decoder,
    decode_camera_batch,
)
from platform_lib.training.loop import next_batch
from schemas.batch import ByteRuns
from tests.support.datasets import write_test_dataset

CFG = get_model_config("bev_fusion_small")
K = np.array([[80.0, 0.0, 80.0], [0.0, 80.0, 48.0], [0.0, 0.0, 1.0]])
FORWARD = np.eye(4)
FORWARD[:3, :3] = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
CPU = torch.device("cpu")
#: the decode tolerance of tests/unit/test_loading_decode.py (mean absolute error, uint8 levels)
MAX_MEAN_ABS_ERROR = 3.0


def _jpeg(seed: int, size=(160, 96)) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 255, size=(size[1] // 8, size[0] // 8, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).resize(size, Image.Resampling.BILINEAR).save(buffer, format="JPEG")
    return buffer.getvalue()


def _sample(cameras: int = 2, key: str = "log-a_000007") -> dict:
    names = [f"cam_{i}" for i in range(cameras)]
    calib = {"width": 160, "height": 96, "intrinsics": K, "extrinsics": FORWARD}
    return {
        "__key__": key,
        "cameras": {n: _jpeg(i) for i, n in enumerate(names)},
        "calib": {"cameras": dict.fromkeys(names, calib)},
        "lidar": np.array([[10.1, 0.1, -1.0, 200.0], [-20.0, 20.0, 0.0, 50.0]], np.float32),
        "radar": None,
        "cuboids": {},
    }


def _collate(samples: list[dict]) -> dict:
    """The loader workers' collate, without a ring (fresh arrays)."""
    stream = BatchStream.__new__(BatchStream)  # only its collate runs: no dataset behind it
    stream.config = LoaderConfig(sample_transform=build_sample_transform(CFG, "device"))
    items = [(s["__key__"], prepare_sample(s, CFG, "device")) for s in samples]
    return stream._collate(items, np.zeros(len(items), dtype=bool), SlotWriter(None, None))


def test_device_mode_sends_jpeg_views_and_the_worker_lift():
    sample = _sample(cameras=2)
    worker, device = prepare_sample(sample, CFG), prepare_sample(sample, CFG, "device")
    assert "camera_images" not in device and "camera_images" in worker
    assert torch.equal(device["camera_index"], worker["camera_index"])
    runs = device["camera_jpegs"]
    assert isinstance(runs, ByteRuns) and len(runs) == CFG.max_cameras
    assert [bytes(r) for r in runs[:2]] == [sample["cameras"]["cam_0"], sample["cameras"]["cam_1"]]
    assert all(len(r) == 0 for r in runs[2:])
    assert device["camera_jpeg_size"][:2].tolist() == [[96, 160], [96, 160]]
    assert device["camera_jpeg_size"][2:].abs().sum() == 0
    # the transform pickles into spawned workers with its mode
    again = pickle.loads(pickle.dumps(build_sample_transform(CFG, "device")))(sample)
    assert torch.equal(again["camera_index"], worker["camera_index"])


def test_decode_camera_batch_gives_the_worker_pixels_exactly():
    samples = [_sample(cameras=2, key="a_000001"), _sample(cameras=1, key="a_000002")]
    batch = _collate(samples)
    assert batch["camera_jpegs"]["data"].dtype == np.uint8
    assert batch["camera_jpegs"]["offsets"].shape == (2 * CFG.max_cameras + 1,)
    decoded = decode_camera_batch(batch, CPU, resize=camera_resize(CFG))
    assert "camera_jpegs" not in decoded and "camera_jpeg_size" not in decoded
    expected = torch.stack([prepare_sample(s, CFG)["camera_images"] for s in samples])
    assert decoded["camera_images"].shape == expected.shape
    assert torch.equal(decoded["camera_images"], expected)


def test_device_mode_refuses_decoded_arrays_naming_the_camera():
    sample = _sample(cameras=1)
    sample["cameras"]["cam_0"] = simplejpeg.decode_jpeg(sample["cameras"]["cam_0"])
    with pytest.raises(ValueError, match=r"log-a_000007 camera cam_0: camera_decode='device'"):
        prepare_sample(sample, CFG, "device")


def test_loader_batches_of_both_modes_agree_in_process(tmp_path: Path):
    root = write_test_dataset(tmp_path / "data", {"loga": 4})
    cfg = get_model_config("bev_fusion_small")

    def first(mode: str) -> dict:
        loader = build_loader(
            str(root),
            rank=0,
            world_size=1,
            batch_size=3,
            num_workers=0,
            seed=0,
            decode="none",
            config=LoaderConfig(sample_transform=build_sample_transform(cfg, mode)),
        )
        return next(iter(loader))

    worker = first("worker")
    decode = camera_batch_decoder(cfg, DataConfig(camera_decode="device"))
    assert decode is not None
    device, _ = next_batch(iter([first("device")]), CPU, decode)
    assert set(device) == set(worker)
    for key, value in worker.items():
        if torch.is_tensor(value):
            assert torch.equal(device[key], value), key


def test_camera_decode_setting_keeps_old_hashes_and_names_its_field():
    assert DataConfig().camera_decode == "worker"
    assert "camera_decode" not in TrainConfig().to_dict()["data"]
    device = TrainConfig.from_dict({"data": {"camera_decode": "device"}})
    assert device.to_dict()["data"]["camera_decode"] == "device"
    assert hash_config(device) != hash_config(TrainConfig())
    with pytest.raises(ConfigError, match="camera_decode"):
        TrainConfig.from_dict({"data": {"camera_decode": "gpu"}})
    assert camera_batch_decoder(CFG, DataConfig()) is None


def test_device_decode_is_refused_for_temporal_and_world_models():
    data = DataConfig(camera_decode="device")
    for name in ("bev_fusion_temporal", "world_model_small"):
        with pytest.raises(ConfigError, match="data.camera_decode"):
            build_train_transform(get_model_config(name), data)


@pytest.mark.gpu
@pytest.mark.skipif(
    not gpu_decode_available(), reason="needs a CUDA device and torchvision (nvJPEG)"
)
def test_cuda_decode_matches_the_cpu_twin_within_tolerance():
    batch = _collate([_sample(cameras=2), _sample(cameras=1, key="b")])
    cpu = decode_camera_batch(batch, CPU, resize=camera_resize(CFG))["camera_images"]
    cuda = decode_camera_batch(batch, torch.device("cuda"), resize=camera_resize(CFG))
    images = cuda["camera_images"]
    assert images.is_cuda and images.shape == cpu.shape
    levels = ((images.cpu() - cpu).abs() * 255).mean().item()
    assert levels <= MAX_MEAN_ABS_ERROR
