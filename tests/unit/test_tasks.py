"""Task-side helpers: the run folder of an elastic launch, cached outputs that were deleted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from flytekit.types.directory import FlyteDirectory

from platform_lib.errors import UserError
from tasks.errors import download_input
from tasks.train import resolve_run_dir


def test_run_dir_is_shared_by_the_ranks_of_one_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    a = resolve_run_dir("d" * 64, "c" * 64)
    assert a == resolve_run_dir("d" * 64, "c" * 64) and a.is_dir()
    assert (
        a.name.endswith(f"-{os.getppid()}")
        and a.parent == tmp_path / f"drivetrain-train-{os.geteuid()}"
    )
    assert resolve_run_dir("e" * 64, "c" * 64) != a


def test_deleted_cached_output_names_the_cache_and_the_command(tmp_path: Path) -> None:
    present = tmp_path / "dataset"
    present.mkdir()
    assert download_input(FlyteDirectory(str(present)), "build_dataset") == str(present)
    with pytest.raises(UserError) as info:
        download_input(FlyteDirectory(str(tmp_path / "wiped")), "merge_dataset")
    assert str(info.value) == (
        "the cached output of task merge_dataset no longer exists (flytekit local cache "
        f"~/.flyte/local-cache points at deleted files) ({tmp_path / 'wiped'}): clear the cache "
        "with `pyflyte local-cache clear` (or `make clean-cache`) and run again"
    )
