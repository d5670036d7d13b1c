"""The named steps of the train loop and the pieces they need.

The loop knows no model: a model of the zoo declares the batch keys it consumes
(`input_keys`, in `forward`'s argument order) and the key of its target (`target_key`).

Loss: per-cell binary cross-entropy with logits over the (B, C, H, W) occupancy logits,
averaged over cells, with occupied cells weighted by `ModelConfig.pos_weight` (occupancy is
sparse: a few % of cells hold a vehicle, far fewer a pedestrian). A cell is predicted
occupied when its logit is > 0; with pos_weight w this happens where the model's estimate
of the occupancy probability exceeds 1 / (1 + w).
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from platform_lib.training.config import ModelConfig, OptimizerConfig

__all__ = [
    "MetricsLog",
    "NonFiniteError",
    "build_optimizer",
    "compute_loss",
    "compute_lr",
    "forward_backward",
    "next_batch",
    "optimizer_step",
    "reduce_mean",
    "resolve_batch_keys",
    "run_model",
    "seed_everything",
]


def seed_everything(seed: int) -> None:
    """Seed torch, numpy and random with `seed` (call with the same seed on every rank before init)."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def build_optimizer(model: nn.Module, cfg: OptimizerConfig) -> torch.optim.Optimizer:
    """Return AdamW over all parameters (norm and bias parameters without weight decay)."""
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=cfg.lr,
        betas=(0.9, 0.95),
        foreach=False,
    )


def compute_lr(step: int, cfg: OptimizerConfig) -> float:
    """Return the learning rate of optimizer step `step` (1-based).

    Linear warmup over `warmup_steps`, then cosine decay to 10 % of `lr` at `max_steps`. A
    pure function of the step, so a resumed run continues the schedule exactly.
    """
    if step <= cfg.warmup_steps:
        return cfg.lr * step / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))))


def next_batch(
    batches: Iterator[dict[str, Any]],
    device: torch.device,
    decode: Callable[[dict[str, Any], torch.device], dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], float]:
    """Return the next batch on `device` and the input wait: seconds blocked on the loader.

    `decode` (`training.data.camera_batch_decoder`) runs on the host batch first, after the
    wait (its time is not input wait).
    """
    start = time.perf_counter()
    batch = next(batches)
    wait_s = time.perf_counter() - start
    if decode is not None:
        batch = decode(batch, device)
    if device.type != "cuda":
        return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}, wait_s
    return _copy_to_cuda(batch, device), wait_s


_COPY_STREAMS: dict[torch.device, Any] = {}


