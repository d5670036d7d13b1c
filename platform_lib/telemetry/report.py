"""The goodput report of a run: one JSON-serialisable dict, and its terminal rendering.

`build_report(timeline)` computes everything from the records (docs/goodput.md defines each
figure); `format_report(report)` prints it. Rank 0's timeline gives the job's wall-time
breakdown (ranks of a synchronous data-parallel job share it); every rank gives its step
times, input wait and straggler score. A run with a layout other than flat FSDP (`meta["layout"]`:
degrees pp, dp_replicate, dp_shard, tp and the pipeline schedule) names it in `job.layout`,
reports its pipeline bubble as badput, and counts FLOPs per rank as the model's / (tp x pp): the
ranks of one tensor- and pipeline-parallel group share each sample (Narayanan et al. 2021).
"""

from __future__ import annotations

import statistics
from typing import Any

from platform_lib.telemetry.anomaly import (
    DEFAULT_MIN_STEP_S,
    DEFAULT_STRAGGLER_THRESHOLD,
    find_step_anomalies,
    score_stragglers,
)
from platform_lib.telemetry.goodput import (
    PRODUCTIVE,
    badput_categories,
    build_segments,
    goodput_figures,
    input_verdict,
    split_lost_steps,
    summarize_segments,
    window_breakdown,
)
from platform_lib.telemetry.timeline import StepRecord, Timeline

__all__ = [
    "REPORT_FORMAT",
    "build_report",
    "describe_layout",
    "format_report",
    "steady_steps",
]

REPORT_FORMAT = "drivetrain-goodput/1"
DEFAULT_WINDOWS = 10


def steady_steps(steps: list[StepRecord]) -> list[StepRecord]:
    """Return the kept steps of one rank without the first step of each attempt (its start-up)."""
    kept, _ = split_lost_steps(steps)
    firsts: dict[int, StepRecord] = {}
    for s in sorted(steps, key=lambda s: s.start):
        firsts.setdefault(s.attempt, s)
    first_ids = {id(s) for s in firsts.values()}
    return [s for s in kept if id(s) not in first_ids]


def _rank_stats(steps: list[StepRecord]) -> dict[str, Any]:
    steady = steady_steps(steps)
    kept, lost = split_lost_steps(steps)
    wall = sum(s.wall_s for s in steady)
    wait = sum(s.input_wait_s for s in steady)
    return {
        "steps_recorded": len(steps),
        "steps_kept": len(kept),
        "steps_lost": len(lost),
        "median_step_s": statistics.median(s.wall_s for s in steady) if steady else None,
        "mean_step_s": wall / len(steady) if steady else None,
        "input_wait_fraction": wait / wall if wall > 0 else 0.0,
        "mean_input_wait_s": wait / len(steady) if steady else 0.0,
        "mean_forward_backward_s": statistics.fmean(s.forward_backward_s for s in steady)
        if steady
        else 0.0,
        "mean_optimizer_s": statistics.fmean(s.optimizer_s for s in steady) if steady else 0.0,
        "checkpoint_s": sum(s.checkpoint_s for s in kept),
        "checkpoints": sum(1 for s in kept if s.checkpoint_s > 0),
        "samples_per_s": sum(s.samples for s in steady) / wall if wall > 0 else 0.0,
        "peak_memory_bytes": max((s.peak_memory_bytes for s in steps), default=0),
    }


