"""Decode camera JPEGs at the size the model needs, with intrinsics that follow the pixels.

`plan_camera_resize` turns a `CameraResize` (output size) into one aspect-preserving crop
(centred horizontally, anchored vertically, by default at the bottom as BEVDet/BEVFusion crop)
and one resize; both decoders (`decode_jpeg_cpu`, `decode_jpegs_gpu`) implement exactly that.

Shapes: image (H, W, 3) uint8 RGB on the CPU, (N, 3, H, W) uint8 RGB on the GPU; K (3, 3)
float64 pixel intrinsics, pixel centres at integer coordinates (OpenCV convention).
Pixel geometry (`adjust_intrinsics`; the half-pixel-centre mapping of OpenCV's / Pillow's
resize): x' = (x + 0.5 - crop_x) * scale_x - 0.5, the same for y; hence fx' = fx * scale_x,
cx' = (cx + 0.5 - crop_x) * scale_x - 0.5 (skew scales with x).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np
import simplejpeg
from PIL import Image

__all__ = [
    "CameraResize",
    "ResizePlan",
    "adjust_calib",
    "adjust_intrinsics",
    "decode_batch_cameras_gpu",
    "decode_jpeg_cpu",
    "decode_jpegs_gpu",
    "decode_sample_cameras",
    "gpu_decode_available",
    "plan_camera_resize",
    "resize_camera_image",
    "resize_on_device",
]


@dataclass(kw_only=True, frozen=True)
class CameraResize:
    """Output size of decoded camera images and where the aspect-ratio crop sits.

    Raises:
        ValueError: from `__post_init__`, naming the offending field.
    """

    width: int
    """output image width, in pixels"""
    height: int
    """output image height, in pixels"""
    anchor_y: float = 1.0
    """vertical position of the crop when the source is taller than the output aspect ratio:
    0.0 keeps the top rows, 0.5 the centre, 1.0 the bottom rows (road; the BEVDet choice)"""

    def __post_init__(self) -> None:
        if self.width < 1 or self.height < 1:
            raise ValueError(
                f"CameraResize.width/height must be >= 1, got {self.width}x{self.height}"
            )
        if not 0.0 <= self.anchor_y <= 1.0:
            raise ValueError(f"CameraResize.anchor_y must be in [0, 1], got {self.anchor_y}")


@dataclass(frozen=True)
class ResizePlan:
    """Crop box in source pixels (integer) and the scale that maps it onto the output."""

    source_width: int
    """source image width, in pixels"""
    source_height: int
    """source image height, in pixels"""
    crop_x: int
    """left column of the crop box in the source image, in pixels"""
    crop_y: int
    """top row of the crop box in the source image, in pixels"""
    crop_width: int
    """crop box width in the source image, in pixels"""
    crop_height: int
    """crop box height in the source image, in pixels"""
    width: int
    """output width, in pixels"""
    height: int
    """output height, in pixels"""

    @property
    def scale_x(self) -> float:
        """Output pixels per source pixel along x."""
        return self.width / self.crop_width

    @property
    def scale_y(self) -> float:
        """Output pixels per source pixel along y."""
        return self.height / self.crop_height

    def to_output(self, uv: np.ndarray) -> np.ndarray:
        """Map (N, 2) source pixel coordinates (u, v) to output pixel coordinates."""
        uv = np.asarray(uv, dtype=np.float64)
        return np.stack(
            [
                (uv[:, 0] + 0.5 - self.crop_x) * self.scale_x - 0.5,
                (uv[:, 1] + 0.5 - self.crop_y) * self.scale_y - 0.5,
            ],
            axis=1,
        )


def plan_camera_resize(source_width: int, source_height: int, resize: CameraResize) -> ResizePlan:
    """Return the crop + resize that turns a source image into `resize`'s size.

    The crop is the largest box of the output aspect ratio inside the source (whole source
    pixels), centred horizontally and at `anchor_y` vertically; scale = output / crop size.

    Raises:
        ValueError: if the source size is not positive.
    """
    if source_width < 1 or source_height < 1:
        raise ValueError(f"source image size must be positive, got {source_width}x{source_height}")
    scale = max(resize.width / source_width, resize.height / source_height)  # cover, then crop
    crop_w = min(source_width, max(1, round(resize.width / scale)))
    crop_h = min(source_height, max(1, round(resize.height / scale)))
    crop_x = (source_width - crop_w) // 2
    crop_y = round((source_height - crop_h) * resize.anchor_y)
    return ResizePlan(
        source_width, source_height, crop_x, crop_y, crop_w, crop_h, resize.width, resize.height
    )


def adjust_intrinsics(intrinsics: np.ndarray, plan: ResizePlan) -> np.ndarray:
    """Return the (3, 3) camera matrix of the output pixels of `plan` (formula in the module doc).

    An identity plan (no crop, same size: a training view decoded at its own size) returns the
    matrix unchanged, bit for bit.
    """
    k = np.array(intrinsics, dtype=np.float64).reshape(3, 3)
    same_size = (plan.crop_width, plan.crop_height) == (plan.width, plan.height)
    if same_size and plan.crop_x == plan.crop_y == 0:
        return k
    sx, sy = plan.scale_x, plan.scale_y
    out = k.copy()
    out[0, 0], out[0, 1] = k[0, 0] * sx, k[0, 1] * sx
    out[0, 2] = (k[0, 2] + 0.5 - plan.crop_x) * sx - 0.5
    out[1, 1] = k[1, 1] * sy
    out[1, 2] = (k[1, 2] + 0.5 - plan.crop_y) * sy - 0.5
    return out


def adjust_calib(camera_calib: dict[str, Any], resize: CameraResize) -> dict[str, Any]:
    """Return one camera's calib.json entry for images decoded to `resize`.

    Args:
        camera_calib: "width", "height" (pixels), "intrinsics" (3, 3), "extrinsics" (4, 4).
        resize: the output size and crop anchor.

    Returns:
        a copy with "width"/"height" of the output, "intrinsics" adjusted, and "resize" the
        `ResizePlan` used (extrinsics unchanged: resizing does not move the camera).
    """
    plan = plan_camera_resize(int(camera_calib["width"]), int(camera_calib["height"]), resize)
    return {
        **camera_calib,
        "width": plan.width,
        "height": plan.height,
        "intrinsics": adjust_intrinsics(camera_calib["intrinsics"], plan),
        "resize": plan,
    }


def _dct_min_size(plan: ResizePlan) -> tuple[int, int]:
    """Smallest full-image size whose crop box still has >= the output resolution."""
    factor = max(plan.scale_x, plan.scale_y)
    return math.ceil(plan.source_width * factor), math.ceil(plan.source_height * factor)


def resize_camera_image(image: np.ndarray, plan: ResizePlan) -> np.ndarray:
    """Resample the crop box of `image` to the plan's output size (antialiased bilinear).

    Args:
        image: (h, w, 3) uint8 RGB, the source image at any uniform scale of the plan's source
            size (e.g. a DCT-scaled decode); the box is mapped by h / source_height, w / source_width.
        plan: the crop box and output size (`plan_camera_resize`).

    Returns:
        (plan.height, plan.width, 3) uint8 RGB.
    """
    h, w = image.shape[:2]
    fx, fy = w / plan.source_width, h / plan.source_height
    box = (
        plan.crop_x * fx,
        plan.crop_y * fy,
        (plan.crop_x + plan.crop_width) * fx,
        (plan.crop_y + plan.crop_height) * fy,
    )
    if (w, h) == (plan.width, plan.height) and box == (0.0, 0.0, float(w), float(h)):
        return np.ascontiguousarray(image)
    pil = Image.fromarray(np.ascontiguousarray(image))
    return np.asarray(pil.resize((plan.width, plan.height), Image.Resampling.BILINEAR, box=box))


def decode_jpeg_cpu(
    data: bytes | memoryview, resize: CameraResize | None = None, *, plan: ResizePlan | None = None
) -> np.ndarray:
    """Decode one JPEG to RGB, at the output size of `resize` when given (DCT-domain scaling).

    libjpeg-turbo decodes at the smallest DCT scale (M/8) that keeps at least the output
    resolution inside the crop; Pillow then resamples the crop box (antialiased bilinear).

    Args:
        data: JPEG bytes.
        resize: output size; None decodes at full size.
        plan: a precomputed `plan_camera_resize` of this image (skips the header parse).

    Returns:
        (H, W, 3) uint8 RGB: the source size, or (resize.height, resize.width).

    Raises:
        ValueError: the bytes are not a decodable JPEG (from simplejpeg).
    """
    if resize is None and plan is None:
        return simplejpeg.decode_jpeg(data, colorspace="RGB")
    if plan is None:
        assert resize is not None  # one of the two is given (checked above)
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
        plan = plan_camera_resize(width, height, resize)
    min_w, min_h = _dct_min_size(plan)
    image = simplejpeg.decode_jpeg(data, colorspace="RGB", min_width=min_w, min_height=min_h)
    return resize_camera_image(image, plan)


def gpu_decode_available() -> bool:
    """True when a CUDA device and torchvision's nvJPEG decoder are both usable here."""
    try:
        import torch
        import torchvision.io  # noqa: F401  (not in the main install; .bench-venv / GPU images)
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def resize_on_device(images: Sequence[Any], resize: CameraResize) -> list:
    """Crop and resize (3, H, W) uint8 tensors on their own device, as `decode_jpeg_cpu` plans it.

    The crop box of `plan_camera_resize` (so `adjust_calib` holds), then an antialiased
    bilinear resize (half-pixel centres, as Pillow's) rounded to uint8; one call per source size.

    Args:
        images: N (3, H, W) uint8 tensors on any one device (CUDA after nvJPEG; CPU in tests).
        resize: output size and crop anchor.

    Returns:
        N (3, resize.height, resize.width) uint8 tensors on the input device, in input order.
    """
    import torch

    out: list = [None] * len(images)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, image in enumerate(images):
        groups.setdefault((int(image.shape[2]), int(image.shape[1])), []).append(i)
    for (width, height), members in groups.items():
        plan = plan_camera_resize(width, height, resize)
        boxes = torch.stack(
            [
                images[i][
                    :,
                    plan.crop_y : plan.crop_y + plan.crop_height,
                    plan.crop_x : plan.crop_x + plan.crop_width,
                ]
                for i in members
            ]
        )
        small = torch.nn.functional.interpolate(
            boxes.float(),
            size=(plan.height, plan.width),
            mode="bilinear",
            antialias=True,
            align_corners=False,
        )
        small = small.round_().clamp_(0, 255).to(torch.uint8)
        for j, i in enumerate(members):
            out[i] = small[j]
    return out


