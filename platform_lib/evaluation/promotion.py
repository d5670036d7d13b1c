"""Champion vs challenger on the same frames: per-slice paired differences and the promotion rule.

Promote only when, from paired log-bootstrap intervals of challenger - champion
(`bootstrap.paired_intervals`), (1) on every gated slice the lower bound of the gated metric's
difference is at least -margin (non-inferiority) and (2) on the primary slice the lower bound
of the primary metric's difference is above 0 (superiority). A difference without an interval
("insufficient", "undefined") shows neither, so the champion stays; unpaired frames raise
`PairingError`. The decision is plain data (`PromotionDecision.to_dict`, `to_tags`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from platform_lib.evaluation.bootstrap import BootstrapConfig, Interval, paired_intervals
from platform_lib.evaluation.errors import EvaluationError, PairingError, validation_error
from platform_lib.evaluation.metrics import FrameCounts, MetricSpec
from platform_lib.evaluation.slices import ALL_SLICE
from platform_lib.evaluation.text import format_difference, logs_text

__all__ = [
    "NEXT_STEP",
    "PromotionConfig",
    "PromotionDecision",
    "SliceRow",
    "check_paired",
    "decide_promotion",
    "parse_promotion_config",
]

Margin = Annotated[float, Field(ge=0.0, le=1.0)]
_TAG_MAX = 5000  # characters MLflow stores per model-version tag


class PromotionConfig(BaseModel):
    """Primary metric, gated slices and their non-inferiority margins."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    primary: MetricSpec = MetricSpec()
    """metric the challenger must improve, with the interval's lower bound above 0"""
    primary_slice: str = ALL_SLICE
    """slice the primary metric is measured on"""
    gated_metric: MetricSpec = MetricSpec()
    """metric the challenger must not lose on any gated slice"""
    gated_slices: tuple[str, ...] = (ALL_SLICE,)
    """slices with a non-inferiority gate"""
    margin: Margin = 0.02
    """default non-inferiority margin, in metric units (0..1)"""
    slice_margins: dict[str, Margin] = Field(default_factory=dict)
    """margin of a gated slice other than the default, in metric units (0..1)"""
    bootstrap: BootstrapConfig = BootstrapConfig()
    """resamples, confidence, seed and minimum logs of every interval"""

    @model_validator(mode="after")
    def _margins_of_gated(self) -> PromotionConfig:
        extra = sorted(set(self.slice_margins) - set(self.gated_slices))
        if extra:
            raise ValueError(f"slice_margins names slices that are not gated: {extra}")
        return self

    def margin_of(self, slice_name: str) -> float:
        """Return the non-inferiority margin of a gated slice."""
        return self.slice_margins.get(slice_name, self.margin)


def parse_promotion_config(data: Any, *, culprit: str = "promotion config") -> PromotionConfig:
    """Validate a promotion config given as plain data.

    Raises:
        EvaluationError: unknown field, margin outside [0, 1], ...; names the field path.
    """
    try:
        return PromotionConfig.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, PromotionConfig, culprit) from None


