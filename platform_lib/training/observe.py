"""Telemetry of a training run: the step recorder the loop feeds, and the goodput report at the end.

`build_recorder` opens this rank's `StepRecorder` (with the profiler window, when set, and the
run's layout in its meta unless it is flat FSDP: `layout_meta`);
`publish_goodput` gathers every rank's records (collective) and, on rank 0, counts the
model's FLOPs per sample once, resolves the device peak, builds the report and writes
`goodput.json` (and `telemetry/timeline.json`) into the run folder (see `platform_lib.telemetry`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from platform_lib.models.catalog import build_model
from platform_lib.telemetry.mfu import count_flops_per_sample, resolve_peak_flops
from platform_lib.telemetry.profiler import StepProfiler
from platform_lib.telemetry.publish import TELEMETRY_DIR, write_run_report
from platform_lib.telemetry.recorder import MetricsSink, StepRecorder
from platform_lib.telemetry.report import build_report
from platform_lib.training.config import TrainConfig
from platform_lib.training.distributed import DistContext
from platform_lib.training.layout import Layout, resolve_layout, stages_per_rank
from platform_lib.training.loop import forward_backward

__all__ = [
    "TELEMETRY_DIR",
    "build_recorder",
    "count_model_flops",
    "layout_meta",
    "publish_goodput",
]


def layout_meta(layout: Layout) -> dict[str, Any] | None:
    """Return the telemetry meta of `layout` (goodput report, workload key); None for flat FSDP.

    Keys: the degrees pp, dp_replicate, dp_shard, tp; pp_schedule, pp_microbatches and
    stages_per_rank (the pipeline bubble's p, m and v).
    """
    if layout.is_fsdp_only:
        return None
    names = ("pp", "dp_replicate", "dp_shard", "tp", "pp_schedule", "pp_microbatches")
    meta: dict[str, Any] = {name: getattr(layout, name) for name in names}
    return meta | {"stages_per_rank": stages_per_rank(layout.pp_schedule)}


def build_recorder(
    cfg: TrainConfig, ctx: DistContext, out: Path, sink: MetricsSink | None = None
) -> StepRecorder:
    """Return this rank's recorder (records `process_start`); `sink` streams metrics on rank 0."""
    metrics = cfg.metrics
    profiler = None
    if metrics.profile_first_step and (ctx.is_main or metrics.profile_all_ranks):
        profiler = StepProfiler(
            out / TELEMETRY_DIR,
            rank=ctx.rank,
            first_step=metrics.profile_first_step,
            num_steps=metrics.profile_steps,
            cuda=ctx.device.type == "cuda",
        )
    precision = "bf16" if cfg.parallel.mixed_precision else "fp32"
    meta: dict[str, Any] = {"model": cfg.model.name, "precision": precision, "preset": cfg.preset}
    # the training run resolved (and checked) this layout before; one node's worth is no bound here
    layout = layout_meta(resolve_layout(cfg.parallel, ctx.world_size, ctx.world_size))
    if layout is not None:
        meta["layout"] = layout
    return StepRecorder(
        out / TELEMETRY_DIR,
        rank=ctx.rank,
        world_size=ctx.world_size,
        device=ctx.device,
        batch_size=cfg.data.batch_size,
        flush_interval=metrics.telemetry_flush_interval,
        sink=sink if ctx.is_main and metrics.mlflow_interval else None,
        sink_interval=max(1, metrics.mlflow_interval),
        profiler=profiler,
        meta=meta,
    )


def count_model_flops(cfg: TrainConfig, batch: dict[str, Any]) -> float:
    """Count forward + backward FLOPs per sample of `cfg.model` on `batch` (FlopCounterMode).

    Runs a fresh, unsharded copy of the model on the meta device (shapes only, no arithmetic:
    the count of a real run at a fraction of its cost), with the RNG state forked, so the
    training model, its gradients and the random streams are untouched. A model whose forward
    needs real values (an op without a meta kernel) is counted on the batch's device instead.
    """
    size = next(len(v) for v in batch.values() if torch.is_tensor(v))
    with torch.random.fork_rng(devices=[]):
        with torch.device("meta"):
            model = build_model(cfg.model.name)
        meta = {k: v.to("meta") if torch.is_tensor(v) else v for k, v in batch.items()}
        try:
            return count_flops_per_sample(lambda: forward_backward(model, meta, cfg.model), size)
        except (NotImplementedError, RuntimeError):
            device = next(iter(v.device for v in batch.values() if torch.is_tensor(v)))
            model = build_model(cfg.model.name).to(device)
            return count_flops_per_sample(lambda: forward_backward(model, batch, cfg.model), size)


def publish_goodput(
    recorder: StepRecorder,
    cfg: TrainConfig,
    ctx: DistContext,
    out: Path,
    batch: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """Close the recorder, gather all ranks (collective) and, on rank 0, write and return the report.

    The report goes under the run folder `out`; `batch` (a batch of this run, the last one)
    is what the FLOPs are counted on, None skips MFU.
    """
    if recorder.profiler is not None:
        recorder.profiler.stop()
    recorder.close()
    timeline = recorder.gather()
    if timeline is None:
        return None
    started = time.perf_counter()
    if batch is not None:
        timeline.meta["flops_per_sample"] = count_model_flops(cfg, batch)
    peak = resolve_peak_flops(ctx.device, cfg.parallel.num_threads)
    timeline.meta.update(
        peak_flops=peak["peak_flops"],
        peak_method=peak["method"],
        device_name=peak["device"],
        world_size=ctx.world_size,
        recorder_overhead_s=recorder.overhead_s,
    )
    metrics = cfg.metrics
    report = build_report(
        timeline,
        min_step_s=metrics.anomaly_min_step_s,
        straggler_threshold=metrics.straggler_threshold,
        window_s=metrics.goodput_window_s or None,
    )
    report["report_s"] = time.perf_counter() - started
    write_run_report(out, timeline, report, html=False)  # the task draws the page
    return report
