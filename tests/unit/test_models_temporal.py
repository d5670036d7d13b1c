"""Temporal BEV fusion: the ego-motion warp against hand-computed cells, the window transform and
the temporal model's inputs.

Grid of bev_fusion_small/temporal: 64 x 64 cells of 0.8 m over +-25.6 m; row i has its centre
at ego x = -25.6 + (i + 0.5) * 0.8, column j at ego y = -25.6 + (j + 0.5) * 0.8.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from platform_lib.models.bev_fusion.model import BEVFusion
from platform_lib.models.bev_fusion.temporal import compute_ego_motion, prepare_window, warp_bev
from platform_lib.models.presets import get_model_config

GRID = get_model_config("bev_fusion_temporal").grid


def _pose(x: float = 0.0, y: float = 0.0, yaw: float = 0.0) -> np.ndarray:
    """world_from_ego (4, 4): ego at (x, y) in m, heading `yaw` rad counter-clockwise from world x."""
    c, s = math.cos(yaw), math.sin(yaw)
    pose = np.eye(4)
    pose[:2, :2] = [[c, -s], [s, c]]
    pose[:2, 3] = [x, y]
    return pose


def _one_hot(row: int, col: int) -> torch.Tensor:
    bev = torch.zeros(1, 1, GRID.height, GRID.width)
    bev[0, 0, row, col] = 1.0
    return bev


def _warp(bev: torch.Tensor, world_from_prev: np.ndarray, world_from_cur: np.ndarray):
    motion = compute_ego_motion(np.stack([world_from_prev, world_from_cur]))
    return warp_bev(bev, torch.from_numpy(motion[:1]), GRID)


def test_identity_pose_is_the_identity_warp():
    bev = torch.rand(2, 5, GRID.height, GRID.width, generator=torch.Generator().manual_seed(0))
    eye = torch.eye(4).expand(2, 4, 4)
    torch.testing.assert_close(warp_bev(bev, eye, GRID), bev, atol=1e-6, rtol=0)
    same_place = compute_ego_motion(np.stack([_pose(5, 2, 0.3)] * 2))
    np.testing.assert_allclose(same_place, np.eye(4)[None].repeat(2, 0), atol=1e-12)


def test_driving_forward_moves_a_static_object_back_by_the_distance():
    """Ego drives 1.6 m (2 cells) forward: the object at previous row 40, column 20
    (x = 6.8, y = -9.2 m) is 1.6 m nearer, x = 5.2 m -> row 38, same column. The 2 front rows
    of the current grid (x > 24 m) were beyond the previous grid's front edge: zero."""
    out = _warp(_one_hot(40, 20), _pose(0, 0), _pose(1.6, 0))
    assert out[0, 0].argmax().item() == 38 * GRID.width + 20
    assert out[0, 0, 38, 20].item() == pytest.approx(1.0, abs=1e-5)
    assert out.sum().item() == pytest.approx(1.0, abs=1e-5)
    ones = _warp(torch.ones(1, 1, GRID.height, GRID.width), _pose(0, 0), _pose(1.6, 0))[0, 0]
    assert ones[62:].abs().max().item() == 0.0
    assert ones[:62].min().item() == pytest.approx(1.0, abs=1e-5)


def test_turning_left_by_90_degrees_rotates_the_map_about_the_ego():
    """Ego turns 90 degrees left in place: the object ahead-right at (x, y) = (6.8, -9.2) m
    (row 40, column 20) is now behind-right at (-9.2, -6.8) m: row 20, column 23."""
    out = _warp(_one_hot(40, 20), _pose(0, 0), _pose(0, 0, math.pi / 2))
    assert out[0, 0].argmax().item() == 20 * GRID.width + 23
    assert out[0, 0, 20, 23].item() == pytest.approx(1.0, abs=1e-5)
    assert out.sum().item() == pytest.approx(1.0, abs=1e-5)


def test_relative_pose_is_exact_far_from_the_world_origin():
    """UTM-sized world coordinates and a heading of 1 rad: only the relative motion counts."""
    start = _pose(512_345.6, 5_123_456.7, 1.0)
    step = start @ _pose(1.6, 0)  # 1.6 m forward along the ego's own heading
    motion = compute_ego_motion(np.stack([start, step]))
    np.testing.assert_allclose(motion[0], _pose(1.6, 0), atol=1e-6)
    out = _warp(_one_hot(40, 20), start, step)
    assert out[0, 0].argmax().item() == 38 * GRID.width + 20


def test_a_single_frame_is_refused_by_the_window_transform():
    cfg = get_model_config("bev_fusion_temporal")
    with pytest.raises(ValueError, match=r"sample log_000001: 1 frame\(s\).*data.window_frames"):
        prepare_window({"__key__": "log_000001", "lidar": np.zeros((0, 4))}, cfg)
    frame = {"__key__": "k", "pose": {"ego_pose": np.zeros((4, 4))}}
    with pytest.raises(ValueError, match="no usable ego pose"):
        prepare_window({"__key__": "k", "frames": [frame, frame]}, cfg)


def test_temporal_model_takes_windows_and_ego_motion():
    torch.manual_seed(0)
    cfg = get_model_config("bev_fusion_temporal")
    model = BEVFusion(cfg)
    assert model.input_keys[-1] == "ego_motion" and BEVFusion.input_keys[-1] == "camera_index"
    b, t, n = 2, 2, cfg.max_cameras
    h, w = cfg.grid.height, cfg.grid.width
    inputs = (
        torch.rand(b, t, cfg.lidar_features, h, w),
        torch.rand(b, t, 2, h, w),
        torch.rand(b, t, n, 3, cfg.camera_height, cfg.camera_width) - 0.5,
        torch.full((b, t, n, h, w), -1, dtype=torch.int64),
    )
    motion = torch.eye(4).expand(b, t, 4, 4)
    assert model(*inputs, motion).shape == (b, cfg.num_classes, h, w)
    with pytest.raises(ValueError, match="ego_motion must be given"):
        model(*inputs)
    with pytest.raises(ValueError, match="windows of 2 frames"):
        model(*(x[:, :1].repeat_interleave(3, 1) for x in inputs), torch.eye(4).expand(b, 3, 4, 4))
    single = BEVFusion(get_model_config("bev_fusion_small"))
    assert not any("temporal" in k for k in single.state_dict())
    with pytest.raises(ValueError, match="left out"):
        single(*(x[:, 0] for x in inputs), motion)
