"""`train()`: one training run under its layout (FSDP2 x TP x PP), from a published dataset to exported weights.

Writes checkpoints, metrics.jsonl, model.safetensors, train_result.json, telemetry and the
goodput report under `output_dir` (the layout: the package README.md, "Output folder of
`train`"). Faults survived: a dead worker (torch elastic restarts all, `train()` resumes from
the newest complete checkpoint, bitwise exactly on CPU), SIGTERM (`preemption.py`), a hung
collective (`hang.py`). Hooks at named points of every step (`hooks.py`) are the injection
seam: tests install theirs, DRIVETRAIN_FAULTS installs the fault hooks (docs/faults.md).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from platform_lib.faults import FaultPlan
from platform_lib.loading.errors import ResumeStateError
from platform_lib.loading.input_wait import InputWaitMeter
from platform_lib.loading.loader import StreamingLoader
from platform_lib.models.catalog import build_model
from platform_lib.models.presets import get_model_config
from platform_lib.telemetry.publish import write_json_atomic
from platform_lib.telemetry.recorder import MetricsSink, StepRecorder
from platform_lib.training.checkpoint import (
    Checkpointer,
    capture_rng_state,
    export_weights,
    restore_rng_state,
)
from platform_lib.training.config import TrainConfig
from platform_lib.training.data import (
    build_train_loader,
    build_train_transform,
    camera_batch_decoder,
    iterate_epochs,
)
from platform_lib.training.distributed import DistContext, destroy_distributed, init_distributed
from platform_lib.training.hang import HangWatchdog, enable_flight_recorder, is_collective_timeout
from platform_lib.training.hooks import HookChain, StepHooks
from platform_lib.training.layout import resolve_layout
from platform_lib.training.loop import (
    MetricsLog,
    NonFiniteError,
    build_optimizer,
    next_batch,
    optimizer_step,
    reduce_mean,
    seed_everything,
)
from platform_lib.training.observe import build_recorder, publish_goodput
from platform_lib.training.parallel import ParallelModel, gather_full_state_dict, parallelize
from platform_lib.training.preemption import PreemptedError, PreemptionHandler

__all__ = [
    "TrainResult",
    "build_run",
    "finish",
    "log_step",
    "maybe_checkpoint",
    "preempt",
    "record_restart",
    "restore",
    "step_optimizer",
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
    restarts: int = 0
    """resumes after lost work (elastic restarts, preemptions) over the run's life"""
    steps_lost: int = 0
    """steps computed after the last checkpoint before each failure, recomputed (restart badput)"""
    restart_badput_s: float = 0.0
    """step time of those lost steps, in s"""
    checkpoint_blocking_s: float = 0.0
    """time the loop was blocked by checkpoint saves in the last attempt (checkpoint badput), in s"""


def resume_loader(loader: StreamingLoader, state: dict[str, Any]) -> None:
    """Continue the loader from a checkpoint.

    After an elastic resize that breaks its global batch, warn and restart the loader's epoch
    instead (never silently).
    """
    try:
        loader.load_state_dict(state)
    except ResumeStateError as error:
        epoch = int(state.get("epoch", 0)) if isinstance(state, dict) else 0
        loader.set_epoch(max(epoch, 0))  # the saved epoch restarts, not epoch 0
        warnings.warn(f"loader state not restored ({error}); epoch {epoch} restarts", stacklevel=2)


def build_run(
    cfg: TrainConfig, ctx: DistContext, dataset_dir: str
) -> tuple[ParallelModel, torch.optim.Optimizer, StreamingLoader]:
    """Build the model under its layout (same initial weights on every rank), AdamW and this rank's loader.

    The layout comes from `cfg.parallel`'s degrees (`resolve_layout`; LOCAL_WORLD_SIZE ranks
    per node); activation checkpointing wraps the model's blocks when `cfg.parallel` asks.
    The loader serves data-parallel ranks: TP and PP peers read the same batches.

    Raises:
        UserError: degrees that do not fit the world size, the node or the model.
    """
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", ctx.world_size))
    layout = resolve_layout(
        cfg.parallel,
        ctx.world_size,
        local_world_size,
        model_name=cfg.model.name,
        batch_size=cfg.data.batch_size,
    )
    seed_everything(cfg.seed)
    model_cfg = get_model_config(cfg.model.name)
    run = parallelize(build_model(model_cfg).to(ctx.device), layout, ctx, cfg.parallel, cfg.model)
    loader = build_train_loader(
        dataset_dir,
        cfg.data,
        build_train_transform(model_cfg, cfg.data),
        rank=run.dp_rank,
        world_size=layout.dp,
        seed=cfg.seed,
    )
    return run, build_optimizer(run.model, cfg.optimizer), loader


