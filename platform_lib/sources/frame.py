"""The canonical frame: what every raw-log reader yields and the shard writer consumes.

Shape legend (N LiDAR points, M radar returns; ego frame: x forward, y left, z up, metres, ISO
8855 / nuScenes, origin at the LiDAR of the sweep; timestamps in s, UNIX epoch for real logs):
    lidar       (N, 4) float32   x, y, z in m (ego frame), intensity (sensor units, 0..255 PandaSet)
    lidar_seg   (N,)   int32     per-point semantic class id (source taxonomy), or None
    radar       (M, 5) float32   x, y, z in m (ego), radial velocity in m/s (positive = moving
                                 away from the sensor), RCS in dBsm; or None
    ego_pose    (4, 4) float64   world_from_ego homogeneous transform
    intrinsics  (3, 3) float64   pinhole camera matrix K, pixels
    extrinsics  (4, 4) float64   ego_from_camera; camera frame is OpenCV (x right, y down, z forward)
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import numpy as np

from schemas.classes import CLASS_GROUPS

__all__ = [
    "CLASS_GROUPS",
    "CameraImage",
    "Cuboids",
    "Frame",
    "FrameError",
    "LOG_ID_PATTERN",
    "sample_key",
]

#: Log ids become part of WebDataset keys, which must not contain dots or path separators.
LOG_ID_PATTERN = re.compile(r"^[A-Za-z0-9-]{1,64}$")


class FrameError(ValueError):
    """A raw frame is malformed. The message names the source file and what to do.

    Pickles with every attribute (`BaseException` pickling: the message, then `__dict__`), so
    worker processes hand it back whole.

    Attributes:
        path: the culprit raw file or folder (str), or None when not file-specific.
        reason: short slug used to count quarantined frames per reason, e.g. "nan_points",
            "missing_camera", "corrupt_lidar", "missing_column", "bad_cuboid", "count_mismatch".
        log_id: log of the failing frame, or None.
        frame_index: 0-based index of the failing frame, or None for log-level errors.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | os.PathLike[str] | None = None,
        reason: str = "invalid_frame",
        log_id: str | None = None,
        frame_index: int | None = None,
    ) -> None:
        super().__init__(message)
        self.path = None if path is None else str(path)
        self.reason = reason
        self.log_id = log_id
        self.frame_index = frame_index

    @classmethod
    def at(
        cls,
        path: str | os.PathLike[str],
        problem: str,
        *,
        reason: str,
        log_id: str | None = None,
        frame_index: int | None = None,
    ) -> FrameError:
        """Return the error "<path>: <problem>" naming the culprit file or folder `path` first."""
        return cls(
            f"{path}: {problem}", path=path, reason=reason, log_id=log_id, frame_index=frame_index
        )


def sample_key(log_id: str, frame_index: int) -> str:
    """Return the WebDataset sample key `<log_id>_<frame:06d>` (no dots, no slashes).

    Raises:
        FrameError: if `log_id` does not match `LOG_ID_PATTERN` or `frame_index` is negative.
    """
    if not LOG_ID_PATTERN.match(log_id):
        raise FrameError(
            f"log id {log_id!r} is not usable in a shard key: use 1-64 characters of [A-Za-z0-9-]",
            reason="bad_log_id",
            log_id=log_id,
        )
    if frame_index < 0:
        raise FrameError(
            f"frame index {frame_index} of log {log_id!r} is negative",
            reason="bad_frame_index",
            log_id=log_id,
            frame_index=frame_index,
        )
    return f"{log_id}_{frame_index:06d}"


@dataclass(kw_only=True)
class CameraImage:
    """One camera exposure, kept as the encoded JPEG bytes of the source (never re-encoded)."""

    jpeg: bytes
    """encoded JPEG, byte-identical to the raw file"""
    width: int
    """image width, in pixels"""
    height: int
    """image height, in pixels"""
    intrinsics: np.ndarray
    """(3, 3) float64 pinhole matrix K, in pixels"""
    extrinsics: np.ndarray
    """(4, 4) float64 ego_from_camera; camera axes OpenCV (x right, y down, z forward)"""
    timestamp: float
    """exposure time, in s"""


@dataclass(kw_only=True)
class Cuboids:
    """K labelled 3D boxes in the ego frame of the sweep.

    `size` is (length along the box heading, width, height) in m; `yaw` is the heading angle
    in rad about ego +z, counter-clockwise from ego +x. `center` is the box centre (not the
    bottom face) in m.
    """

    label: list[str]
    """source label per box, e.g. "Car", "Pedestrian" (K,)"""
    class_group: list[str]
    """one of CLASS_GROUPS or "other" (K,)"""
    center: np.ndarray
    """(K, 3) float64, m, ego frame"""
    size: np.ndarray
    """(K, 3) float64 length, width, height, m; all > 0"""
    yaw: np.ndarray
    """(K,) float64, rad, about ego +z"""
    track_id: list[str]
    """stable object id across frames of a log (K,)"""

    def __len__(self) -> int:
        return len(self.label)

    @classmethod
    def empty(cls) -> Cuboids:
        """Return zero boxes (K = 0)."""
        return cls(
            label=[],
            class_group=[],
            center=np.zeros((0, 3)),
            size=np.zeros((0, 3)),
            yaw=np.zeros((0,)),
            track_id=[],
        )


@dataclass(kw_only=True)
class Frame:
    """One multimodal training sample: all sensors of one LiDAR sweep of one log."""

    log_id: str
    """log (sequence) id, matches LOG_ID_PATTERN"""
    frame_index: int
    """0-based index of the sweep within its log"""
    timestamp: float
    """LiDAR sweep time, in s"""
    ego_pose: np.ndarray
    """(4, 4) float64 world_from_ego"""
    cameras: dict[str, CameraImage]
    """camera name -> image; names match [a-z0-9_]+ (e.g. "front_camera")"""
    lidar: np.ndarray
    """(N, 4) float32 x, y, z (m, ego), intensity"""
    lidar_seg: np.ndarray | None = None
    """(N,) int32 semantic class id per point, or None when unlabelled"""
    radar: np.ndarray | None = None
    """(M, 5) float32 x, y, z (m, ego), radial velocity (m/s), RCS (dBsm), or None"""
    cuboids: Cuboids = field(default_factory=Cuboids.empty)
    """labelled boxes in the ego frame"""
    source_files: dict[str, str] = field(default_factory=dict)
    """role -> raw file path the frame was read from (for error messages and lineage)"""

    @property
    def key(self) -> str:
        """WebDataset sample key, see `sample_key`."""
        return sample_key(self.log_id, self.frame_index)
