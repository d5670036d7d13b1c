"""The goodput page: plots of a run and its baseline comparison, as one self-contained HTML.

The training task publishes it as a Flyte Deck; `drivetrain goodput RUN --html FILE` writes
it too. Plots are matplotlib PNGs embedded as data URIs (no network, no scripts), each in a
fixed box of the page (`PLOT_BOXES`, CSS pixels at 100 % zoom) so a browser screenshot can
check that every plot is drawn. The page is `platform_lib.redact`ed (no password or token).
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after selecting the non-interactive backend)

from platform_lib.redact import redact  # noqa: E402
from platform_lib.telemetry.report import format_report, steady_steps  # noqa: E402
from platform_lib.telemetry.timeline import StepRecord, Timeline  # noqa: E402

__all__ = ["PLOTS", "PLOT_BOXES", "PLOT_HEIGHT", "PLOT_WIDTH", "render_deck_html"]

PLOT_WIDTH, PLOT_HEIGHT = 480, 300  # CSS pixels per plot
_COLUMNS, _GAP, _TOP = 2, 20, 60
PLOTS = ("loss", "step_time", "input_wait", "goodput", "throughput", "ranks")
#: plot name -> (left, top, width, height) of its box on the page, CSS pixels.
PLOT_BOXES = {
    name: (
        _GAP + (i % _COLUMNS) * (PLOT_WIDTH + _GAP),
        _TOP + (i // _COLUMNS) * (PLOT_HEIGHT + _GAP),
        PLOT_WIDTH,
        PLOT_HEIGHT,
    )
    for i, name in enumerate(PLOTS)
}
_DPI = 100


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _figure(title: str, left: float = 0.12) -> tuple[Any, Any]:
    # fixed margins: matplotlib's constrained layout costs more than drawing these plots
    fig, ax = plt.subplots(figsize=(PLOT_WIDTH / _DPI, PLOT_HEIGHT / _DPI), dpi=_DPI)
    fig.subplots_adjust(left=left, right=0.97, top=0.9, bottom=0.15)
    ax.set_title(title, fontsize=10)
    ax.tick_params(labelsize=8)
    # few ticks per axis: tick labels are most of the drawing time
    ax.locator_params(nbins=4)
    return fig, ax


def _plot_loss(metrics_rows: list[dict[str, Any]]) -> str:
    fig, ax = _figure("loss (mean over ranks)")
    rows = [r for r in metrics_rows if "loss" in r]
    ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], color="tab:blue")
    ax.set_xlabel("step", fontsize=8)
    return _png(fig)


def _plot_step_time(timeline: Timeline) -> str:
    fig, ax = _figure("rank 0 step time by category (s)")
    steps = sorted(timeline.for_rank(0).steps, key=lambda s: s.start)
    x = range(len(steps))
    parts = {
        "input wait": [s.input_wait_s for s in steps],
        "forward+backward": [s.forward_backward_s for s in steps],
        "optimizer": [s.optimizer_s for s in steps],
        "checkpoint": [s.checkpoint_s for s in steps],
        "other": [
            max(
                0.0,
                s.wall_s - s.input_wait_s - s.forward_backward_s - s.optimizer_s - s.checkpoint_s,
            )
            for s in steps
        ],
    }
    # one filled polygon per category: a bar per step and category is slow to draw
    ax.stackplot(list(x), *parts.values(), labels=list(parts), step="mid", linewidth=0)
    ax.set_xlabel("recorded step (restarts included)", fontsize=8)
    ax.legend(fontsize=7, loc="upper right")
    return _png(fig)


def _plot_per_rank(
    timeline: Timeline, title: str, value: Callable[[StepRecord], float], **line: Any
) -> tuple[Any, Any]:
    """Draw one line per rank of `value(step)` over its steady steps; return (fig, ax)."""
    fig, ax = _figure(title)
    for rank in timeline.ranks():
        steps = steady_steps(timeline.for_rank(rank).steps)
        ax.plot([s.step for s in steps], [value(s) for s in steps], label=f"rank {rank}", **line)
    ax.set_xlabel("step", fontsize=8)
    ax.legend(fontsize=7)
    return fig, ax


def _plot_input_wait(timeline: Timeline) -> str:
    fig, ax = _plot_per_rank(
        timeline, "input wait (% of step time) per rank", lambda s: 100 * s.input_wait_s / s.wall_s
    )
    ax.axhline(5, color="orange", linestyle="--", linewidth=1)
    ax.axhline(20, color="red", linestyle="--", linewidth=1)
    return _png(fig)


def _plot_goodput(report: dict[str, Any]) -> str:
    fig, ax = _figure(
        left=0.33,
        title=f"seconds by category (goodput {report['goodput']['compatible']:.0%} / "
        f"{report['goodput']['input_adjusted']:.0%})",
    )
    badput = report["badput_s"]  # BADPUT_CATEGORIES, and the pipeline bubble when pipelined
    labels = ["productive", *badput]
    values = [report["productive_s"]["input_adjusted"], *badput.values()]
    colors = ["tab:green"] + ["tab:red"] * len(badput)
    ax.barh(labels, values, color=colors)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel("seconds", fontsize=8)
    return _png(fig)


def _plot_throughput(timeline: Timeline, report: dict[str, Any]) -> str:
    tp = report["throughput"]
    mfu = "n/a" if tp["mfu"] is None else f"{tp['mfu']:.2%}"
    fig, ax = _figure(f"throughput (samples/s, all ranks); MFU {mfu}")
    steps = steady_steps(timeline.for_rank(0).steps)
    world = report["job"]["world_size"]
    ax.plot(
        [s.step for s in steps], [s.samples * world / s.wall_s for s in steps], color="tab:purple"
    )
    ax.set_xlabel("step", fontsize=8)
    return _png(fig)


def _plot_ranks(timeline: Timeline) -> str:
    fig, _ = _plot_per_rank(timeline, "step time per rank (s)", lambda s: s.wall_s, linewidth=1)
    return _png(fig)


def _baseline_html(baseline: dict[str, Any] | None) -> str:
    if not baseline:
        return "<p>No baseline comparison (no store configured).</p>"
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{baseline.get('summary', {}).get(k, float('nan')):.6g}</td>"
        f"<td>{v:.6g}</td></tr>"
        for k, v in sorted(baseline.get("baseline", {}).items())
    )
    flags = "".join(
        f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>"
        for k, v in sorted(baseline["flags"].items())
    )
    return (
        f"<p>Workload <code>{html.escape(str(baseline.get('workload_key')))}</code>, baseline of "
        f"{baseline.get('runs', 0)} earlier run(s), tolerance {baseline.get('tolerance', 0):.0%}.</p>"
        f"<ul>{flags or '<li>no regression</li>'}</ul>"
        f"<table><tr><th>metric</th><th>this run</th><th>baseline</th></tr>{rows}</table>"
    )


def render_deck_html(
    timeline: Timeline, report: dict[str, Any], metrics_rows: list[dict[str, Any]]
) -> str:
    """Return the goodput page: six plots in fixed boxes, the baseline comparison and the text report.

    Args:
        timeline: every rank's records.
        report: `build_report(timeline)` (with "baseline" filled in when compared).
        metrics_rows: metrics.jsonl rows (step, loss, ...) for the loss plot.
    """
    images = {
        "loss": _plot_loss(metrics_rows),
        "step_time": _plot_step_time(timeline),
        "input_wait": _plot_input_wait(timeline),
        "goodput": _plot_goodput(report),
        "throughput": _plot_throughput(timeline, report),
        "ranks": _plot_ranks(timeline),
    }
    boxes = "".join(
        f'<img id="plot-{name}" alt="{name}" src="data:image/png;base64,{images[name]}" '
        f'style="position:absolute;left:{x}px;top:{y}px;width:{w}px;height:{h}px">'
        for name, (x, y, w, h) in PLOT_BOXES.items()
    )
    below = max(y + h for _, y, _, h in PLOT_BOXES.values()) + _GAP
    good = report["goodput"]
    return redact(  # the report names the workload, paths and URLs
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Drivetrain goodput</title>"
        "<style>body{margin:0;font-family:sans-serif;background:#fff}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px}</style>"
        "</head><body>"
        # a positioned container: the plot boxes stay put when Flyte embeds the page in its Deck
        f"<div style='position:relative;width:{2 * PLOT_WIDTH + 3 * _GAP}px;min-height:{below + 400}px'>"
        f"<h2 style='position:absolute;left:{_GAP}px;top:0;margin:16px 0;font-size:18px'>Goodput "
        f"{good['compatible']:.1%} (compatible) / {good['input_adjusted']:.1%} (input-adjusted), "
        f"input: {html.escape(report['input']['verdict'])}</h2>"
        f"{boxes}<div style='position:absolute;left:{_GAP}px;top:{below}px;width:{2 * PLOT_WIDTH + _GAP}px'>"
        f"<h3>Baseline comparison</h3>{_baseline_html(report.get('baseline'))}"
        f"<h3>Report</h3><pre style='font-size:11px'>{html.escape(format_report(report))}</pre></div>"
        "</div></body></html>"
    )
