"""Geometry the tests check the sources with: pinhole projection and points in cuboids.

Production code never calls these (the sources only transform points,
`platform_lib.sources.geometry`); they are the tests' independent oracles, so scipy is a dev
dependency only.

Shape legend (N points, K cuboids):
    points      (N, 3) float64   x, y, z in m, in the frame named by the argument
    center      (K, 3) float64   cuboid centre, m
    size        (K, 3) float64   length (along heading), width, height, m
    yaw         (K,)   float64   heading angle about +z, rad, counter-clockwise from +x

Camera frame is OpenCV: x right, y down, z forward (optical axis).
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

from platform_lib.sources.geometry import invert_transform, transform_points

__all__ = ["count_points_in_cuboids", "label_points_in_cuboids", "project_points"]


def yaw_to_matrix(yaw: np.ndarray) -> np.ndarray:
    """Return (K, 3, 3) rotations about +z by `yaw` (K,) rad."""
    yaw = np.asarray(yaw, dtype=np.float64)
    c, s = np.cos(yaw), np.sin(yaw)
    rot = np.zeros(yaw.shape + (3, 3))
    rot[..., 0, 0], rot[..., 0, 1] = c, -s
    rot[..., 1, 0], rot[..., 1, 1] = s, c
    rot[..., 2, 2] = 1.0
    return rot


def project_points(
    points_ego: np.ndarray, intrinsics: np.ndarray, ego_from_camera: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Project ego-frame points into a pinhole camera.

    Args:
        points_ego: (N, 3) points in m, ego frame.
        intrinsics: (3, 3) K in pixels.
        ego_from_camera: (4, 4) extrinsics; camera axes OpenCV.

    Returns:
        uv: (N, 2) float64 pixel coordinates (u right, v down); meaningless where depth <= 0.
        depth: (N,) float64 distance along the optical axis, m.
    """
    cam = transform_points(invert_transform(ego_from_camera), points_ego)
    depth = cam[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        uvw = cam @ np.asarray(intrinsics, dtype=np.float64).T
        uv = uvw[:, :2] / uvw[:, 2:3]
    return uv, depth


def _points_inside_each(
    points: np.ndarray, center: np.ndarray, size: np.ndarray, yaw: np.ndarray, margin: float
) -> list[np.ndarray]:
    """Return, per cuboid, the sorted indices of `points` inside it (KD-tree prefiltered)."""
    points = np.asarray(points, dtype=np.float64)
    center = np.asarray(center, dtype=np.float64).reshape(-1, 3)
    size = np.asarray(size, dtype=np.float64).reshape(-1, 3)
    if len(center) == 0 or len(points) == 0:
        return [np.zeros(0, dtype=np.int64) for _ in range(len(center))]
    radius = 0.5 * np.linalg.norm(size, axis=1) + margin
    candidates = cKDTree(points).query_ball_point(center, radius)
    rotations = yaw_to_matrix(yaw)
    out = []
    for k, cand in enumerate(candidates):
        cand = np.asarray(sorted(cand), dtype=np.int64)
        local = (points[cand] - center[k]) @ rotations[k]  # = R^T (p - c)
        out.append(cand[np.all(np.abs(local) <= size[k] / 2.0 + margin, axis=1)])
    return out


def label_points_in_cuboids(
    points: np.ndarray, center: np.ndarray, size: np.ndarray, yaw: np.ndarray, margin: float = 0.0
) -> np.ndarray:
    """Return (N,) int64: index of the first cuboid containing each point, -1 where none.

    Args:
        points: (N, 3) m, same frame as the cuboids.
        center: (K, 3) box centres, m (module legend).
        size: (K, 3) length, width, height, m.
        yaw: (K,) heading about +z, rad.
        margin: added to every half extent, m (tolerance for sensor noise).
    """
    out = np.full(len(points), -1, dtype=np.int64)
    inside = _points_inside_each(points, center, size, yaw, margin)
    for k in range(len(inside) - 1, -1, -1):  # reverse so that the lowest index wins
        out[inside[k]] = k
    return out


def count_points_in_cuboids(
    points: np.ndarray, center: np.ndarray, size: np.ndarray, yaw: np.ndarray
) -> np.ndarray:
    """Return (K,) int64 number of `points` (N, 3) inside each cuboid (boxes may share points)."""
    inside = _points_inside_each(points, center, size, yaw, 0.0)
    return np.array([len(idx) for idx in inside], dtype=np.int64)
