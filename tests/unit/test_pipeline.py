"""Pipeline glue: config resolution, source/model names, run folders."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from platform_lib.pipeline import (
    TrainOverrides,
    check_source,
    fetch_raw_logs,
    resolve_build_config,
    resolve_model_name,
    resolve_train_config,
    resolve_train_dir,
)
from platform_lib.training.presets import get_preset


def test_overrides_replace_only_given_fields() -> None:
    cfg = resolve_train_config("pandaset_smoke", TrainOverrides(max_steps=8, lr=0.01), seed=3)
    assert cfg == dataclasses.replace(get_preset("pandaset_smoke"), max_steps=8, lr=0.01, seed=3)
    assert resolve_train_config("small", TrainOverrides(), 0) == get_preset("small")


def test_impossible_values_name_the_inputs() -> None:
    with pytest.raises(ValueError, match=r"preset/overrides/seed.*max_steps must be >= 1"):
        resolve_train_config("small", TrainOverrides(max_steps=0), 0)
    with pytest.raises(ValueError, match=r"seed must be >= 0"):
        resolve_train_config("small", TrainOverrides(), -1)
    with pytest.raises(ValueError, match=r"input preset='tiny'.*large"):
        resolve_train_config("tiny", TrainOverrides(), 0)
    with pytest.raises(ValueError, match=r"input source='nuscenes'"):
        check_source("nuscenes")


def test_split_rules_per_source() -> None:
    assert resolve_build_config("pandaset").split == "by_frame_range"
    assert resolve_build_config("pandaset").val_frames_per_log == 2
    assert resolve_build_config("synthetic").split == "by_log"
    assert resolve_model_name("", "pandaset") == "drivetrain-bev-pandaset"
    assert resolve_model_name("mine", "pandaset") == "mine"


def test_local_raw_logs_are_used_in_place(tmp_path: Path) -> None:
    assert fetch_raw_logs(str(tmp_path), tmp_path / "work") == tmp_path
    with pytest.raises(FileNotFoundError, match="input raw_logs="):
        fetch_raw_logs(str(tmp_path / "missing"), tmp_path / "work")


def test_train_dir_is_shared_by_the_ranks_of_one_launch(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    a = resolve_train_dir("d" * 64, "c" * 64)
    assert a == resolve_train_dir("d" * 64, "c" * 64) and a.is_dir()
    assert a.name.endswith(f"-{os.getppid()}") and a.parent == tmp_path / "drivetrain-train"
    assert resolve_train_dir("e" * 64, "c" * 64) != a
