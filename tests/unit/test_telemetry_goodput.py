"""Goodput, badput, windows, anomalies and stragglers on synthetic step timelines with known
figures (the main timeline is drawn in tests/support/timelines.py)."""

from __future__ import annotations

import pytest

from platform_lib.telemetry.anomaly import (
    compute_ideal_step_time,
    find_step_anomalies,
    score_stragglers,
)
from platform_lib.telemetry.goodput import (
    build_segments,
    goodput_figures,
    input_verdict,
    split_lost_steps,
    summarize_segments,
    window_breakdown,
)
from platform_lib.telemetry.report import build_report, format_report
from platform_lib.telemetry.timeline import Event, StepRecord, Timeline
from tests.support.timelines import restart_timeline, step


def test_restart_loses_the_steps_after_the_restored_checkpoint():
    kept, lost = split_lost_steps(restart_timeline().steps)
    assert [(s.step, s.attempt) for s in kept] == [
        (1, 0),
        (2, 0),
        (3, 0),
        (4, 0),
        (5, 1),
        (6, 1),
        (7, 1),
        (8, 1),
    ]
    assert [(s.step, s.attempt) for s in lost] == [(5, 0), (6, 0)]


def test_badput_categories_are_exact():
    segments, start, end = build_segments(restart_timeline())
    assert (start, end) == (95.0, 131.0)
    totals = summarize_segments(segments, start, end)
    expected = {
        "wall": 36.0,
        "queue": 5.0,
        "program_startup": 4.0 + 3.0,
        "checkpoint_restore": 1.0,
        "recovery": 120.0 - 114.5,
        "lost_work": 3.0 + 1.0,
        # first step's compute minus the attempt's mean compute of the other steps
        "training_prep": (2.0 - (0.75 * 4 + 2.75) / 5) + (1.5 - 0.75),
        "data_loading_first_load": 1.0 + 0.5,
        "data_loading_input_wait": 0.25 * 6,
        "checkpoint_save": 0.5 + 0.5,
        "evaluation": 0.5,
        "post_training": 131.0 - 129.5 - 0.5,
        "productive": (2.0 - 0.85) + 0.75 * 3 + (1.5 - 0.75) + 0.75 * 3,
        "unaccounted": 0.0,
    }
    assert totals == pytest.approx(expected, abs=1e-9)
    figures = goodput_figures(totals)
    assert figures["compatible"] == pytest.approx((6.4 + 1.5) / 36.0, abs=1e-12)
    assert figures["input_adjusted"] == pytest.approx(6.4 / 36.0, abs=1e-12)


def test_gaps_between_records_are_unaccounted():
    timeline = Timeline(
        steps=[step(1, 10.0, 1.0), step(2, 11.5, 1.0), step(3, 12.5, 1.0)],
        events=[Event(kind="process_start", time=8.0), Event(kind="job_end", time=14.0)],
    )
    totals = summarize_segments(*build_segments(timeline))
    assert totals["unaccounted"] == pytest.approx(0.5)  # 11.0 -> 11.5
    assert totals["program_startup"] == pytest.approx(2.0)
    assert totals["post_training"] == pytest.approx(0.5)
    assert totals["training_prep"] == pytest.approx(0.0)  # first step no slower than the rest


def test_rolling_windows_sum_the_same_segments():
    segments, start, end = build_segments(restart_timeline())
    windows = window_breakdown(segments, start, end, window_s=3.0)
    assert len(windows) == 12
    assert windows[0] == pytest.approx(
        {
            "start_s": 0.0,
            "end_s": 3.0,
            "goodput_compatible": 0.0,
            "goodput_input_adjusted": 0.0,
            "input_wait_share": 0.0,
        }
    )
    # 104-107: step 1 only: 1.15 s productive
    assert windows[3]["goodput_compatible"] == pytest.approx(1.15 / 3.0)
    # 107-110: steps 2-4 before the checkpoint: 3 x 0.75 compute + 3 x 0.25 steady wait
    assert windows[4]["goodput_compatible"] == pytest.approx(1.0)
    assert windows[4]["goodput_input_adjusted"] == pytest.approx(0.75)
    assert windows[4]["input_wait_share"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="window_s"):
        window_breakdown(segments, start, end, window_s=0.0)


def test_input_verdict_thresholds():
    assert input_verdict(0.0499) == "not input-bound"
    assert input_verdict(0.05) == "input-limited"
    assert input_verdict(0.1999) == "input-limited"
    assert input_verdict(0.20) == "input-bound"


