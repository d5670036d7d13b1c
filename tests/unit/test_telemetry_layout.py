"""Telemetry per layout: the pipeline bubble as badput, FLOPs per rank under TP/PP, the layout in
the workload key; flat-FSDP reports byte-identical to the ones before layouts.

`golden/goodput_flat_fsdp.{json,txt}` were written by the code before layouts (main at acf5950)
from `_timeline()` below; the timeline is the one drawn in tests/support/timelines.py, on 2 ranks.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from platform_lib.cli import main
from platform_lib.telemetry.baseline import workload_of
from platform_lib.telemetry.goodput import (
    BADPUT_CATEGORIES,
    PIPELINE_BUBBLE,
    build_segments,
    pipeline_bubble_fraction,
    summarize_segments,
)
from platform_lib.telemetry.publish import TIMELINE_JSON, write_run_report
from platform_lib.telemetry.report import build_report, format_report
from platform_lib.telemetry.timeline import Timeline, load_rank_file
from platform_lib.training.config import ParallelConfig, replace
from platform_lib.training.distributed import DistContext
from platform_lib.training.layout import resolve_layout
from platform_lib.training.observe import build_recorder, layout_meta
from platform_lib.training.presets import small
from tests.support.timelines import restart_timeline

GOLDEN = Path(__file__).parent / "golden"
PIPELINED = {
    "pp": 2,
    "dp_replicate": 1,
    "dp_shard": 1,
    "tp": 2,
    "pp_schedule": "1F1B",
    "pp_microbatches": 4,
    "stages_per_rank": 1,
}


def _timeline(layout: dict | None = None, world_size: int = 2) -> Timeline:
    parts = [restart_timeline(rank) for rank in range(world_size)]
    meta = {
        "world_size": world_size,
        "device_type": "cpu",
        "device_name": "cpu",
        "model": "bev_fusion_small",
        "precision": "fp32",
        "preset": "small",
        "batch_size": 4,
        "flops_per_sample": 2.5e9,
        "peak_flops": 1e11,
        "peak_method": "matmul probe",
    }
    if layout:
        meta["layout"] = layout
    return Timeline(
        steps=[s for p in parts for s in p.steps],
        events=[e for p in parts for e in p.events],
        meta=meta,
    )


def test_flat_fsdp_reports_are_byte_identical_to_the_ones_before_layouts() -> None:
    report = build_report(_timeline())
    assert json.dumps(report, indent=1) + "\n" == (GOLDEN / "goodput_flat_fsdp.json").read_text()
    text = format_report(report) + "\n" + workload_of(report, "ab" * 32).key() + "\n"
    assert text == (GOLDEN / "goodput_flat_fsdp.txt").read_text()
    assert PIPELINE_BUBBLE not in report["badput_s"] and "layout" not in report["job"]


def test_bubble_follows_the_schedules_formula() -> None:
    assert pipeline_bubble_fraction(2, 4) == pytest.approx(1 / 5)  # (p-1)/(m+p-1)
    assert pipeline_bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert pipeline_bubble_fraction(4, 8, stages_per_rank=2) == pytest.approx(3 / 19)
    assert pipeline_bubble_fraction(1, 4) == 0.0
    with pytest.raises(ValueError, match="microbatches"):
        pipeline_bubble_fraction(2, 0)


def test_the_pipeline_bubble_is_its_own_badput_category() -> None:
    flat = summarize_segments(*build_segments(_timeline().for_rank(0)))
    piped = summarize_segments(*build_segments(_timeline(PIPELINED).for_rank(0)))
    # forward + backward of the kept steps (tests/support/timelines.py): 2.0 + 0.75 x 3 in
    # attempt 0, 1.5 + 0.75 x 3 in attempt 1; 1F1B over 2 stages, 4 microbatches: 1/5 of it idle
    fwd = (2.0 + 0.75 * 3) + (1.5 + 0.75 * 3)
    assert piped[PIPELINE_BUBBLE] == pytest.approx(fwd / 5)
    assert piped["productive"] == pytest.approx(flat["productive"] - fwd / 5)
    assert piped["unaccounted"] == pytest.approx(flat["unaccounted"])
    report = build_report(_timeline(PIPELINED))
    assert list(report["badput_s"]) == [
        *BADPUT_CATEGORIES[:6],
        PIPELINE_BUBBLE,
        *BADPUT_CATEGORIES[6:],
    ]
    assert report["badput_s"][PIPELINE_BUBBLE] == pytest.approx(fwd / 5)
    assert report["goodput"]["input_adjusted"] == pytest.approx(piped["productive"] / 36.0)
    text = format_report(report)
    assert (
        "layout pp=2 x dp_replicate=1 x dp_shard=1 x tp=2, 1F1B, 4 microbatches"
        in text.splitlines()[0]
    )
    assert any(line.startswith("pipeline_bubble ") for line in text.splitlines())


def test_mfu_counts_the_flops_of_each_rank_of_a_tp_and_pp_group() -> None:
    flat = build_report(_timeline(world_size=4))["throughput"]
    piped = build_report(_timeline(PIPELINED, world_size=4))["throughput"]
    # the 4 ranks are one TP x PP group: they share each sample the group records
    assert piped["samples_per_s"] == pytest.approx(flat["samples_per_s"] / 4)
    assert piped["flops_per_sample_per_rank"] == pytest.approx(2.5e9 / 4)
    assert piped["mfu"] == pytest.approx(flat["mfu"] / 4)
    rank_rate = build_report(_timeline(PIPELINED, world_size=4))["ranks"]["0"]["samples_per_s"]
    assert piped["achieved_flops_per_device"] == pytest.approx(rank_rate * 2.5e9 / 4)


def test_the_workload_key_names_the_layout() -> None:
    report = build_report(_timeline(PIPELINED))
    assert workload_of(report, "ab" * 32).key() == (
        "bev_fusion_small/abababababab/ws2/cpu/fp32/b4/pp2-dpr1-dps1-tp2-1F1B-m4"
    )
    hsdp = {**PIPELINED, "pp": 1, "tp": 1, "dp_replicate": 2}
    assert (
        workload_of(build_report(_timeline(hsdp)), "ab" * 32)
        .key()
        .endswith("/b4/pp1-dpr2-dps1-tp1")
    )


def test_the_recorder_writes_the_layout_of_the_run(tmp_path: Path) -> None:
    cfg = small()
    ctx = DistContext(
        rank=0,
        local_rank=0,
        world_size=4,
        backend="gloo",
        device=torch.device("cpu"),
        owns_group=False,
    )
    flat = build_recorder(cfg, ctx, tmp_path / "flat")
    flat.close()
    assert "layout" not in load_rank_file(flat.path)[2]
    piped_cfg = replace(cfg, parallel=replace(cfg.parallel, pp=2, tp=2))
    piped = build_recorder(piped_cfg, ctx, tmp_path / "piped")
    piped.close()
    assert load_rank_file(piped.path)[2]["layout"] == {**PIPELINED, "pp_microbatches": 2}
    interleaved = ParallelConfig(pp=2, pp_schedule="Interleaved1F1B")
    assert layout_meta(resolve_layout(interleaved, 4, 4))["stages_per_rank"] == 2
    assert layout_meta(resolve_layout(ParallelConfig(), 4, 4)) is None


def test_a_pipelined_run_folder_reports_its_bubble_and_a_corrupt_layout_fails_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`drivetrain goodput` over a real run folder (timeline.json, then rank files), corrupted."""
    timeline = _timeline(PIPELINED)
    run = tmp_path / "run"
    write_run_report(run, timeline, build_report(timeline), html=False)
    (run / "goodput.json").unlink()  # recompute from the records
    assert main(["goodput", str(run), "--html", str(tmp_path / "page.html")]) == 0
    assert "pipeline_bubble " in capsys.readouterr().out
    assert "pipeline_bubble" in (tmp_path / "page.html").read_text()
    gathered = json.loads((run / TIMELINE_JSON).read_text())
    bad_layouts = ({**PIPELINED, "pp": "2"}, {**PIPELINED, "pp_schedule": "GPipe"}, [2])
    for bad in bad_layouts:
        gathered["meta"]["layout"] = bad
        (run / TIMELINE_JSON).write_text(json.dumps(gathered))
        assert main(["goodput", str(run)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "meta layout" in err
    (run / TIMELINE_JSON).unlink()
    rank_file = run / "telemetry" / "rank-00000.jsonl"
    records = [{"type": "step", **dataclasses.asdict(s)} for s in timeline.for_rank(0).steps]
    records += [{"type": "event", **dataclasses.asdict(e)} for e in timeline.for_rank(0).events]
    for bad in bad_layouts:
        meta = {"type": "meta", **timeline.meta, "layout": bad}
        rank_file.write_text("".join(json.dumps(r) + "\n" for r in [meta, *records]))
        assert main(["goodput", str(run)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "rank-00000.jsonl:1: not a telemetry record" in err
        assert "meta layout" in err
