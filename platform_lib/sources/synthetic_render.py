"""Sensor simulation for synthetic scenes: vectorised ray casting against ground and cuboids.

All geometry here is in the ego frame of one sweep (x forward, y left, z up, m); the ground
plane is z = -lidar_height. Shape legend (R rays, K cuboids, N LiDAR points, M radar returns):
    dirs        (R, 3) float64  unit ray directions
    center/size (K, 3) float64  cuboids (size = length, width, height), yaw (K,) rad
    hit         (R,)   int64    -2 nothing, -1 ground, k >= 0 cuboid k
    t           (R,)   float64  distance along the ray, m (inf where nothing is hit)
    axis        (R,)   int64    box face normal axis hit (0 = front/back, 1 = side, 2 = top)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simplejpeg

from platform_lib.sources.synthetic_scene import CLASS_SPECS, SyntheticConfig

__all__ = [
    "cast_rays",
    "CameraRays",
    "prepare_camera_rays",
    "render_camera",
    "simulate_lidar",
    "simulate_radar",
]

_GROUND_SEG_ID = 7  # PandaSet "Road"
_CAMERA_RANGE = 400.0  # m, beyond which the ground fades into haze
_SKY_LOW = np.array([170.0, 200.0, 235.0])
_SKY_HIGH = np.array([60.0, 110.0, 200.0])


def cast_rays(
    origin: np.ndarray,
    dirs: np.ndarray,
    center: np.ndarray,
    size: np.ndarray,
    yaw: np.ndarray,
    ground_z: float | None,
    max_range: float,
    columns: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intersect rays from `origin` (3,) with the ground plane z = ground_z and oriented boxes.

    Uses the slab method in each box's local frame; rays starting inside a box ignore it.
    `columns` may pass `dirs.T` as a contiguous (3, R) array to save the transpose.

    Returns:
        (hit, t, axis) as in the module legend; hits beyond `max_range` count as nothing.
    """
    r = len(dirs)
    hit = np.full(r, -2, dtype=np.int64)
    t_best = np.full(r, np.inf)
    axis = np.zeros(r, dtype=np.int64)
    if ground_z is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            tg = (ground_z - origin[2]) / dirs[:, 2]
        ok = (dirs[:, 2] < -1e-9) & (tg <= max_range)
        t_best[ok], hit[ok], axis[ok] = tg[ok], -1, 2
    k = len(center)
    if k == 0:
        return hit, t_best, axis
    # Cull with bounding spheres: only rays within the cone subtended by a box are slab-tested.
    rel = center - origin[None, :]
    dist = np.maximum(np.linalg.norm(rel, axis=1), 1e-9)
    radius = 0.5 * np.linalg.norm(size, axis=1)
    cos_limit = np.where(
        dist > radius, np.sqrt(np.clip(1.0 - (radius / dist) ** 2, 0.0, 1.0)), -2.0
    )
    unit = rel / dist[:, None]
    if columns is None:
        columns = np.ascontiguousarray(dirs.T)  # (3, R): contiguous per component
    cos, sin = np.cos(yaw), np.sin(yaw)
    local_origin = np.stack(
        [-(cos * rel[:, 0] + sin * rel[:, 1]), -(-sin * rel[:, 0] + cos * rel[:, 1]), -rel[:, 2]],
        axis=1,
    )
    half = size / 2.0
    for b in range(k):  # ascending: on exact ties the lower box index wins
        if dist[b] - radius[b] > max_range:
            continue
        cos_angle = columns[0] * unit[b, 0] + columns[1] * unit[b, 1] + columns[2] * unit[b, 2]
        cand = np.flatnonzero(cos_angle >= cos_limit[b] - 1e-9)
        if cand.size == 0:
            continue
        dx, dy, dz = columns[0, cand], columns[1, cand], columns[2, cand]
        local_dirs = (dx * cos[b] + dy * sin[b], -dx * sin[b] + dy * cos[b], dz)
        t_near = np.full(cand.size, -np.inf)
        t_far = np.full(cand.size, np.inf)
        near_axis = np.zeros(cand.size, dtype=np.int64)
        for a, ld in enumerate(local_dirs):
            with np.errstate(divide="ignore", invalid="ignore"):
                inv = 1.0 / ld
                t1 = (-half[b, a] - local_origin[b, a]) * inv
                t2 = (half[b, a] - local_origin[b, a]) * inv
            lo, hi = np.fmin(t1, t2), np.fmax(t1, t2)
            better = lo > t_near
            near_axis = np.where(better, a, near_axis)
            t_near = np.where(better, lo, t_near)
            t_far = np.fmin(t_far, hi)
        ok = (t_near <= t_far) & (t_near > 1e-6) & (t_near <= max_range) & (t_near < t_best[cand])
        idx = cand[ok]
        t_best[idx], hit[idx], axis[idx] = t_near[ok], b, near_axis[ok]
    return hit, t_best, axis


