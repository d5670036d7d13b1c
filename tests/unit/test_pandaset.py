"""PandaSet reader on the real sample (sequence 002, 10 frames) and on corrupted copies of it."""

from __future__ import annotations

import json
import pickle
import shutil

import numpy as np
import pandas as pd
import pytest
from scipy.spatial import cKDTree

from platform_lib.sources.catalog import iter_log_frames, read_frames
from platform_lib.sources.frame import FrameError
from platform_lib.sources.geometry import transform_points
from platform_lib.sources.hashing import hash_raw_log
from platform_lib.sources.pandaset import (
    CAMERA_NAMES,
    list_pandaset_logs,
    load_pandaset_log,
    map_pandaset_label,
    read_pandaset_frame,
)
from schemas.cuboids import cuboids_to_frame, validate_cuboid_frame
from tests.support.geometry import count_points_in_cuboids, project_points


@pytest.fixture(scope="module")
def frames(pandaset_root):
    return list(read_frames("pandaset", pandaset_root))


def test_lists_root_or_single_sequence(pandaset_root, tmp_path):
    assert list_pandaset_logs(pandaset_root) == [pandaset_root / "002"]
    assert list_pandaset_logs(pandaset_root / "002") == [pandaset_root / "002"]
    with pytest.raises(FileNotFoundError, match="no PandaSet sequence"):
        list_pandaset_logs(tmp_path)


def test_ten_frames_with_source_jpeg_bytes(frames, pandaset_root):
    seq = pandaset_root / "002"
    assert [f.key for f in frames] == [f"002_{i:06d}" for i in range(10)]
    for f in frames:
        assert sorted(f.cameras) == list(CAMERA_NAMES)
        for name, cam in f.cameras.items():
            assert cam.jpeg == (seq / "camera" / name / f"{f.frame_index:02d}.jpg").read_bytes()
            assert (cam.width, cam.height) == (1920, 1080)
    stamps = json.loads((seq / "lidar" / "timestamps.json").read_text())
    assert [f.timestamp for f in frames] == stamps[:10]


def test_lidar_points_are_the_source_points_in_ego(frames, pandaset_root):
    for f in frames[::3]:
        raw = pd.read_pickle(pandaset_root / "002" / "lidar" / f"{f.frame_index:02d}.pkl.gz")
        assert f.lidar.shape == (len(raw), 4) and f.lidar.dtype == np.float32
        assert f.lidar_seg.shape == (len(raw),) and f.lidar_seg.dtype == np.int32
        back = transform_points(f.ego_pose, f.lidar[:, :3])  # ego -> world
        np.testing.assert_allclose(back, raw[["x", "y", "z"]].to_numpy(), atol=0.02)
        np.testing.assert_array_equal(f.lidar[:, 3], raw["i"].to_numpy(np.float32))
        assert (np.linalg.norm(f.lidar[:, :3], axis=1) < 100.0).mean() > 0.9
        road = f.lidar_seg == 7  # "Road": below the origin, ground roughly level in ego
        assert -1.0 < np.median(f.lidar[road, 2]) < 0.0
        near_road = road & (np.linalg.norm(f.lidar[:, :2], axis=1) < 20)
        assert np.std(f.lidar[near_road, 2]) < 0.3


def test_cuboid_centres_near_points_of_their_class(frames):
    for f in frames:
        cars = [i for i, label in enumerate(f.cuboids.label) if label == "Car"]
        car_points = f.lidar[f.lidar_seg == 13, :3]
        dist, _ = cKDTree(car_points).query(f.cuboids.center[cars])
        assert len(cars) > 20 and np.median(dist) < 3.0


def test_length_is_dimensions_y_along_the_heading(frames):
    more, total = 0, 0
    for f in frames:
        c = f.cuboids
        as_read = count_points_in_cuboids(f.lidar[:, :3], c.center, c.size, c.yaw)
        swapped = count_points_in_cuboids(f.lidar[:, :3], c.center, c.size[:, [1, 0, 2]], c.yaw)
        more += int(as_read.sum() > swapped.sum())
        total += 1
        cars = np.array([label == "Car" for label in c.label])
        assert np.all(c.size[cars, 0] > c.size[cars, 1])  # cars are longer than wide
    assert more == total


def test_cuboids_are_deduplicated_and_valid(frames, pandaset_root):
    raw = pd.read_pickle(pandaset_root / "002" / "annotations" / "cuboids" / "00.pkl.gz")
    f = frames[0]
    sensor0 = set(raw.uuid[raw["cuboids.sensor_id"] == 0])
    copies = raw[(raw["cuboids.sensor_id"] == 1) & raw["cuboids.sibling_id"].isin(sensor0)]
    assert len(copies) > 0 and len(f.cuboids) == len(raw) - len(copies)
    assert not set(copies.uuid) & set(f.cuboids.track_id)
    assert len(set(f.cuboids.track_id)) == len(f.cuboids)
    groups = dict(zip(f.cuboids.label, f.cuboids.class_group, strict=True))
    assert groups["Car"] == "vehicle" and groups["Pedestrian with Object"] == "pedestrian"
    assert groups["Motorcycle"] == "cyclist" and groups["Cones"] == "other"
    assert map_pandaset_label("Other Vehicle - Pedicab") == "vehicle"
    table = validate_cuboid_frame(cuboids_to_frame(f.key, f.cuboids))
    assert len(table) == len(f.cuboids)


