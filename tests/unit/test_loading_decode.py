"""Decode at model size: crop/resize geometry, intrinsics, quality vs a reference resize, and
LiDAR points of the real PandaSet sample projected through the adjusted intrinsics."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
from PIL import Image, ImageFilter

from platform_lib.imaging.decode import (
    CameraResize,
    adjust_calib,
    adjust_intrinsics,
    decode_batch_cameras_gpu,
    decode_jpeg_cpu,
    decode_jpegs_gpu,
    decode_sample_cameras,
    gpu_decode_available,
    plan_camera_resize,
    resize_on_device,
)
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.dataset import resolve_decode_threads
from platform_lib.loading.loader import build_loader
from platform_lib.shards.build import BuildConfig, build_dataset
from platform_lib.shards.codec import decode_sample
from platform_lib.shards.reader import open_dataset
from tests.support.datasets import write_test_dataset
from tests.support.geometry import project_points

PANDASET = Path(__file__).parents[2].parent / "shared" / "data" / "pandaset"
BEV_SIZE = CameraResize(width=704, height=256)
#: Mean absolute error (uint8 levels) allowed against Pillow's Lanczos resize of the full-size
#: decode. The resampling filter alone (bilinear vs Lanczos, both on the full decode) accounts
#: for 0.6-1.8 levels on these images; DCT-domain scaling adds < 1 level on top.
MAX_MEAN_ABS_ERROR = 3.0
MAX_DCT_EXTRA_ERROR = 1.0


def _reference(
    full: np.ndarray, resize: CameraResize, resample=Image.Resampling.LANCZOS
) -> np.ndarray:
    plan = plan_camera_resize(full.shape[1], full.shape[0], resize)
    box = (plan.crop_x, plan.crop_y, plan.crop_x + plan.crop_width, plan.crop_y + plan.crop_height)
    return np.asarray(
        Image.fromarray(full).resize((resize.width, resize.height), resample, box=box)
    )


def _mae(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def test_plan_crops_the_bottom_of_a_16_9_frame_for_704x256():
    plan = plan_camera_resize(1920, 1080, BEV_SIZE)
    assert (plan.crop_x, plan.crop_width) == (0, 1920)  # full width: width is the binding side
    assert plan.crop_height == round(256 * 1920 / 704) == 698
    assert plan.crop_y == 1080 - 698  # anchor_y=1.0 keeps the bottom rows (road)
    assert plan.scale_x == pytest.approx(704 / 1920) and plan.scale_y == pytest.approx(256 / 698)
    top = plan_camera_resize(1920, 1080, CameraResize(width=704, height=256, anchor_y=0.0))
    assert top.crop_y == 0
    same_aspect = plan_camera_resize(160, 96, CameraResize(width=80, height=48))
    assert (
        same_aspect.crop_x,
        same_aspect.crop_y,
        same_aspect.crop_width,
        same_aspect.crop_height,
    ) == (0, 0, 160, 96)
    tall = plan_camera_resize(1920, 1080, CameraResize(width=80, height=48))
    assert (tall.crop_x, tall.crop_width, tall.crop_height) == (60, 1800, 1080)  # centred side crop


@pytest.mark.parametrize("field", ["width", "height", "anchor_y"])
def test_resize_config_rejects_impossible_values_naming_the_field(field):
    with pytest.raises(ValueError, match=field):
        CameraResize(**{"width": 704, "height": 256, field: -1})


def test_adjusted_intrinsics_project_where_the_pixels_moved():
    rng = np.random.default_rng(0)
    k = np.array([[1970.0, 0.4, 970.7], [0.0, 1969.5, 483.2], [0.0, 0.0, 1.0]])
    points = rng.uniform([-20, -10, 2], [20, 10, 80], size=(500, 3))  # camera frame, z ahead
    for resize in (
        BEV_SIZE,
        CameraResize(width=960, height=540),
        CameraResize(width=80, height=48, anchor_y=0.3),
    ):
        plan = plan_camera_resize(1920, 1080, resize)
        uv, _ = project_points(points, k, np.eye(4))
        uv_out, _ = project_points(points, adjust_intrinsics(k, plan), np.eye(4))
        np.testing.assert_allclose(uv_out, plan.to_output(uv), atol=1e-9)
    # the source's pixel grid maps onto the output's: the crop box corners land on the output borders
    plan = plan_camera_resize(1920, 1080, BEV_SIZE)
    corners = np.array([[plan.crop_x - 0.5, plan.crop_y - 0.5], [1920 - 0.5, 1080 - 0.5]])
    np.testing.assert_allclose(plan.to_output(corners), [[-0.5, -0.5], [703.5, 255.5]])


def test_decode_of_a_same_aspect_image_is_the_dct_decode_itself():
    image = np.random.default_rng(1).integers(0, 255, (96, 160, 3), dtype=np.uint8)
    data = simplejpeg.encode_jpeg(image, quality=95, colorspace="RGB")
    out = decode_jpeg_cpu(data, CameraResize(width=80, height=48))
    assert np.array_equal(
        out, simplejpeg.decode_jpeg(data, colorspace="RGB", min_width=80, min_height=48)
    )
    assert np.array_equal(decode_jpeg_cpu(data), simplejpeg.decode_jpeg(data, colorspace="RGB"))
    with pytest.raises(ValueError):
        decode_jpeg_cpu(data[: len(data) // 3] + b"\x00" * 16, CameraResize(width=80, height=48))


@pytest.fixture(scope="module")
def pandaset_sample(tmp_path_factory):
    if not (PANDASET / "002").is_dir():
        pytest.skip(f"PandaSet sample not found at {PANDASET / '002'}")
    root = tmp_path_factory.mktemp("pandaset-decode") / "ds"
    build_dataset("pandaset", PANDASET, root, BuildConfig(progress=False))
    reader = open_dataset(root)
    return decode_sample(reader.read_sample(reader.keys[0]), decode="none")


@pytest.mark.parametrize("resize", [BEV_SIZE, CameraResize(width=352, height=128)], ids=str)
def test_dct_downscaled_decode_matches_a_reference_resize(pandaset_sample, resize):
    for name, data in sorted(pandaset_sample["cameras"].items()):
        out = decode_jpeg_cpu(data, resize)
        assert out.shape == (resize.height, resize.width, 3) and out.dtype == np.uint8
        full = simplejpeg.decode_jpeg(data, colorspace="RGB")
        error = _mae(out, _reference(full, resize))
        same_filter = _mae(
            _reference(full, resize, Image.Resampling.BILINEAR), _reference(full, resize)
        )
        assert error <= MAX_MEAN_ABS_ERROR, f"{name}: mean abs error {error:.2f} levels"
        assert error - same_filter <= MAX_DCT_EXTRA_ERROR, (
            f"{name}: DCT scaling adds {error - same_filter:.2f}"
        )


def _inside(
    uv: np.ndarray, depth: np.ndarray, width: float, height: float, x0: float = 0.0, y0: float = 0.0
):
    return (
        (depth > 0.1)
        & (uv[:, 0] >= x0 - 0.5)
        & (uv[:, 0] < x0 + width - 0.5)
        & (uv[:, 1] >= y0 - 0.5)
        & (uv[:, 1] < y0 + height - 0.5)
    )


@pytest.mark.parametrize("resize", [BEV_SIZE, CameraResize(width=960, height=540)], ids=str)
def test_lidar_lands_in_the_downscaled_image_as_at_full_size(pandaset_sample, resize):
    points = pandaset_sample["lidar"][:, :3].astype(np.float64)
    for name, calib in sorted(pandaset_sample["calib"]["cameras"].items()):
        small = adjust_calib(calib, resize)
        plan = small["resize"]
        uv, depth = project_points(points, calib["intrinsics"], calib["extrinsics"])
        uv_out, depth_out = project_points(points, small["intrinsics"], small["extrinsics"])
        np.testing.assert_array_equal(depth_out, depth)
        front = depth > 0.1
        np.testing.assert_allclose(uv_out[front], plan.to_output(uv[front]), atol=1e-6)
        # the points inside the crop box at full size are the points inside the output image
        in_box = _inside(uv, depth, plan.crop_width, plan.crop_height, plan.crop_x, plan.crop_y)
        in_out = _inside(uv_out, depth_out, plan.width, plan.height)
        assert in_box.sum() > 1000, name
        assert (in_box != in_out).sum() <= 2, (
            f"{name}: {(in_box != in_out).sum()} points change sides"
        )
        if (plan.crop_width, plan.crop_height) == (1920, 1080):  # no crop: the very same fraction
            assert in_out.mean() == _inside(uv, depth, 1920, 1080).mean()


def test_lidar_hits_the_same_image_content_at_both_sizes(pandaset_sample):
    """Pixels under each projected point agree between the full and the 704x256 image, and
    agree worse with a half-pixel-naive shift of the principal point: intrinsics follow content."""
    points = pandaset_sample["lidar"][:, :3].astype(np.float64)
    calib = pandaset_sample["calib"]["cameras"]["front_camera"]
    data = pandaset_sample["cameras"]["front_camera"]
    full = np.asarray(
        Image.fromarray(simplejpeg.decode_jpeg(data, colorspace="RGB")).filter(
            ImageFilter.BoxBlur(1)
        )
    ).astype(np.int16)
    small = decode_jpeg_cpu(data, BEV_SIZE).astype(np.int16)
    out_calib = adjust_calib(calib, BEV_SIZE)
    uv, depth = project_points(points, calib["intrinsics"], calib["extrinsics"])
    keep = _inside(
        uv,
        depth,
        out_calib["resize"].crop_width,
        out_calib["resize"].crop_height,
        out_calib["resize"].crop_x,
        out_calib["resize"].crop_y,
    )

    def colour_error(k_out: np.ndarray) -> float:
        uv_out, _ = project_points(points[keep], k_out, calib["extrinsics"])
        cols = np.clip(np.rint(uv_out[:, 0]), 0, 703).astype(int)
        rows = np.clip(np.rint(uv_out[:, 1]), 0, 255).astype(int)
        ref = full[np.rint(uv[keep, 1]).astype(int), np.rint(uv[keep, 0]).astype(int)]
        return float(np.abs(small[rows, cols] - ref).mean())

    right = colour_error(out_calib["intrinsics"])
    shifted = out_calib["intrinsics"].copy()
    shifted[1, 2] += 2.0  # two output pixels off vertically
    assert right < 0.6 * colour_error(shifted), (right, colour_error(shifted))


def test_loader_rejects_gpu_decode_it_cannot_run(tmp_path):
    root = write_test_dataset(tmp_path / "ds", {"log-a": 2})
    with pytest.raises(ValueError, match="sample_transform"):
        build_loader(
            str(root),
            rank=0,
            world_size=1,
            batch_size=1,
            num_workers=0,
            seed=0,
            decode="gpu",
            config=LoaderConfig(sample_transform=dict),
        )
    if not gpu_decode_available():
        with pytest.raises(ValueError, match="CUDA"):
            build_loader(
                str(root), rank=0, world_size=1, batch_size=1, num_workers=0, seed=0, decode="gpu"
            )
    with pytest.raises(ValueError, match="decode must be"):
        build_loader(
            str(root), rank=0, world_size=1, batch_size=1, num_workers=0, seed=0, decode="nvjpeg"
        )


def _same_decoded(a: dict, b: dict) -> None:
    """Assert two decoded samples are equal: images byte for byte, calib value for value."""
    assert list(a["cameras"]) == list(b["cameras"])
    for name in a["cameras"]:
        assert a["cameras"][name].dtype == b["cameras"][name].dtype == np.uint8
        assert np.array_equal(a["cameras"][name], b["cameras"][name]), name
    for name, cam in a["calib"]["cameras"].items():
        other = b["calib"]["cameras"][name]
        assert cam.keys() == other.keys()
        for field in cam:
            assert np.array_equal(np.asarray(cam[field]), np.asarray(other[field])), (name, field)


@pytest.mark.parametrize("resize", [None, BEV_SIZE], ids=str)
def test_threaded_camera_decode_equals_the_serial_decode(pandaset_sample, resize):
    serial = decode_sample_cameras(pandaset_sample, resize)
    with ThreadPoolExecutor(3) as pool:
        threaded = decode_sample_cameras(pandaset_sample, resize, pool=pool)
    assert len(threaded["cameras"]) == 6
    _same_decoded(threaded, serial)


def test_threaded_camera_decode_raises_the_serial_error(pandaset_sample):
    names = list(pandaset_sample["cameras"])
    broken = dict(pandaset_sample["cameras"])
    broken[names[2]] = b"not a JPEG at all" * 64  # the first broken camera in sample order
    broken[names[4]] = bytes(broken[names[4]])[:2000]  # fails later, with another message
    sample = {**pandaset_sample, "cameras": broken}
    for resize in (None, BEV_SIZE):
        with pytest.raises(ValueError) as first:
            decode_sample_cameras({**sample, "cameras": {names[2]: broken[names[2]]}}, resize)
        with pytest.raises(ValueError) as serial:
            decode_sample_cameras(sample, resize)
        with ThreadPoolExecutor(4) as pool, pytest.raises(ValueError) as threaded:
            decode_sample_cameras(sample, resize, pool=pool)
        assert str(threaded.value) == str(serial.value) == str(first.value)


class _Arena:
    """`allocate` for `decode_sample_cameras`: consecutive arrays of one buffer, then None."""

    def __init__(self, nbytes: int) -> None:
        self.buffer, self.used, self.calls = np.zeros(nbytes, dtype=np.uint8), 0, 0

    def __call__(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        self.calls += 1
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if self.used + nbytes > self.buffer.nbytes:
            return None
        out = self.buffer[self.used : self.used + nbytes].view(dtype).reshape(shape)
        self.used += nbytes
        return out


def test_full_size_cameras_decode_straight_into_the_given_buffers(pandaset_sample):
    fresh = decode_sample_cameras(pandaset_sample, None)
    sizes = [image.nbytes for image in fresh["cameras"].values()]
    arena = _Arena(sum(sizes[:4]))  # room for four of the six cameras
    with ThreadPoolExecutor(3) as pool:
        placed = decode_sample_cameras(pandaset_sample, None, pool=pool, allocate=arena)
    _same_decoded(placed, fresh)
    inside = [np.shares_memory(im, arena.buffer) for im in placed["cameras"].values()]
    assert inside == [True] * 4 + [False] * 2  # the rest: fresh arrays, still decoded
    assert arena.used == arena.buffer.nbytes and arena.calls == 6
    resized = decode_sample_cameras(pandaset_sample, BEV_SIZE, allocate=_Arena(2**30))
    _same_decoded(resized, decode_sample_cameras(pandaset_sample, BEV_SIZE))  # not placed


def test_decoding_into_given_buffers_raises_the_serial_error(pandaset_sample):
    names = list(pandaset_sample["cameras"])
    broken = dict(pandaset_sample["cameras"])
    broken[names[1]] = bytes(broken[names[1]])[:2000]  # a header that parses, a body that fails
    broken[names[3]] = b"not a JPEG at all" * 64  # no header: no buffer, fails in order
    sample = {**pandaset_sample, "cameras": broken}
    with pytest.raises(ValueError) as serial:
        decode_sample_cameras(sample, None)
    with ThreadPoolExecutor(4) as pool, pytest.raises(ValueError) as placed:
        decode_sample_cameras(sample, None, pool=pool, allocate=_Arena(2**30))
    assert str(placed.value) == str(serial.value)


def _epoch(root: Path, threads: int, seen: set[str]) -> list[dict]:
    loader = build_loader(
        str(root),
        rank=0,
        world_size=1,
        batch_size=2,
        num_workers=0,
        seed=0,
        decode="cpu",
        config=LoaderConfig(decode_threads=threads, camera_resize=CameraResize(width=12, height=4)),
    )
    batches = []
    for batch in loader:
        seen.update(t.name for t in threading.enumerate())
        batches.append(batch)
    return batches


def test_loader_decode_threads_give_the_batches_of_one_thread(tmp_path):
    root = write_test_dataset(tmp_path / "ds", {"log-a": 5, "log-b": 3})
    names: set[str] = set()
    one = _epoch(root, 1, names)
    assert not any(n.startswith("decode") for n in names)
    threaded = _epoch(root, 3, names)
    assert any(n.startswith("decode") for n in names)  # the pool really ran
    assert sum(len(b["__key__"]) for b in one) == 8
    for a, b in zip(threaded, one, strict=True):
        assert a["__key__"] == b["__key__"]
        for x, y in zip(a["cameras"], b["cameras"], strict=True):
            assert x.keys() == y.keys()
            assert all(np.array_equal(x[n], y[n]) for n in x)
        assert [c["cameras"].keys() for c in a["calib"]] == [
            c["cameras"].keys() for c in b["calib"]
        ]


def test_decode_threads_default_divides_the_cpus_among_the_node_loaders(monkeypatch):
    cpus = len(os.sched_getaffinity(0))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert resolve_decode_threads(LoaderConfig(decode_threads=4), 2) == 4
    assert resolve_decode_threads(LoaderConfig(), 0) == max(1, min(6, cpus))
    assert resolve_decode_threads(LoaderConfig(), 2) == max(1, min(6, cpus // 2))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert resolve_decode_threads(LoaderConfig(), 2) == max(1, min(6, cpus // 8))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "many")  # not torchrun's: one rank
    assert resolve_decode_threads(LoaderConfig(), 1) == max(1, min(6, cpus))
    with pytest.raises(ValueError, match="decode_threads"):
        LoaderConfig(decode_threads=0)


def test_device_crop_resize_matches_the_cpu_decode_and_batches_by_size(pandaset_sample):
    """The GPU path's crop + resize (`resize_on_device`), run on CPU tensors of the full decode."""
    import torch

    datas = [data for _, data in sorted(pandaset_sample["cameras"].items())]
    fulls = [simplejpeg.decode_jpeg(data, colorspace="RGB") for data in datas]
    images = [torch.from_numpy(full).permute(2, 0, 1) for full in fulls]
    half = images[0][:, ::2, ::2].contiguous()  # another source size: its own group, own plan
    out = resize_on_device([images[0], half, *images[1:]], BEV_SIZE)
    # batching by source size changes nothing
    assert torch.equal(out[0], resize_on_device(images[:1], BEV_SIZE)[0])
    assert torch.equal(out[1], resize_on_device([half], BEV_SIZE)[0])
    for data, full, image in zip(datas, fulls, [out[0], *out[2:]], strict=True):
        assert tuple(image.shape) == (3, 256, 704) and image.dtype == torch.uint8
        pixels = image.permute(1, 2, 0).numpy()
        assert _mae(pixels, _reference(full, BEV_SIZE)) <= MAX_MEAN_ABS_ERROR
        assert _mae(pixels, decode_jpeg_cpu(data, BEV_SIZE)) <= MAX_MEAN_ABS_ERROR


