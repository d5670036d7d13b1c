"""`train()`: one data-parallel FSDP2 training run, from a published dataset to exported weights.

Outputs under `output_dir` (rank 0 writes all but the checkpoints):
    checkpoints/step-NNNNNN/   distributed checkpoints (see `checkpoint.py`)
    metrics.jsonl              one line per logged step: step, loss, lr, grad_norm,
                               input_wait_s, step_time_s, samples_per_s, world_size
    model.safetensors          full fp32 weights of the last step (metadata: model, configs)
    train_result.json          the TrainResult of rank 0, its TrainConfig and an input-wait summary
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from platform_lib.loading import InputWaitMeter, ResumeStateError, StreamingLoader
from platform_lib.models import build_model, build_model_transform, get_model_config
from platform_lib.training.checkpoint import (
    export_weights,
    find_latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from platform_lib.training.config import TrainConfig
from platform_lib.training.data import build_train_loader, iterate_epochs
from platform_lib.training.distributed import DistContext, destroy_distributed, init_distributed
from platform_lib.training.loop import (
    MetricsLog,
    build_optimizer,
    forward_backward,
    next_batch,
    optimizer_step,
    reduce_mean,
    seed_everything,
)
from platform_lib.training.parallel import apply_fsdp, build_mesh, build_mp_policy

__all__ = [
    "TrainResult",
    "build_run",
    "finish",
    "log_step",
    "maybe_checkpoint",
    "restore",
    "resume_loader",
    "train",
]

FINAL_LOSS_WINDOW = 10


@dataclass(kw_only=True, frozen=True)
class TrainResult:
    """What rank 0 hands back: paths and a few numbers, never tensors."""

    checkpoint_dir: str
    """folder of the last complete distributed checkpoint"""
    weights_path: str
    """full fp32 weights (safetensors) of the last step"""
    metrics_path: str
    """per-step metrics, JSON lines"""
    first_loss: float
    """loss of step 1 (mean over ranks)"""
    final_loss: float
    """mean loss of the last 10 steps (mean over ranks), to smooth batch-to-batch noise"""
    num_steps: int
    """optimizer steps completed"""
    world_size: int
    """ranks that trained"""


def resume_loader(loader: StreamingLoader, state: dict[str, Any]) -> None:
    """Continue the loader from a checkpoint; after an elastic resize that breaks its global
    batch, warn and restart the loader's epoch instead (never silently)."""
    try:
        loader.load_state_dict(state)
    except ResumeStateError as error:
        epoch = int(state.get("epoch", 0)) if isinstance(state, dict) else 0
        loader.set_epoch(max(epoch, 0))  # the saved epoch restarts, not epoch 0
        warnings.warn(f"loader state not restored ({error}); epoch {epoch} restarts", stacklevel=2)


def build_run(cfg: TrainConfig, ctx: DistContext, dataset_dir: str) -> tuple[nn.Module, torch.optim.Optimizer, StreamingLoader]:
    """Build the FSDP-sharded model (same initial weights on every rank), AdamW and this rank's loader."""
    seed_everything(cfg.seed)
    model_cfg = get_model_config(cfg.model.name)
    model = apply_fsdp(
        build_model(model_cfg).to(ctx.device), build_mesh(ctx), build_mp_policy(cfg.parallel.mixed_precision),
        reshard_after_forward=cfg.parallel.reshard_after_forward,
    )
    loader = build_train_loader(
        dataset_dir, cfg.data, build_model_transform(model_cfg), rank=ctx.rank,
        world_size=ctx.world_size, seed=cfg.seed,
    )
    return model, build_optimizer(model, cfg.optimizer), loader


def restore(out: Path, model: nn.Module, optimizer: torch.optim.Optimizer, loader: StreamingLoader,
            cfg: TrainConfig, ctx: DistContext) -> tuple[int, Path | None]:
    """Load the latest complete checkpoint under `out/checkpoints`; return (step, its folder)."""
    latest = find_latest_checkpoint(out / "checkpoints")
    if latest is None:
        seed_everything(cfg.seed + ctx.rank)
        return 0, None
    extra = load_checkpoint(latest, model, optimizer)
    if "rng_torch" in extra:
        torch.set_rng_state(extra["rng_torch"])
    if "loader" in extra:
        resume_loader(loader, extra["loader"])
    return int(extra["step"]), latest