def _copy_to_cuda(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """Copy `batch`'s tensors to `device` on a side stream; return once the copies are done.

    The host tensors may lie in the loader's ring, page-locked by `cudaHostRegister` rather
    than by torch's allocator, so torch records no event that keeps them alive while an
    asynchronous copy reads them: the ring frees a slot when its last array goes, and a worker
    may then overwrite it. The host therefore waits for the copies (not for the compute queued
    before them: they run on their own stream), and the compute stream waits for them on the GPU.
    """
    stream = _COPY_STREAMS.get(device)
    if stream is None:
        stream = _COPY_STREAMS[device] = torch.cuda.Stream(device)
    compute = torch.cuda.current_stream(device)
    with torch.cuda.stream(stream):
        moved = {
            k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v
            for k, v in batch.items()
        }
    copied = stream.record_event()
    compute.wait_stream(stream)
    for value in moved.values():
        if torch.is_tensor(value):
            value.record_stream(compute)  # allocated on the side stream, used on the compute one
    copied.synchronize()
    return moved


def resolve_batch_keys(model: nn.Module) -> tuple[tuple[str, ...], str]:
    """Return (input keys in `forward`'s order, target key) that `model` declares.

    Raises:
        TypeError: the model declares no `input_keys` / `target_key` (naming its class).
    """
    inputs, target = getattr(model, "input_keys", None), getattr(model, "target_key", None)
    if not inputs or not isinstance(target, str):
        raise TypeError(
            f"model {type(model).__name__} declares no batch keys: give its class `input_keys` "
            "(forward's arguments, in order) and `target_key` (see platform_lib/models/README.md)"
        )
    return tuple(inputs), target


def run_model(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    """Return the model's fp32 (B, C, H, W) logits for `batch`, fed the keys it declares."""
    inputs, _ = resolve_batch_keys(model)
    return model(*(batch[k] for k in inputs)).float()


def compute_loss(logits: torch.Tensor, target: torch.Tensor, pos_weight: float) -> torch.Tensor:
    """Return the mean pos-weighted BCE-with-logits over all cells (scalar fp32).

    Args:
        logits: (B, C, H, W) float.
        target: (B, C, H, W) float in {0, 1}.
        pos_weight: weight of occupied cells.
    """
    weight = torch.full(
        (logits.shape[1], 1, 1), pos_weight, dtype=torch.float32, device=logits.device
    )
    return F.binary_cross_entropy_with_logits(logits.float(), target.float(), pos_weight=weight)


def forward_backward(model: nn.Module, batch: dict[str, Any], cfg: ModelConfig) -> torch.Tensor:
    """Run forward and backward on this rank's batch; return the detached local loss."""
    _, target = resolve_batch_keys(model)
    loss = compute_loss(run_model(model, batch), batch[target], cfg.pos_weight)
    loss.backward()
    return loss.detach()


def optimizer_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    step: int,
    cfg: OptimizerConfig,
    clip: Callable[[float], torch.Tensor] | None = None,
) -> tuple[float, float]:
    """Clip gradients (global norm over all shards) and take AdamW step `step` (1-based).

    `clip` (max norm -> norm before clipping) is the layout's clipping
    (`parallel.ParallelModel.clip_grad_norm`); None: torch's `clip_grad_norm_`. The norm is
    computed on the sharded DTensor gradients, so it is the full model's on every rank.

    Returns:
        (gradient norm before clipping, learning rate used).

    Raises:
        NonFiniteError: the global gradient norm is NaN or inf (on every rank alike).
    """
    max_norm = cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
    norm = clip(max_norm) if clip else torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    if not torch.isfinite(norm):
        raise NonFiniteError(
            f"step {step}: the global gradient norm is {float(norm)} (a NaN/inf loss or gradient on some "
            "rank); the step was not applied. Check the data of this step, lower the learning rate "
            "or enable gradient clipping, then resume from the last checkpoint"
        )
    lr = compute_lr(step, cfg)
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(norm), lr


class NonFiniteError(FloatingPointError):
    """The loss or the gradients became NaN or infinite; the optimizer step was not taken."""


def reduce_mean(value: torch.Tensor) -> float:
    """Return the mean of a scalar over all ranks."""
    total = value.detach().float().reshape(1).clone()
    dist.all_reduce(total)
    return float(total) / dist.get_world_size()


class MetricsLog:
    """Per-step metrics as JSON lines, written by rank 0 only (one object per logged step)."""

    def __init__(self, path: str | os.PathLike[str], *, enabled: bool, resume_step: int) -> None:
        self.path = Path(path)
        self.enabled = enabled
        self.rows: list[dict[str, Any]] = []
        self.dropped: list[dict[str, Any]] = []
        """rows past `resume_step` from an earlier attempt: work lost to a restart"""
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists():  # drop lines past the checkpoint we resume from
                lines = list(map(json.loads, filter(None, self.path.read_text().splitlines())))
                self.rows = [r for r in lines if r["step"] <= resume_step]
                self.dropped = [r for r in lines if r["step"] > resume_step]
            self.path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in self.rows))

    def log(self, row: dict[str, Any]) -> None:
        """Append `row` (must hold "step" and "loss") to the file and to `rows`."""
        if not self.enabled:
            return
        self.rows.append(row)
        with self.path.open("a") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