def decode_jpegs_gpu(
    datas: Sequence[bytes | memoryview], resize: CameraResize | None = None, *, device: str = "cuda"
) -> list:
    """Decode JPEGs on the GPU with nvJPEG and crop/resize them like `decode_jpeg_cpu`.

    One batched nvJPEG call at full size (torchvision has no DCT scaling), then
    `resize_on_device`. Call it only in the main process (forked loader workers never touch CUDA).

    Args:
        datas: N JPEG byte strings (any sizes); copied once into host tensors (so the ring
            slot they came from may be freed as soon as this returns).
        resize: output size; None keeps each image at full size.
        device: CUDA device.

    Returns:
        N (3, H, W) uint8 RGB CUDA tensors (stack them when the sizes agree).

    Raises:
        RuntimeError: no CUDA device, or torchvision (the `gpu` extra) is not installed.
    """
    import torch

    try:
        from torchvision.io import ImageReadMode, decode_jpeg
    except ImportError as exc:
        raise RuntimeError(
            "GPU JPEG decode needs torchvision (nvJPEG); it is not installed here: "
            "install the `gpu` extra (pip install -e '.[gpu]'), or use decode='cpu'"
        ) from exc
    if not torch.cuda.is_available():
        raise RuntimeError(
            "GPU JPEG decode asked for, but torch.cuda.is_available() is False; use decode='cpu'"
        )
    encoded = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in datas]
    images = decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)
    if resize is None:
        return list(images)
    return resize_on_device(images, resize)


