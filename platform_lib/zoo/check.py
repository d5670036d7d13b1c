"""Model-zoo gate: every CPU preset trains a few steps and must match its golden losses.

`check_zoo_preset` trains `zoo_config(preset)` (world size 1, in this process) on the fixed
synthetic dataset (`zoo.dataset`) and compares its per-step losses with
`golden/zoo-<preset>.json` beside this module: relative tolerance 1e-4 in fp32, 2e-2 in bf16
(bf16 CPU kernels round differently per instruction set). Run by `drivetrain zoo check`.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import torch

from platform_lib.telemetry.publish import read_metrics_rows
from platform_lib.training.config import TrainConfig
from platform_lib.training.overrides import apply_overrides
from platform_lib.training.presets import get_preset
from platform_lib.training.train import train

__all__ = [
    "CPU_PRESETS",
    "GOLDEN_DIR",
    "ZOO_CUTS",
    "ZOO_STEPS",
    "check_zoo_preset",
    "golden_path",
    "zoo_config",
]

CPU_PRESETS = ("small", "synthetic_default", "pandaset_smoke", "base")
ZOO_STEPS = 6
#: Further overrides of a preset too large to train ZOO_STEPS full batches on a CPU quickly:
#: `base` (~25 M parameters, 6 cameras at 704 x 256) trains 2 steps of 1 sample on 2 threads:
#: step 1's loss pins the forward pass, step 2's the backward pass and the first AdamW update.
ZOO_CUTS: dict[str, dict[str, Any]] = {
    "base": {"optimizer.max_steps": 2, "data.batch_size": 1, "parallel.num_threads": 2},
}
GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
RTOL = {"fp32": 1e-4, "bf16": 2e-2}


def zoo_config(preset: str) -> TrainConfig:
    """Return `preset` cut to ZOO_STEPS steps (and its `ZOO_CUTS`: a large preset cut further).

    Warm-up 1 step, one checkpoint at the end, no loader workers: the gate measures the
    model, not the loader.
    """
    return apply_overrides(
        get_preset(preset),
        {
            "optimizer.max_steps": ZOO_STEPS,
            "optimizer.warmup_steps": 1,
            "checkpoint.interval": ZOO_STEPS,
            "data.num_workers": 0,
            "metrics.mlflow_interval": 0,
            **ZOO_CUTS.get(preset, {}),
        },
    )


def golden_path(preset: str, golden_dir: str | os.PathLike[str] = GOLDEN_DIR) -> Path:
    """Return the golden file of `preset`."""
    return Path(golden_dir) / f"zoo-{preset}.json"


def check_zoo_preset(
    preset: str,
    dataset_dir: str | os.PathLike[str],
    workdir: str | os.PathLike[str],
    *,
    golden_dir: str | os.PathLike[str] = GOLDEN_DIR,
    write: bool = False,
) -> dict[str, Any]:
    """Train `zoo_config(preset)` on `dataset_dir` and compare its losses with the golden file.

    Returns:
        {"preset", "precision", "losses", "golden_losses", "rtol", "max_rel_error",
        "config_changed", "loss_ok", "median_step_s", "report" (goodput report), "golden"};
        with `write` the golden file is first (re)written from this run.

    Raises:
        FileNotFoundError: no golden file for `preset` (run with write=True to create it).
    """
    cfg, path = zoo_config(preset), golden_path(preset, golden_dir)
    if not write and not path.is_file():
        raise FileNotFoundError(
            f"no golden file {path} for preset {preset!r}: create it with `drivetrain zoo check --write`"
        )
    run = Path(workdir) / preset
    train(cfg, str(dataset_dir), str(run))  # world size 1: this process is rank 0
    rows = read_metrics_rows(run)
    losses = [r["loss"] for r in rows]
    precision = "bf16" if cfg.parallel.mixed_precision else "fp32"
    config = json.loads(json.dumps(cfg.to_dict()))
    if write:
        record = {
            "preset": preset,
            "config": config,
            "torch_version": torch.__version__,
            "precision": precision,
            "losses": losses,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    golden = json.loads(path.read_text())
    rtol = RTOL[precision]
    errors = [
        abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, golden["losses"], strict=False)
    ]
    max_error = max(errors, default=float("inf"))
    steady = [r["step_time_s"] for r in rows[1:]]
    return {
        "preset": preset,
        "precision": precision,
        "losses": losses,
        "golden_losses": golden["losses"],
        "rtol": rtol,
        "max_rel_error": max_error,
        "config_changed": golden["config"] != config,
        "loss_ok": len(losses) == len(golden["losses"])
        and max_error <= rtol
        and golden["config"] == config,
        "median_step_s": statistics.median(steady) if steady else None,
        "report": json.loads((run / "goodput.json").read_text()),
        "golden": str(path),
    }
