"""Shared fixtures: the real PandaSet sample (../shared/data/pandaset beside the repo) and
small synthetic raw logs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

#: `shared/` lies beside the repository root (CI clones the repo with shared/ next to it).
SHARED_DIR = Path(__file__).resolve().parents[1].parent / "shared"
PANDASET_DIR = SHARED_DIR / "data" / "pandaset"


@pytest.fixture(scope="session")
def pandaset_root() -> Path:
    """PandaSet root holding sequence 002 (10 frames); skips when the sample is absent."""
    if not (PANDASET_DIR / "002" / "lidar" / "poses.json").is_file():
        pytest.skip(f"PandaSet sample not found at {PANDASET_DIR / '002'} (expected the shared/ "
                    "folder beside the repository root)")
    return PANDASET_DIR


@pytest.fixture
def pandaset_copy(pandaset_root: Path, tmp_path: Path) -> Path:
    """A writable copy of sequence 002 under tmp_path (for corrupting it in bad-input tests)."""
    copy = tmp_path / "pandaset" / "002"
    shutil.copytree(pandaset_root / "002", copy)
    return copy


@pytest.fixture(scope="session")
def synthetic_root(tmp_path_factory) -> Path:
    """Synthetic raw logs of the default small config (4 logs x 8 frames, 160x96 images)."""
    from platform_lib.sources.synthetic import SyntheticConfig, write_synthetic_logs

    root = tmp_path_factory.mktemp("synthetic-raw")
    write_synthetic_logs(SyntheticConfig(), root, progress=False)
    return root
