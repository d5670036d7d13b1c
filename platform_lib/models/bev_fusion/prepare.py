"""Turn a decoded sample into the fixed-size tensors of `BEVFusion` (runs in loader workers).

Shape legend (H x W BEV cells, N = cfg.max_cameras, h x w camera image, K lift slots per camera;
contents and the camera lift: the package README.md):
    lidar_bev      (4 + Z, H, W) float32  occupancy, log1p(count), max height, mean intensity,
                                          Z height-slice occupancies (lidar_encoder "bev")
    lidar_pillars, lidar_pillar_index     instead of lidar_bev with lidar_encoder "pillars":
                                          (P, M, 9) float32 and (P, 2) int64 (`pillars.py`)
    radar_bev      (2, H, W)     float32  log1p(count), mean radial velocity (m/s)
    camera_images  (N, 3, h, w)  float32  RGB in [-0.5, 0.5]; zero for empty slots
    camera_index   (N, H, W)     int64    lift slot in [0, K) per BEV cell and camera, -1 = not seen
    target         (3, H, W)     float32  cuboid footprint occupancy (vehicle, pedestrian, cyclist)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Literal, cast

import numpy as np
import simplejpeg
import torch

from platform_lib.imaging.decode import (
    CameraResize,
    ResizePlan,
    adjust_intrinsics,
    decode_jpeg_cpu,
    plan_camera_resize,
    resize_camera_image,
)
from platform_lib.models.bev_fusion.config import BEVFusionConfig
from platform_lib.models.bev_fusion.pillars import build_pillars
from platform_lib.models.targets import rasterise_cuboids
from schemas.batch import ByteRuns

__all__ = [
    "CameraDecode",
    "build_sample_transform",
    "camera_resize",
    "compute_camera_index",
    "normalise_camera",
    "prepare_sample",
]

#: Where camera JPEGs are decoded: in the loader worker, or in the training process
#: (nvJPEG on CUDA, the CPU decoder otherwise); `DataConfig.camera_decode`.
CameraDecode = Literal["worker", "device"]
_NO_BYTES = np.empty(0, dtype=np.uint8)


def _scatter_lidar(points: np.ndarray, cfg: BEVFusionConfig) -> np.ndarray:
    grid = cfg.grid
    h, w = grid.height, grid.width
    out = np.zeros((cfg.lidar_features, h, w), dtype=np.float32)
    pts = np.asarray(points, dtype=np.float32).reshape(-1, 4)
    rows, cols, inside = grid.cell_index(pts[:, 0], pts[:, 1])
    keep = inside & (pts[:, 2] >= cfg.z_min) & (pts[:, 2] < cfg.z_max)
    if not keep.any():
        return out
    flat = rows[keep] * w + cols[keep]
    z01 = (pts[keep, 2] - cfg.z_min) / (cfg.z_max - cfg.z_min)
    count = np.bincount(flat, minlength=h * w).astype(np.float32)
    max_z = np.zeros(h * w, dtype=np.float32)
    np.maximum.at(max_z, flat, z01.astype(np.float32))
    intensity = np.bincount(flat, weights=pts[keep, 3], minlength=h * w)
    mean_i = intensity / np.maximum(count, 1.0) / cfg.intensity_scale
    out[0] = (count > 0).reshape(h, w)
    out[1] = np.log1p(count).reshape(h, w)
    out[2] = max_z.reshape(h, w)
    out[3] = mean_i.reshape(h, w)
    z_bin = np.minimum((z01 * cfg.lidar_z_bins).astype(np.int64), cfg.lidar_z_bins - 1)
    occ = np.bincount(z_bin * (h * w) + flat, minlength=cfg.lidar_z_bins * h * w)
    out[4:] = (occ > 0).reshape(cfg.lidar_z_bins, h, w)
    return out


def _scatter_radar(points: np.ndarray | None, cfg: BEVFusionConfig) -> np.ndarray:
    grid = cfg.grid
    h, w = grid.height, grid.width
    out = np.zeros((2, h, w), dtype=np.float32)
    if points is None or len(points) == 0:
        return out
    pts = np.asarray(points, dtype=np.float32).reshape(-1, 5)
    rows, cols, inside = grid.cell_index(pts[:, 0], pts[:, 1])
    keep = inside & (pts[:, 2] >= cfg.z_min) & (pts[:, 2] < cfg.z_max)
    flat = rows[keep] * w + cols[keep]
    count = np.bincount(flat, minlength=h * w).astype(np.float32)
    velocity = np.bincount(flat, weights=pts[keep, 3], minlength=h * w)
    out[0] = np.log1p(count).reshape(h, w)
    out[1] = (velocity / np.maximum(count, 1.0)).reshape(h, w)
    return out


def camera_resize(cfg: BEVFusionConfig) -> CameraResize:
    """Return the camera input size of `cfg` as a `CameraResize`.

    Also usable as the loader's `LoaderConfig.camera_resize`, so workers decode straight to
    model size.
    """
    return CameraResize(
        width=cfg.camera_width, height=cfg.camera_height, anchor_y=cfg.camera_anchor_y
    )


def _camera_plan(
    image: np.ndarray | bytes, calib: Mapping[str, Any], cfg: BEVFusionConfig, where: str
) -> tuple[ResizePlan, bool, dict[str, Any]]:
    """Plan one camera's crop/resize from its size: (plan, is JPEG bytes, calib of the output).

    The size is the JPEG header's (no decode) or the array's; it must equal its calib entry's.
    """
    resize = camera_resize(cfg)
    size = (int(calib["width"]), int(calib["height"]))
    encoded = isinstance(image, bytes | bytearray | memoryview) or np.ndim(image) == 1  # JPEG bytes
    if encoded:
        height, width, _, _ = simplejpeg.decode_jpeg_header(image)
    else:
        height, width = np.shape(image)[:2]
    if (width, height) != size:
        raise ValueError(
            f"{where}: image is {width}x{height} but its calib says {size[0]}x{size[1]}; "
            "the intrinsics would not match the pixels (rebuild the shard)"
        )
    plan = plan_camera_resize(width, height, resize)
    adjusted = {
        **calib,
        "width": plan.width,
        "height": plan.height,
        "intrinsics": adjust_intrinsics(calib["intrinsics"], plan),
    }
    return plan, encoded, adjusted


def normalise_camera(pixels: np.ndarray) -> np.ndarray:
    """(h, w, 3) uint8 RGB -> the model's (3, h, w) float32 in [-0.5, 0.5]."""
    return (pixels.astype(np.float32) / 255.0 - 0.5).transpose(2, 0, 1)


