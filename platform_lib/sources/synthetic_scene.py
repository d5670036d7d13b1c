"""Synthetic scenes: config, sensor rig and seeded kinematics of the ego and the cuboids.

World frame: flat ground plane z = 0, x/y in m. The ego (origin = LiDAR) drives at
`lidar_height_m` above the ground with constant speed and yaw rate; cuboids move in straight
lines at constant speed. Everything is drawn from `np.random.default_rng([seed, log_index])`,
so a log does not depend on how many other logs are generated.

Shape legend (F frames, K objects):
    ego_pose    (F, 4, 4) float64  world_from_ego
    center      (F, K, 3) float64  object centre in world, m
    yaw         (K,)      float64  heading in world, rad
    velocity    (K, 3)    float64  world-frame velocity, m/s
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "CLASS_SPECS",
    "RIG",
    "Scene",
    "SyntheticConfig",
    "build_rig",
    "sample_scene",
]


#: An inclusive (min, max) pair; a list, not a tuple, so that Flyte types it as a task input.
IntRange = Annotated[list[int], Field(min_length=2, max_length=2)]
FloatRange = Annotated[list[float], Field(min_length=2, max_length=2)]


class SyntheticConfig(BaseModel):
    """Size and physics of generated synthetic logs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_logs: int = Field(default=4, gt=0, le=10000)
    """number of logs (sequences)"""
    frames_per_log: int = Field(default=8, gt=0)
    """LiDAR sweeps per log"""
    image_width: int = Field(default=160, ge=16)
    """camera image width, in pixels"""
    image_height: int = Field(default=96, ge=16)
    """camera image height, in pixels"""
    lidar_beams: int = Field(default=32, gt=0)
    """LiDAR elevation channels"""
    lidar_azimuth_bins: int = Field(default=256, gt=0)
    """LiDAR azimuth steps per 360 degree sweep"""
    lidar_fov_up_deg: float = Field(default=10.0, lt=90.0, allow_inf_nan=False)
    """elevation of the top beam, in degrees"""
    lidar_fov_down_deg: float = Field(default=-25.0, gt=-90.0, allow_inf_nan=False)
    """elevation of the bottom beam, in degrees"""
    lidar_max_range_m: float = Field(default=80.0, gt=0.0, allow_inf_nan=False)
    """LiDAR maximum range, in m"""
    lidar_height_m: float = Field(default=1.8, gt=0.0, allow_inf_nan=False)
    """LiDAR (ego origin) height above the ground, in m"""
    range_noise_m: float = Field(default=0.02, ge=0.0, allow_inf_nan=False)
    """standard deviation of LiDAR range noise, in m"""
    num_vehicles: IntRange = Field(default_factory=lambda: [3, 8])
    """inclusive (min, max) vehicles per log (an object that finds no collision-free start in
    50 draws is left out, so crowded scenes may hold fewer)"""
    num_pedestrians: IntRange = Field(default_factory=lambda: [1, 5])
    """inclusive (min, max) pedestrians per log"""
    num_cyclists: IntRange = Field(default_factory=lambda: [0, 3])
    """inclusive (min, max) cyclists per log"""
    scene_radius_m: float = Field(default=45.0, gt=0.0, allow_inf_nan=False)
    """objects start within this distance of the ego start, in m"""
    ego_speed_mps: FloatRange = Field(default_factory=lambda: [4.0, 12.0])
    """(min, max) ego speed, in m/s"""
    max_yaw_rate_dps: float = Field(default=6.0, ge=0.0, allow_inf_nan=False)
    """maximum absolute ego yaw rate, in degrees/s"""
    frame_rate_hz: float = Field(default=10.0, gt=0.0, allow_inf_nan=False)
    """sweeps per second, in Hz"""
    start_timestamp_s: float = Field(default=1.7e9, allow_inf_nan=False)
    """timestamp of frame 0 of log 0, in s (UNIX epoch); log j starts j * 1000 s later"""
    jpeg_quality: int = Field(default=90, ge=1, le=100)
    """JPEG quality of the rendered images (1-100)"""
    radar_max_range_m: float = Field(default=120.0, gt=0.0, allow_inf_nan=False)
    """radar maximum range, in m"""
    seed: int = Field(default=0, ge=0)
    """seed of every random draw"""

    @model_validator(mode="after")
    def _ranges_are_ordered(self) -> SyntheticConfig:
        if not self.lidar_fov_down_deg < self.lidar_fov_up_deg:
            raise ValueError("need lidar_fov_down_deg < lidar_fov_up_deg")
        for name in ("num_vehicles", "num_pedestrians", "num_cyclists", "ego_speed_mps"):
            low, high = getattr(self, name)
            if not 0 <= low <= high:
                raise ValueError(f"SyntheticConfig.{name} must be (min, max) with 0 <= min <= max")
        return self


