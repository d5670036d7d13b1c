"""`train()`: one data-parallel FSDP2 training run, from a published dataset to exported weights.

Outputs under `output_dir` (rank 0 writes all but the checkpoints):
    checkpoints/step-NNNNNN/   distributed checkpoints (see `checkpoint.py`)
    metrics.jsonl              one line per logged step: step, loss, lr, grad_norm,
                               input_wait_s, step_time_s, samples_per_s, world_size
    model.safetensors          full fp32 weights of the last step (metadata: model, configs)
    train_config.json          the TrainConfig
    train_result.json          the TrainResult of rank 0
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from platform_lib.models import build_model, build_model_transform, get_model_config
from platform_lib.training.checkpoint import (
    export_weights,
    find_latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from platform_lib.training.config import TrainConfig
from platform_lib.training.data import build_train_loader, iterate_epochs
from platform_lib.training.distributed import destroy_distributed, init_distributed
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

__all__ = ["TrainResult", "train"]

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


def train(cfg: TrainConfig, dataset_dir: str, output_dir: str) -> TrainResult | None:
    """Train `cfg.model` on the `cfg.train_split` split of the dataset at `dataset_dir`.

    Call it on every rank (torchrun / `launch_local`) or directly in one process (world
    size 1). Resumes from the latest complete checkpoint under `output_dir/checkpoints`.

    Returns:
        TrainResult on rank 0, None on the other ranks.

    Raises:
        ValueError: empty training split, bad backend. ManifestMissingError / DatasetError
            (from `platform_lib.shards`): `dataset_dir` is not a published dataset.
    """
    ctx = init_distributed(cfg.backend)
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(cfg.num_threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        out = Path(output_dir)
        seed_everything(cfg.seed)  # identical initial weights on every rank
        model_cfg = get_model_config(cfg.model)
        model = apply_fsdp(
            build_model(model_cfg).to(ctx.device), build_mesh(ctx), build_mp_policy(cfg.mixed_precision),
            reshard_after_forward=cfg.reshard_after_forward,
        )
        optimizer = build_optimizer(model, cfg)
        loader = build_train_loader(
            dataset_dir, cfg.train_split, build_model_transform(model_cfg), rank=ctx.rank,
            world_size=ctx.world_size, batch_size=cfg.batch_size, num_workers=cfg.num_workers,
            seed=cfg.seed,
        )
        step = 0
        latest = find_latest_checkpoint(out / "checkpoints")
        if latest is not None:
            extra = load_checkpoint(latest, model, optimizer)
            step = int(extra["step"])
            if "rng_torch" in extra:
                torch.set_rng_state(extra["rng_torch"])
            if "loader" in extra and hasattr(loader, "load_state_dict"):
                loader.load_state_dict(extra["loader"])
        else:
            seed_everything(cfg.seed + ctx.rank)
        metrics = MetricsLog(out / "metrics.jsonl", enabled=ctx.is_main, resume_step=step)
        if ctx.is_main:
            (out / "train_config.json").write_text(json.dumps(cfg.to_dict(), indent=2, sort_keys=True))
        batches = iterate_epochs(loader)
        checkpoint = latest
        while step < cfg.max_steps:
            start = time.perf_counter()
            batch, input_wait_s = next_batch(batches, ctx.device)
            loss = forward_backward(model, batch, cfg)
            step += 1
            grad_norm, lr = optimizer_step(model, optimizer, step, cfg)
            if step % cfg.checkpoint_interval == 0 or step == cfg.max_steps:
                extra = {"step": step, "rng_torch": torch.get_rng_state()}
                if hasattr(loader, "state_dict"):
                    extra["loader"] = loader.state_dict()
                checkpoint = save_checkpoint(out / "checkpoints", step, model, optimizer, extra, keep=cfg.keep_checkpoints)
            mean_loss, step_time_s = reduce_mean(loss), time.perf_counter() - start
            if step % cfg.log_interval == 0 or step == cfg.max_steps or step == 1:
                metrics.log({
                    "step": step, "loss": mean_loss, "lr": lr,
                    "grad_norm": grad_norm, "input_wait_s": input_wait_s, "step_time_s": step_time_s,
                    "samples_per_s": cfg.batch_size * ctx.world_size / step_time_s,
                    "world_size": ctx.world_size,
                })
        meta = {"model": cfg.model, "model_config": json.dumps(asdict(model_cfg), sort_keys=True),
                "train_config": json.dumps(cfg.to_dict(), sort_keys=True), "step": str(step)}
        weights = export_weights(model, out / "model.safetensors", meta)
        if not ctx.is_main:
            return None
        losses = [r["loss"] for r in metrics.rows]
        result = TrainResult(
            checkpoint_dir=str(checkpoint), weights_path=str(weights), metrics_path=str(metrics.path),
            first_loss=losses[0], final_loss=sum(losses[-FINAL_LOSS_WINDOW:]) / len(losses[-FINAL_LOSS_WINDOW:]),
            num_steps=step, world_size=ctx.world_size,
        )
        tmp = out / "train_result.json.tmp"
        tmp.write_text(json.dumps(asdict(result), indent=2, sort_keys=True))
        os.replace(tmp, out / "train_result.json")
        return result
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
        destroy_distributed(ctx)
