"""Telemetry overhead, and the default pipeline's goodput with its fixed overheads.

Modes: `overhead` (the recorder's own time against step time), `pipeline` (the default
pipeline run in this process, every task timed from outside, with the goodput report and the
post-training tail), `agent` (the elastic agent's share of the tail); rows: bench/README.md.

Usage: python bench/telemetry.py overhead [--steps 40] [--work DIR]
       python bench/telemetry.py agent [--intervals 5 0.5] [--repeat 3]
       python bench/telemetry.py pipeline [--before] [--work DIR] [--json] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


def run_overhead(args: argparse.Namespace) -> dict:
    import torch

    from platform_lib.telemetry.recorder import StepRecorder
    from platform_lib.training.overrides import apply_overrides
    from platform_lib.training.presets import small
    from platform_lib.training.train import train
    from platform_lib.zoo.dataset import build_golden_dataset

    if args.work is None:  # a folder of our own: removed at the end
        with tempfile.TemporaryDirectory(prefix="drivetrain-bench-telemetry-") as work:
            args.work = work
            return run_overhead(args)
    work = Path(args.work)
    dataset = work / "dataset"
    if not (dataset / "manifest.json").is_file():
        build_golden_dataset(work)
    shutil.rmtree(work / "run", ignore_errors=True)
    cfg = apply_overrides(
        small(),
        {
            "optimizer.max_steps": args.steps,
            "checkpoint.interval": args.steps,
            "metrics.anomaly_min_step_s": 0.0,
        },
    )
    train(cfg, str(dataset), str(work / "run"))
    timeline = json.loads((work / "run" / "telemetry" / "timeline.json").read_text())
    steps = timeline["steps"]
    step_total = sum(s["wall_s"] for s in steps)
    median_step = statistics.median(s["wall_s"] for s in steps[1:])
    in_run = timeline["meta"]["recorder_overhead_s"]

    loops = 2000
    recorder = StepRecorder(
        work / "micro", rank=0, world_size=1, device=torch.device("cpu"), batch_size=2
    )
    start = time.perf_counter()
    for n in range(1, loops + 1):
        recorder.begin_step(n)
        recorder.lap("input_wait", 0.001)
        recorder.lap("forward_backward")
        recorder.lap("optimizer")
        recorder.end_step()
    recorder.close()
    per_step = (time.perf_counter() - start) / loops
    result = {
        "steps": len(steps),
        "median_step_s": median_step,
        "step_time_total_s": step_total,
        "recorder_overhead_in_run_s": in_run,
        "overhead_in_run_fraction": in_run / step_total,
        "recorder_us_per_step_tight_loop": per_step * 1e6,
        "tight_loop_fraction_of_median_step": per_step / median_step,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
    }
    print(
        f"small preset, {len(steps)} steps, median step {median_step * 1e3:.1f} ms "
        f"(load average {result['load_average']:.1f} on {result['cpus']} CPUs)"
    )
    print(
        f"  recorder time in the run: {in_run * 1e3:.2f} ms over {step_total:.2f} s of steps "
        f"= {result['overhead_in_run_fraction']:.4%} of step time (target < 1%)"
    )
    print(
        f"  recorder calls of one step, tight loop: {per_step * 1e6:.1f} us "
        f"= {result['tight_loop_fraction_of_median_step']:.4%} of the median step"
    )
    return result


def _worker_return_time() -> float:
    """Elastic worker of `run_agent`: returns at once (POSIX time of its return)."""
    return time.time()


def run_agent(args: argparse.Namespace) -> dict:
    import uuid

    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from platform_lib.training.launch import find_free_port

    rows = {}
    for interval in args.intervals:
        tails = []
        for _ in range(args.repeat):
            config = LaunchConfig(
                min_nodes=1,
                max_nodes=1,
                nproc_per_node=2,
                run_id=f"bench-{uuid.uuid4().hex[:6]}",
                rdzv_backend="c10d",
                rdzv_endpoint=f"127.0.0.1:{find_free_port()}",
                max_restarts=0,
                monitor_interval=interval,
                start_method="spawn",
            )
            returned = elastic_launch(config, _worker_return_time)()
            tails.append(time.time() - max(returned.values()))
        rows[interval] = tails
        print(
            f"monitor_interval {interval:>4} s: worker return -> launch return "
            + ", ".join(f"{t:.2f} s" for t in tails)
            + f" (load average {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    return rows


def _isolate(work: Path) -> None:
    for key in ("HOME", "TMPDIR", "DRIVETRAIN_HOME"):
        (work / key).mkdir(parents=True, exist_ok=True)
        os.environ[key] = str(work / key)
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    tempfile.tempdir = None


def run_pipeline(args: argparse.Namespace) -> dict:
    if args.repeat > 1:
        return _repeat_pipeline(args)
    if args.work is None:  # a folder of our own: removed at the end
        with tempfile.TemporaryDirectory(prefix="drivetrain-bench-pipeline-") as work:
            args.work = work
            return run_pipeline(args)
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    _isolate(work)
    if args.before:
        os.environ["DRIVETRAIN_ELASTIC_MONITOR_INTERVAL_S"] = "5"
    started = time.time()
    from platform_lib.telemetry.report import format_report
    from workflows.training_pipeline import training_pipeline

    imported = time.time()
    spans: dict[str, tuple[float, float]] = {}
    for node in training_pipeline.nodes:
        entity = node.flyte_entity
        name = entity.name.split(".")[-1]

        def timed(ctx, inputs, _run=entity.sandbox_execute, _name=name):
            t0 = time.time()
            try:
                return _run(ctx, inputs)
            finally:
                spans[_name] = (t0, time.time())

        entity.sandbox_execute = timed
    import tasks.register

    registered: dict = {}
    record = tasks.register.record_training_run

    def record_and_keep(**kwargs):
        registered.update(kwargs)
        return record(**kwargs)

    tasks.register.record_training_run = record_and_keep  # keeps its inputs for the cold run
    overrides = json.dumps({"metrics.mlflow_interval": 0}) if args.before else ""
    t0 = time.time()
    uri = training_pipeline(overrides=overrides)
    total = time.time() - t0
    cold = _cold_registration(registered)
    run_dir = next((work / "TMPDIR").glob("drivetrain-train-*/*"))
    report = json.loads((run_dir / "goodput.json").read_text())
    timeline = json.loads((run_dir / "telemetry" / "timeline.json").read_text())
    last_step_end = max(s["start"] + s["wall_s"] for s in timeline["steps"] if s["rank"] == 0)
    first_start = min(e["time"] for e in timeline["events"] if e["kind"] == "process_start")
    train_start, train_end = spans["train_model"]
    result = {
        "mode": "before" if args.before else "after",
        "model_uri": uri,
        "pipeline_s": total,
        "import_s": imported - started,
        "tasks_s": {k: b - a for k, (a, b) in sorted(spans.items(), key=lambda kv: kv[1][0])},
        "train_task_s": train_end - train_start,
        "elastic_start_s": first_start - train_start,
        "post_training_tail_s": train_end - last_step_end,
        "registration_s": spans["register_model"][1] - spans["register_model"][0],
        "registration_cold": cold,
        # in the registration task, before it registers (finish_goodput)
        "finish_goodput_s": json.loads((run_dir / "mlflow_run.json").read_text())[
            "finish_goodput_s"
        ],
        "steps_s": sum(s["wall_s"] for s in timeline["steps"] if s["rank"] == 0),
        "report": report,
    }
    result["task_goodput"] = report["productive_s"]["compatible"] / result["train_task_s"]
    if args.json:
        print(json.dumps(result, indent=1, sort_keys=True))
        return result
    print(
        f"default pipeline ({result['mode']} the fixed-overhead cuts): {total:.1f} s "
        f"(+ {result['import_s']:.1f} s importing the workflow); load average {os.getloadavg()[0]:.1f}"
    )
    for name, seconds in result["tasks_s"].items():
        print(f"  {name:<22}{seconds:8.2f} s")
    print(
        f"  train task: elastic start-up before the first worker {result['elastic_start_s']:.2f} s, "
        f"post-training tail {result['post_training_tail_s']:.2f} s (target < 1.5 s), "
        f"registration {result['registration_s']:.2f} s (target < 2 s)"
    )
    print(
        f"  registration in a fresh interpreter (as in its own pod): imports "
        f"{cold['import_s']:.2f} s + registration {cold['record_s']:.2f} s"
    )
    print(
        f"  of registration: finish_goodput {result['finish_goodput_s']:.2f} s "
        "(baseline, MLflow, plots; no longer in the post-training tail)"
    )
    print(f"  goodput over the train task's wall time: {result['task_goodput']:.1%}")
    print(format_report(report))
    return result


_COLD_REGISTRATION = """
import json, sys, time
t0 = time.perf_counter()
from platform_lib.evaluation.promotion import PromotionConfig
from platform_lib.registry.record import record_training_run
from platform_lib.training.config import TrainConfig
t1 = time.perf_counter()
kwargs = json.loads(sys.argv[1])
kwargs["config"] = TrainConfig.from_dict(kwargs["config"])
if "promotion" in kwargs:
    kwargs["promotion"] = PromotionConfig.model_validate(kwargs["promotion"])
