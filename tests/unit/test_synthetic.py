"""Synthetic raw logs: determinism, physical consistency of the sensors, bad-input errors."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pandera.errors
import pyarrow as pa
import pytest
import simplejpeg

from platform_lib.sources.catalog import iter_log_frames, read_frames
from platform_lib.sources.frame import FrameError
from platform_lib.sources.hashing import hash_raw_log
from platform_lib.sources.synthetic import (
    SyntheticConfig,
    list_synthetic_logs,
    write_synthetic_logs,
)
from platform_lib.sources.validation import validate_frame
from schemas.cuboids import (
    CENTER_XY_LIMIT_M,
    CENTER_Z_LIMIT_M,
    CUBOID_SCHEMA,
    SIZE_LIMIT_M,
    cuboids_to_frame,
    validate_cuboid_frame,
)
from tests.support.geometry import label_points_in_cuboids, project_points

SMALL = SyntheticConfig(
    num_logs=2,
    frames_per_log=3,
    image_width=96,
    image_height=64,
    lidar_beams=16,
    lidar_azimuth_bins=128,
)


@pytest.fixture(scope="module")
def frames(synthetic_root):
    return list(read_frames("synthetic", synthetic_root))


@pytest.mark.parametrize(
    "field, value",
    [
        ("num_logs", 0),
        ("image_width", 8),
        ("lidar_fov_down_deg", 20.0),
        ("num_vehicles", (5, 2)),
        ("jpeg_quality", 101),
    ],
)
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field.split("_deg")[0]):
        SyntheticConfig(**{field: value})


def test_rewrite_replaces_atomically(tmp_path):
    (log,) = write_synthetic_logs(
        SyntheticConfig(**{**SMALL.__dict__, "num_logs": 1}), tmp_path, progress=False
    )
    digest = hash_raw_log(log)
    (log / "lidar" / "000000.npy").write_bytes(b"garbage")
    write_synthetic_logs(
        SyntheticConfig(**{**SMALL.__dict__, "num_logs": 1}), tmp_path, progress=False
    )
    assert hash_raw_log(log) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["synth-0000"]  # no temp folders left
    assert list_synthetic_logs(tmp_path) == [log] and list_synthetic_logs(log) == [log]


def test_frames_follow_the_contract(frames, synthetic_root):
    assert len(frames) == 32 and frames[0].key == "synth-0000_000000"
    assert frames[-1].key == "synth-0003_000007"
    names = [
        "back_camera",
        "front_camera",
        "front_left_camera",
        "front_right_camera",
        "left_camera",
        "right_camera",
    ]
    for f in frames:
        assert sorted(f.cameras) == names
        assert all((c.width, c.height) == (160, 96) for c in f.cameras.values())
        assert f.lidar.dtype == np.float32 and f.lidar.shape[1] == 4 and len(f.lidar) > 1000
        assert f.lidar_seg.shape == (len(f.lidar),) and f.radar.shape[1] == 5
        assert set(np.unique(f.lidar_seg)) <= {7, 13, 26, 30}
        assert np.all((f.lidar[:, 3] >= 0) & (f.lidar[:, 3] <= 255))
        validate_cuboid_frame(cuboids_to_frame(f.key, f.cuboids))
    jpeg = (synthetic_root / "synth-0002" / "camera" / "left_camera" / "000005.jpg").read_bytes()
    assert frames[2 * 8 + 5].cameras["left_camera"].jpeg == jpeg
    dt = np.diff([f.timestamp for f in frames[:8]])
    np.testing.assert_allclose(dt, 0.1, atol=1e-6)


def test_lidar_hits_ground_and_boxes(frames):
    seg_of_group = {"vehicle": 13, "pedestrian": 30, "cyclist": 26}
    object_points = 0
    for f in frames:
        ground = f.lidar_seg == 7
        np.testing.assert_allclose(f.lidar[ground, 2], -1.8, atol=0.15)
        box = label_points_in_cuboids(
            f.lidar[:, :3], f.cuboids.center, f.cuboids.size, f.cuboids.yaw, margin=0.1
        )
        objects = ~ground
        object_points += int(objects.sum())
        hit = box[objects]
        assert np.all(hit >= 0)  # every object-labelled point lies on a cuboid
        expected = np.array([seg_of_group[f.cuboids.class_group[k]] for k in hit])
        np.testing.assert_array_equal(f.lidar_seg[objects], expected)
    assert object_points > 500


def test_objects_appear_in_the_front_camera_where_projected(frames):
    colour_ok, gray_ok, n_obj, n_ground = 0, 0, 0, 0
    for f in frames:
        cam = f.cameras["front_camera"]
        image = simplejpeg.decode_jpeg(cam.jpeg).astype(int)
        uv, depth = project_points(f.lidar[:, :3], cam.intrinsics, cam.extrinsics)
        inside = (
            (depth > 0.5)
            & (uv[:, 0] >= 1)
            & (uv[:, 0] < cam.width - 1)
            & (uv[:, 1] >= 1)
            & (uv[:, 1] < cam.height - 1)
        )
        px = image[uv[inside, 1].astype(int), uv[inside, 0].astype(int)]
        seg = f.lidar_seg[inside]
        cars = seg == 13
        colour_ok += int(
            ((px[cars, 0] > px[cars, 1] + 60) & (px[cars, 0] > px[cars, 2] + 60)).sum()
        )
        n_obj += int(cars.sum())
        road = seg == 7
        gray_ok += int((np.ptp(px[road], axis=1) < 30).sum())
        n_ground += int(road.sum())
    assert n_obj > 50 and colour_ok / n_obj > 0.8
    assert gray_ok / n_ground > 0.95


def test_radar_sees_box_faces_with_radial_velocity(frames, synthetic_root):
    checked = 0
    for f in frames[:8]:
        cub = json.loads(
            (synthetic_root / "synth-0000" / "cuboids" / f"{f.frame_index:06d}.json").read_text()
        )
        velocity = np.array(cub["velocity"])
        box = label_points_in_cuboids(
            f.radar[:, :3], f.cuboids.center, f.cuboids.size, f.cuboids.yaw, margin=0.05
        )
        assert np.all(box >= 0)
        # ego velocity from consecutive poses (constant speed + yaw rate)
        if f.frame_index + 1 < 8:
            nxt = frames[f.frame_index + 1]
            step = np.linalg.inv(f.ego_pose) @ nxt.ego_pose
            v_ego = step[:3, 3] / (nxt.timestamp - f.timestamp)
            yaw_rate = np.arctan2(step[1, 0], step[0, 0]) / (nxt.timestamp - f.timestamp)
            radar_pos = np.array([2.0, 0.0, -1.2])
            v_radar = np.array([v_ego[0] - yaw_rate * radar_pos[1], yaw_rate * radar_pos[0], 0])
            u = f.radar[:, :3] - radar_pos
            u /= np.linalg.norm(u, axis=1, keepdims=True)
            expected = np.sum((velocity[box] - v_radar) * u, axis=1)
            np.testing.assert_allclose(f.radar[:, 3], expected, atol=0.6)
            checked += len(box)
    assert checked > 10


def test_cuboids_move_consistently_in_world(frames, synthetic_root):
    log = frames[:8]
    for k, track in enumerate(log[0].cuboids.track_id):
        world = [f.ego_pose[:3, :3] @ f.cuboids.center[k] + f.ego_pose[:3, 3] for f in log]
        assert log[-1].cuboids.track_id[k] == track
        steps = np.diff(np.array(world), axis=0)
        np.testing.assert_allclose(steps, np.broadcast_to(steps[0], steps.shape), atol=1e-6)
        np.testing.assert_allclose(world[0][2], log[0].cuboids.size[k, 2] / 2, atol=1e-9)


@pytest.fixture
def small_log(tmp_path):
    (log,) = write_synthetic_logs(
        SyntheticConfig(**{**SMALL.__dict__, "num_logs": 1}), tmp_path, progress=False
    )
    return log


def _error_at(log, index) -> FrameError:
    items = list(iter_log_frames("synthetic", log))
    assert len(items) == 3
    assert [isinstance(x, FrameError) for x in items].count(True) == 1  # the others still read
    err = items[index]
    assert isinstance(err, FrameError) and err.frame_index == index
    assert str(err).startswith(err.path + ":"), str(err)  # the culprit file comes first
    assert "regenerate" in str(err) or "quarantine the frame" in str(err), str(err)
    with pytest.raises(FrameError):
        list(read_frames("synthetic", log))
    return err


def test_missing_and_corrupt_camera(small_log):
    bad = small_log / "camera" / "front_camera" / "000001.jpg"
    bad.unlink()
    err = _error_at(small_log, 1)
    assert err.reason == "missing_camera" and str(bad) in str(err) and "regenerate" in str(err)
    bad.write_bytes(b"\xff\xd8" + b"\x00" * 100)
    err = _error_at(small_log, 1)
    assert err.reason == "corrupt_camera" and "truncated" in str(err) and err.path == str(bad)


def test_truncated_lidar_and_nan_points(small_log):
    path = small_log / "lidar" / "000002.npy"
    points = np.load(path)
    path.write_bytes(path.read_bytes()[:200])
    err = _error_at(small_log, 2)
    assert err.reason == "corrupt_lidar" and str(path) in str(err)
    points[[3, 5], 1] = np.nan
    np.save(path, points)
    err = _error_at(small_log, 2)
    assert err.reason == "nan_points" and f"2 of {len(points)} points" in str(err)


def test_bad_cuboid_and_count_mismatch(small_log):
    path = small_log / "cuboids" / "000000.json"
    cub = json.loads(path.read_text())
    cub["size"][1][2] = -1.0
    path.write_text(json.dumps(cub))
    err = _error_at(small_log, 0)
    assert err.reason == "bad_cuboid" and cub["track_id"][1] in str(err) and str(path) in str(err)
    del cub["yaw"]
    path.write_text(json.dumps(cub))
    err = _error_at(small_log, 0)
    assert err.reason == "missing_column" and "['yaw']" in str(err)
    seg = small_log / "lidar_seg" / "000001.npy"
    np.save(seg, np.load(seg)[:-3])
    items = list(iter_log_frames("synthetic", small_log))
    err = items[1]
    assert err.reason == "count_mismatch" and str(seg) in str(err)
    assert str(small_log / "lidar" / "000001.npy") in str(err)


def test_validate_frame_rejects_contract_violations(frames):
    frame = copy.deepcopy(frames[0])
    validate_frame(frame)
    frame.lidar = frame.lidar.astype(np.float64)
    with pytest.raises(FrameError, match=r"expected \(N, 4\) float32") as info:
        validate_frame(frame)
    assert info.value.reason == "bad_points" and info.value.path == frame.source_files["lidar"]
    frame = copy.deepcopy(frames[0])
    frame.cameras["front_camera"].extrinsics[:3, :3] *= 2.0
    with pytest.raises(FrameError, match="not a rigid transform") as info:
        validate_frame(frame)
    assert info.value.reason == "bad_calibration"
    assert info.value.path == frame.source_files["camera/front_camera"]
    frame = copy.deepcopy(frames[0])
    frame.cuboids.track_id.pop()
    with pytest.raises(FrameError, match="disagree on count") as info:
        validate_frame(frame)
    assert info.value.reason == "count_mismatch"
    frame = copy.deepcopy(frames[0])
    frame.cuboids.class_group[0] = "truck"
    with pytest.raises(FrameError, match="unknown class groups"):
        validate_frame(frame)


def test_log_level_errors_are_raised_before_any_frame(small_log):
    meta = small_log / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "format": "other"}))
    with pytest.raises(FrameError, match="regenerate") as info:
        next(read_frames("synthetic", small_log))
    assert info.value.reason == "corrupt_metadata" and info.value.path == str(meta)
    assert info.value.frame_index is None
    meta.unlink()
    with pytest.raises(FileNotFoundError, match="no synthetic log"):
        list_synthetic_logs(small_log.parent)


def test_cuboid_schema_rejects_bad_rows(frames):
    table = cuboids_to_frame(frames[0].key, frames[0].cuboids)
    assert list(table.columns) == CUBOID_SCHEMA.names
    assert pa.Table.from_pandas(table, schema=CUBOID_SCHEMA, preserve_index=False).num_rows == len(
        frames[0].cuboids
    )
    table.loc[0, "length"] = 0.0
    table.loc[1, "class_group"] = "truck"
    with pytest.raises(pandera.errors.SchemaErrors) as info:
        validate_cuboid_frame(table)
    assert "length" in str(info.value) and "class_group" in str(info.value)


def test_config_refuses_unknown_fields_and_malformed_ranges():
    with pytest.raises(ValueError, match="num_logz"):
        SyntheticConfig(num_logz=2)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="num_vehicles"):
        SyntheticConfig(num_vehicles=(1, 2, 3))
    with pytest.raises(ValueError, match="num_vehicles"):
        SyntheticConfig(num_vehicles=(5, 2))
    assert SyntheticConfig(num_vehicles=(1, 2)).num_vehicles == [1, 2]


def test_config_crosses_flyte_unchanged_and_without_warnings():
    """SyntheticConfig is a workflow input (workflows/training_pipeline.py): Flyte types it all."""
    import logging

    from flytekit.core.context_manager import FlyteContextManager
    from flytekit.core.type_engine import TypeEngine

    seen: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = seen.append  # type: ignore[method-assign]
    logger = logging.getLogger("flytekit")
    logger.addHandler(handler)
    try:
        ctx = FlyteContextManager.current_context()
        literal_type = TypeEngine.to_literal_type(SyntheticConfig)
        literal = TypeEngine.to_literal(ctx, SMALL, SyntheticConfig, literal_type)
        assert TypeEngine.to_python_value(ctx, literal, SyntheticConfig) == SMALL
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in seen] == []


@pytest.mark.parametrize(
    ("field", "index", "value"),
    [
        ("size", (0, 0), SIZE_LIMIT_M + 1.0),
        ("center", (0, 1), -CENTER_XY_LIMIT_M - 1.0),
        ("center", (0, 2), CENTER_Z_LIMIT_M + 1.0),
    ],
)
def test_the_frame_check_enforces_the_cuboid_schema_bounds(frames, field, index, value):
    """A box the contract (`CuboidModel`) refuses, `validate_frame` (production) refuses too."""
    frame = copy.deepcopy(frames[0])
    getattr(frame.cuboids, field)[index] = value
    with pytest.raises(pandera.errors.SchemaErrors):
        validate_cuboid_frame(cuboids_to_frame(frame.key, frame.cuboids))
    with pytest.raises(FrameError, match="out-of-contract") as info:
        validate_frame(frame)
    assert info.value.reason == "bad_cuboid" and frame.cuboids.track_id[0] in str(info.value)
    getattr(frame.cuboids, field)[index] = math.copysign(
        SIZE_LIMIT_M if field == "size" else CENTER_Z_LIMIT_M, value
    )  # on the bound: both accept
    validate_cuboid_frame(cuboids_to_frame(frame.key, frame.cuboids))
    validate_frame(frame)
