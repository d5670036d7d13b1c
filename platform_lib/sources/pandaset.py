"""PandaSet reader: sequence folders -> canonical `Frame`s in the ego frame of each sweep.

`load_pandaset_log` lists the sequence folder once (`raw_files.scan_raw_files`, the listing the
content hash covers) and opens every file through that listing; `catalog.iter_log_frames`
yields a `FrameError` in place of a bad frame and goes on, `catalog.read_frames` raises on
the first one; log-level problems raise `FrameError` with `frame_index=None`. Frames,
cuboid conventions and the overlap de-duplication follow the PandaSet devkit docs, as listed in
the package README.md, "PandaSet conventions" (ego = LiDAR pose frame re-axed to x forward,
y left, z up; heading in world = yaw + pi/2; length = `dimensions.y`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from platform_lib.sources.catalog import find_log_folders
from platform_lib.sources.frame import CameraImage, Cuboids, Frame, FrameError
from platform_lib.sources.geometry import (
    EGO_FROM_PANDASET_LIDAR,
    invert_transform,
    transform_points,
)
from platform_lib.sources.hashing import hash_raw_log
from platform_lib.sources.pandaset_cuboids import map_pandaset_label, read_pandaset_cuboids
from platform_lib.sources.pandaset_files import (
    index_numbered_files,
    load_json,
    load_pickled_frame,
    parse_pose,
    require_columns,
)
from platform_lib.sources.raw_files import RawFiles, scan_raw_files
from platform_lib.sources.validation import read_jpeg_file, validate_frame

__all__ = [
    "CAMERA_NAMES",
    "PandasetLog",
    "hash_raw_log",
    "list_pandaset_logs",
    "load_pandaset_log",
    "map_pandaset_label",
    "read_pandaset_frame",
]

#: The six PandaSet cameras, sorted by name (the member order of the shards).
CAMERA_NAMES: tuple[str, ...] = (
    "back_camera",
    "front_camera",
    "front_left_camera",
    "front_right_camera",
    "left_camera",
    "right_camera",
)
_LIDAR_COLUMNS = ("x", "y", "z", "i")
_LIDAR_FROM_EGO = invert_transform(EGO_FROM_PANDASET_LIDAR)


@dataclass(kw_only=True, frozen=True)
class PandasetLog:
    """Per-sequence metadata loaded once by `load_pandaset_log`."""

    log_dir: Path
    """sequence folder"""
    log_id: str
    """sequence folder name, e.g. "002\""""
    frame_indices: tuple[int, ...]
    """0..max index seen in lidar/, cameras or annotations"""
    lidar_poses: list
    """raw lidar/poses.json list (world_from_lidar per frame)"""
    lidar_timestamps: list
    """raw lidar/timestamps.json list, s"""
    cameras: dict
    """name -> {"intrinsics": (3, 3), "poses": list, "timestamps": list, "files": {i: Path}}"""
    has_semseg: bool
    """annotations/semseg/ exists"""
    has_cuboids: bool
    """annotations/cuboids/ exists"""
    num_lidar_files: int
    """number of lidar/NN.pkl.gz sweeps present"""
    files: RawFiles
    """the sequence folder's listing: the only files read (and the ones hashed)"""


def list_pandaset_logs(root: str | os.PathLike[str]) -> list[Path]:
    """Return the sorted sequence folders under a PandaSet root, or [root] if it is one.

    A sequence folder is recognised by holding `lidar/poses.json`; names starting with "." are
    skipped, as the content hash of the root skips them (`raw_files`).

    Raises:
        FileNotFoundError: if `root` does not exist or holds no sequence folder.
    """
    logs = find_log_folders(Path(root), "lidar/poses.json")
    if not logs:
        raise FileNotFoundError(
            f"{root}: no PandaSet sequence found (expected <root>/<seq>/lidar/poses.json or "
            "<root>/lidar/poses.json); pass the PandaSet root or one sequence folder"
        )
    return logs


