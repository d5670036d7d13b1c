"""`drivetrain data build|inspect|validate` through the CLI entry point."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from platform_lib.cli import main

SYNTH = ["--source", "synthetic", "--num-logs", "2", "--frames-per-log", "3", "--seed", "7"]


def _hashes(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_synthetic_builds_are_byte_identical(synthetic_builds):
    a, b = _hashes(synthetic_builds / "ds-a"), _hashes(synthetic_builds / "ds-b")
    assert a == b
    assert {"manifest.json", "index.parquet"} <= set(a)
    assert len([p for p in a if p.startswith("shards/")]) >= 2


def test_inspect_json_summary(synthetic_builds, capsys):
    assert main(["data", "inspect", str(synthetic_builds / "ds-a"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    manifest = json.loads((synthetic_builds / "ds-a" / "manifest.json").read_text())
    assert summary["dataset_hash"] == manifest["dataset_hash"]
    assert summary["num_samples"] == 6 and summary["num_shards"] == manifest["num_shards"]
    assert summary["sensors"]["radar"] is True and len(summary["sensors"]["cameras"]) == 6
    assert summary["total_bytes"] == manifest["total_bytes"]
    assert set(summary["class_counts"]) == {"vehicle", "pedestrian", "cyclist", "other"}
    assert main(["data", "inspect", str(synthetic_builds / "ds-a")]) == 0
    assert "dataset_hash" in capsys.readouterr().out


def test_inspect_shows_a_views_parent_and_parameters(synthetic_builds, tmp_path, capsys):
    parent = synthetic_builds / "ds-a"
    view = tmp_path / "view"
    assert main(["data", "view", str(parent), "--output", str(view), "--camera-size", "80x48"]) == 0
    capsys.readouterr()
    assert main(["data", "inspect", str(view), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    parent_hash = json.loads((parent / "manifest.json").read_text())["dataset_hash"]
    assert summary["dataset_hash"] != parent_hash
    assert summary["view"]["parent_dataset_hash"] == parent_hash
    assert (summary["view"]["camera_width"], summary["view"]["camera_height"]) == (80, 48)
    assert summary["view"]["quality"] == 90
    assert main(["data", "inspect", str(view)]) == 0
    assert f'"parent_dataset_hash": "{parent_hash}"' in capsys.readouterr().out
    assert main(["data", "inspect", str(parent), "--json"]) == 0
    assert "view" not in json.loads(capsys.readouterr().out)  # built from raw logs


def test_validate_exit_codes(synthetic_builds, tmp_path, capsys):
    assert main(["data", "validate", str(synthetic_builds / "ds-a")]) == 0
    broken = tmp_path / "broken"
    shutil.copytree(synthetic_builds / "ds-a", broken)
    shard = broken / "shards" / "shard-000001.tar"
    shard.write_bytes(shard.read_bytes()[:-3000])
    capsys.readouterr()
    assert main(["data", "validate", str(broken)]) == 1
    assert "shard shards/shard-000001.tar" in capsys.readouterr().err


def test_existing_raw_logs_are_reused(synthetic_builds, tmp_path, capsys):
    code = main(
        [
            "data",
            "build",
            *SYNTH,
            "--input",
            str(synthetic_builds / "raw-a"),
            "--output",
            str(tmp_path / "ds"),
            "--shard-size-mb",
            "0.3",
        ]
    )
    assert code == 0 and "using 2 existing synthetic logs" in capsys.readouterr().err
    assert _hashes(tmp_path / "ds") == _hashes(synthetic_builds / "ds-a")


def test_build_errors_exit_nonzero(synthetic_builds, tmp_path, capsys):
    out = synthetic_builds / "ds-a"
    args = [
        "data",
        "build",
        *SYNTH,
        "--input",
        str(synthetic_builds / "raw-a"),
        "--output",
        str(out),
        "--shard-size-mb",
        "0.3",
    ]
    assert main(args) == 1
    assert "already holds a dataset" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (
        main(
            [
                "data",
                "build",
                "--source",
                "pandaset",
                "--input",
                str(empty),
                "--output",
                str(tmp_path / "x"),
            ]
        )
        == 1
    )
    assert "no pandaset logs found" in capsys.readouterr().err


def test_split_flags_reach_the_manifest(synthetic_builds, tmp_path):
    code = main(
        [
            "data",
            "build",
            *SYNTH,
            "--input",
            str(synthetic_builds / "raw-a"),
            "--output",
            str(tmp_path / "ds"),
            "--split",
            "by_log",
            "--val-logs",
            "synth-0001",
        ]
    )
    assert code == 0
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert manifest["splits"]["params"]["val_logs"] == ["synth-0001"]
    assert manifest["splits"]["counts"] == {"train": 3, "val": 3}


def test_impossible_synthetic_sizes_are_a_usage_error(tmp_path, capsys):
    code = main(
        [
            "data",
            "build",
            "--source",
            "synthetic",
            "--num-logs",
            "0",
            "--input",
            str(tmp_path / "raw"),
            "--output",
            str(tmp_path / "ds"),
        ]
    )
    assert code == 2
    assert "num_logs must be > 0" in capsys.readouterr().err
    assert not (tmp_path / "ds").exists()


def test_synthetic_logs_are_never_generated_into_a_foreign_folder(tmp_path, capsys):
    raw = tmp_path / "pandaset"
    (raw / "002").mkdir(parents=True)
    code = main(
        [
            "data",
            "build",
            "--source",
            "synthetic",
            "--input",
            str(raw),
            "--output",
            str(tmp_path / "ds"),
        ]
    )
    assert code == 1 and "not an empty folder" in capsys.readouterr().err
    assert [p.name for p in raw.iterdir()] == ["002"]


def test_bad_build_settings_are_one_usage_line_naming_every_field(tmp_path, capsys):
    args = ["data", "build", *SYNTH, "--input", str(tmp_path / "raw"), "--output", str(tmp_path)]
    assert main([*args, "--shard-size-mb", "-1", "--workers", "0"]) == 2
    assert capsys.readouterr().err == (
        "error: shard_size_mb must be > 0, got -1.0; workers must be >= 1, got 0 (data build): "
        "see `drivetrain data build --help`\n"
    )
    assert not (tmp_path / "raw").exists()  # refused before any log was generated
