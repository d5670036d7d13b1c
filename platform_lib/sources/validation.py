"""Validation of canonical frames: every source calls `validate_frame` before yielding a frame.

Checks shapes, dtypes and finiteness of every array (legend in `platform_lib.sources.frame`),
per-point labels against points, cuboids against the contract of `schemas.cuboids`, and that
camera JPEGs are complete. Each failure raises `FrameError` naming the raw file the bad value
came from (`Frame.source_files[role]`) and a reason slug.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from platform_lib.sources.frame import CLASS_GROUPS, Frame, FrameError, sample_key
from platform_lib.sources.raw_files import MAX_IMAGE_BYTES, MAX_JSON_BYTES, RawFiles, parse_json
from schemas.cuboids import CENTER_XY_LIMIT_M, CENTER_Z_LIMIT_M, SIZE_LIMIT_M

__all__ = [
    "CAMERA_NAME_PATTERN",
    "check_jpeg_bytes",
    "load_json_file",
    "read_jpeg_file",
    "require_file",
    "validate_frame",
]

#: Camera names become tar member names (`<key>.<camera>.jpg`).
CAMERA_NAME_PATTERN = re.compile(r"^[a-z0-9_]{1,64}$")

_JPEG_SOI = b"\xff\xd8"
_JPEG_EOI = b"\xff\xd9"


def check_jpeg_bytes(
    data: bytes, path: str, *, log_id: str | None = None, frame_index: int | None = None
) -> None:
    """Raise `FrameError` (reason "corrupt_camera") unless `data` starts with SOI and holds EOI.

    The end-of-image marker is searched in the last 64 bytes, so a truncated file is caught
    without decoding pixels.
    """
    if not data.startswith(_JPEG_SOI):
        raise FrameError.at(
            path,
            f"not a JPEG (first bytes {data[:4].hex() or 'empty'}, expected ffd8); "
            "restore the camera image from the original log or quarantine the frame",
            reason="corrupt_camera",
            log_id=log_id,
            frame_index=frame_index,
        )
    if _JPEG_EOI not in data[-64:]:
        raise FrameError.at(
            path,
            f"JPEG is truncated ({len(data)} bytes, no end-of-image marker); "
            "re-copy the camera image from the original log or quarantine the frame",
            reason="corrupt_camera",
            log_id=log_id,
            frame_index=frame_index,
        )


def require_file(
    files: RawFiles,
    path: Path,
    missing: str,
    *,
    reason: str,
    log_id: str | None,
    frame_index: int | None = None,
) -> None:
    """Raise `FrameError` "<path>: <missing>" with `reason` unless the listing holds file `path`."""
    if not files.has_file(path):
        raise FrameError.at(path, missing, reason=reason, log_id=log_id, frame_index=frame_index)


def load_json_file(
    files: RawFiles,
    path: Path,
    *,
    missing: str,
    fix: str,
    log_id: str | None,
    frame_index: int | None = None,
    missing_reason: str = "missing_file",
    corrupt_reason: str = "corrupt_metadata",
) -> Any:
    """Load a JSON file through the listing (at most `MAX_JSON_BYTES`, nesting bounded).

    Args:
        files: the log folder's listing (`raw_files.scan_raw_files`).
        path: the JSON file.
        missing: message (after "<path>: ") when the file is absent.
        fix: what to do (after "not valid JSON (...); ") when it does not parse.
        log_id: log of the file, for the error.
        frame_index: frame of the file, or None for log-level files.
        missing_reason: reason slug when the file is absent.
        corrupt_reason: reason slug when it does not parse.

    Raises:
        FrameError: `missing_reason` if absent, `corrupt_reason` if not valid UTF-8 JSON or
            nested too deep.
        UserError: larger than `MAX_JSON_BYTES`; NotRegularFileError: not a regular file.
    """
    require_file(
        files, path, missing, reason=missing_reason, log_id=log_id, frame_index=frame_index
    )
    data = files.read(path, max_bytes=MAX_JSON_BYTES)
    try:
        return parse_json(data)
    except ValueError as exc:
        raise FrameError.at(
            path,
            f"not valid JSON ({exc}); {fix}",
            reason=corrupt_reason,
            log_id=log_id,
            frame_index=frame_index,
        ) from exc


def read_jpeg_file(
    files: RawFiles, path: Path, *, missing: str, fix: str, log_id: str, frame_index: int
) -> tuple[bytes, int, int]:
    """Read a camera JPEG through the listing; return (bytes, width, height) in pixels.

    Checks the SOI/EOI markers (`check_jpeg_bytes`) and parses the header only (no pixel
    decode); `missing` is the message of an absent file, `fix` ends the message of an
    unreadable header (e.g. "; re-copy the image").

    Raises:
        FrameError: reason "missing_camera" or "corrupt_camera". UserError: larger than
            `MAX_IMAGE_BYTES`.
    """
    require_file(
        files, path, missing, reason="missing_camera", log_id=log_id, frame_index=frame_index
    )
    data = files.read(path, max_bytes=MAX_IMAGE_BYTES)
    check_jpeg_bytes(data, str(path), log_id=log_id, frame_index=frame_index)
    try:
        with Image.open(io.BytesIO(data)) as img:
            width, height = img.size
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise FrameError.at(
            path,
            f"unreadable JPEG header ({exc}){fix}",
            reason="corrupt_camera",
            log_id=log_id,
            frame_index=frame_index,
        ) from exc
    return data, int(width), int(height)


def _fail(frame: Frame, role: str, message: str, reason: str) -> FrameError:
    path = frame.source_files.get(role, f"<{role} of {frame.log_id} frame {frame.frame_index}>")
    return FrameError.at(
        path,
        message,
        reason=reason,
        log_id=frame.log_id,
        frame_index=frame.frame_index,
    )


def _check_matrix(frame: Frame, role: str, name: str, value: np.ndarray, shape: tuple) -> None:
    value = np.asarray(value)
    reason = "bad_calibration" if role.startswith("camera") else "bad_pose"
    if value.shape != shape or not np.all(np.isfinite(value)):
        raise _fail(
            frame,
            role,
            f"{name} must be a finite {shape} matrix, got shape "
            f"{value.shape}; fix the calibration/pose file of the log",
            reason,
        )
    if shape == (4, 4):
        rot = value[:3, :3]
        if not (
            np.allclose(rot.T @ rot, np.eye(3), atol=1e-4)
            and np.allclose(value[3], [0, 0, 0, 1])
            and np.linalg.det(rot) > 0
        ):
            raise _fail(
                frame,
                role,
                f"{name} is not a rigid transform (rotation not orthonormal "
                "or last row not [0, 0, 0, 1]); fix the calibration/pose file",
                reason,
            )


def _check_points(frame: Frame, role: str, points: np.ndarray, columns: int) -> None:
    if (
        not isinstance(points, np.ndarray)
        or points.dtype != np.float32
        or points.ndim != 2
        or points.shape[1] != columns
    ):
        raise _fail(
            frame,
            role,
            f"expected (N, {columns}) float32 points, got "
            f"{getattr(points, 'shape', None)} {getattr(points, 'dtype', type(points).__name__)}; "
            "this is a reader bug, report it with the file",
            "bad_points",
        )
    bad = ~np.isfinite(points).all(axis=1)
    if bad.any():
        raise _fail(
            frame,
            role,
            f"{int(bad.sum())} of {len(points)} points hold NaN/inf (first at row "
            f"{int(np.flatnonzero(bad)[0])}); drop those points in the source log or quarantine "
            "the frame",
            "nan_points",
        )


def validate_frame(frame: Frame) -> Frame:
    """Check a frame against the canonical contract; return it unchanged when it holds.

    Raises:
        FrameError: naming the culprit raw file (from `frame.source_files`) with a reason slug:
            "bad_log_id", "bad_pose", "bad_calibration", "corrupt_camera", "bad_points",
            "nan_points", "count_mismatch", "bad_cuboid".
    """
    sample_key(frame.log_id, frame.frame_index)
    if not np.isfinite(frame.timestamp):
        raise _fail(frame, "timestamps", f"timestamp is {frame.timestamp}", "bad_pose")
    _check_matrix(frame, "lidar_pose", "ego_pose", frame.ego_pose, (4, 4))
    for name, cam in frame.cameras.items():
        role = f"camera/{name}"
        if not CAMERA_NAME_PATTERN.match(name):
            raise _fail(frame, role, f"camera name {name!r} is not [a-z0-9_]+", "bad_calibration")
        check_jpeg_bytes(
            cam.jpeg,
            frame.source_files.get(role, role),
            log_id=frame.log_id,
            frame_index=frame.frame_index,
        )
        if cam.width <= 0 or cam.height <= 0:
            raise _fail(frame, role, f"image size {cam.width}x{cam.height}", "corrupt_camera")
        _check_matrix(frame, role, "intrinsics", cam.intrinsics, (3, 3))
        _check_matrix(frame, role, "extrinsics", cam.extrinsics, (4, 4))
    _check_points(frame, "lidar", frame.lidar, 4)
    if frame.lidar_seg is not None:
        seg = frame.lidar_seg
        if (
            not isinstance(seg, np.ndarray)
            or seg.dtype != np.int32
            or seg.shape != (len(frame.lidar),)
        ):
            raise FrameError(
                f"{frame.source_files.get('lidar_seg', 'lidar_seg')}: holds "
                f"{getattr(seg, 'shape', None)} labels but "
                f"{frame.source_files.get('lidar', 'lidar')} holds {len(frame.lidar)} points; "
                "the semantic labels must have one row per LiDAR point: re-export the pair or "
                "quarantine the frame",
                path=frame.source_files.get("lidar_seg"),
                reason="count_mismatch",
                log_id=frame.log_id,
                frame_index=frame.frame_index,
            )
    if frame.radar is not None:
        _check_points(frame, "radar", frame.radar, 5)
    _validate_cuboids(frame)
    return frame


def _validate_cuboids(frame: Frame) -> None:
    cub = frame.cuboids
    k = len(cub.label)
    lengths = {
        f: len(getattr(cub, f)) for f in ("class_group", "center", "size", "yaw", "track_id")
    }
    if any(n != k for n in lengths.values()):
        raise _fail(
            frame,
            "cuboids",
            f"cuboid fields disagree on count: label={k} {lengths}",
            "count_mismatch",
        )
    if k == 0:
        return
    center, size, yaw = (np.asarray(a, dtype=np.float64) for a in (cub.center, cub.size, cub.yaw))
    if center.shape != (k, 3) or size.shape != (k, 3) or yaw.shape != (k,):
        raise _fail(
            frame,
            "cuboids",
            f"cuboid arrays have shapes {center.shape}, {size.shape}, "
            f"{yaw.shape}; expected ({k}, 3), ({k}, 3), ({k},)",
            "bad_cuboid",
        )
    with np.errstate(invalid="ignore"):  # NaN compares False: out of bounds
        good = (
            np.isfinite(yaw)
            & (np.abs(center[:, :2]) <= CENTER_XY_LIMIT_M).all(1)
            & (np.abs(center[:, 2]) <= CENTER_Z_LIMIT_M)
            & ((size > 0) & (size <= SIZE_LIMIT_M)).all(1)
        )
    if not good.all():
        bad = ~good
        i = int(np.flatnonzero(bad)[0])
        raise _fail(
            frame,
            "cuboids",
            f"{int(bad.sum())} cuboid(s) have non-positive, non-finite or out-of-contract "
            f"size/centre/yaw (schemas/cuboids.py: |centre x, y| <= {CENTER_XY_LIMIT_M:g} m, "
            f"|centre z| <= {CENTER_Z_LIMIT_M:g} m, 0 < size <= {SIZE_LIMIT_M:g} m), first "
            f"row {i} (track {cub.track_id[i]!r}, label {cub.label[i]!r}, centre "
            f"{center[i].tolist()}, size {size[i].tolist()}); fix the annotation or quarantine "
            "the frame",
            "bad_cuboid",
        )
    unknown = sorted(set(cub.class_group) - set(CLASS_GROUPS) - {"other"})
    if unknown:
        raise _fail(frame, "cuboids", f"unknown class groups {unknown}", "bad_cuboid")