def maybe_checkpoint(out: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                     loader: StreamingLoader, cfg: TrainConfig) -> Path | None:
    """Save a distributed checkpoint every `checkpoint.interval` steps and at the last step."""
    if step % cfg.checkpoint.interval and step != cfg.optimizer.max_steps:
        return None
    extra = {"step": step, "rng_torch": torch.get_rng_state(), "loader": loader.state_dict()}
    return save_checkpoint(out / "checkpoints", step, model, optimizer, extra, keep=cfg.checkpoint.keep)


def log_step(metrics: MetricsLog, step: int, loss: torch.Tensor, cfg: TrainConfig, ctx: DistContext,
             **values: float) -> None:
    """Average the loss over ranks and write one metrics line (rank 0, every `log_interval` steps)."""
    mean_loss, max_steps = reduce_mean(loss), cfg.optimizer.max_steps  # collective: every step
    if step % cfg.metrics.log_interval == 0 or step in (1, max_steps):
        samples_per_s = cfg.data.batch_size * ctx.world_size / values["step_time_s"]
        metrics.log({"step": step, "loss": mean_loss, **values, "samples_per_s": samples_per_s,
                     "world_size": ctx.world_size})
    if ctx.is_main and (step in (1, max_steps) or step % max(1, max_steps // 10) == 0):
        print(f"[drivetrain train] step {step}/{max_steps}  loss {mean_loss:.4f}  "
              f"step {values['step_time_s'] * 1e3:.0f} ms  input wait {values['input_wait_s'] * 1e3:.1f} ms",
              file=sys.stderr, flush=True)  # progress on the console; metrics.jsonl is the record


def finish(out: Path, model: nn.Module, cfg: TrainConfig, ctx: DistContext, step: int,
           checkpoint: Path | None, metrics: MetricsLog, meter: InputWaitMeter) -> TrainResult | None:
    """Export the full weights (collective) and, on rank 0, write and return the TrainResult."""
    meta = {"model": cfg.model.name,
            "model_config": json.dumps(asdict(get_model_config(cfg.model.name)), sort_keys=True),
            "train_config": json.dumps(cfg.to_dict(), sort_keys=True), "step": str(step)}
    weights = export_weights(model, out / "model.safetensors", meta)
    if not ctx.is_main:
        return None
    losses = [r["loss"] for r in metrics.rows]
    tail = losses[-FINAL_LOSS_WINDOW:]
    result = TrainResult(
        checkpoint_dir=str(checkpoint), weights_path=str(weights), metrics_path=str(metrics.path),
        first_loss=losses[0], final_loss=sum(tail) / len(tail), num_steps=step, world_size=ctx.world_size,
    )
    record = {**asdict(result), "config": cfg.to_dict(), "input_wait": meter.summary()}
    tmp = out / "train_result.json.tmp"
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True))
    os.replace(tmp, out / "train_result.json")
    return result


def train(cfg: TrainConfig, dataset_dir: str, output_dir: str) -> TrainResult | None:
    """Train `cfg.model.name` on the `cfg.data.train_split` split of the dataset at `dataset_dir`.

    Call it on every rank (torchrun / `launch_local`) or directly in one process (world
    size 1). Resumes from the latest complete checkpoint under `output_dir/checkpoints`.

    Returns:
        TrainResult on rank 0, None on the other ranks.

    Raises:
        ValueError: empty training split, bad backend. ManifestMissingError / DatasetError
            (from `platform_lib.shards`) or loader errors: `dataset_dir` is not a published dataset.
    """
    ctx, out = init_distributed(cfg.parallel.backend), Path(output_dir)
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(cfg.parallel.num_threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        model, optimizer, loader = build_run(cfg, ctx, dataset_dir)
        step, checkpoint = restore(out, model, optimizer, loader, cfg, ctx)
        metrics = MetricsLog(out / "metrics.jsonl", enabled=ctx.is_main, resume_step=step)
        batches, meter = iterate_epochs(loader), InputWaitMeter(skip_first=1)
        while step < cfg.optimizer.max_steps:
            start = time.perf_counter()
            batch, input_wait_s = next_batch(batches, ctx.device)
            loss = forward_backward(model, batch, cfg.model)
            step += 1
            grad_norm, lr = optimizer_step(model, optimizer, step, cfg.optimizer)
            checkpoint = maybe_checkpoint(out, step, model, optimizer, loader, cfg) or checkpoint
            step_time_s = time.perf_counter() - start
            meter.record(wait_s=input_wait_s, step_s=step_time_s)
            log_step(metrics, step, loss, cfg, ctx, lr=lr, grad_norm=grad_norm,
                     input_wait_s=input_wait_s, step_time_s=step_time_s)
        return finish(out, model, cfg, ctx, step, checkpoint, metrics, meter)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
        destroy_distributed(ctx)