def _throughput(meta: dict[str, Any], ranks: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Samples/s, achieved FLOP/s and MFU of the run (PaLM's definition, see `telemetry.mfu`).

    Every rank of a tensor- and pipeline-parallel group records its group's samples, so the
    model's samples/s is the ranks' sum / (tp x pp), and each rank does the model's FLOPs per
    sample / (tp x pp) of each sample it records.
    """
    layout = meta.get("layout")
    group = int(layout["tp"]) * int(layout["pp"]) if layout else 1
    samples_per_s = sum(r["samples_per_s"] for r in ranks.values()) / group
    flops_per_sample = meta.get("flops_per_sample")
    peak = meta.get("peak_flops")
    devices = len(ranks) or 1
    achieved = flops_per_sample * samples_per_s if flops_per_sample else None
    out = {
        "samples_per_s": samples_per_s,
        "flops_per_sample": flops_per_sample,
        "achieved_flops": achieved,
        "achieved_flops_per_device": achieved / devices if achieved else None,
        "peak_flops_per_device": peak,
        "peak_method": meta.get("peak_method"),
        "mfu": achieved / (peak * devices) if achieved and peak else None,
    }
    if layout:
        out["flops_per_sample_per_rank"] = flops_per_sample / group if flops_per_sample else None
    return out


def build_report(
    timeline: Timeline,
    *,
    min_step_s: float = DEFAULT_MIN_STEP_S,
    straggler_threshold: float = DEFAULT_STRAGGLER_THRESHOLD,
    window_s: float | None = None,
) -> dict[str, Any]:
    """Compute the goodput report of a run.

    Args:
        timeline: every rank's records (`load_timeline`, or gathered by the recorder).
        min_step_s: anomaly minimum step (ml-goodput-measurement: 1 s), in s.
        straggler_threshold: ranks scoring below it are flagged.
        window_s: rolling-window length, in s; None: a tenth of the job's wall time.

    Returns:
        A dict (schema `REPORT_FORMAT`, see docs/goodput.md): job, goodput, badput_s,
        badput_accelerator_hours, input, anomalies, ranks, throughput, memory, windows.

    Raises:
        ValueError: the timeline is empty or rank 0 (whose timeline gives the wall-time
            breakdown) recorded nothing.
    """
    ranks = timeline.ranks()
    if 0 not in ranks:
        raise ValueError(f"rank 0 recorded no telemetry (ranks present: {ranks})")
    ref = timeline.for_rank(0)
    segments, start, end = build_segments(ref)
    totals = summarize_segments(segments, start, end)
    figures = goodput_figures(totals)
    world_size = int(timeline.meta.get("world_size") or len(ranks))
    per_rank = {r: _rank_stats(timeline.for_rank(r).steps) for r in ranks}
    medians = {r: s["median_step_s"] for r, s in per_rank.items() if s["median_step_s"]}
    for rank, score in score_stragglers(medians, straggler_threshold).items():
        per_rank[rank].update(straggler_score=score["score"], straggler=score["straggler"])
    ref_stats = per_rank[0]
    hours = world_size / 3600.0
    windows = window_breakdown(
        segments, start, end, window_s or max((end - start) / DEFAULT_WINDOWS, 1e-6)
    )
    badput = {k: totals.get(k, 0.0) for k in badput_categories(timeline.meta)}
    job: dict[str, Any] = {
        "start": start,
        "end": end,
        "wall_s": totals["wall"],
        "world_size": world_size,
        "device_type": timeline.meta.get("device_type"),
        "accelerator_hours": totals["wall"] * hours,
        "model": timeline.meta.get("model"),
        "precision": timeline.meta.get("precision"),
        "preset": timeline.meta.get("preset"),
        "batch_size": timeline.meta.get("batch_size"),
        "device_name": timeline.meta.get("device_name"),
    }
    if timeline.meta.get("layout"):
        job["layout"] = dict(timeline.meta["layout"])
    return {
        "format": REPORT_FORMAT,
        "job": job,
        "goodput": figures,
        "productive_s": {
            "compatible": totals[PRODUCTIVE] + totals["data_loading_input_wait"],
            "input_adjusted": totals[PRODUCTIVE],
        },
        "badput_s": badput,
        "badput_accelerator_hours": {k: v * hours for k, v in badput.items()},
        "input": {
            "wait_fraction": ref_stats["input_wait_fraction"],
            "mean_wait_s": ref_stats["mean_input_wait_s"],
            "verdict": input_verdict(ref_stats["input_wait_fraction"]),
        },
        "steps": {
            "kept": ref_stats["steps_kept"],
            "lost": ref_stats["steps_lost"],
            "median_step_s": ref_stats["median_step_s"],
            "mean_step_s": ref_stats["mean_step_s"],
            "checkpoint_s": ref_stats["checkpoint_s"],
            "checkpoints": ref_stats["checkpoints"],
        },
        "anomalies": find_step_anomalies(steady_steps(ref.steps), min_step_s),
        "ranks": {str(r): s for r, s in per_rank.items()},
        "stragglers": sorted(r for r, s in per_rank.items() if s.get("straggler")),
        "throughput": _throughput(timeline.meta, per_rank),
        "memory": {
            "peak_bytes": max((s["peak_memory_bytes"] for s in per_rank.values()), default=0)
        },
        "windows": windows,
        "events": sorted({e.kind for e in timeline.events}),
        "baseline": timeline.meta.get("baseline"),
    }


def describe_layout(layout: dict[str, Any]) -> str:
    """Return a layout in one line, e.g. "pp=2 x dp_replicate=1 x dp_shard=2 x tp=1, 1F1B, 4 microbatches"."""
    degrees = " x ".join(f"{n}={layout[n]}" for n in ("pp", "dp_replicate", "dp_shard", "tp"))
    if int(layout["pp"]) <= 1:
        return degrees
    return f"{degrees}, {layout['pp_schedule']}, {layout['pp_microbatches']} microbatches"


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def format_report(report: dict[str, Any]) -> str:
    """Render a report as plain text for the terminal (`drivetrain goodput`)."""
    job, good = report["job"], report["goodput"]
    layout = job.get("layout")
    lines = [
        f"job: {job['wall_s']:.2f} s wall, {job['world_size']} rank(s) on {job['device_type']}, "
        f"{job['accelerator_hours']:.5f} accelerator-hours"
        + (f", layout {describe_layout(layout)}" if layout else ""),
        f"goodput: {good['compatible']:.1%} (ml-goodput-measurement compatible)   "
        f"{good['input_adjusted']:.1%} (input-adjusted)",
        "",
        f"{'category':<26}{'seconds':>10}{'share':>8}{'acc-hours':>12}",
    ]
    wall = job["wall_s"] or 1.0
    rows = [("productive (compatible)", report["productive_s"]["compatible"], None)]
    rows += [
        (k, seconds, report["badput_accelerator_hours"][k])
        for k, seconds in report["badput_s"].items()
    ]
    for name, seconds, acc_h in rows:
        acc = acc_h if acc_h is not None else seconds * job["world_size"] / 3600
        lines.append(f"{name:<26}{seconds:>10.3f}{seconds / wall:>8.1%}{acc:>12.5f}")
    steps, inp = report["steps"], report["input"]
    lines += [
        "",
        f"steps: {steps['kept']} kept, {steps['lost']} lost to restarts; median {_fmt_s(steps['median_step_s'])}; "
        f"{steps['checkpoints']} checkpoint(s) blocking {steps['checkpoint_s']:.3f} s",
        f"input wait: {inp['wait_fraction']:.1%} of step time ({inp['verdict']})",
    ]
    anomalies = report["anomalies"]
    if anomalies["ideal_step_s"] is not None:
        listed = ", ".join(
            f"step {a['step']} +{a['extra_s']:.3f} s ({a['cause']})" for a in anomalies["anomalies"]
        )
        lines.append(
            f"ideal step {anomalies['ideal_step_s']:.3f} s (median + 3 MAD = {anomalies['threshold_s']:.3f} s); "
            f"anomalies: {listed or 'none'}"
        )
    else:
        lines.append(f"ideal step: no step >= {anomalies['min_step_s']} s (anomaly minimum)")
    tp = report["throughput"]
    mfu = "-" if tp["mfu"] is None else f"{tp['mfu']:.2%}"
    achieved = "-" if tp["achieved_flops"] is None else f"{tp['achieved_flops'] / 1e9:.2f} GFLOP/s"
    lines.append(
        f"throughput: {tp['samples_per_s']:.2f} samples/s, {achieved}, MFU {mfu} "
        f"(peak: {tp['peak_method'] or 'unknown'})"
    )
    lines.append(f"peak memory: {report['memory']['peak_bytes'] / 2**20:.1f} MiB")
    for rank, stats in report["ranks"].items():
        score = stats.get("straggler_score")
        flag = "  STRAGGLER" if stats.get("straggler") else ""
        lines.append(
            f"  rank {rank}: median step {_fmt_s(stats['median_step_s'])}, input wait "
            f"{stats['input_wait_fraction']:.1%}, score {'-' if score is None else f'{score:.2f}'}{flag}"
        )
    baseline = report.get("baseline")
    if baseline:
        lines.append(
            f"baseline ({baseline.get('runs', 0)} run(s) of workload {baseline.get('workload_key')}):"
        )
        for name, flag in sorted(baseline.get("flags", {}).items()):
            lines.append(f"  {name}: {flag}")
        if not baseline.get("flags"):
            lines.append("  no regression")
    return "\n".join(lines)