def test_points_project_into_the_front_camera(frames):
    for f in frames[::3]:
        cam = f.cameras["front_camera"]
        uv, depth = project_points(f.lidar[:, :3], cam.intrinsics, cam.extrinsics)
        inside = (
            (depth > 0)
            & (uv[:, 0] >= 0)
            & (uv[:, 0] < cam.width)
            & (uv[:, 1] >= 0)
            & (uv[:, 1] < cam.height)
        )
        assert inside.mean() > 0.25
        ahead = f.lidar[:, 0] > 5.0
        assert (depth[ahead] > 0).all()  # front camera looks along ego +x
        road = inside & (f.lidar_seg == 7)
        assert np.median(uv[road, 1]) > cam.height / 2  # the road is in the lower half


@pytest.mark.parametrize(
    "name, heading_deg",
    [
        ("front_camera", 0),
        ("front_left_camera", 58),
        ("left_camera", 90),
        ("back_camera", 180),
        ("right_camera", -90),
        ("front_right_camera", -58),
    ],
)
def test_camera_extrinsics_point_where_the_name_says(frames, name, heading_deg):
    for f in frames[::4]:
        ext = f.cameras[name].extrinsics
        forward, right, down = ext[:3, 2], ext[:3, 0], ext[:3, 1]  # OpenCV axes in ego
        heading = np.degrees(np.arctan2(forward[1], forward[0]))
        assert abs((heading - heading_deg + 180) % 360 - 180) < 5
        assert down[2] < -0.99 and abs(forward[2]) < 0.05  # level, y down
        assert np.cross(right, down) @ forward > 0.99  # right-handed: x right, y down, z fwd
        assert (
            right
            @ np.array([-np.sin(np.radians(heading_deg)), np.cos(np.radians(heading_deg)), 0.0])
            < -0.95
        )  # x is right
        cam = f.cameras[name]
        uv, depth = project_points(f.lidar[:, :3], cam.intrinsics, cam.extrinsics)
        inside = (
            (depth > 0)
            & (uv[:, 0] >= 0)
            & (uv[:, 0] < cam.width)
            & (uv[:, 1] >= 0)
            & (uv[:, 1] < cam.height)
        )
        assert inside.mean() > 0.1


def test_raw_log_hash_is_content_only(pandaset_root, pandaset_copy):
    original = hash_raw_log(pandaset_root / "002")
    assert hash_raw_log(pandaset_copy) == original
    target = pandaset_copy / "camera" / "front_camera" / "00.jpg"
    data = bytearray(target.read_bytes())
    data[1000] ^= 0xFF
    target.write_bytes(bytes(data))
    assert hash_raw_log(pandaset_copy) != original


_ACTIONS = ("re-copy", "re-export", "quarantine the frame")


def _frame_error(log_dir, index) -> FrameError:
    with pytest.raises(FrameError) as info:
        read_pandaset_frame(load_pandaset_log(log_dir), index)
    _assert_says_what_to_do(info.value)
    return info.value


def _assert_says_what_to_do(err: FrameError) -> None:
    assert str(err).startswith(err.path + ":"), str(err)  # the culprit file comes first
    assert any(action in str(err) for action in _ACTIONS), str(err)


def test_missing_camera_is_yielded_and_reading_goes_on(pandaset_copy):
    bad = pandaset_copy / "camera" / "back_camera" / "09.jpg"
    bad.unlink()
    items = list(iter_log_frames("pandaset", pandaset_copy))
    assert [isinstance(x, FrameError) for x in items] == [False] * 9 + [True]
    err = items[9]
    _assert_says_what_to_do(err)
    assert err.reason == "missing_camera" and err.path == str(bad) and err.frame_index == 9
    # names both sides of the disagreement: the camera folder (9 images) and lidar (10 sweeps)
    assert str(bad.parent) in str(err) and "holds 9 images" in str(err)
    assert str(pandaset_copy / "lidar") in str(err) and "10 sweeps" in str(err)
    with pytest.raises(FrameError, match="09.jpg"):
        list(read_frames("pandaset", pandaset_copy))


