"""Build orchestration: determinism, atomic publishing, bad frames, quarantine, splits."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from shard_helpers import make_frame, make_frames

from platform_lib.shards.build import BuildConfig, write_dataset
from platform_lib.shards.errors import BuildError, ManifestMissingError
from platform_lib.shards.manifest import load_manifest
from platform_lib.shards.reader import open_dataset
from platform_lib.shards.split import assign_splits
from platform_lib.sources.frame import FrameError

LOGS = [
    {"log_id": "log-a", "content_hash": "a" * 64},
    {"log_id": "log-b", "content_hash": "b" * 64},
]
CONFIG = BuildConfig(shard_size_mb=0.03, progress=False)


def _hashes(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_two_builds_are_byte_identical(tmp_path):
    m1 = write_dataset(make_frames(), tmp_path / "one", CONFIG, source="t", source_logs=LOGS)
    m2 = write_dataset(make_frames(), tmp_path / "two", CONFIG, source="t", source_logs=LOGS)
    assert m1 == m2
    h1, h2 = _hashes(tmp_path / "one"), _hashes(tmp_path / "two")
    assert h1 == h2 and "manifest.json" in h1 and "index.parquet" in h1
    assert len([p for p in h1 if p.startswith("shards/")]) == m1.num_shards > 1
    # nothing else lies beside the output (staging folder renamed away)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]


def test_manifest_records_inventory(tmp_path):
    m = write_dataset(make_frames(), tmp_path / "ds", CONFIG, source="t", source_logs=LOGS)
    assert load_manifest(tmp_path / "ds") == m
    assert m.num_samples == 8 and m.sensors.cameras == ("back_camera", "front_camera")
    assert m.sensors.radar and m.sensors.lidar_seg
    assert m.class_counts == {"vehicle": 8, "pedestrian": 8, "cyclist": 8, "other": 0}
    assert [log.num_frames for log in m.source_logs] == [4, 4]
    assert m.total_bytes == m.index.bytes + sum(s.bytes for s in m.shards)
    assert m.splits.counts == {"train": 4, "val": 4}
    assert m.build_config["shard_size_mb"] == 0.03
    assert m.quarantine == ()


def _crashing(frames, after):
    for i, frame in enumerate(frames):
        if i == after:
            raise RuntimeError("simulated crash")
        yield frame


def test_crash_mid_build_leaves_no_manifest(tmp_path):
    out = tmp_path / "ds"
    with pytest.raises(RuntimeError, match="simulated crash"):
        write_dataset(_crashing(make_frames(), 5), out, CONFIG, source="t", source_logs=LOGS)
    assert not (out / "manifest.json").exists()
    assert list(tmp_path.rglob("manifest.json")) == []
    with pytest.raises(ManifestMissingError) as info:
        open_dataset(out)
    assert str(out) in str(info.value) and "rebuild" in str(info.value)


def test_killed_build_leaves_no_manifest(tmp_path):
    """A hard kill (no cleanup runs) mid-build: partial shards exist but no manifest."""
    out = tmp_path / "ds"
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from shard_helpers import make_frames
        from platform_lib.shards.build import BuildConfig, write_dataset
        def frames():
            for i, f in enumerate(make_frames()):
                if i == 6:
                    os._exit(9)
                yield f
        write_dataset(frames(), {str(out)!r}, BuildConfig(shard_size_mb=0.03, progress=False),
                      source="t", source_logs=[])
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert result.returncode == 9, result.stderr.decode()
    staging = [p for p in tmp_path.iterdir() if p.name.startswith(".ds.staging-")]
    assert len(staging) == 1 and list(staging[0].glob("shards/*.tar"))
    assert list(tmp_path.rglob("manifest.json")) == []
    for folder in (out, staging[0]):
        with pytest.raises(ManifestMissingError, match="rebuild"):
            open_dataset(folder)


def test_existing_dataset_refused_then_replaced(tmp_path):
    out = tmp_path / "ds"
    first = write_dataset(make_frames(per_log=2), out, CONFIG, source="t", source_logs=LOGS)
    with pytest.raises(BuildError, match="already holds a dataset.*--overwrite"):
        write_dataset(make_frames(), out, CONFIG, source="t", source_logs=LOGS)
    assert load_manifest(out) == first
    config = BuildConfig(shard_size_mb=0.03, progress=False, overwrite=True)
    second = write_dataset(make_frames(), out, config, source="t", source_logs=LOGS)
    assert load_manifest(out) == second and second.num_samples == 8
    assert open_dataset(out).keys == [f.key for f in make_frames()]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_non_dataset_folder_refused(tmp_path):
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "notes.txt").write_text("mine")
    with pytest.raises(BuildError, match="not a Drivetrain dataset"):
        write_dataset(make_frames(), tmp_path / "ds", CONFIG, source="t", source_logs=LOGS)


def _with_bad_frames():
    frames = make_frames()
    frames[2].cameras["front_camera"].jpeg = b"\xff\xd8garbage"
    frames[5].lidar[3, 1] = float("nan")
    source_error = FrameError(
        "/raw/log-b/lidar/03.pkl.gz: truncated pickle",
        reason="corrupt_lidar",
        path="/raw/log-b/lidar/03.pkl.gz",
        log_id="log-b",
        frame_index=3,
    )
    frames[7] = source_error
    return frames


def test_bad_frames_fail_build_with_report(tmp_path):
    with pytest.raises(BuildError) as info:
        write_dataset(_with_bad_frames(), tmp_path / "ds", CONFIG, source="t", source_logs=LOGS)
    message = str(info.value)
    assert "3 bad frame(s)" in message and "--quarantine" in message
    assert "corrupt_camera: 1" in message and "/raw/log-a/front_camera/02.jpg" in message
    assert "nan_points: 1" in message and "corrupt_lidar: 1" in message
    assert info.value.report["corrupt_lidar"] == {
        "count": 1,
        "examples": ["/raw/log-b/lidar/03.pkl.gz"],
    }
    assert not (tmp_path / "ds").exists()


def test_quarantine_leaves_bad_frames_out(tmp_path):
    config = BuildConfig(shard_size_mb=0.03, progress=False, quarantine=True)
    m = write_dataset(
        _with_bad_frames(), tmp_path / "ds", config, source="t", source_logs=LOGS, input_root="/raw"
    )
    assert m.num_samples == 5
    assert [(q["key"], q["reason"]) for q in m.quarantine] == [
        ("log-a_000002", "corrupt_camera"),
        ("log-b_000001", "nan_points"),
        ("log-b_000003", "corrupt_lidar"),
    ]
    assert m.quarantine[2]["path"] == "log-b/lidar/03.pkl.gz"  # relative to the input
    assert "log-a_000002" not in open_dataset(tmp_path / "ds").keys
    assert [log.num_quarantined for log in m.source_logs] == [1, 2]


def test_quarantine_paths_are_relative_to_a_relative_input(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    frames = make_frames()
    frames[1] = FrameError(
        "raw/in/log-a/lidar/01.pkl.gz: truncated pickle",
        reason="corrupt_lidar",
        path="raw/in/log-a/lidar/01.pkl.gz",
        log_id="log-a",
        frame_index=1,
    )
    config = BuildConfig(shard_size_mb=0.03, progress=False, quarantine=True)
    m = write_dataset(
        frames, tmp_path / "ds", config, source="t", source_logs=LOGS, input_root="raw/in"
    )
    assert m.quarantine[0]["path"] == "log-a/lidar/01.pkl.gz"
    assert m.quarantine[0]["detail"] == "log-a/lidar/01.pkl.gz: truncated pickle"


def test_unknown_val_logs_fail_as_build_error(tmp_path):
    config = BuildConfig(shard_size_mb=1, progress=False, val_logs=("nope",))
    with pytest.raises(BuildError, match="nope"):
        write_dataset(make_frames(), tmp_path / "ds", config, source="t", source_logs=LOGS)
    assert not (tmp_path / "ds").exists()


def test_unsorted_frames_refused(tmp_path):
    frames = [make_frame("log-a", 1), make_frame("log-a", 0)]
    with pytest.raises(BuildError, match="sorted by"):
        write_dataset(frames, tmp_path / "ds", CONFIG, source="t", source_logs=[])


def test_split_by_frame_range_and_explicit_logs(tmp_path):
    config = BuildConfig(
        shard_size_mb=1, progress=False, split="by_frame_range", val_frames_per_log=1
    )
    m = write_dataset(make_frames(), tmp_path / "ds", config, source="t", source_logs=LOGS)
    assert m.splits.model_dump() == {
        "method": "by_frame_range",
        "params": {"val_frames_per_log": 1},
        "counts": {"train": 6, "val": 2},
    }
    index = open_dataset(tmp_path / "ds").index.to_pydict()
    val = [k for k, s in zip(index["key"], index["split"], strict=True) if s == "val"]
    assert val == ["log-a_000003", "log-b_000003"]
    samples = [("a", 0), ("a", 1), ("b", 0), ("c", 0)]
    splits, record = assign_splits(samples, method="by_log", val_logs=("b",))
    assert splits == ["train", "train", "val", "train"] and record["params"]["val_logs"] == ["b"]
    with pytest.raises(ValueError, match="not in the build"):
        assign_splits(samples, method="by_log", val_logs=("zz",))


def test_build_config_checks_fields():
    with pytest.raises(ValueError, match="shard_size_mb"):
        BuildConfig(shard_size_mb=0)
    with pytest.raises(ValueError, match="split"):
        BuildConfig(split="random")
