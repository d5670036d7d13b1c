"""Helpers for pipeline tests (plain functions; fixtures live in conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_pipeline_cli(
    args: list[str], env: dict[str, str], timeout: int = 600
) -> subprocess.CompletedProcess:
    """Run `pyflyte run workflows/training_pipeline.py training_pipeline ARGS` from the repo root."""
    cmd = [
        str(Path(sys.executable).parent / "pyflyte"),
        "run",
        "workflows/training_pipeline.py",
        "training_pipeline",
        *args,
    ]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
