"""End to end on the real PandaSet sample (sequence 002, 10 frames): build, read, rebuild."""

from __future__ import annotations

import gzip
import hashlib
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import webdataset as wds
from scipy.spatial import cKDTree

from platform_lib.shards.build import BuildConfig, build_dataset
from platform_lib.shards.codec import decode_sample
from platform_lib.shards.errors import BuildError
from platform_lib.shards.reader import open_dataset
from platform_lib.shards.validate import validate_dataset
from platform_lib.sources.geometry import project_points

PANDASET = Path(__file__).parents[2].parent / "shared" / "data" / "pandaset"
SEQUENCE = PANDASET / "002"
CAMERAS = (
    "back_camera",
    "front_camera",
    "front_left_camera",
    "front_right_camera",
    "left_camera",
    "right_camera",
)

pytestmark = pytest.mark.skipif(not SEQUENCE.is_dir(), reason=f"{SEQUENCE} not present")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("pandaset") / "ds"
    manifest = build_dataset("pandaset", PANDASET, root, BuildConfig(progress=False))
    return root, manifest


def test_manifest_of_the_sample(built):
    _, manifest = built
    assert manifest.num_samples == 10 and manifest.num_shards == 1
    assert manifest.source == "pandaset"
    assert manifest.sensors.model_dump(mode="json") == {
        "cameras": list(CAMERAS),
        "lidar": True,
        "lidar_seg": True,
        "radar": False,
    }
    assert [log.log_id for log in manifest.source_logs] == ["002"]
    assert manifest.source_logs[0].num_frames == 10
    assert manifest.class_counts["vehicle"] > 0 and manifest.quarantine == ()


def test_webdataset_yields_source_jpegs_and_point_counts(built):
    root, manifest = built
    urls = [str(root / s.path) for s in manifest.shards]
    samples = list(wds.WebDataset(urls, shardshuffle=False))
    assert [s["__key__"] for s in samples] == [f"002_{i:06d}" for i in range(10)]
    for i, sample in enumerate(samples):
        for camera in CAMERAS:
            assert (
                sample[f"{camera}.jpg"]
                == (SEQUENCE / "camera" / camera / f"{i:02d}.jpg").read_bytes()
            )
    decoded = decode_sample(samples[0], decode="none")
    with gzip.open(SEQUENCE / "lidar" / "00.pkl.gz") as f:
        source_points = len(pickle.load(f))
    assert decoded["lidar"].shape == (source_points, 4)
    assert decoded["lidar_seg"].shape == (source_points,)
    index = open_dataset(root).index.to_pydict()
    assert index["num_lidar_points"][0] == source_points


def test_shard_geometry_is_in_the_ego_frame_with_stored_calibration(built):
    """Decoded from the shards (not the source reader): points, cuboids and calib.json agree."""
    root, _ = built
    reader = open_dataset(root)
    for key in reader.keys:
        sample = decode_sample(reader.read_sample(key), decode="none")
        points, seg, boxes = sample["lidar"], sample["lidar_seg"], sample["cuboids"]
        assert (np.linalg.norm(points[:, :3], axis=1) < 100.0).mean() > 0.9
        cars = [i for i, label in enumerate(boxes["label"]) if label == "Car"]
        dist, _ = cKDTree(points[seg == 13, :3]).query(np.asarray(boxes["center"])[cars])
        assert len(cars) > 20 and np.median(dist) < 3.0
        front = sample["calib"]["cameras"]["front_camera"]
        uv, depth = project_points(points[:, :3], front["intrinsics"], front["extrinsics"])
        inside = (
            (depth > 0)
            & (uv[:, 0] >= 0)
            & (uv[:, 0] < front["width"])
            & (uv[:, 1] >= 0)
            & (uv[:, 1] < front["height"])
        )
        assert inside.mean() > 0.25
        assert (depth[points[:, 0] > 5.0] > 0).all()  # the front camera looks along ego +x


def test_random_access_matches_scan_and_validates(built):
    root, _ = built
    reader = open_dataset(root)
    for sample in reader.iter_samples():
        for name, data in sample.items():
            if not name.startswith("__"):
                assert reader.read_member(sample["__key__"], name) == data
    assert validate_dataset(str(root)).ok


def test_rebuild_is_byte_identical(built, tmp_path):
    root, manifest = built
    again = build_dataset("pandaset", SEQUENCE, tmp_path / "again", BuildConfig(progress=False))
    assert again == manifest
    for rel in ["manifest.json", "index.parquet", *manifest.shard_paths]:
        first = hashlib.sha256((root / rel).read_bytes()).hexdigest()
        assert hashlib.sha256((tmp_path / "again" / rel).read_bytes()).hexdigest() == first, rel


@pytest.fixture
def corrupt_copy(tmp_path):
    copy = tmp_path / "raw" / "002"
    shutil.copytree(SEQUENCE, copy)
    bad = copy / "camera" / "left_camera" / "04.jpg"
    bad.write_bytes(bad.read_bytes()[:5000])  # truncated JPEG
    return copy, bad


def test_corrupt_jpeg_fails_build_naming_file(corrupt_copy, tmp_path):
    copy, bad = corrupt_copy
    with pytest.raises(BuildError) as info:
        build_dataset("pandaset", copy.parent, tmp_path / "ds", BuildConfig(progress=False))
    assert str(bad) in str(info.value) and "corrupt_camera: 1" in str(info.value)
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("workers", [1, 2])
def test_corrupt_jpeg_quarantined(corrupt_copy, tmp_path, workers):
    copy, _ = corrupt_copy
    config = BuildConfig(progress=False, quarantine=True, workers=workers)
    manifest = build_dataset("pandaset", copy.parent, tmp_path / "ds", config)
    assert manifest.num_samples == 9
    assert len(manifest.quarantine) == 1
    entry = manifest.quarantine[0]
    assert entry["key"] == "002_000004" and entry["reason"] == "corrupt_camera"
    assert entry["path"] == "002/camera/left_camera/04.jpg"
    assert "002_000004" not in open_dataset(tmp_path / "ds").keys