record_training_run(**kwargs)
print(json.dumps({"import_s": t1 - t0, "record_s": time.perf_counter() - t1}))
"""


def _cold_registration(kwargs: dict) -> dict:
    """Register the same run again in a fresh interpreter: (imports, registration) seconds.

    In the pipeline, registration runs in the process that already imported MLflow's store
    (locally every task shares one process); on a cluster it is a pod of its own.
    """
    import subprocess

    args = {k: str(v) if isinstance(v, Path) else v for k, v in kwargs.items()}
    args["config"] = kwargs["config"].to_dict()
    if "promotion" in kwargs:
        args["promotion"] = kwargs["promotion"].model_dump(mode="json")
    out = subprocess.run(
        [sys.executable, "-c", _COLD_REGISTRATION, json.dumps(args)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def _repeat_pipeline(args: argparse.Namespace) -> dict:
    """Run `pipeline` `args.repeat` times, each in a fresh interpreter (cold imports, like a pod)."""
    import subprocess

    runs = []
    for n in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="drivetrain-bench-pipeline-") as work:
            cmd = [sys.executable, __file__, "pipeline", "--json", "--work", work]
            cmd += ["--before"] if args.before else []
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out[out.index("\n{\n") :]))
        r = runs[-1]
        print(
            f"run {n + 1}/{args.repeat} ({r['mode']}): pipeline {r['pipeline_s']:.1f} s, train task "
            f"{r['train_task_s']:.1f} s, post-training tail {r['post_training_tail_s']:.2f} s, "
            f"registration {r['registration_s']:.2f} s (fresh interpreter: "
            f"{r['registration_cold']['import_s']:.2f} s imports + "
            f"{r['registration_cold']['record_s']:.2f} s), load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    summary = {}
    for r in runs:
        r["program_startup_s"] = r["report"]["badput_s"]["program_startup"]
        r["goodput_compatible"] = r["report"]["goodput"]["compatible"]
    for key in (
        "pipeline_s",
        "train_task_s",
        "elastic_start_s",
        "program_startup_s",
        "post_training_tail_s",
        "finish_goodput_s",
        "registration_s",
        "task_goodput",
        "goodput_compatible",
    ):
        values = sorted(r[key] for r in runs)
        summary[key] = {"min": values[0], "median": statistics.median(values), "max": values[-1]}
        print(
            f"  {key:<22} min {values[0]:7.3f}  median {statistics.median(values):7.3f}  "
            f"max {values[-1]:7.3f}"
        )
    return {"runs": runs, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode")
    over = sub.add_parser("overhead")
    over.add_argument("--steps", type=int, default=40)
    over.add_argument("--work")
    pipe = sub.add_parser("pipeline")
    pipe.add_argument(
        "--before", action="store_true", help="monitor interval 5 s, no MLflow stream"
    )
    pipe.add_argument("--work")
    pipe.add_argument("--json", action="store_true")
    pipe.add_argument(
        "--repeat", type=int, default=1, help="runs, each in a fresh interpreter (min/median/max)"
    )
    agent = sub.add_parser("agent")
    agent.add_argument("--intervals", type=float, nargs="+", default=[5.0, 0.5])
    agent.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    if args.mode == "pipeline":
        run_pipeline(args)
    elif args.mode == "agent":
        run_agent(args)
    else:
        if args.mode is None:
            args = over.parse_args([])
        run_overhead(args)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # workflows/ of this checkout
    sys.exit(main())
