"""Pipeline glue: config resolution, source/model names, run folders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from platform_lib.pipeline import (
    check_source,
    fetch_raw_logs,
    resolve_build_config,
    resolve_model_name,
    resolve_train_dir,
)


def test_unknown_source_names_the_input() -> None:
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