def _camera_input(
    image: np.ndarray | bytes, calib: Mapping[str, Any], cfg: BEVFusionConfig, where: str
) -> tuple[np.ndarray, dict[str, Any]]:
    """Decode/crop/resize one camera to the model input; return (3, h, w) float32 and its calib."""
    plan, encoded, adjusted = _camera_plan(image, calib, cfg, where)
    if encoded:  # DCT-domain downscaling (bytes or a 1-D uint8 array)
        pixels = decode_jpeg_cpu(memoryview(cast(bytes, image)), plan=plan)
    else:
        pixels = resize_camera_image(np.ascontiguousarray(image, dtype=np.uint8), plan)
    return normalise_camera(pixels), adjusted


def compute_camera_index(calib: Mapping[str, Any], cfg: BEVFusionConfig) -> np.ndarray:
    """Return the lift slot each BEV cell reads from one camera.

    Args:
        calib: one camera of `calib.json`: "width", "height" (pixels), "intrinsics"
            (3, 3) K in pixels, "extrinsics" (4, 4) ego_from_camera (OpenCV camera axes).
        cfg: model config (grid, camera_stride, lift_*).

    Returns:
        (H, W) int64 slot `column * lift_depth_bins + depth_bin` in
        [0, camera_columns * lift_depth_bins), or -1 where the cell centre (at ego height
        `lift_z`) projects behind the camera, beyond `lift_max_depth` or outside the image width.
    """
    xs, ys = cfg.grid.cell_centres()
    pts = np.stack([xs.ravel(), ys.ravel(), np.full(xs.size, cfg.lift_z), np.ones(xs.size)])
    ego_from_camera = np.asarray(calib["extrinsics"], dtype=np.float64).reshape(4, 4)
    cam = (np.linalg.inv(ego_from_camera) @ pts)[:3]
    k = np.asarray(calib["intrinsics"], dtype=np.float64).reshape(3, 3)
    depth = cam[2]
    in_front = depth > 0.1
    u = np.where(
        in_front,
        (k[0, 0] * cam[0] + k[0, 1] * cam[1]) / np.where(in_front, depth, 1.0) + k[0, 2],
        -1.0,
    )
    # pixel u spans [u - 0.5, u + 0.5) (OpenCV centres); feature column j covers pixels
    # [j, j + 1) * width / camera_columns
    column = np.floor((u + 0.5) / float(calib["width"]) * cfg.camera_columns).astype(np.int64)
    depth_bin = np.floor(depth / cfg.lift_max_depth * cfg.lift_depth_bins).astype(np.int64)
    valid = (
        in_front & (column >= 0) & (column < cfg.camera_columns) & (depth_bin < cfg.lift_depth_bins)
    )
    slot = np.where(valid, column * cfg.lift_depth_bins + depth_bin, -1)
    return slot.reshape(cfg.grid.height, cfg.grid.width)


@functools.lru_cache(maxsize=256)
def _cached_camera_index(
    k: bytes, ego_from_camera: bytes, width: int, height: int, cfg: BEVFusionConfig
) -> np.ndarray:
    """Return `compute_camera_index`, memoised per (calibration, cfg): a rig's repeats per frame."""
    calib = {
        "intrinsics": np.frombuffer(k).reshape(3, 3),
        "extrinsics": np.frombuffer(ego_from_camera).reshape(4, 4),
        "width": width,
        "height": height,
    }
    index = compute_camera_index(calib, cfg)
    index.setflags(write=False)
    return index


