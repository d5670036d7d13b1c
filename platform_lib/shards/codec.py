"""Frame <-> shard members: the byte encoding of one sample (docs/format.md, "Shards").

Shape legend (N LiDAR points, M radar returns, K cuboids):
    lidar.npy      (N, 4) float32  x, y, z (m, ego frame), intensity
    lidar_seg.npy  (N,)   int32    semantic class id per point
    radar.npy      (M, 5) float32  x, y, z (m, ego), radial velocity (m/s), RCS (dBsm)
    cuboids.json   K boxes: center/size (K, 3) m, yaw (K,) rad, ego frame
"""

from __future__ import annotations

import io
import json
from typing import Any, Literal

import numpy as np
import simplejpeg

from platform_lib.sources.frame import CLASS_GROUPS, Frame, FrameError, sample_key
from platform_lib.sources.validation import validate_frame

__all__ = [
    "check_frame",
    "decode_sample",
    "dumps_json",
    "encode_frame",
    "npy_view",
    "save_npy",
    "summarize_frame",
]


def dumps_json(obj: Any) -> bytes:
    """Return deterministic JSON bytes: sorted keys, no spaces, floats as repr, no NaN."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def save_npy(array: np.ndarray) -> bytes:
    """Return the `np.save` bytes of `array` (C order, no pickle)."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def check_frame(frame: Frame) -> None:
    """Check `frame` against the Frame contract before it is written.

    Runs `platform_lib.sources.validation.validate_frame` (shapes, dtypes, finiteness, counts,
    cuboid sizes, JPEG markers) and additionally parses every JPEG header to check that the
    image size matches the calibration (cheap: no pixel decoding).

    Raises:
        FrameError: with `.reason` (e.g. "corrupt_camera", "nan_points", "bad_cuboid",
            "count_mismatch"), `.path` (the raw file) and a message naming file and remedy.
    """
    validate_frame(frame)
    for name, cam in sorted(frame.cameras.items()):
        path = frame.source_files.get(f"camera/{name}", f"camera/{name}")
        try:
            height, width, _, _ = simplejpeg.decode_jpeg_header(cam.jpeg)
        except Exception as exc:
            raise FrameError(
                f"{path}: JPEG header is unreadable ({exc}); restore the camera "
                "image from the original log or quarantine the frame",
                path=path,
                reason="corrupt_camera",
                log_id=frame.log_id,
                frame_index=frame.frame_index,
            ) from exc
        if (width, height) != (cam.width, cam.height):
            raise FrameError(
                f"{path}: JPEG is {width}x{height} but the calibration says "
                f"{cam.width}x{cam.height}; fix intrinsics or the image",
                path=path,
                reason="corrupt_camera",
                log_id=frame.log_id,
                frame_index=frame.frame_index,
            )


def encode_frame(frame: Frame) -> list[tuple[str, bytes]]:
    """Encode `frame` into its tar members, in the fixed order of docs/format.md.

    Returns:
        [(ext name, bytes), ...]: `<camera>.jpg` (cameras sorted by name, source bytes as
        they are), `lidar.npy`, `lidar_seg.npy` (if labelled), `radar.npy` (if present),
        `cuboids.json`, `calib.json`, `pose.json`.
    """
    cameras = sorted(frame.cameras.items())
    members = [(f"{name}.jpg", cam.jpeg) for name, cam in cameras]
    members.append(("lidar.npy", save_npy(frame.lidar.astype("<f4", copy=False))))
    if frame.lidar_seg is not None:
        members.append(("lidar_seg.npy", save_npy(frame.lidar_seg.astype("<i4", copy=False))))
    if frame.radar is not None:
        members.append(("radar.npy", save_npy(frame.radar.astype("<f4", copy=False))))
    cub = frame.cuboids
    members.append(
        (
            "cuboids.json",
            dumps_json(
                {
                    "label": [str(x) for x in cub.label],
                    "class_group": [str(x) for x in cub.class_group],
                    "center": np.asarray(cub.center, dtype=np.float64).reshape(-1, 3).tolist(),
                    "size": np.asarray(cub.size, dtype=np.float64).reshape(-1, 3).tolist(),
                    "yaw": np.asarray(cub.yaw, dtype=np.float64).reshape(-1).tolist(),
                    "track_id": [str(x) for x in cub.track_id],
                }
            ),
        )
    )
    members.append(
        (
            "calib.json",
            dumps_json(
                {
                    "cameras": {
                        name: {
                            "width": int(cam.width),
                            "height": int(cam.height),
                            "intrinsics": np.asarray(cam.intrinsics, dtype=np.float64).tolist(),
                            "extrinsics": np.asarray(cam.extrinsics, dtype=np.float64).tolist(),
                            "timestamp": float(cam.timestamp),
                        }
                        for name, cam in cameras
                    }
                }
            ),
        )
    )
    members.append(
        (
            "pose.json",
            dumps_json(
                {
                    "log_id": frame.log_id,
                    "frame_index": int(frame.frame_index),
                    "timestamp": float(frame.timestamp),
                    "ego_pose": np.asarray(frame.ego_pose, dtype=np.float64).tolist(),
                }
            ),
        )
    )
    return members


def summarize_frame(frame: Frame) -> dict[str, Any]:
    """Return the per-sample index statistics of `frame` (point and per-class cuboid counts)."""
    groups = list(frame.cuboids.class_group)
    return {
        "key": sample_key(frame.log_id, frame.frame_index),
        "log_id": frame.log_id,
        "frame_index": int(frame.frame_index),
        "timestamp": float(frame.timestamp),
        "num_lidar_points": int(frame.lidar.shape[0]),
        "num_radar_points": 0 if frame.radar is None else int(frame.radar.shape[0]),
        "num_cuboids": len(groups),
        **{f"num_{g}": groups.count(g) for g in CLASS_GROUPS},
        "num_other": groups.count("other"),
    }


