"""Small hand-made frames for shard tests (no raw-log reader involved)."""

from __future__ import annotations

import numpy as np
import simplejpeg

from platform_lib.sources.frame import CameraImage, Cuboids, Frame

CAMERAS = ("back_camera", "front_camera")


def make_jpeg(seed: int, width: int = 32, height: int = 24) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    return simplejpeg.encode_jpeg(pixels, quality=90, colorspace="RGB")


def make_frame(
    log_id: str = "log-a",
    frame_index: int = 0,
    *,
    n_points: int = 100,
    radar: bool = True,
    seg: bool = True,
    n_boxes: int = 3,
) -> Frame:
    """Return a valid, deterministic Frame whose content depends on (log_id, frame_index)."""
    seed = sum(log_id.encode()) * 1000 + frame_index
    rng = np.random.default_rng(seed)
    intrinsics = np.array([[20.0, 0, 16], [0, 20.0, 12], [0, 0, 1]])
    cameras = {
        name: CameraImage(
            jpeg=make_jpeg(seed + i),
            width=32,
            height=24,
            intrinsics=intrinsics,
            extrinsics=np.eye(4),
            timestamp=100.0 + frame_index * 0.1,
        )
        for i, name in enumerate(CAMERAS)
    }
    groups = ["vehicle", "pedestrian", "cyclist", "other"]
    return Frame(
        log_id=log_id,
        frame_index=frame_index,
        timestamp=100.0 + frame_index * 0.1,
        ego_pose=np.eye(4),
        cameras=cameras,
        lidar=rng.normal(size=(n_points, 4)).astype(np.float32),
        lidar_seg=rng.integers(0, 40, size=n_points).astype(np.int32) if seg else None,
        radar=rng.normal(size=(7, 5)).astype(np.float32) if radar else None,
        cuboids=Cuboids(
            label=[f"L{i}" for i in range(n_boxes)],
            class_group=[groups[i % 4] for i in range(n_boxes)],
            center=rng.normal(size=(n_boxes, 3)),
            size=rng.uniform(0.5, 4, size=(n_boxes, 3)),
            yaw=rng.uniform(-3, 3, size=n_boxes),
            track_id=[f"t{i}" for i in range(n_boxes)],
        ),
        source_files={f"camera/{n}": f"/raw/{log_id}/{n}/{frame_index:02d}.jpg" for n in CAMERAS},
    )


def make_frames(logs: tuple[str, ...] = ("log-a", "log-b"), per_log: int = 4, **kw) -> list[Frame]:
    return [make_frame(log, i, **kw) for log in logs for i in range(per_log)]
