"""StepRecorder files, attempts and restarts; FLOP counting and peaks; baselines and flags."""

from __future__ import annotations

import json
import time

import pytest
import torch
from torch import nn

from platform_lib.telemetry.baseline import (
    MlflowBaselineStore,
    aggregate_baseline,
    compare_with_baseline,
    summarize_run,
    workload_of,
)
from platform_lib.telemetry.goodput import split_lost_steps
from platform_lib.telemetry.mfu import (
    count_flops_per_sample,
    measure_cpu_peak,
    register_peak,
    resolve_peak_flops,
)
from platform_lib.telemetry.recorder import StepRecorder
from platform_lib.telemetry.report import build_report
from platform_lib.telemetry.timeline import load_rank_file, load_timeline

CPU = torch.device("cpu")


def record_steps(recorder: StepRecorder, steps: range, *, checkpoint_at: int | None = None) -> None:
    for n in steps:
        recorder.begin_step(n)
        recorder.lap("input_wait", 0.01)
        recorder.lap("forward_backward")
        recorder.lap("optimizer")
        if n == checkpoint_at:
            recorder.record_checkpoint(n, 0.25, path=f"step-{n}")
        recorder.end_step(loss=1.0 / n)


def test_recorder_writes_steps_events_and_meta(tmp_path):
    recorder = StepRecorder(
        tmp_path,
        rank=1,
        world_size=2,
        device=CPU,
        batch_size=4,
        flush_interval=3,
        meta={"model": "m"},
        started=10.0,
    )
    record_steps(recorder, range(1, 6), checkpoint_at=4)
    recorder.close()
    steps, events, meta = load_rank_file(tmp_path / "rank-00001.jsonl")
    assert [s.step for s in steps] == [1, 2, 3, 4, 5]
    assert all(s.rank == 1 and s.attempt == 0 and s.samples == 4 for s in steps)
    assert [s.input_wait_s for s in steps] == [0.01] * 5
    assert [s.checkpoint_s for s in steps] == [0.0, 0.0, 0.0, 0.25, 0.0]
    assert steps[3].wall_s >= 0 and steps[4].start >= steps[3].start
    assert steps[0].peak_memory_bytes > 0 and steps[2].loss == pytest.approx(1 / 3)
    assert [e.kind for e in events] == ["process_start", "first_step", "checkpoint_save", "job_end"]
    assert events[0].time == 10.0 and events[2].step == 4 and events[2].duration_s == 0.25
    assert events[2].detail == {"path": "step-4"}
    assert meta == {"world_size": 2, "device_type": "cpu", "batch_size": 4, "model": "m"}
    assert recorder.overhead_s > 0


def test_a_restart_is_a_new_attempt_and_repeats_are_lost_work(tmp_path):
    # started 10 s ago, so the restore (recorded as the 0.5 s before now) lies inside the job
    first = StepRecorder(
        tmp_path,
        rank=0,
        world_size=1,
        device=CPU,
        batch_size=2,
        flush_interval=1,
        started=time.time() - 10,
    )
    record_steps(first, range(1, 8), checkpoint_at=4)
    # killed here: no close(); steps 5-7 happened after the checkpoint of step 4
    second = StepRecorder(tmp_path, rank=0, world_size=1, device=CPU, batch_size=2)
    assert second.attempt == 1
    second.record_restore(4, 0.5)
    record_steps(second, range(5, 9))
    second.close()
    timeline = load_timeline(tmp_path)
    kinds = [(e.kind, e.attempt) for e in timeline.events]
    assert ("restart", 1) in kinds and ("checkpoint_restore", 1) in kinds
    kept, lost = split_lost_steps(timeline.steps)
    assert [(s.step, s.attempt) for s in lost] == [(5, 0), (6, 0), (7, 0)]
    assert [s.step for s in kept] == list(range(1, 9))
    report = build_report(timeline, min_step_s=0.0)
    assert report["steps"]["lost"] == 3 and report["steps"]["kept"] == 8
    assert report["badput_s"]["lost_work"] == pytest.approx(
        sum(s.wall_s for s in lost), abs=1e-5
    )  # POSIX-time precision
    assert report["badput_s"]["checkpoint_restore"] == pytest.approx(0.5)


def test_a_torn_last_line_is_dropped_but_a_bad_line_inside_is_an_error(tmp_path):
    recorder = StepRecorder(
        tmp_path, rank=0, world_size=1, device=CPU, batch_size=2, flush_interval=1
    )
    record_steps(recorder, range(1, 3))
    path = tmp_path / "rank-00000.jsonl"
    with path.open("a") as f:
        f.write('{"type": "step", "step": 3, "ra')  # killed mid-write
    assert [s.step for s in load_rank_file(path)[0]] == [1, 2]
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "not json", *lines[1:2]]) + "\n")
    with pytest.raises(ValueError, match=r"rank-00000.jsonl:2"):
        load_rank_file(path)


