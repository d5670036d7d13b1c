"""Golden-loss file of the small preset: the first steps of a fixed CPU run, pinned in git.

The run: preset `small()` (world size 1, in this process, CPU, gloo, fp32)
on a fixed synthetic dataset (2 logs x 6 frames, seed 0, split by frame range: the last 2
frames of each log are val). The test `tests/unit/test_training_golden.py` reruns it and
compares the per-step losses with `tests/unit/golden/small.json` (relative tolerance 1e-4).

Regenerate after an intended change to the model, the loss, the loader order or the
synthetic generator, and commit the file with the change that explains it:

    .venv/bin/python tests/support/golden_run.py --write
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from platform_lib.training.presets import small
from platform_lib.training.train import train
from platform_lib.zoo.dataset import SYNTHETIC, build_golden_dataset

__all__ = ["GOLDEN_PATH", "RTOL", "build_golden_dataset", "run_golden"]

GOLDEN_PATH = Path(__file__).resolve().parents[1] / "unit" / "golden" / "small.json"
RTOL = 1e-4


def run_golden(workdir: str | os.PathLike[str]) -> dict[str, Any]:
    """Build the dataset, train `small()` for its steps and return the golden record."""
    workdir = Path(workdir)
    cfg = small()
    result = train(cfg, str(build_golden_dataset(workdir)), str(workdir / "train"))
    rows = [json.loads(line) for line in Path(result.metrics_path).read_text().splitlines()]
    return {
        "preset": cfg.preset,
        "config": cfg.to_dict(),
        "synthetic": {
            "num_logs": SYNTHETIC.num_logs,
            "frames_per_log": SYNTHETIC.frames_per_log,
            "seed": SYNTHETIC.seed,
        },
        "torch_version": torch.__version__,
        "rtol": RTOL,
        "losses": [r["loss"] for r in rows],
    }


def main(argv: list[str] | None = None) -> int:
    """CLI: print the golden record, or write it to GOLDEN_PATH with --write."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"overwrite {GOLDEN_PATH}")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        record = run_golden(tmp)
    text = json.dumps(record, indent=2, sort_keys=True) + "\n"
    if args.write:
        GOLDEN_PATH.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN_PATH.write_text(text)
        print(f"wrote {GOLDEN_PATH}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