#: label, class group, PandaSet semseg id, base (length, width, height) m, speed range m/s,
#: probability of being static, LiDAR reflectivity 0..1, RCS dBsm, RGB colour.
CLASS_SPECS = {
    "vehicle": ("Car", 13, (4.5, 1.9, 1.6), (2.0, 10.0), 0.5, 0.55, 10.0, (200, 40, 40)),
    "pedestrian": ("Pedestrian", 30, (0.6, 0.6, 1.75), (0.5, 1.8), 0.3, 0.35, -5.0, (240, 200, 40)),
    "cyclist": ("Bicycle", 26, (1.8, 0.6, 1.7), (2.0, 6.0), 0.2, 0.45, 0.0, (40, 110, 230)),
}

#: PandaSet-like rig: name -> (position in ego m, yaw of the optical axis in deg, horizontal FOV
#: in deg). Measured on PandaSet 002: front 52 deg FOV, the others ~92 deg; cameras sit 0.3 m
#: below the LiDAR here.
RIG = {
    "back_camera": ((-0.3, 0.0, -0.3), 180.0, 92.0),
    "front_camera": ((0.85, 0.0, -0.3), 0.0, 52.0),
    "front_left_camera": ((1.5, 0.6, -0.3), 58.0, 92.0),
    "front_right_camera": ((1.5, -0.6, -0.3), -58.0, 92.0),
    "left_camera": ((0.55, 0.55, -0.3), 90.0, 92.0),
    "right_camera": ((0.6, -0.7, -0.3), -90.0, 92.0),
}


def build_rig(width: int, height: int) -> dict[str, dict[str, np.ndarray]]:
    """Return name -> {"intrinsics": (3, 3) K, "extrinsics": (4, 4) ego_from_camera (OpenCV)}."""
    rig = {}
    for name, (position, yaw_deg, hfov_deg) in RIG.items():
        f = (width / 2.0) / np.tan(np.radians(hfov_deg) / 2.0)
        k = np.array([[f, 0.0, width / 2.0], [0.0, f, height / 2.0], [0.0, 0.0, 1.0]])
        yaw = np.radians(yaw_deg)
        forward = np.array([np.cos(yaw), np.sin(yaw), 0.0])
        right = np.array([np.sin(yaw), -np.cos(yaw), 0.0])
        down = np.array([0.0, 0.0, -1.0])
        ext = np.eye(4)
        ext[:3, :3] = np.stack([right, down, forward], axis=1)  # columns: camera axes in ego
        ext[:3, 3] = position
        rig[name] = {"intrinsics": k, "extrinsics": ext}
    return rig


@dataclass(kw_only=True, frozen=True)
class Scene:
    """Ego trajectory and moving cuboids of one synthetic log (see the module legend)."""

    timestamps: np.ndarray
    """(F,) float64, s"""
    ego_pose: np.ndarray
    """(F, 4, 4) world_from_ego"""
    ego_speed: float
    """m/s, along ego +x"""
    ego_yaw_rate: float
    """rad/s, about +z"""
    class_group: list[str]
    """(K,) "vehicle" / "pedestrian" / "cyclist\""""
    track_id: list[str]
    """(K,) stable object ids"""
    size: np.ndarray
    """(K, 3) length, width, height, m"""
    yaw: np.ndarray
    """(K,) world heading, rad"""
    velocity: np.ndarray
    """(K, 3) world velocity, m/s"""
    center: np.ndarray
    """(F, K, 3) world centres, m"""


