"""PNG plots of a promotion decision: the primary metric by range band, per-slice differences.

Drawn with matplotlib's object API on the Agg canvas (no pyplot global state, no display);
each file is written under a temporary name and renamed into place. Error bars are the
bootstrap intervals of the decision (`promotion.PromotionDecision`). A model's metric without
an interval is drawn as its estimate alone; a difference without an interval is not drawn as
a point at all, its row names the reason ("insufficient: 2 logs").
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from platform_lib.evaluation.bootstrap import Interval
from platform_lib.evaluation.promotion import PromotionDecision
from platform_lib.evaluation.text import format_difference

__all__ = ["BAND_PLOT", "DIFFERENCE_PLOT", "render_promotion_plots"]

BAND_PLOT = "metric_by_range_band.png"
DIFFERENCE_PLOT = "slice_differences.png"


def _point(interval: Interval) -> tuple[float, float, float]:
    """Return (estimate, lower error, upper error); NaN estimate when there is none."""
    if interval.estimate is None:
        return np.nan, 0.0, 0.0
    if interval.low is None or interval.high is None:
        return interval.estimate, 0.0, 0.0
    return interval.estimate, interval.estimate - interval.low, interval.high - interval.estimate


def _save(fig: Figure, path: Path) -> Path:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        FigureCanvasAgg(fig).print_png(str(tmp))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _band_figure(decision: PromotionDecision) -> Figure:
    fig = Figure(figsize=(6.4, 4.0), dpi=100)
    ax = fig.add_subplot()
    names = [r.metric.rsplit("/", 1)[-1] for r in decision.bands]
    x = np.arange(len(names))
    for offset, who in ((-0.1, "champion"), (0.1, "challenger")):
        points = [_point(getattr(r, who)) for r in decision.bands]
        values = [p[0] for p in points]
        errors = np.array([[p[1] for p in points], [p[2] for p in points]])
        ax.errorbar(x + offset, values, yerr=errors, fmt="o", capsize=4, label=who)
    ax.set_xticks(x, names)
    metric = decision.bands[0].metric.rsplit("/", 1)[0] if decision.bands else "metric"
    ax.set_xlabel("range band (distance of the BEV cell from ego)")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} by range band (slice {decision.config.get('primary_slice', 'all')})")
    ax.legend()
    fig.tight_layout()
    return fig


def _difference_figure(decision: PromotionDecision) -> Figure:
    rows = list(decision.rows)
    fig = Figure(figsize=(6.4, 1.2 + 0.45 * len(rows)), dpi=100)
    ax = fig.add_subplot()
    y = np.arange(len(rows))[::-1]
    points = [
        _point(r.difference) if r.difference.status == "ok" else (np.nan, 0.0, 0.0) for r in rows
    ]
    errors = np.array([[p[1] for p in points], [p[2] for p in points]])
    ax.errorbar([p[0] for p in points], y, xerr=errors, fmt="o", capsize=4)
    for yi, r in zip(y, rows, strict=True):
        if r.margin is not None:
            ax.plot([-r.margin], [yi], marker="|", markersize=14, color="red")
    ax.axvline(0.0, color="grey", linewidth=1)
    labels = []
    for r in rows:
        ok = r.difference.status == "ok"
        note = (r.verdict or r.role) if ok else format_difference(r.difference.to_dict())
        labels.append(f"{r.slice} {r.metric} ({note})")
    ax.set_yticks(y, labels)
    ax.set_xlabel("challenger - champion (red: -margin)")
    ax.set_title(f"decision: {decision.decision}")
    fig.tight_layout()
    return fig


def render_promotion_plots(
    decision: PromotionDecision, out_dir: str | os.PathLike[str]
) -> list[Path]:
    """Write the two plots of `decision` as PNG files into `out_dir` (created if missing).

    Returns:
        [out_dir/metric_by_range_band.png, out_dir/slice_differences.png]
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return [
        _save(_band_figure(decision), out / BAND_PLOT),
        _save(_difference_figure(decision), out / DIFFERENCE_PLOT),
    ]
