"""The champion gate of a registration: the current champion and the new model on the same frames.

The new version's per-frame counts (frame_counts.json) are paired with those of the version
holding alias `champion`, evaluated here on the same split, and `evaluation.promotion` decides;
a model's first version is promoted as first, with its own per-slice table. A built-in slice
(`DEFAULT_SLICE_SPEC`) that selects no frame is left out and named; a user's spec is strict.
The page (`promotion.html`) is self-contained HTML, published as a Flyte Deck and an MLflow
artifact; the rules and the policy for small val splits: docs/pipeline.md.
"""

from __future__ import annotations

import base64
import html
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from platform_lib.evaluation.bootstrap import summarize_slices
from platform_lib.evaluation.metrics import FrameCounts
from platform_lib.evaluation.plots import BAND_PLOT, DIFFERENCE_PLOT, render_promotion_plots
from platform_lib.evaluation.promotion import (
    PromotionConfig,
    decide_promotion,
    parse_promotion_config,
)
from platform_lib.evaluation.slices import (
    SliceSpec,
    load_frame_attributes,
    parse_slice_spec,
    slice_masks,
)
from platform_lib.evaluation.text import format_difference, format_metric

__all__ = [
    "DEFAULT_PROMOTION",
    "parse_promotion",
    "DEFAULT_SLICE_SPEC",
    "PAGE_NAME",
    "PLOT_BOXES",
    "ChampionGate",
    "compute_masks",
    "decide_champion",
    "load_frame_counts",
    "render_promotion_page",
    "render_version_description",
]

#: Built-in slices over attributes every dataset has (ego poses and the index's counts).
DEFAULT_SLICE_SPEC = parse_slice_spec(
    {
        "slices": [
            {"name": "moving", "where": {"ego_speed_mps": {"min": 1.0}}},
            {"name": "stationary", "where": {"ego_speed_mps": {"max": 1.0}}},
            {"name": "with_pedestrians", "where": {"has_pedestrian": True}},
        ]
    },
    culprit="built-in slice spec",
)
#: Registration's promotion rule: mean IoU over all frames, margin 0.02, 1,000 resamples.
DEFAULT_PROMOTION = PromotionConfig()
PAGE_NAME = "promotion.html"
DECISION_JSON = "promotion.json"
_PLOT_W, _PLOT_H, _GAP, _TOP = 640, 400, 20, 90
#: plot file -> (left, top, width, height) of its box on the page, CSS pixels at 100 % zoom.
PLOT_BOXES = {
    BAND_PLOT: (_GAP, _TOP, _PLOT_W, _PLOT_H),
    DIFFERENCE_PLOT: (2 * _GAP + _PLOT_W, _TOP, _PLOT_W, _PLOT_H),
}


def parse_promotion(text: str) -> PromotionConfig:
    """Return the promotion rule given as a JSON object of `PromotionConfig` fields ("": the default).

    E.g. '{"margin": 0.05, "gated_slices": ["all", "moving"]}'.

    Raises:
        ConfigError, EvaluationError: not a JSON object, or an unknown field or a value out of
            range (a margin outside [0, 1]); one line naming `promotion` and the field.
    """
    from platform_lib.training.overrides import parse_overrides

    data = parse_overrides(text, culprit="promotion")
    return parse_promotion_config(data, culprit="promotion") if data else DEFAULT_PROMOTION


@dataclass(frozen=True, kw_only=True)
class ChampionGate:
    """What the gate decided for a new version, and the files that record it."""

    decision: str
    """"promoted:first", "promoted:better", "kept:insufficient", "kept:worse_on_slice" or
    "kept:not_better" """
    compared_with: str | None
    """champion version the new one was compared with; None for the first version"""
    tags: dict[str, str]
    """model-version tags (decision, reasons, gated differences, per-slice estimates)"""
    files: tuple[Path, ...] = field(default=())
    """promotion.json, the plots and promotion.html (artifacts of the version's run)"""
    record: dict[str, Any] = field(default_factory=dict)
    """promotion.json's content (decision, reasons, per-slice rows)"""

    @property
    def promote(self) -> bool:
        """Whether `champion` moves to the new version."""
        return self.decision.startswith("promoted")

    @property
    def page(self) -> Path | None:
        """The HTML page (decision, plots, per-slice table), if written."""
        return next((f for f in self.files if f.name == PAGE_NAME), None)


def load_frame_counts(path: str | os.PathLike[str]) -> FrameCounts:
    """Read frame_counts.json written by `training.evaluate.evaluate`.

    Raises:
        FileNotFoundError: the evaluation wrote no counts (an evaluation older than the gate).
        ValueError: counts whose shape does not match their keys, classes and bands.
    """
    return FrameCounts.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def _write(out: Path, record: dict[str, Any], plots: list[Path]) -> tuple[Path, ...]:
    out.mkdir(parents=True, exist_ok=True)
    decision_json = out / DECISION_JSON
    decision_json.write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
    page = out / PAGE_NAME
    page.write_text(render_promotion_page(record, plots), encoding="utf-8")
    return (decision_json, *plots, page)


