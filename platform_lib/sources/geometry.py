"""Quaternions and rigid transforms shared by the sources.

Shape legend (N points):
    points      (N, 3) float64   x, y, z in m, in the frame named by the argument
    T           (4, 4) float64   homogeneous transform `a_from_b` maps b-frame points into frame a
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "EGO_FROM_PANDASET_LIDAR",
    "invert_transform",
    "make_transform",
    "quaternion_to_matrix",
    "transform_points",
]

#: PandaSet LiDAR axes (x right, y forward, z up) -> ego axes (x forward, y left, z up).
EGO_FROM_PANDASET_LIDAR = np.array(
    [[0.0, 1.0, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
)


def quaternion_to_matrix(w: float, x: float, y: float, z: float) -> np.ndarray:
    """Return the (3, 3) rotation matrix of a (not necessarily unit) quaternion w + xi + yj + zk.

    Raises:
        ValueError: if the quaternion has (near) zero norm.
    """
    q = np.array([w, x, y, z], dtype=np.float64)
    norm = np.linalg.norm(q)
    if not np.isfinite(norm) or norm < 1e-9:
        raise ValueError(f"quaternion {q.tolist()} has zero or non-finite norm")
    w, x, y, z = q / norm
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def make_transform(rotation: np.ndarray, translation: np.ndarray) -> np.ndarray:
    """Return the (4, 4) homogeneous transform with a (3, 3) rotation and (3,) translation in m."""
    transform = np.eye(4)
    transform[:3, :3] = rotation
    transform[:3, 3] = translation
    return transform


def invert_transform(transform: np.ndarray) -> np.ndarray:
    """Return the inverse of a rigid (4, 4) transform (`b_from_a` from `a_from_b`)."""
    rotation = transform[:3, :3]
    inverse = np.eye(4)
    inverse[:3, :3] = rotation.T
    inverse[:3, 3] = -rotation.T @ transform[:3, 3]
    return inverse


def transform_points(transform: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Apply `a_from_b` (4, 4) to (N, 3) points in frame b; returns (N, 3) float64 in frame a."""
    points = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    x, y, z = points[:, 0], points[:, 1], points[:, 2]
    out = np.empty_like(points)
    for i in range(3):  # elementwise: avoids BLAS thread start-up on (N, 3) @ (3, 3)
        out[:, i] = (
            transform[i, 0] * x + transform[i, 1] * y + transform[i, 2] * z + transform[i, 3]
        )
    return out