def restore(
    checkpointer: Checkpointer,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loader: StreamingLoader,
    cfg: TrainConfig,
    ctx: DistContext,
) -> tuple[int, str | None]:
    """Load the newest complete checkpoint (partial ones are skipped); return (step, its folder)."""
    latest = checkpointer.latest()
    if latest is None:
        seed_everything(cfg.seed + ctx.rank)
        return 0, None
    state = checkpointer.load(latest, model, optimizer)
    if "rng" in state:
        restore_rng_state(state["rng"])
    if "loader" in state:
        resume_loader(loader, state["loader"])
    return int(state["step"]), latest


def record_restart(
    out: Path, step: int, samples: MetricsLog, metrics: MetricsLog, restore_s: float
) -> None:
    """Rank 0: append this resume to `restarts.jsonl` when it resumed or threw away work.

    Steps lost: steps trained after the restored checkpoint by the failed attempt (from the
    sample ledger, written right after each optimizer step); their step time (from the
    metrics rows written for them) is the restart badput.
    """
    if not metrics.enabled or (step == 0 and not samples.dropped):
        return
    failed_after = samples.dropped[-1]["step"] if samples.dropped else step
    row = {
        "restored_step": step,
        "failed_after_step": failed_after,
        "steps_lost": failed_after - step,
        "lost_step_time_s": sum(r["step_time_s"] for r in metrics.dropped),
        "restore_s": restore_s,
        "attempt": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        "time": time.time(),
    }
    with (out / "restarts.jsonl").open("a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")
    print(
        f"[drivetrain train] resumed from step {step}: {row['steps_lost']} steps lost "
        f"({row['lost_step_time_s']:.2f} s of step time), restore {restore_s:.2f} s",
        file=sys.stderr,
        flush=True,
    )


def maybe_checkpoint(
    checkpointer: Checkpointer,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loader: StreamingLoader,
    cfg: TrainConfig,
    force: bool = False,
) -> tuple[str | None, float]:
    """Save a distributed checkpoint every `checkpoint.interval` steps, at the last step and when `force`d.

    Returns:
        (its folder or None, seconds the loop was blocked).
    """
    if step % cfg.checkpoint.interval and step != cfg.optimizer.max_steps and not force:
        return None, 0.0
    state = {"step": step, "rng": capture_rng_state(), "loader": loader.state_dict()}
    saved = checkpointer.save(step, model, optimizer, state)
    return saved.path, saved.blocking_s


def preempt(
    checkpointer: Checkpointer,
    preemption: PreemptionHandler,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loader: StreamingLoader,
    cfg: TrainConfig,
    ctx: DistContext,
) -> PreemptedError:
    """Save the final checkpoint of `step` (if the grace period allows); return the error to raise."""
    already = bool(checkpointer.saves) and checkpointer.saves[-1].step == step
    budget = preemption.remaining_s()
    needed = max((s.blocking_s for s in checkpointer.saves), default=0.0)
    path: str | None = checkpointer.saves[-1].path if already else None
    if not already and needed <= budget:
        path, _ = maybe_checkpoint(checkpointer, step, model, optimizer, loader, cfg, force=True)
    checkpointer.wait()
    name = preemption.received.name if preemption.received else "signal on another rank"
    done = (
        f"final checkpoint {path} complete {preemption.grace_s - preemption.remaining_s():.1f} s after the "
        f"signal (grace {preemption.grace_s:g} s)"
        if path
        else f"no final checkpoint: the last save took {needed:.1f} s, more than the {budget:.1f} s of grace left"
    )
    message = (
        f"rank {ctx.rank} pid {os.getpid()}: preempted by {name} after step {step}; {done}; "
        "restart to resume (recoverable)"
    )
    sys.stderr.write(f"[drivetrain train] {message}\n")  # one write: ranks share the stream
    sys.stderr.flush()
    return PreemptedError(message, step=step, checkpoint=path, signal_name=name)