def _camera_plan(
    data: bytes | memoryview, calib: dict[str, Any] | None, resize: CameraResize, where: str
) -> ResizePlan:
    height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    if calib is not None and (int(calib["width"]), int(calib["height"])) != (width, height):
        raise ValueError(
            f"{where}: JPEG is {width}x{height} but calib.json says {calib['width']}x"
            f"{calib['height']}; the intrinsics would not match the pixels: rebuild the shard"
        )
    return plan_camera_resize(width, height, resize)


#: `decode_sample_cameras`'s `allocate`: (shape, dtype) -> an uninitialised array, or None.
Allocate = Callable[[tuple[int, ...], np.dtype], np.ndarray | None]


def _decode_camera(
    data: bytes | memoryview,
    calib: dict[str, Any] | None,
    resize: CameraResize | None,
    where: str,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, dict[str, Any] | None]:
    """One camera of `decode_sample_cameras`: (image, adjusted calib entry or None).

    `out`: the (H, W, 3) uint8 array a full-size image is decoded into (None: a fresh one).
    """
    if resize is None:
        return simplejpeg.decode_jpeg(data, colorspace="RGB", buffer=out), None
    plan = _camera_plan(data, calib, resize, where)
    image = decode_jpeg_cpu(data, plan=plan)
    return image, (adjust_calib(calib, resize) if calib is not None else None)


