"""Training views: determinism and lineage, members carried byte for byte, intrinsics and
pixels as the decode path computes them from the source, and the one-line refusals."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import simplejpeg

from platform_lib.cli import main
from platform_lib.errors import UserError
from platform_lib.imaging.decode import (
    CameraResize,
    adjust_calib,
    adjust_intrinsics,
    plan_camera_resize,
)
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader
from platform_lib.shards.build import BuildConfig, build_dataset, write_dataset
from platform_lib.shards.codec import dumps_json
from platform_lib.shards.errors import SampleDecodeError
from platform_lib.shards.manifest import load_manifest
from platform_lib.shards.reader import open_dataset
from platform_lib.shards.training_view import ViewConfig, build_view
from platform_lib.shards.validate import validate_dataset
from tests.support.datasets import make_frame, write_test_dataset
from tests.unit.test_loading_decode import MAX_MEAN_ABS_ERROR

SMALL = ViewConfig(camera_width=12, camera_height=6, quality=85, progress=False)
BEV = ViewConfig(camera_width=704, camera_height=256, progress=False)


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> Path:
    """A small real dataset: 5 samples over 3 shards, 2 cameras of 24x16."""
    return write_test_dataset(tmp_path_factory.mktemp("view-parent") / "ds", {"a": 3, "b": 2})


@pytest.fixture(scope="module")
def small_view(parent: Path) -> Path:
    out = parent.parent / "view"
    build_view(parent, out, SMALL)
    return out


@pytest.fixture(scope="module")
def pandaset_parent(pandaset_root: Path, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("view-pandaset") / "ds"
    build_dataset("pandaset", pandaset_root, root, BuildConfig(progress=False))
    return root


@pytest.fixture(scope="module")
def pandaset_view(pandaset_parent: Path) -> Path:
    out = pandaset_parent.parent / "view-704x256"
    build_view(pandaset_parent, out, BEV)
    return out


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_two_builds_of_a_view_are_byte_identical_and_record_their_lineage(parent, small_view):
    again = parent.parent / "view-again"
    manifest = build_view(parent, again, SMALL.model_copy(update={"shard_size_mb": None}))
    assert _files(again) == _files(small_view)  # manifest, index and every shard
    assert manifest == load_manifest(small_view)
    source = load_manifest(parent)
    lineage = manifest.view
    assert lineage is not None and lineage.parent_dataset_hash == source.dataset_hash
    assert (lineage.camera_width, lineage.camera_height, lineage.anchor_y) == (12, 6, 1.0)
    assert lineage.quality == 85 and lineage.chroma_subsampling == "444"
    assert lineage.encoder == f"simplejpeg {simplejpeg.__version__} (libjpeg-turbo)"
    assert "bilinear" in lineage.resize_filter and "DCT" in lineage.resize_filter
    assert manifest.dataset_hash != source.dataset_hash
    for field in ("source", "num_samples", "sensors", "source_logs", "splits", "class_counts"):
        assert getattr(manifest, field) == getattr(source, field), field
    assert source.view is None and "view" not in json.loads((parent / "manifest.json").read_text())
    assert validate_dataset(str(small_view)).ok
    other = build_view(parent, parent.parent / "view-q60", SMALL.model_copy(update={"quality": 60}))
    assert other.dataset_hash != manifest.dataset_hash and other.view.quality == 60


def test_a_view_changes_only_the_cameras_and_their_calibration(parent, small_view):
    with open_dataset(parent) as source, open_dataset(small_view) as view:
        assert view.keys == source.keys
        for split in ("train", "val"):
            assert view.split_keys(split) == source.split_keys(split)
        for key in source.keys:
            before, after = source.read_sample(key), view.read_sample(key)
            assert list(after) == list(before)  # same members, same order
            calib = json.loads(before["calib.json"])
            for name, camera in calib["cameras"].items():
                adjusted = adjust_calib(camera, SMALL.resize)
                camera.update(width=12, height=6, intrinsics=adjusted["intrinsics"].tolist())
                assert simplejpeg.decode_jpeg_header(after[f"{name}.jpg"])[:2] == (6, 12)
            assert after["calib.json"] == dumps_json(calib)
            carried = set(before) - {
                "__shard__",
                "calib.json",
                "front_camera.jpg",
                "left_camera.jpg",
            }
            assert carried == {"__key__", "lidar.npy", "cuboids.json", "pose.json"}
            for member in carried:
                assert after[member] == before[member], member


def test_intrinsics_of_an_identity_plan_are_kept_bit_for_bit():
    k = np.array([[700.25, 0.0, 511.503], [0.0, 700.25, 127.7], [0.0, 0.0, 1.0]])
    plan = plan_camera_resize(704, 256, CameraResize(width=704, height=256))
    assert np.array_equal(adjust_intrinsics(k, plan), k)  # (511.503 + 0.5) - 0.5 != 511.503


def _batch(dataset: Path, resize: CameraResize) -> dict[str, dict]:
    loader = build_loader(
        str(dataset),
        rank=0,
        world_size=1,
        batch_size=10,
        num_workers=0,
        seed=0,
        shuffle=False,
        config=LoaderConfig(camera_resize=resize),
    )
    with loader:
        batch = next(iter(loader))
    return {
        key: {"cameras": cameras, "calib": calib}
        for key, cameras, calib in zip(
            batch["__key__"], batch["cameras"], batch["calib"], strict=True
        )
    }


def _mae(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def test_a_view_batch_equals_the_source_decoded_at_model_size(pandaset_parent, pandaset_view):
    resize = BEV.resize
    from_view, from_source = _batch(pandaset_view, resize), _batch(pandaset_parent, resize)
    assert sorted(from_view) == sorted(from_source) and len(from_view) == 10
    with open_dataset(pandaset_view) as view:
        for key, sample in from_view.items():
            for name, image in sample["cameras"].items():
                jpeg = view.read_member(key, f"{name}.jpg")
                # decoded at its own size: the JPEG's pixels, not resampled again
                assert np.array_equal(image, simplejpeg.decode_jpeg(jpeg, colorspace="RGB"))
                expected = from_source[key]["cameras"][name]
                assert image.shape == expected.shape == (256, 704, 3)
                error = _mae(image, expected)
                assert error <= MAX_MEAN_ABS_ERROR, f"{key} {name}: mean abs error {error:.2f}"
                got, want = (
                    sample["calib"]["cameras"][name],
                    from_source[key]["calib"]["cameras"][name],
                )
                assert (
                    (got["width"], got["height"]) == (want["width"], want["height"]) == (704, 256)
                )
                assert np.array_equal(got["intrinsics"], want["intrinsics"]), f"{key} {name}"
                assert np.array_equal(got["extrinsics"], want["extrinsics"])


def test_a_parent_that_fails_validation_is_refused_naming_it(parent, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(parent, broken)
    shard = broken / "shards" / "shard-000001.tar"
    data = bytearray(shard.read_bytes())
    data[700] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(UserError, match="fails validation") as caught:
        build_view(broken, tmp_path / "view", SMALL)
    assert caught.value.culprit == str(broken) and "shard-000001.tar" in caught.value.what
    assert not (tmp_path / "view").exists() and not list(tmp_path.glob(".view.staging-*"))
    args = [
        "data",
        "view",
        str(broken),
        "--output",
        str(tmp_path / "view"),
        "--camera-size",
        "12x6",
    ]
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: dataset fails validation") and f"({broken}): run " in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "view").exists()


@pytest.mark.parametrize(
    ("size", "code", "what"),
    [
        ("0x6", 2, "camera size 0x6 has a zero side"),
        ("704", 2, "camera size '704' is not WIDTHxHEIGHT in pixels"),
        ("12x-6", 2, "camera size '12x-6' is not WIDTHxHEIGHT in pixels"),
        (
            "48x6",
            1,
            "camera size 48x6 is larger than camera front_camera (24x16) of sample a_000000",
        ),
        ("12x17", 1, "camera size 12x17 is larger than camera front_camera (24x16)"),
    ],
)
def test_a_bad_camera_size_is_one_line_naming_the_flag(parent, tmp_path, capsys, size, code, what):
    out = tmp_path / "view"
    assert main(["data", "view", str(parent), "--output", str(out), "--camera-size", size]) == code
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {what}") and "(--camera-size): give " in err
    assert len(err.splitlines()) == 1 and not out.exists()


def test_the_view_command_publishes_a_view(parent, small_view, tmp_path, capsys):
    out = tmp_path / "view"
    args = ["data", "view", str(parent), "--output", str(out), "--camera-size", "12x6"]
    assert main([*args, "--quality", "85"]) == 0
    assert load_manifest(out).dataset_hash == load_manifest(small_view).dataset_hash
    assert "dataset_hash " + load_manifest(out).dataset_hash in capsys.readouterr().out
    assert main(args) == 1  # the output holds a dataset now
    assert "--overwrite" in capsys.readouterr().err


def test_a_camera_that_passes_its_checksums_but_does_not_decode_is_named(tmp_path, capsys):
    frame = make_frame("a", 0)
    camera = frame.cameras["left_camera"]
    scan = camera.jpeg.index(b"\xff\xda")  # start of scan: headers stay, the scan is cut short
    truncated = camera.jpeg[: scan + 2 + int.from_bytes(camera.jpeg[scan + 2 : scan + 4]) + 8]
    truncated += b"\xff\xd9"
    cameras = {**frame.cameras, "left_camera": dataclasses.replace(camera, jpeg=truncated)}
    config = BuildConfig(split="by_log", val_fraction=0.0, progress=False)
    logs = [{"log_id": "a", "content_hash": "0" * 64}]
    parent = tmp_path / "ds"
    write_dataset(
        [dataclasses.replace(frame, cameras=cameras)],
        parent,
        config,
        source="synthetic",
        source_logs=logs,
    )
    with pytest.raises(SampleDecodeError, match="sample a_000000 camera left_camera"):
        build_view(parent, tmp_path / "view", SMALL)
    args = [
        "data",
        "view",
        str(parent),
        "--output",
        str(tmp_path / "view"),
        "--camera-size",
        "12x6",
    ]
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("error: sample a_000000 camera left_camera") and len(err.splitlines()) == 1
    )
    assert not (tmp_path / "view").exists()