def step_optimizer(
    run: ParallelModel,
    optimizer: torch.optim.Optimizer,
    step: int,
    cfg: TrainConfig,
    loss: torch.Tensor,
) -> tuple[float, float]:
    """Run `optimizer_step`, naming the ranks with a non-finite local loss when it refuses a step.

    When it refuses a non-finite gradient (on every rank alike), one all-gather (on that path
    only) finds the ranks whose local loss was non-finite.
    """
    try:
        return optimizer_step(run.model, optimizer, step, cfg.optimizer, run.clip_grad_norm)
    except NonFiniteError as error:
        finite: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(finite, math.isfinite(loss.item()))
        ranks = [r for r, ok in enumerate(finite) if not ok] or "none (the gradients alone)"
        raise NonFiniteError(f"{error}; non-finite local loss on rank(s) {ranks}") from None


def log_step(
    metrics: MetricsLog,
    step: int,
    loss: torch.Tensor,
    cfg: TrainConfig,
    ctx: DistContext,
    data_parallel: int,
    **values: float,
) -> None:
    """Average the loss over ranks and write one metrics line (rank 0, every `log_interval` steps).

    `data_parallel`: ranks that load different samples (the layout's dp degree).
    """
    mean_loss, max_steps = reduce_mean(loss), cfg.optimizer.max_steps  # collective: every step
    if step % cfg.metrics.log_interval == 0 or step in (1, max_steps):
        samples_per_s = cfg.data.batch_size * data_parallel / values["step_time_s"]
        metrics.log(
            {
                "step": step,
                "loss": mean_loss,
                **values,
                "samples_per_s": samples_per_s,
                "world_size": ctx.world_size,
            }
        )
    if ctx.is_main and (step in (1, max_steps) or step % max(1, max_steps // 10) == 0):
        print(
            f"[drivetrain train] step {step}/{max_steps}  loss {mean_loss:.4f}  "
            f"step {values['step_time_s'] * 1e3:.0f} ms  input wait {values['input_wait_s'] * 1e3:.1f} ms",
            file=sys.stderr,
            flush=True,
        )  # progress on the console; metrics.jsonl is the record


def finish(
    out: Path,
    run: ParallelModel,
    cfg: TrainConfig,
    ctx: DistContext,
    step: int,
    checkpointer: Checkpointer,
    metrics: MetricsLog,
    meter: InputWaitMeter,
) -> TrainResult | None:
    """Export the full weights (collective) and, on rank 0, write and return the TrainResult."""
    meta = {
        "model": cfg.model.name,
        "model_config": json.dumps(asdict(get_model_config(cfg.model.name)), sort_keys=True),
        "train_config": json.dumps(cfg.to_dict(), sort_keys=True),
        "step": str(step),
    }
    gathered = gather_full_state_dict(run)  # pipeline stages: rank 0 merges them
    model = None if run.layout.pp > 1 else run.model
    weights = export_weights(model, out / "model.safetensors", meta, state_dict=gathered)
    if not ctx.is_main:
        return None
    losses = [r["loss"] for r in metrics.rows]
    tail = losses[-FINAL_LOSS_WINDOW:]
    restarts = (
        [json.loads(line) for line in (out / "restarts.jsonl").read_text().splitlines()]
        if (out / "restarts.jsonl").exists()
        else []
    )
    result = TrainResult(
        checkpoint_dir=str(checkpointer.latest()),
        weights_path=str(weights),
        metrics_path=str(metrics.path),
        first_loss=losses[0],
        final_loss=sum(tail) / len(tail),
        num_steps=step,
        world_size=ctx.world_size,
        restarts=len(restarts),
        steps_lost=sum(r["steps_lost"] for r in restarts),
        restart_badput_s=sum(r["lost_step_time_s"] for r in restarts),
        checkpoint_blocking_s=sum(s.blocking_s for s in checkpointer.saves),
    )
    record = {**asdict(result), "config": cfg.to_dict(), "input_wait": meter.summary()}
    write_json_atomic(out / "train_result.json", record)
    return result


def train(
    cfg: TrainConfig,
    dataset_dir: str,
    output_dir: str,
    *,
    sink: MetricsSink | None = None,
    hooks: Sequence[StepHooks] = (),
) -> TrainResult | None:
    """Train `cfg.model.name` on the `cfg.data.train_split` split of the dataset at `dataset_dir`.

    Call it on every rank (torchrun / `launch_local`) or directly in one process (world
    size 1). Resumes from the newest complete checkpoint in the checkpoint folder.
    Every rank records telemetry under `output_dir/telemetry` and rank 0 writes
    `goodput.json` at the end; a `sink` (rank 0) receives metrics every
    `cfg.metrics.mlflow_interval` steps (`platform_lib.telemetry`, docs/goodput.md).
    `hooks` are called at named points of every step (`hooks.py`), before the fault hooks
    DRIVETRAIN_FAULTS switches on in this rank.

    Returns:
        TrainResult on rank 0, None on the other ranks.

    Raises:
        ValueError: empty training split, bad backend. ManifestMissingError / DatasetError
            (from `platform_lib.shards`) or loader errors: `dataset_dir` is not a published dataset.
        PreemptedError: SIGTERM; the final checkpoint is saved, a restart resumes (recoverable).
        CollectiveHangError: a collective did not complete within `parallel.collective_timeout_s`;
            names the rank(s) that never joined.
        NonFiniteError: NaN/inf gradients. CheckpointSaveError: a save failed (e.g. disk full).
    """
    enable_flight_recorder()  # before the process group exists
    ctx = init_distributed(cfg.parallel.backend, cfg.parallel.collective_timeout_s)
    out = Path(output_dir)
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(cfg.parallel.num_threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    faults = FaultPlan.from_env(rank=ctx.rank, world_size=ctx.world_size)
    step_hooks = HookChain([*hooks, faults])
    watchdog = HangWatchdog(
        out, rank=ctx.rank, world_size=ctx.world_size, timeout_s=cfg.parallel.collective_timeout_s
    )
    preemption = PreemptionHandler(cfg.checkpoint.preemption_grace_s, ctx.device)
    recorder: StepRecorder | None = None
    try:
        recorder = build_recorder(cfg, ctx, out, sink)
        run, optimizer, loader = build_run(cfg, ctx, dataset_dir)
        model = run.model
        checkpointer = Checkpointer(
            cfg.checkpoint.folder or out / "checkpoints",
            keep=cfg.checkpoint.keep,
            async_save=cfg.checkpoint.async_save,
            storage_hook=step_hooks.wrap_storage,
            wait_timeout_s=cfg.parallel.collective_timeout_s,
        )
        restore_start = time.perf_counter()
        step, restored = restore(checkpointer, model, optimizer, loader, cfg, ctx)
        if restored is not None:
            recorder.record_restore(step, time.perf_counter() - restore_start, path=str(restored))
        metrics = MetricsLog(out / "metrics.jsonl", enabled=ctx.is_main, resume_step=step)
        samples = MetricsLog(
            out / "samples" / f"rank-{ctx.rank:05d}.jsonl", enabled=True, resume_step=step
        )
        record_restart(out, step, samples, metrics, time.perf_counter() - restore_start)
        decode = camera_batch_decoder(get_model_config(cfg.model.name), cfg.data)
        batches = iterate_epochs(loader, faults.batch_delay_s())
        meter = InputWaitMeter(skip_first=1)
        batch = None
        while step < cfg.optimizer.max_steps:
            step_hooks.at_step(step + 1)
            recorder.begin_step(step + 1)
            start = time.perf_counter()
            batch, input_wait_s = next_batch(batches, ctx.device, decode)
            recorder.lap("input_wait", input_wait_s)
            loss = run.forward_backward(step_hooks.on_batch(step + 1, batch))
            recorder.lap("forward_backward")
            step += 1
            grad_norm, lr = step_optimizer(run, optimizer, step, cfg, loss)
            recorder.lap("optimizer")
            samples.log({"step": step, "keys": list(batch["__key__"])})
            saved, blocking_s = maybe_checkpoint(checkpointer, step, model, optimizer, loader, cfg)
            if saved is not None:
                recorder.record_checkpoint(step, blocking_s, path=saved)
            step_time_s = time.perf_counter() - start
            meter.record(wait_s=input_wait_s, step_s=step_time_s)
            log_step(
                metrics,
                step,
                loss,
                cfg,
                ctx,
                run.layout.dp,
                lr=lr,
                grad_norm=grad_norm,
                input_wait_s=input_wait_s,
                step_time_s=step_time_s,
                checkpoint_blocking_s=blocking_s,
            )
            recorder.end_step()
            if preemption.requested():  # collective: every rank stops after the same step
                raise preempt(checkpointer, preemption, step, model, optimizer, loader, cfg, ctx)
        checkpointer.close()
        result = finish(out, run, cfg, ctx, step, checkpointer, metrics, meter)
        publish_goodput(recorder, cfg, ctx, out, batch)
        return result
    except RuntimeError as error:
        if is_collective_timeout(error):
            raise watchdog.diagnose(error) from error
        raise
    finally:
        if recorder is not None:
            recorder.flush()  # a failed attempt's steps count as lost work after the restart
        preemption.close()
        watchdog.close()
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
        destroy_distributed(ctx)