def _lidar_dirs(config: SyntheticConfig) -> np.ndarray:
    elev = np.radians(
        np.linspace(config.lidar_fov_down_deg, config.lidar_fov_up_deg, config.lidar_beams)
    )
    azim = np.linspace(0.0, 2 * np.pi, config.lidar_azimuth_bins, endpoint=False)
    el, az = np.meshgrid(elev, azim, indexing="ij")
    return np.stack([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)], -1).reshape(
        -1, 3
    )


def _box_normals(
    dirs: np.ndarray, hit: np.ndarray, axis: np.ndarray, yaw: np.ndarray
) -> np.ndarray:
    """Unit surface normals (R, 3) facing the ray origin, for ground (z) and box faces."""
    normal = np.zeros_like(dirs)
    normal[:, 2] = 1.0
    box = hit >= 0
    ang = yaw[hit[box]] if len(yaw) else np.zeros(0)
    ax = axis[box]
    nx = np.where(ax == 0, np.cos(ang), np.where(ax == 1, -np.sin(ang), 0.0))
    ny = np.where(ax == 0, np.sin(ang), np.where(ax == 1, np.cos(ang), 0.0))
    nz = np.where(ax == 2, 1.0, 0.0)
    normal[box] = np.stack([nx, ny, nz], axis=1)
    flip = np.sum(normal * dirs, axis=1) > 0
    normal[flip] *= -1.0
    return normal