def load_pandaset_log(
    log_dir: str | os.PathLike[str], *, files: RawFiles | None = None
) -> PandasetLog:
    """Load the per-sequence metadata (poses, timestamps, intrinsics, file lists).

    Args:
        log_dir: the sequence folder.
        files: the folder's hashed listing to read through (`hashing.hash_logs`); None: list
            it now.

    Raises:
        FrameError: (frame_index None) reasons "missing_file", "corrupt_metadata",
            "missing_camera" (a camera folder is absent), "bad_calibration".
        UserError: the folder's listing refused an entry (dangling link, link loop, FIFO,
            device, socket; `raw_files.scan_raw_files`) or a file is over its size bound.
    """
    log_dir = Path(log_dir)
    log_id = log_dir.name
    raw = scan_raw_files(log_dir) if files is None else files
    lidar_files = index_numbered_files(raw, log_dir / "lidar", ".pkl.gz")
    indices = set(lidar_files)
    cameras = {}
    for name in CAMERA_NAMES:
        folder = log_dir / "camera" / name
        if not raw.has_dir(folder):
            raise FrameError.at(
                folder,
                "camera folder is missing; a PandaSet sequence has all of "
                f"{list(CAMERA_NAMES)}: re-copy the sequence",
                reason="missing_camera",
                log_id=log_id,
            )
        intr_path = folder / "intrinsics.json"
        intr = load_json(intr_path, files=raw, log_id=log_id)
        try:
            k = np.array(
                [[intr["fx"], 0.0, intr["cx"]], [0.0, intr["fy"], intr["cy"]], [0.0, 0.0, 1.0]],
                dtype=np.float64,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise FrameError.at(
                intr_path,
                f"expected {{fx, fy, cx, cy}} ({exc!r})",
                reason="bad_calibration",
                log_id=log_id,
            ) from exc
        images = index_numbered_files(raw, folder, ".jpg")
        indices |= set(images)
        cameras[name] = {
            "intrinsics": k,
            "files": images,
            "folder": folder,
            "poses": load_json(folder / "poses.json", files=raw, log_id=log_id),
            "timestamps": load_json(folder / "timestamps.json", files=raw, log_id=log_id),
        }
    for sub in ("cuboids", "semseg"):
        indices |= set(index_numbered_files(raw, log_dir / "annotations" / sub, ".pkl.gz"))
    return PandasetLog(
        log_dir=log_dir,
        log_id=log_id,
        frame_indices=tuple(range(max(indices) + 1)) if indices else (),
        lidar_poses=load_json(log_dir / "lidar" / "poses.json", files=raw, log_id=log_id),
        lidar_timestamps=load_json(log_dir / "lidar" / "timestamps.json", files=raw, log_id=log_id),
        cameras=cameras,
        has_semseg=raw.has_dir(log_dir / "annotations" / "semseg"),
        has_cuboids=raw.has_dir(log_dir / "annotations" / "cuboids"),
        num_lidar_files=len(lidar_files),
        files=raw,
    )


def _timestamp(stamps: Any, i: int, folder: Path, log_id: str) -> float:
    """Return entry `i` of `folder`/timestamps.json (already loaded as `stamps`), in s."""
    if not isinstance(stamps, list) or i >= len(stamps):
        raise FrameError.at(
            folder / "timestamps.json",
            f"no timestamp for frame {i}",
            reason="count_mismatch",
            log_id=log_id,
            frame_index=i,
        )
    return float(stamps[i])


def _read_camera(
    log: PandasetLog, name: str, i: int, ego_from_world: np.ndarray
) -> tuple[CameraImage, Path]:
    cam = log.cameras[name]
    path = cam["folder"] / f"{i:02d}.jpg"
    data, width, height = read_jpeg_file(
        log.files,
        path,
        missing=f"camera image of frame {i} is missing (camera folder {cam['folder']} holds "
        f"{len(cam['files'])} images, lidar folder {log.log_dir / 'lidar'} holds "
        f"{log.num_lidar_files} sweeps); re-copy the image from the original download or "
        "quarantine the frame",
        fix="; re-copy the image",
        log_id=log.log_id,
        frame_index=i,
    )
    world_from_camera = parse_pose(
        cam["poses"], i, cam["folder"] / "poses.json", log_id=log.log_id, frame_index=i
    )
    image = CameraImage(
        jpeg=data,
        width=width,
        height=height,
        intrinsics=cam["intrinsics"].copy(),
        extrinsics=ego_from_world @ world_from_camera,
        timestamp=_timestamp(cam["timestamps"], i, cam["folder"], log.log_id),
    )
    return image, path


def read_pandaset_frame(log: PandasetLog, frame_index: int) -> Frame:
    """Read and validate one frame of a loaded sequence.

    Returns:
        Frame with lidar (N, 4) float32 (x, y, z in m, ego frame; intensity 0..255), lidar_seg
        (N,) int32 PandaSet class ids (annotations/semseg/classes.json) when labelled, the six
        cameras and cuboids in the ego frame; radar None (PandaSet has none).

    Raises:
        FrameError: naming the culprit file; see `validate_frame` for the reasons, plus
            "missing_lidar", "corrupt_lidar", "missing_column", "missing_camera",
            "corrupt_camera", "missing_cuboids", "corrupt_cuboids", "missing_semseg",
            "corrupt_semseg", "count_mismatch", "bad_pose".
    """
    i, log_id, lidar_dir = frame_index, log.log_id, log.log_dir / "lidar"
    lidar_path = lidar_dir / f"{i:02d}.pkl.gz"
    df = load_pickled_frame(
        lidar_path, files=log.files, reason="corrupt_lidar", log_id=log_id, frame_index=i
    )
    require_columns(df, _LIDAR_COLUMNS, lidar_path, log_id=log_id, frame_index=i)
    world_from_ego = (
        parse_pose(log.lidar_poses, i, lidar_dir / "poses.json", log_id=log_id, frame_index=i)
        @ _LIDAR_FROM_EGO
    )
    ego_from_world = invert_transform(world_from_ego)
    timestamp = _timestamp(log.lidar_timestamps, i, lidar_dir, log_id)
    points = np.empty((len(df), 4), dtype=np.float32)
    points[:, :3] = transform_points(ego_from_world, df[["x", "y", "z"]].to_numpy(np.float64))
    points[:, 3] = df["i"].to_numpy(np.float64)
    files = {
        "lidar": str(lidar_path),
        "lidar_pose": str(lidar_dir / "poses.json"),
        "timestamps": str(lidar_dir / "timestamps.json"),
    }
    lidar_seg = None
    if log.has_semseg:
        seg_path = log.log_dir / "annotations" / "semseg" / f"{i:02d}.pkl.gz"
        seg = load_pickled_frame(
            seg_path, files=log.files, reason="corrupt_semseg", log_id=log_id, frame_index=i
        )
        require_columns(seg, ("class",), seg_path, log_id=log_id, frame_index=i)
        lidar_seg = seg["class"].to_numpy().astype(np.int32)
        files["lidar_seg"] = str(seg_path)
    cuboids = Cuboids.empty()
    if log.has_cuboids:
        cub_path = log.log_dir / "annotations" / "cuboids" / f"{i:02d}.pkl.gz"
        cuboids = read_pandaset_cuboids(cub_path, log_id, i, ego_from_world, files=log.files)
        files["cuboids"] = str(cub_path)
    cameras = {}
    for name in CAMERA_NAMES:
        cameras[name], cam_path = _read_camera(log, name, i, ego_from_world)
        files[f"camera/{name}"] = str(cam_path)
    frame = Frame(
        log_id=log_id,
        frame_index=i,
        timestamp=timestamp,
        ego_pose=world_from_ego,
        cameras=cameras,
        lidar=points,
        lidar_seg=lidar_seg,
        radar=None,
        cuboids=cuboids,
        source_files=files,
    )
    return validate_frame(frame)