def test_sink_gets_window_means_every_interval(tmp_path):
    pushed = []
    recorder = StepRecorder(
        tmp_path,
        rank=0,
        world_size=2,
        device=CPU,
        batch_size=4,
        sink=lambda step, metrics: pushed.append((step, metrics)),
        sink_interval=2,
    )
    record_steps(recorder, range(1, 6))
    recorder.close()
    assert [step for step, _ in pushed] == [2, 4, 5]
    assert set(pushed[0][1]) == {
        "telemetry/step_time_s",
        "telemetry/input_wait_fraction",
        "telemetry/samples_per_s",
        "telemetry/peak_memory_bytes",
    }
    assert pushed[0][1]["telemetry/samples_per_s"] == pytest.approx(
        8 / pushed[0][1]["telemetry/step_time_s"]
    )


def test_lap_outside_a_step_and_unknown_phase_fail(tmp_path):
    recorder = StepRecorder(tmp_path, rank=0, world_size=1, device=CPU, batch_size=1)
    with pytest.raises(RuntimeError, match="begin_step"):
        recorder.lap("optimizer")
    recorder.begin_step(1)
    with pytest.raises(KeyError):
        recorder.lap("backward_only")


def test_flop_counter_counts_a_linear_layer_exactly():
    layer = nn.Linear(64, 32)
    x = torch.randn(8, 64)

    def step() -> None:
        layer(x).sum().backward()

    # forward 2*B*in*out, backward: weight gradient 2*B*in*out (input needs no gradient)
    assert count_flops_per_sample(step, batch_size=8) == 4 * 64 * 32
    with pytest.raises(ValueError, match="batch_size"):
        count_flops_per_sample(step, batch_size=0)


def test_peaks_table_and_cpu_probe():
    probe = measure_cpu_peak(num_threads=1, size=128, repeats=2)
    assert probe["peak_flops"] > 1e6 and "torch.mm 128x128 float32, 1 thread(s)" in probe["method"]
    assert resolve_peak_flops(CPU)["device"] == "cpu"
    register_peak("TestGPU", 1e12)
    with pytest.raises(ValueError, match="> 0"):
        register_peak("Bad", 0.0)


def report_with(median: float, wait: float, ckpt: float, peak: int) -> dict:
    return {
        "steps": {"median_step_s": median, "checkpoint_s": ckpt * 2, "checkpoints": 2},
        "input": {"wait_fraction": wait},
        "throughput": {"mfu": 0.1},
        "memory": {"peak_bytes": peak},
        "goodput": {"compatible": 0.5, "input_adjusted": 0.4},
    }


def test_regression_flags_against_the_baseline():
    base = aggregate_baseline(
        [summarize_run(report_with(m, 0.02, 0.3, 1000)) for m in (0.19, 0.2, 0.21)]
    )
    assert base["median_step_s"] == pytest.approx(0.2) and base[
        "checkpoint_s_per_save"
    ] == pytest.approx(0.3)
    assert compare_with_baseline(summarize_run(report_with(0.21, 0.06, 0.315, 1050)), base) == {}
    flags = compare_with_baseline(summarize_run(report_with(0.2101, 0.0701, 0.316, 1051)), base)
    assert sorted(flags) == ["checkpoint", "input_wait", "peak_memory", "step_time"]
    assert flags["step_time"].startswith("0.2101 s vs baseline 0.2000 s (+5.0%")
    assert "+5.0 points" in flags["input_wait"]
    assert (
        compare_with_baseline(summarize_run(report_with(0.3, 0.02, 0.3, 1000)), base, tolerance=0.6)
        == {}
    )
    with pytest.raises(ValueError, match="tolerance"):
        compare_with_baseline({}, {}, tolerance=-0.1)


def test_workload_key_of_a_report():
    report = {
        "job": {
            "model": "bev_fusion_small",
            "world_size": 2,
            "device_type": "cpu",
            "device_name": "cpu",
            "precision": "bf16",
            "batch_size": 4,
        }
    }
    assert (
        workload_of(report, "0123456789abcdef").key()
        == "bev_fusion_small/0123456789ab/ws2/cpu/bf16/b4"
    )
    report["job"]["device_type"], report["job"]["device_name"] = "cuda", "NVIDIA H100 80GB HBM3"
    assert workload_of(report, "ff" * 32).key().split("/")[3] == "NVIDIA H100 80GB HBM3"
    with pytest.raises(ValueError, match="batch_size"):
        workload_of({"job": {**report["job"], "batch_size": None}}, "ab")


def test_mlflow_baseline_store_round_trip(tmp_path, mlflow_db):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_db(tmp_path / "mlflow.db"))
    store = MlflowBaselineStore(client)
    assert store.load("w/1") == []
    for run, median in enumerate((0.3, 0.2, 0.25)):
        store.add("w/1", summarize_run(report_with(median, 0.0, 0.1, 10)), source_run_id=f"r{run}")
    first = store.add("w/1", summarize_run(report_with(7.0, 0.0, 0.1, 10)), source_run_id="r0")
    store.add("w/2", summarize_run(report_with(9.0, 0.0, 0.1, 10)))
    loaded = store.load("w/1", max_runs=2)
    assert [s["median_step_s"] for s in loaded] == [0.25, 0.2]  # newest first, workloads apart
    assert first == store.add("w/1", {}, source_run_id="r0")  # a run is added once
    assert [s["median_step_s"] for s in store.load("w/1", exclude_run_id="r2")] == [0.2, 0.3]
    assert json.loads(json.dumps(loaded))  # plain floats