def test_ideal_step_time_follows_ml_goodput_measurement():
    times = [1.0, 1.1, 0.9, 1.0, 1.2, 5.0, 0.5]
    # >= 1 s: [1.0, 1.1, 1.0, 1.2, 5.0]; median 1.1, |dev| = [0.1, 0, 0.1, 0.1, 3.9] -> MAD 0.1
    # threshold 1.4 -> normal [1.0, 1.1, 1.0, 1.2] -> mean 1.075
    assert compute_ideal_step_time(times) == pytest.approx(1.075)
    assert compute_ideal_step_time([0.2, 0.3]) is None
    assert compute_ideal_step_time([0.2, 0.3, 0.2], min_step_s=0.1) == pytest.approx(0.2)


def test_slow_step_is_an_anomaly_with_its_cause():
    steps = [step(n, float(n), 0.2, wait=0.02) for n in range(1, 11)]
    steps[6] = step(7, 7.0, 0.6, wait=0.02)  # slow compute
    steps[8] = step(9, 9.0, 0.2 + 0.3, wait=0.32)  # input stall
    result = find_step_anomalies(steps, min_step_s=0.1)
    assert result["median_step_s"] == pytest.approx(0.2)
    assert result["mad_s"] == pytest.approx(0.0)
    assert result["ideal_step_s"] == pytest.approx(0.2)
    assert [(a["step"], a["cause"]) for a in result["anomalies"]] == [(7, "compute"), (9, "input")]
    assert [a["extra_s"] for a in result["anomalies"]] == pytest.approx([0.4, 0.3])
    assert result["extra_s"] == pytest.approx(0.7)
    # the 1 s minimum of ml-goodput-measurement leaves CPU-sized steps out entirely
    assert find_step_anomalies(steps)["ideal_step_s"] is None


def test_straggler_scores():
    scores = score_stragglers({0: 0.2, 1: 0.21, 2: 0.35})
    assert scores[0] == {"median_step_s": 0.2, "score": 1.0, "straggler": False}
    assert scores[1]["score"] == pytest.approx(0.2 / 0.21) and not scores[1]["straggler"]
    assert scores[2]["score"] == pytest.approx(0.2 / 0.35) and scores[2]["straggler"]
    assert not score_stragglers({0: 0.2, 1: 0.28}, threshold=0.7)[1]["straggler"]  # 0.714
    with pytest.raises(ValueError, match="> 0"):
        score_stragglers({0: 0.0})


def test_report_flags_a_straggling_rank_and_checkpoint_anomalies():
    fast = restart_timeline(rank=0)
    slow_steps = [
        StepRecord(**{**s.__dict__, "rank": 1, "wall_s": s.wall_s * 1.6}) for s in fast.steps
    ]
    timeline = Timeline(
        steps=fast.steps + slow_steps,
        events=fast.events,
        meta={
            "world_size": 2,
            "device_type": "cpu",
            "flops_per_sample": 1e6,
            "peak_flops": 1e9,
            "peak_method": "test",
        },
    )
    report = build_report(timeline, min_step_s=0.0)
    assert report["job"]["wall_s"] == pytest.approx(36.0)
    assert report["job"]["accelerator_hours"] == pytest.approx(36.0 * 2 / 3600)
    assert report["badput_accelerator_hours"]["lost_work"] == pytest.approx(4.0 * 2 / 3600)
    assert report["stragglers"] == [1]
    assert report["ranks"]["1"]["straggler_score"] == pytest.approx(1 / 1.6)
    assert report["steps"] == {
        "kept": 8,
        "lost": 2,
        "median_step_s": 1.0,
        "mean_step_s": pytest.approx(7.0 / 6),
        "checkpoint_s": 1.0,
        "checkpoints": 2,
    }
    # steady kept steps of rank 0: 1.0, 1.0, 1.5, 1.0, 1.0, 1.5 -> median 1.0, MAD 0: both checkpoints flagged
    anomalies = report["anomalies"]
    assert [(a["step"], a["cause"]) for a in anomalies["anomalies"]] == [
        (4, "checkpoint"),
        (8, "checkpoint"),
    ]
    assert report["input"]["wait_fraction"] == pytest.approx(1.5 / 7.0)
    assert report["input"]["verdict"] == "input-bound"
    # throughput: 6 steady steps x 4 samples per rank over their wall time, both ranks
    rank0 = 24 / 7.0
    rank1 = 24 / (7.0 * 1.6)
    assert report["throughput"]["samples_per_s"] == pytest.approx(rank0 + rank1)
    assert report["throughput"]["mfu"] == pytest.approx(1e6 * (rank0 + rank1) / (2 * 1e9))
    assert report["memory"]["peak_bytes"] == 1008
    text = format_report(report)
    assert "rank 1" in text and "STRAGGLER" in text and "lost_work" in text


def test_report_of_an_empty_rank_is_an_error():
    with pytest.raises(ValueError, match="rank 0 recorded no telemetry"):
        build_report(Timeline(steps=[step(1, 0.0, 1.0, rank=3)]))