def _first_version_record(
    name: str, challenger: FrameCounts, masks: dict[str, np.ndarray], config: PromotionConfig
) -> dict[str, Any]:
    """Return the record of a model's first version: promoted as first, its own table."""
    specs = list(dict.fromkeys((config.primary, config.gated_metric)))
    table = summarize_slices(challenger, masks, specs, config.bootstrap)
    return {
        "decision": "promoted:first",
        "promote": True,
        "reasons": [f"{name} has no champion yet: the first version becomes champion"],
        "compared_with": None,
        "rows": [
            {"slice": r["slice"], "metric": r["metric"], "challenger": r, "role": "report"}
            for r in table
        ],
        "config": config.model_dump(mode="json"),
    }


def decide_champion(
    name: str,
    champion: tuple[str, FrameCounts] | None,
    challenger: FrameCounts,
    masks: dict[str, np.ndarray],
    skipped: list[str],
    config: PromotionConfig,
    out_dir: str | os.PathLike[str],
) -> ChampionGate:
    """Apply the paired promotion rule to the champion's and the new model's counts.

    With no champion (a model's first version) the new version is promoted as first and its
    own per-slice table is recorded.

    Args:
        name: the registered model's name.
        champion: the version holding `champion` and its per-frame counts on the new model's
            evaluation frames; None when the model has no champion yet.
        challenger: the new model's per-frame counts.
        masks: slice name -> (N,) bool, "all" first (`compute_masks`).
        skipped: built-in slices left out (no frame).
        config: primary metric, gated slices, margins, bootstrap settings.
        out_dir: where promotion.json, the plots (not for a first version) and promotion.html
            are written.

    Raises:
        PairingError: the counts are not of the same frames, classes and bands.
        EvaluationError: the config gates a slice the spec lacks.
    """
    if champion is None:
        record = _first_version_record(name, challenger, masks, config)
        tags = {"champion_decision": record["decision"], "promotion_reasons": record["reasons"][0]}
        plots: list[Path] = []
    else:
        version, counts = champion
        decision = decide_promotion(counts, challenger, masks, config)
        record = {**decision.to_dict(), "compared_with": version}
        tags = decision.to_tags() | {"compared_with": version}
        plots = render_promotion_plots(decision, out_dir)
    record["skipped_slices"] = skipped
    tags |= {
        f"slice.{r['slice']}.{r['metric']}": format_metric(r["challenger"]) for r in record["rows"]
    }
    return ChampionGate(
        decision=record["decision"],
        compared_with=record["compared_with"],
        tags=tags,
        files=_write(Path(out_dir), record, plots),
        record=record,
    )


_STYLE = f"""
body {{ font-family: sans-serif; margin: 0; background: #fff; color: #111; }}
#head {{ position: absolute; left: {_GAP}px; top: 10px; height: {_TOP - 20}px; overflow: hidden; }}
#head h2 {{ margin: 0 0 6px 0; font-size: 20px; }}
img.plot {{ position: absolute; object-fit: contain; }}
#table {{ position: absolute; left: {_GAP}px; top: {_TOP + _PLOT_H + _GAP}px; }}
table {{ border-collapse: collapse; font-size: 13px; }}
td, th {{ border: 1px solid #999; padding: 3px 8px; text-align: left; }}
td.kept, td.worse, td.not_better, td.insufficient {{ color: #a00; }}
"""


