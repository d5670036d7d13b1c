"""A few training steps of the small world model under one layout, on the ranks torchrun starts.

Every rank builds the same global batch of each step (random BEV frames, ego motion and a
sparse occupancy target from a fixed seed) and takes its data-parallel slice
(`ParallelModel.dp_rank`); TP and PP peers take the same slice. Steps go through the
train loop's own pieces (`parallelize`, `build_optimizer`, `optimizer_step`, `reduce_mean`),
fp32. Rank 0 writes {"losses": [...], "param_bytes": [per rank], "model_bytes": ...} to the
output file. `run_layout` starts the ranks with torchrun and reads that file. `train_layout` runs the
real `train()` (loader, checkpoints, export) of the world model under a layout instead.

    python -m torch.distributed.run --standalone --nproc-per-node 4 -m tests.support.layouts \
        OUT.json '{"tp": 2}'
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from platform_lib.models.catalog import build_model
from platform_lib.models.presets import get_model_config
from platform_lib.training.config import (
    ModelConfig,
    OptimizerConfig,
    ParallelConfig,
    TrainConfig,
    replace,
)
from platform_lib.training.distributed import destroy_distributed, init_distributed
from platform_lib.training.launch import DISABLE_SHARED_STORE, launch_local
from platform_lib.training.layout import resolve_layout
from platform_lib.training.loop import (
    build_optimizer,
    optimizer_step,
    reduce_mean,
    seed_everything,
)
from platform_lib.training.parallel import parallelize
from platform_lib.training.presets import small

MODEL = "world_model_small"
GLOBAL_BATCH = 8
STEPS = 5
REPO = Path(__file__).resolve().parents[2]


def build_global_batch(step: int) -> dict[str, torch.Tensor]:
    """Return the global batch of `step`: the same on every rank (seeded by the step)."""
    cfg = get_model_config(MODEL)
    g = torch.Generator().manual_seed(1000 + step)
    b, t, h, w = GLOBAL_BATCH, cfg.temporal_frames, cfg.grid.height, cfg.grid.width
    motion = torch.eye(4).repeat(b, t, 1, 1) + 0.1 * torch.randn(b, t, 4, 4, generator=g)
    return {
        "lidar_bev": torch.rand(b, t, cfg.input_features - 2, h, w, generator=g),
        "radar_bev": torch.rand(b, t, 2, h, w, generator=g),
        "ego_motion": motion,
        "target": (torch.rand(b, cfg.num_classes, h, w, generator=g) < 0.05).float(),
    }


def main(out: str, overrides: dict[str, Any]) -> None:
    """Train `STEPS` steps under the layout of `overrides` (ParallelConfig fields)."""
    parallel = ParallelConfig(backend="gloo", mixed_precision=False, **overrides)
    ctx = init_distributed("gloo", 120.0)
    try:
        layout = resolve_layout(
            parallel,
            ctx.world_size,
            int(os.environ.get("LOCAL_WORLD_SIZE", ctx.world_size)),
            model_name=MODEL,
            batch_size=GLOBAL_BATCH // max(1, ctx.world_size // (parallel.tp * parallel.pp)),
        )
        seed_everything(0)
        model_cfg, opt_cfg = ModelConfig(name=MODEL), OptimizerConfig(warmup_steps=1, max_steps=10)
        model = build_model(MODEL)
        model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        run = parallelize(model, layout, ctx, parallel, model_cfg)
        optimizer = build_optimizer(run.model, opt_cfg)
        local = GLOBAL_BATCH // layout.dp
        losses = []
        for step in range(1, STEPS + 1):
            batch = {
                k: v[run.dp_rank * local : (run.dp_rank + 1) * local]
                for k, v in build_global_batch(step).items()
            }
            loss = run.forward_backward(batch)
            optimizer_step(run.model, optimizer, step, opt_cfg, run.clip_grad_norm)
            losses.append(reduce_mean(loss))
        mine = sum(
            (p.to_local() if hasattr(p, "to_local") else p).numel() * p.element_size()
            for p in run.model.parameters()
        )
        sizes: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(sizes, mine)
        if ctx.is_main:
            record = {"losses": losses, "param_bytes": sizes, "model_bytes": model_bytes}
            Path(out).write_text(json.dumps(record))
    finally:
        destroy_distributed(ctx)


def run_layout(out: Path, nproc: int, overrides: dict[str, Any], timeout_s: float = 300) -> dict:
    """Run `main` on `nproc` local ranks (torchrun, gloo, CPU); return rank 0's record.

    Raises:
        AssertionError: a rank failed (the message ends with the last 40 lines of stderr).
        subprocess.TimeoutExpired: the run hung.
    """
    # torchrun here never restarts in place, so its ranks share the agent's rendezvous store,
    # bound on an OS-chosen port; with sharing disabled (the Makefile's default for local
    # pyflyte runs) the agent picks a "free" port for the ranks to bind seconds later, which
    # a concurrent launch's ephemeral port can take first.
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop(DISABLE_SHARED_STORE, None)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "tests.support.layouts",
        str(out),
        json.dumps(overrides),
    ]
    done = subprocess.run(command, env=env, cwd=REPO, timeout=timeout_s, capture_output=True)
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").splitlines()[-40:]
        raise AssertionError(
            f"{nproc}-rank layout {overrides} exited {done.returncode}:\n" + "\n".join(tail)
        )
    return json.loads(out.read_text())


def world_model_config(degrees: dict[str, Any], ranks: int = 4) -> TrainConfig:
    """Return `small()` for the world model under `degrees`: 3 steps, a checkpoint at step 2.

    Per-rank batch = 4 / data-parallel degree, so every layout trains on the same global batch.
    """
    base = small()
    dp = ranks // (degrees.get("tp", 1) * degrees.get("pp", 1))
    return replace(
        base,
        model=replace(base.model, name=MODEL),
        data=replace(base.data, window_frames=3, batch_size=4 // dp),
        optimizer=replace(base.optimizer, max_steps=3, warmup_steps=1),
        checkpoint=replace(base.checkpoint, interval=2, keep=3),
        parallel=replace(base.parallel, **degrees),
    )


def train_layout(
    dataset: Path, out: Path, degrees: dict[str, Any], resume_from: Path | None = None
) -> list[float]:
    """Train `world_model_config(degrees)` on 4 ranks into `out`; return the logged losses.

    Raises:
        AssertionError: the last metrics line's samples per s is not of the global batch (4).

    With `resume_from` (a finished run folder), start from a copy of it without its last
    checkpoint and weights: the run resumes at step 2 under this layout.
    """
    if resume_from is not None:
        shutil.copytree(resume_from, out)
        shutil.rmtree(out / "checkpoints" / "step-000003")
        (out / "model.safetensors").unlink()
    launch_local(world_model_config(degrees), str(dataset), str(out), nproc=4)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for row in rows[-1:]:  # this run's own step: samples per s counts the global batch of 4
        assert abs(row["samples_per_s"] * row["step_time_s"] - 4) < 1e-6, row
    return [row["loss"] for row in rows]


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
