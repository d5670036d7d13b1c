"""Reading synthetic raw logs (layout in `platform_lib.sources.synthetic`) into Frames.

Every failure raises `FrameError` naming the raw file, with a reason slug. `load_synthetic_log`
lists the log folder once (`raw_files.scan_raw_files`, the listing the content hash covers) and
every file is looked up and opened through that listing, with the bounds of `raw_files`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from platform_lib.sources.frame import CameraImage, Cuboids, Frame, FrameError
from platform_lib.sources.raw_files import MAX_ARRAY_BYTES, RawFiles, scan_raw_files
from platform_lib.sources.validation import (
    load_json_file,
    read_jpeg_file,
    require_file,
    validate_frame,
)

__all__ = ["SyntheticLog", "load_synthetic_log", "read_synthetic_frame"]

_CUBOID_KEYS = ("label", "class_group", "center", "size", "yaw", "track_id")


@dataclass(kw_only=True, frozen=True)
class SyntheticLog:
    """Per-log metadata of a synthetic raw log, loaded once."""

    log_dir: Path
    """log folder"""
    log_id: str
    """e.g. "synth-0000\""""
    num_frames: int
    """frames in the log"""
    calib: dict
    """name -> {"width", "height", "intrinsics" (3, 3), "extrinsics" (4, 4)}"""
    poses: list
    """F x 4x4 world_from_ego"""
    timestamps: list
    """F floats, s"""
    files: RawFiles
    """the log folder's listing: the only files read (and the ones hashed)"""

    @property
    def frame_indices(self) -> range:
        """Indices of the log's frames, 0..num_frames-1."""
        return range(self.num_frames)


def _load_json(files: RawFiles, path: Path, log_id: str | None, **where: Any) -> Any:
    """`load_json_file` with the synthetic log's messages; `where`: frame_index, reasons."""
    return load_json_file(
        files,
        path,
        missing="file is missing; regenerate the synthetic log (write_synthetic_logs) or "
        "quarantine the frame",
        fix="regenerate the synthetic log",
        log_id=log_id,
        **where,
    )


