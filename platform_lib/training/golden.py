"""The fixed synthetic dataset of golden-loss checks (model zoo gate, tests).

2 logs x 6 frames of synthetic logs (seed 0), split by frame range: the last 2 frames of each
log are val. Golden files are written by `drivetrain zoo check --write` (package data beside
`platform_lib/training/zoo.py`) and by the test helper `tests/unit/golden_run.py`; this module
only builds the dataset and writes nothing else.
"""

from __future__ import annotations

import os
from pathlib import Path

from platform_lib.shards.build import BuildConfig, build_dataset
from platform_lib.sources.synthetic import SyntheticConfig, write_synthetic_logs

__all__ = ["SYNTHETIC", "build_golden_dataset"]

#: The synthetic logs of the golden dataset.
SYNTHETIC = SyntheticConfig(num_logs=2, frames_per_log=6, seed=0)


def build_golden_dataset(workdir: str | os.PathLike[str]) -> Path:
    """Generate the fixed synthetic logs under `workdir/raw` and build `workdir/dataset`; return it."""
    workdir = Path(workdir)
    write_synthetic_logs(SYNTHETIC, workdir / "raw", progress=False)
    dataset = workdir / "dataset"
    build_dataset(
        "synthetic",
        workdir / "raw",
        dataset,
        BuildConfig(split="by_frame_range", val_frames_per_log=2, progress=False),
    )
    return dataset
