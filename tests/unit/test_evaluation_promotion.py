"""The paired champion-vs-challenger rule: better, worse on one slice, within noise, unpaired."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from platform_lib.errors import UserError
from platform_lib.evaluation.errors import PairingError
from platform_lib.evaluation.metrics import FrameCounts
from platform_lib.evaluation.plots import render_promotion_plots
from platform_lib.evaluation.promotion import (
    PromotionConfig,
    decide_promotion,
    parse_promotion_config,
)

LOGS, FRAMES = 20, 5
CONFIG = PromotionConfig(gated_slices=("all", "first-half"), margin=0.02)


def _pair(delta_per_log: np.ndarray, seed: int = 0) -> tuple[FrameCounts, FrameCounts]:
    """Champion with per-log IoU around 0.5; challenger with IoU + delta_per_log[log] there."""
    rng = np.random.default_rng(seed)
    p = np.repeat(rng.uniform(0.35, 0.65, size=delta_per_log.size), FRAMES)
    shift = np.repeat(delta_per_log, FRAMES)
    union = rng.integers(200, 400, size=p.size)
    keys = tuple(f"log-{i // FRAMES:03d}_{i % FRAMES:06d}" for i in range(p.size))
    out = []
    for d in (0.0, 1.0):
        tp = rng.binomial(union, p + d * shift)
        fp = rng.binomial(union - tp, 0.5)
        counts = np.stack([tp, fp, union - tp - fp], axis=-1)  # (N, 3)
        both_bands = np.stack([counts, counts // 2], axis=1)[:, None]  # (N, 1, 2, 3)
        out.append(FrameCounts(keys, ("vehicle",), ("all", "0-20m"), both_bands))
    return out[0], out[1]


def _masks(n_logs: int = LOGS) -> dict[str, np.ndarray]:
    first = np.arange(n_logs * FRAMES) < (n_logs // 2) * FRAMES
    return {"all": np.ones(n_logs * FRAMES, dtype=bool), "first-half": first}


def test_better_everywhere_is_promoted() -> None:
    champion, challenger = _pair(np.full(LOGS, 0.05))
    decision = decide_promotion(champion, challenger, _masks(), CONFIG)
    assert decision.promote and decision.decision == "promoted:better"
    primary = next(r for r in decision.rows if "primary" in r.role)
    assert primary.slice == "all" and primary.verdict == "better"
    assert primary.difference.low > 0 and primary.difference.estimate == pytest.approx(
        0.05, abs=0.01
    )
    assert [r.verdict for r in decision.rows] == ["better", "ok"]


def test_worse_on_one_gated_slice_is_kept_and_names_the_slice() -> None:
    deltas = np.where(np.arange(LOGS) < LOGS // 2, -0.05, 0.12)  # better overall, worse on half
    champion, challenger = _pair(deltas)
    decision = decide_promotion(champion, challenger, _masks(), CONFIG)
    assert not decision.promote and decision.decision == "kept:worse_on_slice"
    half = next(r for r in decision.rows if r.slice == "first-half")
    assert half.verdict == "worse" and half.difference.low < -0.02
    assert any("'first-half'" in reason and "-margin" in reason for reason in decision.reasons)
    assert decision.to_tags()["champion_decision"] == "kept:worse_on_slice"


def test_within_noise_is_not_better() -> None:
    champion, challenger = _pair(np.zeros(LOGS))
    decision = decide_promotion(champion, challenger, _masks(), CONFIG)
    assert not decision.promote and decision.decision == "kept:not_better"
    primary = next(r for r in decision.rows if "primary" in r.role)
    assert primary.difference.low <= 0 <= primary.difference.high


def test_too_few_logs_keeps_the_champion_as_insufficient() -> None:
    champion, challenger = _pair(np.full(4, 0.2))
    decision = decide_promotion(champion, challenger, _masks(4), CONFIG)
    assert decision.decision == "kept:insufficient" and not decision.promote
    assert all(r.difference.low is None for r in decision.rows)


def test_different_val_sets_are_refused() -> None:
    champion, challenger = _pair(np.full(LOGS, 0.05))
    other = FrameCounts(
        tuple(k.replace("log-000", "log-999") for k in challenger.keys),
        challenger.classes,
        challenger.bands,
        challenger.counts,
    )
    with pytest.raises(PairingError, match="different frames .*5 frames in one only|same frames"):
        decide_promotion(champion, other, _masks(), CONFIG)


def test_decision_is_deterministic_and_plain_data(tmp_path: Path) -> None:
    champion, challenger = _pair(np.full(LOGS, 0.03), seed=4)
    first = decide_promotion(champion, challenger, _masks(), CONFIG).to_dict()
    second = decide_promotion(champion, challenger, _masks(), CONFIG).to_dict()
    assert first == second
    assert json.loads(json.dumps(first)) == first
    assert [b["metric"] for b in first["bands"]] == ["iou/mean/all", "iou/mean/0-20m"]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"margin": 1.5}, "margin"),
        ({"margin": -0.1}, "margin"),
        ({"gated_slices": ["all", "night"], "slice_margins": {"night": 2}}, "slice_margins.night"),
        ({"slice_margins": {"night": 0.1}}, "not gated"),
        ({"primary": {"metric": "f1"}}, "primary.metric"),
        ({"primery": {}}, "unknown attribute 'primery'"),
    ],
)
def test_bad_promotion_configs_name_the_field(data: dict, field: str) -> None:
    with pytest.raises(UserError, match=field):
        parse_promotion_config(data)


def test_gated_slice_missing_from_the_spec_is_refused() -> None:
    champion, challenger = _pair(np.full(LOGS, 0.05))
    config = PromotionConfig(gated_slices=("all", "night"))
    with pytest.raises(UserError, match="slice 'night' of the promotion config"):
        decide_promotion(champion, challenger, _masks(), config)


def test_plots_are_written_as_png(tmp_path: Path) -> None:
    champion, challenger = _pair(np.full(LOGS, 0.05))
    decision = decide_promotion(champion, challenger, _masks(), CONFIG)
    paths = render_promotion_plots(decision, tmp_path / "plots")
    assert [p.name for p in paths] == ["metric_by_range_band.png", "slice_differences.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    assert sorted(x.name for x in (tmp_path / "plots").iterdir()) == sorted(p.name for p in paths)


def test_the_promotion_rule_is_a_json_object_of_its_fields():
    from platform_lib.errors import UserError
    from platform_lib.registry.gate import DEFAULT_PROMOTION, parse_promotion

    assert parse_promotion("") is DEFAULT_PROMOTION
    rule = parse_promotion('{"margin": 0.05, "gated_slices": ["all", "moving"]}')
    assert rule.margin == 0.05 and rule.gated_slices == ("all", "moving")
    for bad in ('{"margin": -0.1}', '{"margin": 1.5}', '{"nope": 1}', "[]", "{"):
        with pytest.raises(UserError) as info:
            parse_promotion(bad)
        assert "promotion" in str(info.value) and "\n" not in str(info.value)