@pytest.mark.gpu
@pytest.mark.skipif(
    not gpu_decode_available(), reason="needs a CUDA device and torchvision (nvJPEG)"
)
def test_gpu_decode_matches_the_cpu_decode(pandaset_sample):
    datas = [data for _, data in sorted(pandaset_sample["cameras"].items())]
    images = decode_jpegs_gpu(datas, BEV_SIZE)
    for data, image in zip(datas, images, strict=True):
        assert tuple(image.shape) == (3, 256, 704) and image.is_cuda
        full = simplejpeg.decode_jpeg(data, colorspace="RGB")
        assert (
            _mae(image.permute(1, 2, 0).cpu().numpy(), _reference(full, BEV_SIZE))
            <= MAX_MEAN_ABS_ERROR
        )
    # a loader batch: the same pixels within tolerance and the CPU path's intrinsics exactly
    batch = {"cameras": [pandaset_sample["cameras"]], "calib": [pandaset_sample["calib"]]}
    gpu = decode_batch_cameras_gpu(batch, BEV_SIZE)
    cpu = decode_sample_cameras(pandaset_sample, BEV_SIZE)
    for name, cam in cpu["calib"]["cameras"].items():
        assert np.array_equal(gpu["calib"][0]["cameras"][name]["intrinsics"], cam["intrinsics"])
        pixels = gpu["cameras"][0][name].permute(1, 2, 0).cpu().numpy()
        assert _mae(pixels, cpu["cameras"][name]) <= MAX_MEAN_ABS_ERROR