def prepare_sample(
    sample: Mapping[str, Any], cfg: BEVFusionConfig, camera_decode: CameraDecode = "worker"
) -> dict[str, Any]:
    """Build the model inputs and the BEV target of one decoded sample.

    Args:
        sample: a decoded sample (docs/format.md); cameras as (H, W, 3) uint8 RGB arrays
            or JPEG bytes (decoded with DCT-domain downscaling), of the size their calib.json
            entry states (e.g. already reduced by the loader's `camera_resize`), points in the
            ego frame. Each camera is cropped to the input aspect ratio and resized to
            camera_height x camera_width (`imaging/decode.py`); the lift uses the intrinsics
            of those pixels.
        cfg: model config.
        camera_decode: "worker" decodes the cameras here; "device" leaves the pixels to the
            training process (`training.data.decode_camera_batch`: nvJPEG on CUDA): cameras
            must be JPEG bytes, and travel as such.

    Returns:
        dict with "lidar_bev" (or "lidar_pillars" and "lidar_pillar_index"), "radar_bev",
        "camera_images", "camera_index", "target" (shapes in the module docstring). With
        camera_decode "device", instead of "camera_images": "camera_jpegs", a `ByteRuns` of
        max_cameras JPEGs (views of the sample's bytes; empty for empty slots) and
        "camera_jpeg_size" (N, 2) int64 source (height, width) per slot (0 for empty slots);
        "camera_index" is the same as with "worker" (from the JPEG header's size).

    Raises:
        ValueError: naming the sample key, if it has more cameras than `cfg.max_cameras`,
            a camera without calibration, an image whose size disagrees with its calibration,
            or (camera_decode "device") a camera that is not JPEG bytes.
    """
    key = sample.get("__key__", "?")
    cameras = dict(sample.get("cameras") or {})
    calib = (sample.get("calib") or {}).get("cameras", {})
    if len(cameras) > cfg.max_cameras:
        raise ValueError(
            f"sample {key}: {len(cameras)} cameras but the model has max_cameras="
            f"{cfg.max_cameras}; raise max_cameras in the model config"
        )
    grid = cfg.grid
    on_device = camera_decode == "device"
    images = np.zeros(
        (0 if on_device else cfg.max_cameras, 3, cfg.camera_height, cfg.camera_width),
        dtype=np.float32,
    )
    jpegs = [_NO_BYTES] * cfg.max_cameras
    jpeg_size = np.zeros((cfg.max_cameras, 2), dtype=np.int64)
    index = np.full((cfg.max_cameras, grid.height, grid.width), -1, dtype=np.int64)
    for slot, name in enumerate(sorted(cameras)):
        if name not in calib:
            raise ValueError(f"sample {key}: camera {name!r} has no entry in calib.json")
        where = f"sample {key} camera {name}"
        if on_device:
            plan, encoded, model_calib = _camera_plan(cameras[name], calib[name], cfg, where)
            if not encoded:
                raise ValueError(
                    f"{where}: camera_decode='device' needs JPEG bytes, got a decoded array; "
                    "load with decode='none' or use camera_decode='worker'"
                )
            jpegs[slot] = np.frombuffer(cameras[name], dtype=np.uint8)  # a view, no copy
            jpeg_size[slot] = plan.source_height, plan.source_width
        else:
            images[slot], model_calib = _camera_input(cameras[name], calib[name], cfg, where)
        index[slot] = _cached_camera_index(
            np.asarray(model_calib["intrinsics"], dtype=np.float64).tobytes(),
            np.asarray(model_calib["extrinsics"], dtype=np.float64).tobytes(),
            int(model_calib["width"]),
            int(model_calib["height"]),
            cfg,
        )
    if cfg.lidar_encoder == "pillars":
        pillars, pillar_index = build_pillars(sample["lidar"], cfg)
        lidar = {
            "lidar_pillars": torch.from_numpy(pillars),
            "lidar_pillar_index": torch.from_numpy(pillar_index),
        }
    else:
        lidar = {"lidar_bev": torch.from_numpy(_scatter_lidar(sample["lidar"], cfg))}
    cams: dict[str, Any] = (
        {"camera_jpegs": ByteRuns(jpegs), "camera_jpeg_size": torch.from_numpy(jpeg_size)}
        if on_device
        else {"camera_images": torch.from_numpy(images)}
    )
    return {
        **lidar,
        "radar_bev": torch.from_numpy(_scatter_radar(sample.get("radar"), cfg)),
        **cams,
        "camera_index": torch.from_numpy(index),
        "target": torch.from_numpy(rasterise_cuboids(sample.get("cuboids") or {}, grid)),
    }


def build_sample_transform(
    cfg: BEVFusionConfig, camera_decode: CameraDecode = "worker"
) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """Return a picklable `sample -> tensors` callable for loader workers (`prepare_sample` bound to `cfg`)."""
    return functools.partial(prepare_sample, cfg=cfg, camera_decode=camera_decode)