def render_promotion_page(record: dict[str, Any], plots: list[Path]) -> str:
    """Return the gate's page: the decision and reasons, the plots, the per-slice table.

    Plots are embedded PNG data URIs in the fixed boxes `PLOT_BOXES` (no scripts, no network),
    so that a browser screenshot can check them; the table follows below the plots.

    Args:
        record: promotion.json's content (`decide_champion`).
        plots: PNG files named as in `PLOT_BOXES`.
    """
    esc = html.escape
    compared = record.get("compared_with")
    against = f"against champion version {esc(str(compared))}" if compared else "first version"
    head = (
        f'<div id="head"><h2 id="decision">decision: {esc(record["decision"])}</h2>'
        f"<div>{against}; skipped slices (no frame): "
        f"{esc(', '.join(record.get('skipped_slices') or []) or 'none')}</div></div>"
    )
    images = []
    for path in plots:
        left, top, width, height = PLOT_BOXES[path.name]
        data = base64.b64encode(path.read_bytes()).decode()
        images.append(
            f'<img class="plot" id="plot-{esc(path.stem)}" alt="{esc(path.stem)}" '
            f'style="left:{left}px;top:{top}px;width:{width}px;height:{height}px" '
            f'src="data:image/png;base64,{data}">'
        )
    columns = ("slice", "metric", "role", "champion", "challenger", "difference", "margin")
    header = "".join(f"<th>{c}</th>" for c in (*columns, "verdict"))
    lines = []
    for row in record["rows"]:
        cells = [row["slice"], row["metric"], row.get("role", "")]
        cells += [format_metric(row[k]) if row.get(k) else "" for k in columns[3:5]]
        cells.append(format_difference(row["difference"]) if row.get("difference") else "")
        cells.append("" if row.get("margin") is None else f"{row['margin']:g}")
        verdict = row.get("verdict", "")
        body = "".join(f"<td>{esc(str(c))}</td>" for c in cells)
        lines.append(f'<tr>{body}<td class="{esc(verdict)}">{esc(verdict)}</td></tr>')
    reasons = "".join(f"<li>{esc(r)}</li>" for r in record["reasons"])
    table = (
        f'<div id="table"><ul id="reasons">{reasons}</ul>'
        f'<table id="slices"><tr>{header}</tr>{"".join(lines)}</table></div>'
    )
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>promotion decision</title>'
        f"<style>{_STYLE}</style></head><body>{head}{''.join(images)}{table}</body></html>"
    )


#: Characters MLflow stores in a model version's description.
DESCRIPTION_MAX = 5000


def _cell(text: str) -> str:
    """Return `text` safe in a Markdown table cell (no pipe, no line break)."""
    return " ".join(text.split()).replace("|", "\\|")


def render_version_description(record: dict[str, Any], decision: str) -> str:
    """Return the model version's description: the decision, the per-slice table, the reasons.

    Markdown, which the MLflow UI renders on the version's page: a bold decision line, a table
    with a row per (slice, metric): the new version's ("candidate") and the champion's metric,
    the paired difference with its interval and the verdict; a difference without an interval
    reads as its reason ("insufficient: 2 logs"), never as a number. Then one bullet per reason
    (the last says what the user can do when the champion stays). Rows that would pass MLflow's
    5,000 characters are left out and counted; all of them are in promotion/promotion.html.

    Args:
        record: promotion.json's content (`decide_champion`).
        decision: the decision registration recorded (may differ from the gate's).
    """
    compared = record.get("compared_with")
    head = [f"**champion decision: {decision}**"]
    head.append(f"against champion version {compared}" if compared else "first version")
    gate_decision = record.get("decision", decision)
    if decision != gate_decision:
        head.append(f"(the gate decided {gate_decision}; `champion` moved meanwhile)")
    lines = [" ".join(head), ""]
    confidence = record.get("config", {}).get("bootstrap", {}).get("confidence", 0.95)
    lines += [
        f"| slice | metric | candidate | champion | difference [{confidence:.0%} CI] | verdict |",
        "|---|---|---|---|---|---|",
    ]
    reasons = ["", *(f"- {_cell(r)}" for r in record.get("reasons", []))]
    reasons.append("- all rows, plots and the config: promotion/promotion.html of the run")
    budget = DESCRIPTION_MAX - len("\n".join(lines + reasons)) - 80
    rows = record.get("rows", [])
    for i, row in enumerate(rows):
        champion, difference = row.get("champion"), row.get("difference")
        cells = (
            row["slice"],
            row["metric"],
            format_metric(row["challenger"]),
            format_metric(champion) if champion else "-",
            format_difference(difference) if difference else "-",
            row.get("verdict") or "-",
        )
        line = "| " + " | ".join(_cell(str(c)) for c in cells) + " |"
        if len(line) + 1 > budget:
            lines.append(f"| ... | {len(rows) - i} more rows in promotion/promotion.html | | | | |")
            break
        lines.append(line)
        budget -= len(line) + 1
    return "\n".join(lines + reasons)[:DESCRIPTION_MAX]


def compute_masks(
    dataset_dir: str | os.PathLike[str], counts: FrameCounts, spec: SliceSpec | None
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Return the slice masks of `counts`' frames ("all" first) and the slices left out.

    A given `spec` is strict; the built-in `DEFAULT_SLICE_SPEC` (`spec` None) is lenient: a
    slice of it that selects no frame is left out and named.

    Raises:
        SliceSpecError: a slice needs an attribute the dataset lacks (or, for a given `spec`,
            selects no frame).
        EvaluationError: a counted frame that is not in the dataset.
    """
    attributes = load_frame_attributes(dataset_dir, counts.keys)
    masks = slice_masks(spec or DEFAULT_SLICE_SPEC, attributes, skip_empty=spec is None)
    return masks, [s.name for s in (spec or DEFAULT_SLICE_SPEC).slices if s.name not in masks]
