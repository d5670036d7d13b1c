"""Helpers for pipeline tests (plain functions; fixtures live in conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: The variables `isolated_environ` points under its root, and the folder each gets.
ISOLATED = {"HOME": "home", "TMPDIR": "tmp", "DRIVETRAIN_HOME": "drivetrain"}


def isolated_environ(root: Path) -> dict[str, str]:
    """This process's environment with everything a pipeline run writes moved under `root`.

    HOME (flytekit's local cache ~/.flyte/local-cache), TMPDIR (flytekit's raw outputs and the
    elastic run folders), DRIVETRAIN_HOME (MLflow store), each created; MLFLOW_TRACKING_URI
    removed.
    """
    env = {name: str(root / folder) for name, folder in ISOLATED.items()}
    for value in env.values():
        Path(value).mkdir(parents=True, exist_ok=True)
    merged = {**os.environ, **env}
    merged.pop("MLFLOW_TRACKING_URI", None)
    return merged


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


#: Overrides of the tiny pipeline runs: 2 steps, one checkpoint, no loader workers.
STEPS = (
    '{"max_steps": 2, "warmup_steps": 0, "checkpoint.interval": 2, "batch_size": 1, '
    '"num_workers": 0}'
)


def tiny_synthetic(num_logs: int):
    """Synthetic logs small enough for a full pipeline run in seconds (2 frames per log)."""
    from platform_lib.sources.synthetic import SyntheticConfig

    return SyntheticConfig(
        num_logs=num_logs,
        frames_per_log=2,
        image_width=64,
        image_height=48,
        lidar_beams=8,
        lidar_azimuth_bins=64,
    )