def simulate_lidar(
    config: SyntheticConfig,
    groups: list[str],
    center: np.ndarray,
    size: np.ndarray,
    yaw: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Cast one 360 degree sweep from the ego origin.

    Returns:
        points: (N, 4) float32 x, y, z (m, ego), intensity 0..255 (reflectivity x incidence
            cosine x range falloff, rounded like PandaSet's integer intensities).
        seg: (N,) int32 PandaSet class id (Road 7, Car 13, Pedestrian 30, Bicycle 26).
    """
    dirs = _lidar_dirs(config)
    hit, t, axis = cast_rays(
        np.zeros(3), dirs, center, size, yaw, -config.lidar_height_m, config.lidar_max_range_m
    )
    keep = hit > -2
    dirs, hit, t, axis = dirs[keep], hit[keep], t[keep], axis[keep]
    t_noisy = t + rng.normal(0.0, config.range_noise_m, size=len(t))
    seg_of = np.array([CLASS_SPECS[g][1] for g in groups] + [_GROUND_SEG_ID], dtype=np.int32)
    refl_of = np.array([CLASS_SPECS[g][5] for g in groups] + [0.15])
    cos_inc = np.abs(np.sum(_box_normals(dirs, hit, axis, yaw) * dirs, axis=1))
    intensity = 255.0 * refl_of[hit] * (0.3 + 0.7 * cos_inc) / (1.0 + (t / 40.0) ** 2)
    points = np.empty((len(t), 4), dtype=np.float32)
    points[:, :3] = dirs * t_noisy[:, None]
    points[:, 3] = np.clip(np.round(intensity), 0, 255)
    return points, seg_of[hit]


_RADAR_POSITION = np.array([2.0, 0.0, -1.2])  # front bumper, relative to the LiDAR, m


def simulate_radar(
    config: SyntheticConfig,
    groups: list[str],
    center: np.ndarray,
    size: np.ndarray,
    yaw: np.ndarray,
    velocity_ego: np.ndarray,
    ego_speed: float,
    ego_yaw_rate: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Simulate a front radar (+-60 deg azimuth) at the bumper; returns from cuboid faces only.

    Args:
        config: generator settings (radar range).
        groups: (K,) class group per object.
        center: (K, 3) object box centres, m, ego frame.
        size: (K, 3) length, width, height, m.
        yaw: (K,) heading about ego +z, rad.
        velocity_ego: (K, 3) object velocities expressed in ego axes, m/s (world-relative).
        ego_speed: ego forward speed, m/s.
        ego_yaw_rate: ego yaw rate, rad/s.
        rng: random generator of the frame (RCS noise).

    Returns:
        (M, 5) float32 x, y, z (m, ego), radial velocity (m/s, positive = moving away from the
        radar, relative to the moving radar), RCS (dBsm).
    """
    elev = np.radians([-1.0, 1.0, 3.0])
    azim = np.radians(np.linspace(-60.0, 60.0, 121))
    el, az = np.meshgrid(elev, azim, indexing="ij")
    dirs = np.stack([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)], -1).reshape(
        -1, 3
    )
    hit, t, _ = cast_rays(_RADAR_POSITION, dirs, center, size, yaw, None, config.radar_max_range_m)
    box = hit >= 0
    if not box.any():
        return np.zeros((0, 5), dtype=np.float32)
    dirs, hit, t = dirs[box], hit[box], t[box]
    points = _RADAR_POSITION + dirs * t[:, None]
    radar_velocity = np.array(
        [ego_speed - ego_yaw_rate * _RADAR_POSITION[1], ego_yaw_rate * _RADAR_POSITION[0], 0.0]
    )
    v_r = np.sum((velocity_ego[hit] - radar_velocity) * dirs, axis=1)
    rcs = np.array([CLASS_SPECS[g][6] for g in groups])[hit]
    out = np.empty((len(t), 5), dtype=np.float32)
    out[:, :3] = points
    out[:, 3] = v_r + rng.normal(0.0, 0.1, size=len(t))
    out[:, 4] = rcs + rng.normal(0.0, 1.5, size=len(t))
    return out


@dataclass(kw_only=True, frozen=True)
class CameraRays:
    """Per-camera ray data that stays fixed over a log (the rig is rigid, the ground flat)."""

    width: int
    """image width, in pixels"""
    height: int
    """image height, in pixels"""
    origin: np.ndarray
    """(3,) camera centre in ego, m"""
    dirs: np.ndarray
    """(H*W, 3) unit ray directions in ego through the pixel centres, row-major"""
    ground: np.ndarray
    """(H*W,) bool: the ray hits the ground within 400 m"""
    ground_t: np.ndarray
    """(H*W,) distance to the ground along the ray, m (inf where none)"""
    ground_xy: np.ndarray
    """(G, 2) ego x, y of the ground hits of `ground` rays, m"""
    background: np.ndarray
    """(H*W, 3) float64 sky/haze colour without the checker pattern"""
    ground_index: np.ndarray
    """(G,) int64 flat pixel indices of the `ground` rays"""
    ground_weight: np.ndarray
    """(G,) float64 1 - haze of the ground pixels (weight of the checker pattern)"""
    columns: np.ndarray
    """(3, H*W) `dirs` transposed, contiguous (what `cast_rays` scans)"""


def prepare_camera_rays(
    config: SyntheticConfig, intrinsics: np.ndarray, extrinsics: np.ndarray
) -> CameraRays:
    """Precompute the rays of one camera (pinhole `intrinsics`, `extrinsics` ego_from_camera)."""
    w, h = config.image_width, config.image_height
    u, v = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
    k_inv = np.linalg.inv(intrinsics)
    ray_cam = [k_inv[i, 0] * u.ravel() + k_inv[i, 1] * v.ravel() + k_inv[i, 2] for i in range(3)]
    rot = extrinsics[:3, :3]  # elementwise instead of (R,3)@(3,3): far faster on loaded CPUs
    dirs = np.stack(
        [
            rot[i, 0] * ray_cam[0] + rot[i, 1] * ray_cam[1] + rot[i, 2] * ray_cam[2]
            for i in range(3)
        ],
        axis=1,
    )
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    origin = np.asarray(extrinsics[:3, 3], dtype=np.float64)
    hit, t, _ = cast_rays(
        origin,
        dirs,
        np.zeros((0, 3)),
        np.zeros((0, 3)),
        np.zeros(0),
        -config.lidar_height_m,
        _CAMERA_RANGE,
    )
    ground = hit == -1
    elevation = np.clip(dirs[:, 2], 0.0, 1.0)[:, None]
    background = (1 - elevation) * _SKY_LOW + elevation * _SKY_HIGH
    background[ground] = np.clip(t[ground] / _CAMERA_RANGE, 0.0, 1.0)[:, None] * _SKY_LOW
    return CameraRays(
        width=w,
        height=h,
        origin=origin,
        dirs=dirs,
        ground=ground,
        ground_t=np.where(ground, t, np.inf),
        ground_xy=(origin + dirs[ground] * t[ground, None])[:, :2],
        background=background,
        ground_index=np.flatnonzero(ground),
        ground_weight=1.0 - np.clip(t[ground] / _CAMERA_RANGE, 0.0, 1.0),
        columns=np.ascontiguousarray(dirs.T),
    )


def render_camera(
    config: SyntheticConfig,
    cam: CameraRays,
    groups: list[str],
    center: np.ndarray,
    size: np.ndarray,
    yaw: np.ndarray,
    world_from_ego: np.ndarray,
) -> bytes:
    """Ray-trace one pinhole image.

    Sky gradient, world-fixed 2 m checkered ground with haze, and cuboids filled with their
    class colour (face shading by normal axis).

    Returns:
        JPEG bytes (quality `config.jpeg_quality`, 4:2:0), deterministic for the same inputs.
    """
    rgb = cam.background.copy()
    gx, gy, rot = cam.ground_xy[:, 0], cam.ground_xy[:, 1], world_from_ego
    x_world = rot[0, 0] * gx + rot[0, 1] * gy + rot[0, 3]
    y_world = rot[1, 0] * gx + rot[1, 1] * gy + rot[1, 3]
    checker = (np.floor(x_world / 2.0) + np.floor(y_world / 2.0)) % 2
    rgb[cam.ground_index] += (cam.ground_weight * (85.0 + 25.0 * checker))[:, None]
    hit, t, axis = cast_rays(
        cam.origin, cam.dirs, center, size, yaw, None, _CAMERA_RANGE, columns=cam.columns
    )
    box = (hit >= 0) & (t < cam.ground_t)
    if box.any():
        colour = np.array([CLASS_SPECS[g][7] for g in groups], dtype=np.float64)[hit[box]]
        shade = np.array([1.0, 0.75, 1.2])[axis[box]]
        rgb[box] = np.clip(colour * shade[:, None], 0, 255)
    image = np.round(rgb).astype(np.uint8).reshape(cam.height, cam.width, 3)
    return simplejpeg.encode_jpeg(
        np.ascontiguousarray(image),
        quality=config.jpeg_quality,
        colorspace="RGB",
        colorsubsampling="420",
        fastdct=False,
    )