def load_synthetic_log(
    log_dir: str | os.PathLike[str], *, files: RawFiles | None = None
) -> SyntheticLog:
    """Load meta.json, calib.json, poses.json and timestamps.json of the log at `log_dir`.

    `files`: the folder's listing to read through, as in `pandaset.load_pandaset_log`.

    Raises:
        FrameError: (frame_index None) "missing_file", "corrupt_metadata", "count_mismatch".
        UserError: the folder's listing refused an entry (`raw_files.scan_raw_files`) or a
            file is over its size bound.
    """
    log_dir = Path(log_dir)
    files = scan_raw_files(log_dir) if files is None else files
    meta = _load_json(files, log_dir / "meta.json", None)
    if not isinstance(meta, dict) or meta.get("format") != "drivetrain-synthetic-v1":
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise FrameError.at(
            log_dir / "meta.json",
            f"format is {found!r}, expected "
            "'drivetrain-synthetic-v1'; regenerate the log with write_synthetic_logs",
            reason="corrupt_metadata",
        )
    log_id = str(meta.get("log_id", log_dir.name))
    try:
        num_frames = int(meta["num_frames"])
        calib = {
            name: {
                "width": int(c["width"]),
                "height": int(c["height"]),
                "intrinsics": np.array(c["intrinsics"], dtype=np.float64),
                "extrinsics": np.array(c["extrinsics"], dtype=np.float64),
            }
            for name, c in _load_json(files, log_dir / "calib.json", log_id)["cameras"].items()
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise FrameError.at(
            log_dir,
            f"meta.json/calib.json malformed ({exc!r}); regenerate the log",
            reason="corrupt_metadata",
            log_id=log_id,
        ) from exc
    poses = _load_json(files, log_dir / "poses.json", log_id)
    timestamps = _load_json(files, log_dir / "timestamps.json", log_id)
    for name, values in (("poses.json", poses), ("timestamps.json", timestamps)):
        if not isinstance(values, list) or len(values) != num_frames:
            raise FrameError.at(
                log_dir / name,
                f"holds {len(values) if isinstance(values, list) else 'no'} "
                f"entries but {log_dir / 'meta.json'} says {num_frames} frames; regenerate the log",
                reason="count_mismatch",
                log_id=log_id,
            )
    return SyntheticLog(
        log_dir=log_dir,
        log_id=log_id,
        num_frames=num_frames,
        calib=calib,
        poses=poses,
        timestamps=timestamps,
        files=files,
    )


def _load_npy(files: RawFiles, path: Path, what: str, log_id: str, i: int) -> np.ndarray:
    require_file(
        files,
        path,
        f"{what} file of frame {i} is missing; regenerate the log or quarantine the frame",
        reason=f"missing_{what}",
        log_id=log_id,
        frame_index=i,
    )
    # Opened outside the try: a refused type or size is not a corrupt file.
    with files.open(path, max_bytes=MAX_ARRAY_BYTES) as fh:
        try:
            return np.load(fh, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise FrameError.at(
                path,
                f"unreadable .npy ({exc}); the file is truncated or corrupt: "
                "regenerate the log or quarantine the frame",
                reason=f"corrupt_{what}",
                log_id=log_id,
                frame_index=i,
            ) from exc


def read_synthetic_frame(log: SyntheticLog, frame_index: int) -> Frame:
    """Read and validate frame `frame_index` of a loaded synthetic log.

    Raises:
        FrameError: naming the culprit file ("missing_camera", "corrupt_camera",
            "missing_lidar", "corrupt_lidar", "missing_cuboids", "bad_cuboid", ... and the
            reasons of `validate_frame`).
    """
    i, log_id, root = frame_index, log.log_id, log.log_dir
    stem = f"{i:06d}"
    files = {
        "lidar": str(root / "lidar" / f"{stem}.npy"),
        "lidar_seg": str(root / "lidar_seg" / f"{stem}.npy"),
        "radar": str(root / "radar" / f"{stem}.npy"),
        "cuboids": str(root / "cuboids" / f"{stem}.json"),
        "lidar_pose": str(root / "poses.json"),
        "timestamps": str(root / "timestamps.json"),
    }
    raw_files = log.files
    lidar = _load_npy(raw_files, Path(files["lidar"]), "lidar", log_id, i)
    seg = _load_npy(raw_files, Path(files["lidar_seg"]), "lidar_seg", log_id, i)
    radar = _load_npy(raw_files, Path(files["radar"]), "radar", log_id, i)
    raw = _load_json(
        raw_files,
        Path(files["cuboids"]),
        log_id,
        frame_index=i,
        missing_reason="missing_cuboids",
        corrupt_reason="corrupt_cuboids",
    )

    def bad_cuboids(problem: str, reason: str) -> FrameError:
        path = files["cuboids"]
        return FrameError.at(
            path,
            f"{problem}; regenerate the log",
            reason=reason,
            log_id=log_id,
            frame_index=i,
        )

    missing = [k for k in _CUBOID_KEYS if not isinstance(raw, dict) or k not in raw]
    if missing:
        raise bad_cuboids(f"missing field(s) {missing}", "missing_column")
    try:
        cuboids = Cuboids(
            label=[str(x) for x in raw["label"]],
            class_group=[str(x) for x in raw["class_group"]],
            center=np.array(raw["center"], dtype=np.float64).reshape(-1, 3),
            size=np.array(raw["size"], dtype=np.float64).reshape(-1, 3),
            yaw=np.array(raw["yaw"], dtype=np.float64).reshape(-1),
            track_id=[str(x) for x in raw["track_id"]],
        )
        ego_pose = np.array(log.poses[i], dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise bad_cuboids(f"malformed cuboids ({exc})", "bad_cuboid") from exc
    timestamp = float(log.timestamps[i])
    cameras = {}
    for name in sorted(log.calib):
        path = root / "camera" / name / f"{stem}.jpg"
        data, width, height = read_jpeg_file(
            raw_files,
            path,
            missing=f"camera image of frame {i} is missing; regenerate the log or quarantine "
            "the frame",
            fix="",
            log_id=log_id,
            frame_index=i,
        )
        cal = log.calib[name]
        if (width, height) != (cal["width"], cal["height"]):
            raise FrameError.at(
                path,
                f"image is {width}x{height} but calib.json says "
                f"{cal['width']}x{cal['height']}; regenerate the log",
                reason="bad_calibration",
                log_id=log_id,
                frame_index=i,
            )
        cameras[name] = CameraImage(
            jpeg=data,
            width=width,
            height=height,
            intrinsics=cal["intrinsics"].copy(),
            extrinsics=cal["extrinsics"].copy(),
            timestamp=timestamp,
        )
        files[f"camera/{name}"] = str(path)
    frame = Frame(
        log_id=log_id,
        frame_index=i,
        timestamp=timestamp,
        ego_pose=ego_pose,
        cameras=cameras,
        lidar=lidar,
        lidar_seg=seg,
        radar=radar,
        cuboids=cuboids,
        source_files=files,
    )
    return validate_frame(frame)