#: Longest .npy preamble: magic (6) + version (2) + length (4) + header (< 2**16 for v1; we
#: read this much and let numpy refuse a longer v2 header).
_NPY_HEADER_MAX = 12 + 65536


def npy_view(data: bytes | memoryview) -> np.ndarray:
    """Return the array of `.npy` bytes as a view of `data` (header parse only, no copy).

    Follows the NPY format spec (numpy.lib.format, versions 1.0-3.0); object arrays refused.

    Raises:
        ValueError: not an .npy, object dtype, or fewer data bytes than the header needs.
    """
    view = memoryview(data).cast("B")
    header = io.BytesIO(view[:_NPY_HEADER_MAX].tobytes())  # the header only (small copy)
    version = np.lib.format.read_magic(header)
    read_header = {
        (1, 0): np.lib.format.read_array_header_1_0,
        (2, 0): np.lib.format.read_array_header_2_0,
    }.get(version)
    if read_header is None:
        raise ValueError(f"unsupported .npy version {version}")
    shape, fortran, dtype = read_header(header)
    if dtype.hasobject:
        raise ValueError("object arrays are not allowed in shards")
    count = int(np.prod(shape, dtype=np.int64))
    start = header.tell()
    if len(view) - start < count * dtype.itemsize:
        raise ValueError(
            f"data holds {len(view) - start} bytes, the header needs {count * dtype.itemsize}"
        )
    array = np.frombuffer(view, dtype=dtype, count=count, offset=start)
    return array.reshape(shape, order="F" if fortran else "C")


def _load_npy(data: bytes | memoryview, name: str, key: str, shard: str) -> np.ndarray:
    try:
        return npy_view(data)
    except Exception as exc:
        raise ValueError(
            f"sample {key} in {shard}: member {name} is not a valid .npy "
            f"({exc}); run `drivetrain data validate` on the dataset"
        ) from exc


def _load_json(data: bytes | memoryview) -> Any:
    return json.loads(data if isinstance(data, bytes) else bytes(data))


def decode_sample(
    members: dict[str, Any], *, decode: Literal["cpu", "none"] = "cpu"
) -> dict[str, Any]:
    """Decode one sample's member bytes into the "Decoded sample" dict of docs/format.md.

    Args:
        members: ext name -> bytes or a buffer view (`front_camera.jpg`, `lidar.npy`, ...), as
            a WebDataset sample, `DatasetReader.read_sample` or the loader's ring gives it;
            optional str entries `__key__` and `__shard__` (or WebDataset's `__url__`) are
            carried over for provenance. Arrays are views of these buffers (no copy).
        decode: "cpu" decodes JPEGs to (H, W, 3) uint8 RGB; "none" keeps the JPEG bytes (the
            object given: bytes, or a memoryview into the buffer).

    Returns:
        {"__key__", "__shard__", "cameras", "lidar" (N, 4) float32, "lidar_seg" (N,) int32 or
        None, "radar" (M, 5) float32 or None, "cuboids" (center/size (K, 3) float64, yaw (K,)),
        "calib" (intrinsics (3, 3), extrinsics (4, 4) ndarrays), "pose" (ego_pose (4, 4))}.

    Raises:
        ValueError: a required member is missing or undecodable (message names key and shard).
    """
    if decode not in ("cpu", "none"):
        raise ValueError(f"decode must be 'cpu' or 'none', got {decode!r}")
    key = str(members.get("__key__", "?"))
    shard = str(members.get("__shard__", members.get("__url__", "?")))
    for required in ("lidar.npy", "cuboids.json", "calib.json", "pose.json"):
        if required not in members:
            raise ValueError(
                f"sample {key} in {shard} lacks member {required!r}; "
                "the shard is not a Drivetrain dataset shard or is damaged"
            )
    cameras: dict[str, Any] = {}
    for name in sorted(members):
        if name.startswith("__") or not name.endswith(".jpg"):
            continue
        data = members[name]
        if decode == "none":
            cameras[name[:-4]] = data
            continue
        try:
            cameras[name[:-4]] = simplejpeg.decode_jpeg(data, colorspace="RGB")
        except Exception as exc:
            raise ValueError(
                f"sample {key} in {shard}: {name} is not a decodable JPEG "
                f"({exc}); run `drivetrain data validate`"
            ) from exc
    calib = _load_json(members["calib.json"])
    for cam in calib["cameras"].values():
        cam["intrinsics"] = np.asarray(cam["intrinsics"], dtype=np.float64)
        cam["extrinsics"] = np.asarray(cam["extrinsics"], dtype=np.float64)
    pose = _load_json(members["pose.json"])
    pose["ego_pose"] = np.asarray(pose["ego_pose"], dtype=np.float64)
    cuboids = _load_json(members["cuboids.json"])
    for field in ("center", "size"):
        cuboids[field] = np.asarray(cuboids[field], dtype=np.float64).reshape(-1, 3)
    cuboids["yaw"] = np.asarray(cuboids["yaw"], dtype=np.float64).reshape(-1)
    seg = members.get("lidar_seg.npy")
    radar = members.get("radar.npy")
    return {
        "__key__": key,
        "__shard__": shard,
        "cameras": cameras,
        "lidar": _load_npy(members["lidar.npy"], "lidar.npy", key, shard),
        "lidar_seg": None if seg is None else _load_npy(seg, "lidar_seg.npy", key, shard),
        "radar": None if radar is None else _load_npy(radar, "radar.npy", key, shard),
        "cuboids": cuboids,
        "calib": calib,
        "pose": pose,
    }