def _full_size_buffer(data: bytes | memoryview, allocate: Allocate) -> np.ndarray | None:
    """An (H, W, 3) uint8 array from `allocate` for the full-size image `data`, or None.

    None also for bytes whose header does not parse: the decode raises their error, in order.
    """
    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None
    return allocate((height, width, 3), np.dtype(np.uint8))


def decode_sample_cameras(
    sample: dict[str, Any],
    resize: CameraResize | None,
    *,
    pool: Executor | None = None,
    allocate: Allocate | None = None,
) -> dict[str, Any]:
    """Decode the JPEG bytes of a decoded sample's cameras on the CPU; calib follows the size.

    Args:
        sample: a decoded sample (docs/format.md) with `decode="none"`: "cameras" name -> JPEG
            bytes, "calib" {"cameras": name -> width, height, intrinsics (3, 3), extrinsics}.
        resize: output size of every camera; None decodes at full size (calib unchanged).
        pool: threads that decode the cameras at once (simplejpeg's decode and Pillow's resize
            release the GIL: `bench/gil.py`); None decodes them one after the other. The
            result is the same either way, byte for byte, errors included.
        allocate: where full-size images are decoded: `(shape, dtype)` -> an uninitialised
            array (e.g. in the loader's shared-memory ring, so that no image is copied
            after decoding) or None (a fresh array); called in this thread, in camera order.
            Resized images are always fresh arrays.

    Returns:
        the sample with "cameras" name -> (H, W, 3) uint8 RGB and, when resized, each camera's
        calib entry replaced by `adjust_calib` (output width/height, adjusted intrinsics, plan).

    Raises:
        ValueError: a camera is not a decodable JPEG, or its size disagrees with calib.json
            (names the sample key and the camera; the first such camera in sample order).
    """
    key = sample.get("__key__", "?")
    calib = (sample.get("calib") or {}).get("cameras", {})
    names = list(sample["cameras"])
    data = [sample["cameras"][name] for name in names]
    outs = (
        [_full_size_buffer(d, allocate) for d in data]
        if allocate is not None and resize is None
        else [None] * len(names)
    )
    jobs = [
        (d, calib.get(name), resize, f"sample {key} camera {name}", out)
        for name, d, out in zip(names, data, outs, strict=True)
    ]
    if pool is None or len(jobs) < 2:
        results = [_decode_camera(*job) for job in jobs]
    else:  # map yields in order and re-raises the first failing camera's error, as serially
        results = list(pool.map(_decode_camera, *zip(*jobs, strict=True)))
    cameras = {name: image for name, (image, _) in zip(names, results, strict=True)}
    adjusted = {
        name: entry for name, (_, entry) in zip(names, results, strict=True) if entry is not None
    }
    out = {**sample, "cameras": cameras}
    if adjusted:
        out["calib"] = {**sample["calib"], "cameras": {**calib, **adjusted}}
    return out


def decode_batch_cameras_gpu(
    batch: dict[str, Any], resize: CameraResize | None, *, device: str = "cuda"
) -> dict[str, Any]:
    """GPU counterpart of `decode_sample_cameras` for a loader batch without sample_transform.

    Args:
        batch: {"cameras": [B dicts name -> JPEG bytes], "calib": [B calib dicts], ...}.
        resize: output size; None keeps the full size.
        device: CUDA device.

    Returns:
        the batch with "cameras": [B dicts name -> (3, H, W) uint8 CUDA tensor] and each
        resized camera's calib entry adjusted (as `adjust_calib`). All JPEGs of the batch go
        to nvJPEG in one call.

    Raises:
        RuntimeError: see `decode_jpegs_gpu`.
    """
    names = [(i, name) for i, cams in enumerate(batch["cameras"]) for name in cams]
    images = decode_jpegs_gpu(
        [batch["cameras"][i][name] for i, name in names], resize, device=device
    )
    cameras: list[dict[str, Any]] = [{} for _ in batch["cameras"]]
    for (i, name), image in zip(names, images, strict=True):
        cameras[i][name] = image
    out = {**batch, "cameras": cameras}
    if resize is not None and "calib" in batch:
        out["calib"] = [
            {**c, "cameras": {n: adjust_calib(cam, resize) for n, cam in c["cameras"].items()}}
            for c in batch["calib"]
        ]
    return out