@dataclass(frozen=True, kw_only=True)
class SliceRow:
    """One line of the per-slice table: a metric of both models and their difference."""

    slice: str
    metric: str
    """metric label, e.g. "iou/mean/all" """
    champion: Interval
    challenger: Interval
    difference: Interval
    """challenger - champion (paired)"""
    role: str
    """"primary", "gated", "primary+gated" or "report" """
    margin: float | None
    """non-inferiority margin (gated rows), in metric units"""
    verdict: str
    """"better", "not_better", "ok", "worse", "insufficient", "undefined" or "" (report rows)"""

    def to_dict(self) -> dict[str, Any]:
        """Return plain data (intervals as dicts)."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class PromotionDecision:
    """Whether the challenger replaces the champion, why, and the tables behind it."""

    promote: bool
    decision: str
    """"promoted:better", "kept:insufficient", "kept:worse_on_slice" or "kept:not_better" """
    reasons: tuple[str, ...]
    """one sentence per gate that failed (or why it passed)"""
    rows: tuple[SliceRow, ...]
    """per-slice table, slices in spec order ("all" first)"""
    bands: tuple[SliceRow, ...] = field(default=())
    """primary metric per range band on the primary slice (for the range-band plot)"""
    config: dict[str, Any] = field(default_factory=dict)
    """the PromotionConfig as plain data"""

    def to_dict(self) -> dict[str, Any]:
        """Return plain data for a JSON artifact."""
        return {
            "promote": self.promote,
            "decision": self.decision,
            "reasons": list(self.reasons),
            "rows": [r.to_dict() for r in self.rows],
            "bands": [r.to_dict() for r in self.bands],
            "config": self.config,
        }

    def to_tags(self) -> dict[str, str]:
        """Return short MLflow tags: the decision, the reasons, and each gated difference."""
        tags = {
            "champion_decision": self.decision,
            "promotion_reasons": " | ".join(self.reasons)[:_TAG_MAX],
        }
        for row in self.rows:
            if row.role != "report":
                tags[f"diff.{row.slice}.{row.metric}"] = _interval_text(row.difference)
        return tags


def _interval_text(interval: Interval) -> str:
    """Return a difference with its interval, or only its status (the tags' short form)."""
    return format_difference(interval.to_dict()) if interval.status == "ok" else interval.status


def check_paired(champion: FrameCounts, challenger: FrameCounts) -> None:
    """Refuse counts of different frames, classes or bands.

    Raises:
        PairingError: naming how many frames differ and an example.
    """
    if champion.classes != challenger.classes or champion.bands != challenger.bands:
        raise PairingError(
            f"classes/bands differ: champion {champion.classes} {champion.bands}, challenger "
            f"{challenger.classes} {challenger.bands}",
            "challenger counts",
            "evaluate both models with the same class groups and range bands",
        )
    if champion.keys != challenger.keys:
        only = sorted(set(champion.keys) ^ set(challenger.keys))
        raise PairingError(
            f"champion and challenger were evaluated on different frames ({len(only)} frames in "
            f"one only, e.g. {only[0] if only else 'order'!r})",
            "challenger counts",
            "evaluate both models on the same dataset split (a paired comparison needs the same "
            "frames)",
        )


def decide_promotion(
    champion: FrameCounts,
    challenger: FrameCounts,
    masks: dict[str, np.ndarray],
    config: PromotionConfig | None = None,
) -> PromotionDecision:
    """Compare challenger with champion on every slice and apply the promotion rule.

    Args:
        champion: per-frame counts of the current champion.
        challenger: per-frame counts of the new model on the same frames.
        masks: slice name -> (N,) bool (`slices.slice_masks`), "all" included.
        config: primary metric, gated slices, margins, bootstrap settings.

    Raises:
        PairingError: the counts are of different frames, classes or bands.
        EvaluationError: a gated or primary slice missing from `masks`, or a metric band the
            counts lack.
    """
    config = config or PromotionConfig()
    check_paired(champion, challenger)
    for name in (config.primary_slice, *config.gated_slices):
        if name not in masks:
            raise EvaluationError(
                f"slice {name!r} of the promotion config is not in the slice spec",
                "promotion config",
                f"declare it in the slice spec or gate on one of {list(masks)}",
            )
    for spec in (config.primary, config.gated_metric):
        if spec.band not in champion.bands:
            raise EvaluationError(
                f"band {spec.band!r} was not evaluated",
                "promotion config",
                f"use one of {list(champion.bands)}",
            )

    def row(slice_name: str, spec: MetricSpec, role: str, margin: float | None) -> SliceRow:
        a, b, d = paired_intervals(champion, challenger, masks[slice_name], spec, config.bootstrap)
        assert b is not None and d is not None  # a challenger was given
        return SliceRow(
            slice=slice_name,
            metric=spec.label,
            champion=a,
            challenger=b,
            difference=d,
            role=role,
            margin=margin,
            verdict=_verdict(d, role, margin),
        )

    rows = []
    for name in masks:
        for spec in dict.fromkeys((config.primary, config.gated_metric)):
            primary = spec == config.primary and name == config.primary_slice
            gated = spec == config.gated_metric and name in config.gated_slices
            role = "+".join(r for r, on in (("primary", primary), ("gated", gated)) if on)
            rows.append(
                row(name, spec, role or "report", config.margin_of(name) if gated else None)
            )
    reasons, decision = _apply_rule(rows, config.bootstrap.min_logs)
    bands = tuple(
        row(config.primary_slice, config.primary.model_copy(update={"band": b}), "report", None)
        for b in champion.bands
    )
    return PromotionDecision(
        promote=decision == "promoted:better",
        decision=decision,
        reasons=tuple(reasons),
        rows=tuple(rows),
        bands=bands,
        config=config.model_dump(mode="json"),
    )


#: The last reason of a decision that keeps the champion: what the user can do about it.
NEXT_STEP = {
    "kept:insufficient": (
        "what you can do: evaluate on a val split with at least {min_logs} logs in every gated "
        "slice (hold out more logs; more frames per log do not help) and register again, or "
        "read the table and promote explicitly with "
        "platform_lib.registry.register.promote_champion(name, version)"
    ),
    "kept:worse_on_slice": (
        "what you can do: fix the model on the slices named above, or, if that loss is "
        "acceptable, raise their margin (slice_margins) in the promotion config"
    ),
    "kept:not_better": (
        "what you can do: the difference is within noise; more val logs narrow the interval, "
        "or promote explicitly with platform_lib.registry.register.promote_champion(name, "
        "version) if a tie should move the champion"
    ),
}


def _verdict(d: Interval, role: str, margin: float | None) -> str:
    """Return a row's verdict: "" for report rows, else from its difference `d` and margin."""
    if role == "report":
        return ""
    if d.status != "ok":
        return d.status
    if "gated" in role and d.low is not None and margin is not None and d.low < -margin:
        return "worse"
    if "primary" in role and not (d.low is not None and d.low > 0):
        return "not_better"
    return "better" if "primary" in role else "ok"


def _reason(r: SliceRow, min_logs: int) -> str | None:
    """Return the sentence a gated or primary row adds to the decision's reasons, if any."""
    d, where = r.difference, f"slice {r.slice!r} {r.metric}"
    if r.verdict == "insufficient":
        return (
            f"{where}: insufficient, no interval ({logs_text(d.num_logs)}, "
            f"{d.num_frames} frames; an interval needs {min_logs} logs)"
        )
    if r.verdict == "undefined":
        return (
            f"{where}: undefined, no interval (the metric has no denominator on its "
            f"{d.num_frames} frames: no predicted or true cell)"
        )
    diff = f"{where}: challenger - champion {_interval_text(d)}"
    if r.verdict == "worse":
        return f"{diff} goes below -margin -{r.margin:g}"
    if r.verdict == "not_better":
        return f"{diff} does not exclude 0"
    return f"{diff} is above 0" if r.verdict == "better" else None


def _apply_rule(rows: list[SliceRow], min_logs: int) -> tuple[list[str], str]:
    """Return (reasons, decision) from the verdicts of the gated and primary rows.

    A decision that keeps the champion ends with `NEXT_STEP`'s sentence for it.
    """
    reasons = [text for r in rows if (text := _reason(r, min_logs)) is not None]
    verdicts = {r.verdict for r in rows}
    for decision, blocking in (
        ("kept:insufficient", {"insufficient", "undefined"}),
        ("kept:worse_on_slice", {"worse"}),
        ("kept:not_better", {"not_better"}),
    ):
        if verdicts & blocking:
            return [*reasons, NEXT_STEP[decision].format(min_logs=min_logs)], decision
    return reasons, "promoted:better"
