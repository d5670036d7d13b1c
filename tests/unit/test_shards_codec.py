"""Encoding of frames into tar members and decoding back (docs/format.md)."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from platform_lib.shards.codec import check_frame, decode_sample, dumps_json, encode_frame
from platform_lib.sources.frame import FrameError
from tests.support.frames import CAMERAS, make_frame


def test_encode_frame_member_order_and_bytes():
    frame = make_frame("log-a", 3)
    members = encode_frame(frame)
    names = [n for n, _ in members]
    assert names == [f"{c}.jpg" for c in sorted(CAMERAS)] + [
        "lidar.npy",
        "lidar_seg.npy",
        "radar.npy",
        "cuboids.json",
        "calib.json",
        "pose.json",
    ]
    data = dict(members)
    assert data["front_camera.jpg"] == frame.cameras["front_camera"].jpeg  # never re-encoded
    lidar = np.load(io.BytesIO(data["lidar.npy"]), allow_pickle=False)
    assert lidar.dtype == np.dtype("<f4") and np.array_equal(lidar, frame.lidar)
    pose = json.loads(data["pose.json"])
    assert pose == {
        "log_id": "log-a",
        "frame_index": 3,
        "timestamp": frame.timestamp,
        "ego_pose": np.eye(4).tolist(),
    }
    # deterministic JSON: sorted keys, no spaces
    assert data["pose.json"] == dumps_json(pose)
    assert b" " not in data["calib.json"]


def test_encode_frame_omits_absent_sensors():
    names = [n for n, _ in encode_frame(make_frame(radar=False, seg=False))]
    assert "radar.npy" not in names and "lidar_seg.npy" not in names


def test_encode_frame_is_deterministic():
    assert encode_frame(make_frame("log-b", 1)) == encode_frame(make_frame("log-b", 1))


@pytest.mark.parametrize("decode", ["cpu", "none"])
def test_decode_sample_round_trip(decode):
    frame = make_frame("log-a", 2)
    members = dict(encode_frame(frame))
    members["__key__"] = frame.key
    members["__url__"] = "shards/shard-000000.tar"
    sample = decode_sample(members, decode=decode)
    assert sample["__key__"] == "log-a_000002"
    assert sample["__shard__"] == "shards/shard-000000.tar"
    assert set(sample["cameras"]) == set(CAMERAS)
    front = sample["cameras"]["front_camera"]
    if decode == "cpu":
        assert front.shape == (24, 32, 3) and front.dtype == np.uint8
    else:
        assert front == frame.cameras["front_camera"].jpeg
    np.testing.assert_array_equal(sample["lidar"], frame.lidar)
    np.testing.assert_array_equal(sample["lidar_seg"], frame.lidar_seg)
    np.testing.assert_array_equal(sample["radar"], frame.radar)
    np.testing.assert_array_equal(sample["cuboids"]["center"], frame.cuboids.center)
    assert sample["cuboids"]["size"].shape == (3, 3)
    assert sample["cuboids"]["class_group"] == frame.cuboids.class_group
    cal = sample["calib"]["cameras"]["front_camera"]
    assert cal["intrinsics"].shape == (3, 3) and cal["extrinsics"].shape == (4, 4)
    assert (cal["width"], cal["height"]) == (32, 24)
    assert sample["pose"]["ego_pose"].shape == (4, 4)


def test_decode_sample_without_optional_members():
    members = dict(encode_frame(make_frame(radar=False, seg=False)))
    sample = decode_sample(members, decode="none")
    assert sample["radar"] is None and sample["lidar_seg"] is None


def test_decode_sample_missing_member_names_key():
    members = dict(encode_frame(make_frame()))
    del members["pose.json"]
    members["__key__"] = "log-a_000000"
    with pytest.raises(ValueError, match=r"log-a_000000.*pose\.json"):
        decode_sample(members)


def test_check_frame_rejects_corrupt_jpeg_naming_file():
    frame = make_frame("log-a", 1)
    cam = frame.cameras["front_camera"]
    cam.jpeg = cam.jpeg[: len(cam.jpeg) // 2]  # truncated
    with pytest.raises(FrameError, match=r"/raw/log-a/front_camera/01\.jpg") as info:
        check_frame(frame)
    assert info.value.reason == "corrupt_camera"


def test_check_frame_rejects_wrong_image_size():
    frame = make_frame()
    frame.cameras["back_camera"].width = 64
    with pytest.raises(FrameError, match=r"32x24 but the calibration says 64x24"):
        check_frame(frame)