def _ego_trajectory(t: np.ndarray, speed: float, yaw_rate: float, height: float) -> np.ndarray:
    heading = yaw_rate * t
    if abs(yaw_rate) < 1e-9:
        x, y = speed * t, np.zeros_like(t)
    else:
        x = speed / yaw_rate * np.sin(heading)
        y = speed / yaw_rate * (1.0 - np.cos(heading))
    pose = np.tile(np.eye(4), (len(t), 1, 1))
    pose[:, 0, 0], pose[:, 0, 1] = np.cos(heading), -np.sin(heading)
    pose[:, 1, 0], pose[:, 1, 1] = np.sin(heading), np.cos(heading)
    pose[:, :3, 3] = np.stack([x, y, np.full_like(t, height)], axis=1)
    return pose


def sample_scene(config: SyntheticConfig, log_index: int) -> Scene:
    """Draw the ego trajectory and non-colliding moving objects of log `log_index`."""
    rng = np.random.default_rng([config.seed, log_index, 0])
    frames = config.frames_per_log
    t = np.arange(frames) / config.frame_rate_hz
    low_speed, high_speed = config.ego_speed_mps
    speed = float(rng.uniform(low_speed, high_speed))
    yaw_rate = float(np.radians(rng.uniform(-1.0, 1.0) * config.max_yaw_rate_dps))
    ego_pose = _ego_trajectory(t, speed, yaw_rate, config.lidar_height_m)
    ego_xy = ego_pose[:, :2, 3]
    groups: list[str] = []
    sizes: list[Any] = []
    yaws: list[Any] = []
    vels: list[Any] = []
    paths: list[Any] = []
    radii: list[Any] = []
    counts = {
        "vehicle": config.num_vehicles,
        "pedestrian": config.num_pedestrians,
        "cyclist": config.num_cyclists,
    }
    for group, (lo, hi) in counts.items():
        _, _, base, speed_range, p_static, *_ = CLASS_SPECS[group]
        for _ in range(int(rng.integers(lo, hi + 1))):
            for _attempt in range(50):
                size = np.array(base) * rng.uniform(0.9, 1.1, size=3)
                r = float(rng.uniform(4.0, config.scene_radius_m))
                # half of the objects ahead of the ego (front camera), the rest all around
                bearing = float(
                    rng.normal(0.0, 0.35) if rng.uniform() < 0.5 else rng.uniform(-np.pi, np.pi)
                )
                yaw = float(rng.uniform(-np.pi, np.pi))
                v = 0.0 if rng.uniform() < p_static else float(rng.uniform(*speed_range))
                vel = v * np.array([np.cos(yaw), np.sin(yaw), 0.0])
                start = ego_xy[0] + r * np.array([np.cos(bearing), np.sin(bearing)])
                path = start + t[:, None] * vel[None, :2]
                radius = 0.5 * float(np.hypot(size[0], size[1]))
                if np.min(np.linalg.norm(path - ego_xy, axis=1)) < radius + 3.5:
                    continue
                if any(
                    np.min(np.linalg.norm(path - p, axis=1)) < radius + q + 0.5
                    for p, q in zip(paths, radii, strict=True)
                ):
                    continue
                groups.append(group)
                sizes.append(size)
                yaws.append(yaw)
                vels.append(vel)
                paths.append(path)
                radii.append(radius)
                break
    k = len(groups)
    center = np.zeros((frames, k, 3))
    if k:
        center[:, :, :2] = np.stack(paths, axis=1)
        center[:, :, 2] = np.array(sizes)[:, 2] / 2.0
    return Scene(
        timestamps=config.start_timestamp_s + 1000.0 * log_index + t,
        ego_pose=ego_pose,
        ego_speed=speed,
        ego_yaw_rate=yaw_rate,
        class_group=groups,
        track_id=[f"{g}-{j:03d}" for j, g in enumerate(groups)],
        size=np.array(sizes).reshape(k, 3),
        yaw=np.array(yaws),
        velocity=np.array(vels).reshape(k, 3),
        center=center,
    )
