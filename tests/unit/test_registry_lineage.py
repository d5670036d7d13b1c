"""Lineage hashes: raw-log content keys (local and S3 ETags), config hash, val split, code version."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from platform_lib.errors import UserError
from platform_lib.registry.lineage import (
    Lineage,
    build_lineage,
    hash_val_split,
    resolve_code_version,
    resolve_flyte_execution_id,
)
from platform_lib.shards.manifest import SourceLog, load_manifest
from platform_lib.shards.training_view import ViewConfig, build_view
from platform_lib.sources.hashing import hash_raw_location
from platform_lib.training.config import hash_config
from platform_lib.training.presets import get_preset
from platform_lib.training.trained_on import TrainedOn
from tests.support.datasets import write_test_dataset


def _make_logs(root: Path) -> Path:
    (root / "log-a" / "lidar").mkdir(parents=True)
    (root / "log-a" / "lidar" / "00.bin").write_bytes(b"\x00\x01" * 100)
    (root / "log-a" / "poses.json").write_text('[{"x": 1}]')
    (root / "log-b").mkdir()
    (root / "log-b" / "poses.json").write_text('[{"x": 2}]')
    return root


def test_local_hash_depends_on_bytes_not_location(tmp_path: Path) -> None:
    a = _make_logs(tmp_path / "a")
    b = tmp_path / "elsewhere" / "b"
    shutil.copytree(a, b)
    os.utime(b / "log-b" / "poses.json", (1, 1))  # mtimes do not matter
    assert hash_raw_location(str(a)) == hash_raw_location(str(b)) == hash_raw_location(a.as_uri())
    before = hash_raw_location(str(b))
    (b / "log-a" / "lidar" / "00.bin").write_bytes(b"\x00\x02" + b"\x00\x01" * 99)
    changed = hash_raw_location(str(b))
    assert changed != before
    (b / "log-b" / "new.txt").write_text("x")  # an added file changes the key too
    assert len({before, changed, hash_raw_location(str(b))}) == 3


def test_hash_raw_location_rejects_missing_and_empty(tmp_path: Path) -> None:
    with pytest.raises(
        UserError, match=r"^raw-log folder does not exist .*\(.*nope\): pass raw_logs"
    ):
        hash_raw_location(str(tmp_path / "nope"))
    (tmp_path / "empty" / ".hidden").mkdir(parents=True)
    with pytest.raises(UserError, match=r"^raw-log folder is empty \(.*empty\)"):
        hash_raw_location(str(tmp_path / "empty"))


def test_config_hash_is_canonical() -> None:
    cfg = get_preset("small")
    assert re.fullmatch(r"[0-9a-f]{64}", hash_config(cfg))
    assert hash_config(cfg) != hash_config(get_preset("pandaset_smoke"))


def test_val_split_hash_ignores_train_rows(tmp_path: Path) -> None:
    a = write_test_dataset(tmp_path / "a", {"loga": 2, "val": 2}, val_logs=("val",))
    b = write_test_dataset(tmp_path / "b", {"logb": 3, "val": 2}, val_logs=("val",))
    c = write_test_dataset(tmp_path / "c", {"loga": 2, "val": 3}, val_logs=("val",))
    assert hash_val_split(a) == hash_val_split(b) != hash_val_split(c)
    with pytest.raises(ValueError, match="no 'test' samples"):
        hash_val_split(a, split="test")
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        hash_val_split(tmp_path / "none")


def test_code_version_git_or_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "a.txt").write_text("a")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    assert re.fullmatch(r"[0-9a-f]{40}", resolve_code_version(repo))
    (repo / "a.txt").write_text("b")
    assert re.fullmatch(r"[0-9a-f]{40}\+dirty", resolve_code_version(repo))
    monkeypatch.delenv("DRIVETRAIN_CODE_VERSION", raising=False)
    assert (
        resolve_code_version() == resolve_code_version(tmp_path / "not-git") == "drivetrain==0.1.0"
    )
    monkeypatch.setenv("DRIVETRAIN_CODE_VERSION", "abc123")
    assert resolve_code_version() == "abc123"


def test_build_lineage_collects_every_tag(tmp_path: Path) -> None:
    dataset = write_test_dataset(tmp_path / "ds", {"a": 1, "b": 1}, val_logs=("b",))
    manifest = load_manifest(dataset).model_copy(
        update={
            "dataset_hash": "d" * 64,
            "source_logs": (
                SourceLog(log_id="b", content_hash="2"),
                SourceLog(log_id="a", content_hash="1"),
            ),
        }
    )
    lineage = build_lineage(
        manifest=manifest,
        dataset_dir=dataset,
        config=get_preset("small"),
        seed=7,
        raw_logs_hash="r" * 64,
    )
    tags = lineage.to_tags()
    assert isinstance(lineage, Lineage)
    assert tags["dataset_hash"] == "d" * 64 and tags["raw_logs_hash"] == "r" * 64
    assert tags["source_log_hashes"] == '{"a":"1","b":"2"}'
    assert tags["seed"] == "7" and tags["flyte_execution_id"] == "local"
    assert tags["config_hash"] == hash_config(get_preset("small"))
    assert tags["val_split_hash"] == hash_val_split(dataset)
    assert resolve_flyte_execution_id() == "local"
    assert (
        build_lineage(
            manifest=manifest,
            dataset_dir=dataset,
            config=get_preset("small"),
            seed=7,
            execution_id="f3a9",
            code_version="c0de",
        ).to_tags()["flyte_execution_id"]
        == "f3a9"
    )


def test_lineage_names_the_training_view_and_its_parent(tmp_path: Path) -> None:
    parent = write_test_dataset(tmp_path / "ds", {"a": 2, "b": 1}, val_logs=("b",))
    view = build_view(
        parent, tmp_path / "view", ViewConfig(camera_width=12, camera_height=6, progress=False)
    )
    manifest = load_manifest(parent)
    common = {"manifest": manifest, "dataset_dir": parent, "config": get_preset("small"), "seed": 0}

    tags = build_lineage(**common, trained_on=TrainedOn(view.dataset_hash, view.view)).to_tags()
    assert tags["dataset_hash"] == manifest.dataset_hash != view.dataset_hash
    assert tags["train_dataset_hash"] == view.dataset_hash
    train_view = json.loads(tags["train_view"])
    assert train_view["parent_dataset_hash"] == manifest.dataset_hash
    assert (train_view["camera_width"], train_view["camera_height"]) == (12, 6)
    assert train_view["quality"] == 90 and train_view["anchor_y"] == 1.0
    assert tags["val_split_hash"] == hash_val_split(parent)  # evaluated on the parent

    itself = build_lineage(**common, trained_on=TrainedOn(manifest.dataset_hash, None)).to_tags()
    assert (itself["train_dataset_hash"], itself["train_view"]) == (manifest.dataset_hash, "none")
    unknown = build_lineage(**common).to_tags()
    assert (unknown["train_dataset_hash"], unknown["train_view"]) == ("unknown", "none")


def test_lineage_refuses_a_run_that_read_another_dataset(tmp_path: Path) -> None:
    parent = write_test_dataset(tmp_path / "ds", {"a": 2, "b": 1}, val_logs=("b",))
    other = write_test_dataset(tmp_path / "other", {"c": 2, "b": 1}, val_logs=("b",))
    view_of_other = build_view(
        other, tmp_path / "view", ViewConfig(camera_width=12, camera_height=6, progress=False)
    )
    common = {
        "manifest": load_manifest(parent),
        "dataset_dir": parent,
        "config": get_preset("small"),
        "seed": 0,
    }
    for trained_on in (
        TrainedOn(load_manifest(other).dataset_hash, None),
        TrainedOn(view_of_other.dataset_hash, view_of_other.view),
    ):
        with pytest.raises(UserError, match=r"neither dataset [0-9a-f]{16}\.\.\. nor a training"):
            build_lineage(**common, trained_on=trained_on)