def test_a_gap_in_the_lidar_sweeps_is_reported_not_skipped(pandaset_copy):
    gap = pandaset_copy / "lidar" / "04.pkl.gz"
    gap.unlink()
    items = list(iter_log_frames("pandaset", pandaset_copy))
    assert len(items) == 10 and [i for i, x in enumerate(items) if isinstance(x, FrameError)] == [4]
    assert items[4].reason == "missing_lidar" and items[4].path == str(gap)
    _assert_says_what_to_do(items[4])
    assert [x.frame_index for x in items if not isinstance(x, FrameError)] == [
        0,
        1,
        2,
        3,
        5,
        6,
        7,
        8,
        9,
    ]


@pytest.mark.parametrize(
    "damage, expected",
    [
        (lambda b: b"this is not a jpeg", "not a JPEG"),
        (lambda b: b[: len(b) // 2], "truncated"),
    ],
)
def test_corrupt_camera_names_the_file(pandaset_copy, damage, expected):
    bad = pandaset_copy / "camera" / "left_camera" / "04.jpg"
    bad.write_bytes(damage(bad.read_bytes()))
    err = _frame_error(pandaset_copy, 4)
    assert err.reason == "corrupt_camera" and err.path == str(bad)
    assert str(bad) in str(err) and expected in str(err) and "quarantine the frame" in str(err)


def test_truncated_lidar_pickle_names_the_file(pandaset_copy):
    bad = pandaset_copy / "lidar" / "02.pkl.gz"
    bad.write_bytes(bad.read_bytes()[:20000])
    err = _frame_error(pandaset_copy, 2)
    assert err.reason == "corrupt_lidar" and err.path == str(bad)
    assert str(bad) in str(err) and "truncated or corrupt" in str(err)
    again = pickle.loads(pickle.dumps(err))  # survives multiprocessing
    assert (again.reason, again.path, again.frame_index, str(again)) == (
        err.reason,
        err.path,
        err.frame_index,
        str(err),
    )


@pytest.mark.parametrize("sub, column", [("lidar", "i"), ("annotations/cuboids", "yaw")])
def test_missing_column_names_column_and_file(pandaset_copy, sub, column):
    path = pandaset_copy / sub / "01.pkl.gz"
    pd.read_pickle(path).drop(columns=[column]).to_pickle(path, compression="gzip")
    err = _frame_error(pandaset_copy, 1)
    assert err.reason == "missing_column" and err.path == str(path)
    assert f"['{column}']" in str(err) and str(path) in str(err)


def test_nan_points_name_file_and_count(pandaset_copy):
    path = pandaset_copy / "lidar" / "05.pkl.gz"
    df = pd.read_pickle(path)
    df.loc[[10, 20, 30], "x"] = np.nan
    df.loc[40, "z"] = np.inf
    df.to_pickle(path, compression="gzip")
    err = _frame_error(pandaset_copy, 5)
    assert err.reason == "nan_points" and err.path == str(path)
    assert f"4 of {len(df)} points" in str(err) and "row 10" in str(err)


def test_non_positive_cuboid_size_names_file_and_uuid(pandaset_copy):
    path = pandaset_copy / "annotations" / "cuboids" / "03.pkl.gz"
    df = pd.read_pickle(path)
    df.loc[df.index[2], "dimensions.x"] = 0.0
    df.to_pickle(path, compression="gzip")
    err = _frame_error(pandaset_copy, 3)
    assert err.reason == "bad_cuboid" and err.path == str(path)
    assert df.uuid.iloc[2] in str(err) and "non-positive" in str(err)


def test_semseg_rows_disagreeing_with_points_names_both(pandaset_copy):
    seg = pandaset_copy / "annotations" / "semseg" / "06.pkl.gz"
    pd.read_pickle(seg).iloc[:-5].to_pickle(seg, compression="gzip")
    err = _frame_error(pandaset_copy, 6)
    assert err.reason == "count_mismatch" and err.path == str(seg)
    assert str(seg) in str(err) and str(pandaset_copy / "lidar" / "06.pkl.gz") in str(err)


def test_short_camera_poses_is_a_count_mismatch(pandaset_copy):
    poses = pandaset_copy / "camera" / "right_camera" / "poses.json"
    poses.write_text(json.dumps(json.loads(poses.read_text())[:7]))
    err = _frame_error(pandaset_copy, 8)
    assert err.reason == "count_mismatch" and err.path == str(poses)
    assert "holds 7 poses" in str(err)


def test_missing_lidar_poses_is_a_log_level_error(pandaset_copy):
    (pandaset_copy / "lidar" / "poses.json").unlink()
    (err,) = iter_log_frames("pandaset", pandaset_copy)  # the log's one item, before any frame
    assert isinstance(err, FrameError)
    assert err.reason == "missing_file" and err.frame_index is None
    _assert_says_what_to_do(err)
    assert str(pandaset_copy / "lidar" / "poses.json") in str(err)


def test_missing_camera_folder_is_a_log_level_error(pandaset_copy):
    shutil.rmtree(pandaset_copy / "camera" / "front_left_camera")
    with pytest.raises(FrameError, match="front_left_camera: camera folder is missing"):
        load_pandaset_log(pandaset_copy)
