"""Temporal BEV fusion: frame windows as inputs, earlier BEV features warped to the current ego frame.

The warp is BEVDet4D's alignment (Huang & Huang 2022, sec. 3.3) with the grid conventions of
`platform_lib.models.targets`; frame conventions and the formulas: `compute_ego_motion`,
`build_warp_grid` and the package README.md, "Temporal fusion".

Shape legend (T frames of a window, oldest first; B batch; H x W cells; per frame: prepare.py):
    lidar_bev, radar_bev, camera_images, camera_index   (B, T, ...) the frames
    ego_motion      (B, T, 4, 4) float32   t_from_current per frame; the last is the identity
    target          (B, 3, H, W)           the current (last) frame's occupancy
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from platform_lib.models.bev_fusion.config import BEVFusionConfig
from platform_lib.models.bev_fusion.prepare import prepare_sample
from platform_lib.models.targets import BEVGrid

__all__ = ["FRAME_KEYS", "build_warp_grid", "compute_ego_motion", "prepare_window", "warp_bev"]

#: Per-frame inputs stacked along a time axis in a window (the target is the last frame's).
FRAME_KEYS = ("lidar_bev", "radar_bev", "camera_images", "camera_index")


def compute_ego_motion(world_from_ego: np.ndarray) -> np.ndarray:
    """Return each frame's pose relative to the last frame of the window.

    Args:
        world_from_ego: (T, 4, 4) float64 `pose.ego_pose` of each frame of the window, oldest
            first (docs/format.md; ego frame x forward, y left, z up, in m).

    Returns:
        (T, 4, 4) float32 `t_from_current = inv(world_from_t) @ world_from_current`, mapping
        current ego coordinates to frame t's (computed in float64: world coordinates may be
        large, e.g. UTM); the last is the identity.

    Raises:
        ValueError: a pose that is not a finite invertible (4, 4) transform.
    """
    poses = np.asarray(world_from_ego, dtype=np.float64)
    if poses.ndim != 3 or poses.shape[1:] != (4, 4) or not np.isfinite(poses).all():
        raise ValueError(f"ego poses must be finite (T, 4, 4) transforms, got shape {poses.shape}")
    try:
        return (np.linalg.inv(poses) @ poses[-1]).astype(np.float32)
    except np.linalg.LinAlgError:
        raise ValueError("an ego pose of the window is not invertible") from None


def build_warp_grid(t_from_current: torch.Tensor, grid: BEVGrid) -> torch.Tensor:
    """Return the `grid_sample` grid that reads frame t's BEV map at the current cells' places.

    Each current cell centre (x, y) (ego frame of the current frame) maps to
    R(yaw) @ (x, y) + (tx, ty) in frame t, with yaw = atan2(R[1, 0], R[0, 0]) and (tx, ty)
    of `t_from_current`; rows follow ego x, columns ego y (`BEVGrid`).

    Args:
        t_from_current: (B, 4, 4) float relative poses.
        grid: the BEV grid of both frames.

    Returns:
        (B, H, W, 2) grid (dtype of `t_from_current`, computed in float64) of normalised
        (column, row) coordinates, -1 and 1 at the grid's outer cell edges
        (`align_corners=False`).
    """
    pose = t_from_current.to(torch.float64)
    yaw = torch.atan2(pose[:, 1, 0], pose[:, 0, 0])
    cos, sin = torch.cos(yaw)[:, None, None], torch.sin(yaw)[:, None, None]
    tx, ty = pose[:, 0, 3][:, None, None], pose[:, 1, 3][:, None, None]
    xs, ys = (torch.from_numpy(c).to(pose.device)[None] for c in grid.cell_centres())
    x_t = cos * xs - sin * ys + tx
    y_t = sin * xs + cos * ys + ty
    row = 2.0 * (x_t - grid.x_min) / (grid.x_max - grid.x_min) - 1.0
    col = 2.0 * (y_t - grid.y_min) / (grid.y_max - grid.y_min) - 1.0
    return torch.stack([col, row], dim=-1).to(t_from_current.dtype)


def warp_bev(features: torch.Tensor, t_from_current: torch.Tensor, grid: BEVGrid) -> torch.Tensor:
    """Warp frame t's BEV features into the current ego frame.

    Args:
        features: (B, C, H, W) float BEV features in frame t's ego frame.
        t_from_current: (B, 4, 4) float pose of the current ego frame seen from frame t.
        grid: the BEV grid (H x W cells) of both frames.

    Returns:
        (B, C, H, W) features on the current frame's cells, bilinear, zero where the current
        cell lies outside frame t's grid; sampled in fp32, returned in `features.dtype`.
    """
    sample_at = build_warp_grid(t_from_current, grid).to(torch.float32)
    warped = F.grid_sample(
        features.float(), sample_at, mode="bilinear", padding_mode="zeros", align_corners=False
    )
    return warped.to(features.dtype)


def prepare_window(sample: Mapping[str, Any], cfg: BEVFusionConfig) -> dict[str, torch.Tensor]:
    """Build the inputs of a temporal `BEVFusion` from one loader window.

    Args:
        sample: a loader unit of `cfg.temporal_frames` frames ({"__key__", "__keys__",
            "frames": [decoded sample, ...]}, oldest first; `loading/windows.py`), each frame
            with "pose": {"ego_pose": (4, 4) world_from_ego}.
        cfg: model config with `temporal_frames` > 1.

    Returns:
        FRAME_KEYS stacked to (T, ...), "ego_motion" (T, 4, 4) float32 and the last frame's
        "target" (shapes in the module docstring).

    Raises:
        ValueError: naming the sample key, if the unit is not a window of
            `cfg.temporal_frames` frames (set data.window_frames), a frame has no ego pose,
            or as `prepare_sample`.
    """
    key = sample.get("__key__", "?")
    frames = sample.get("frames")
    if not isinstance(frames, list | tuple) or len(frames) != cfg.temporal_frames:
        got = len(frames) if isinstance(frames, list | tuple) else 1
        raise ValueError(
            f"sample {key}: {got} frame(s) but model {cfg.name} fuses temporal_frames="
            f"{cfg.temporal_frames}; load windows of that many frames (data.window_frames)"
        )
    try:
        poses = np.stack([np.asarray(f["pose"]["ego_pose"], dtype=np.float64) for f in frames])
        motion = compute_ego_motion(poses)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"sample {key}: no usable ego pose in its frames ({exc})") from None
    prepared = [prepare_sample(f, cfg) for f in frames]
    out = {k: torch.stack([p[k] for p in prepared]) for k in FRAME_KEYS}
    out["ego_motion"] = torch.from_numpy(motion)
    out["target"] = prepared[-1]["target"]
    return out
