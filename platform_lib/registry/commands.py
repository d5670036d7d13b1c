"""`drivetrain goodput` and `drivetrain zoo check`: goodput reports and the model-zoo gate.

drivetrain goodput RUN [--json] [--html FILE]
    RUN is a training run folder (holds telemetry/) or an MLflow run id (its goodput/
    artifacts). Prints the report (docs/goodput.md); --json prints the whole record.
drivetrain zoo check [--preset NAME ...] [--write] [--strict] [--json]
    Trains each CPU preset a few steps on a fixed synthetic dataset, compares the losses
    with the golden files and the median step time with the workload's baseline (MLflow
    store); exit 1 on a loss mismatch (and with --strict on a step-time regression).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from platform_lib.redact import redact

__all__ = ["add_goodput_commands", "add_zoo_commands"]


_RUN_ID = re.compile(r"[0-9a-f]{32}")


def _load(run: str) -> tuple[Any, dict[str, Any] | None]:
    """Return (timeline, stored report) of a run folder or an MLflow run id.

    Raises:
        FileNotFoundError: `run` is neither (or holds no telemetry); the message says which.
    """
    from platform_lib.telemetry.publish import load_run_telemetry

    if Path(run).is_dir():
        return load_run_telemetry(run)
    if not _RUN_ID.fullmatch(run):
        raise FileNotFoundError("not a folder, and not an MLflow run id (32 hex digits)")
    from mlflow.exceptions import MlflowException

    from platform_lib.registry.goodput import load_goodput_from_mlflow

    try:
        return load_goodput_from_mlflow(run)
    except MlflowException as exc:
        raise FileNotFoundError(f"MLflow: {exc.message}") from exc


def _run_goodput(args: argparse.Namespace) -> int:
    from platform_lib.telemetry.report import build_report, format_report

    try:
        timeline, report = _load(args.run)
    except (FileNotFoundError, ValueError) as exc:
        print(redact(f"error: no goodput report for {args.run!r}: {exc}"), file=sys.stderr)
        return 2
    if report is None or args.min_step_s is not None:  # rank files only, or other settings
        baseline = (report or {}).get("baseline")
        report = build_report(
            timeline, **({} if args.min_step_s is None else {"min_step_s": args.min_step_s})
        )
        report["baseline"] = baseline
    if args.html:
        from platform_lib.telemetry.deck import render_deck_html
        from platform_lib.telemetry.publish import read_metrics_rows

        rows = read_metrics_rows(args.run) if Path(args.run).is_dir() else []
        Path(args.html).write_text(render_deck_html(timeline, report, rows), encoding="utf-8")
    print(json.dumps(report, indent=1, sort_keys=True) if args.json else format_report(report))
    return 0


def add_goodput_commands(groups: argparse._SubParsersAction) -> None:
    """Add `goodput RUN` to the `drivetrain` subparsers."""
    parser = groups.add_parser("goodput", help="where a training run's accelerator-hours went")
    parser.add_argument("run", help="training run folder (with telemetry/) or MLflow run id")
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON")
    parser.add_argument(
        "--html", metavar="FILE", help="also write the plots page (the Flyte Deck) to FILE"
    )
    parser.add_argument(
        "--min-step-s",
        type=float,
        default=None,
        help="recompute with this anomaly minimum step time, in s",
    )
    parser.set_defaults(func=_run_goodput)


def _run_zoo_check(args: argparse.Namespace) -> int:
    from platform_lib.registry.goodput import compare_with_workload_baseline
    from platform_lib.shards.manifest import load_manifest
    from platform_lib.telemetry.baseline import workload_of
    from platform_lib.training.golden import build_golden_dataset
    from platform_lib.training.zoo import CPU_PRESETS, check_zoo_preset

    failed = 0
    results = []
    with tempfile.TemporaryDirectory(prefix="drivetrain-zoo-") as tmp:
        dataset = build_golden_dataset(tmp)
        for preset in args.preset or CPU_PRESETS:
            result = check_zoo_preset(preset, dataset, Path(tmp) / "runs", write=args.write)
            baseline = compare_with_workload_baseline(
                result["report"],
                workload_of(result["report"], load_manifest(dataset).dataset_hash),
                tolerance=args.tolerance,
                source_run_id=f"zoo:{preset}",
            )
            slow = "step_time" in baseline["flags"]
            ok = result["loss_ok"] and not (args.strict and slow)
            failed += not ok
            results.append(
                {k: v for k, v in result.items() if k != "report"}
                | {"baseline": baseline, "ok": ok}
            )
            if not args.json:
                base = baseline["baseline"].get("median_step_s")
                print(
                    f"{preset:<18} losses {'match' if result['loss_ok'] else 'DIFFER'} "
                    f"(max rel. error {result['max_rel_error']:.2e}, rtol {result['rtol']:g}); "
                    f"median step {result['median_step_s']:.4f} s, baseline "
                    f"{'none yet' if base is None else f'{base:.4f} s'}"
                    f"{'; ' + baseline['flags']['step_time'] if slow else ''}"
                )
    if args.json:
        print(json.dumps(results, indent=1, sort_keys=True))
    return 1 if failed else 0


def add_zoo_commands(groups: argparse._SubParsersAction) -> None:
    """Add `zoo check` to the `drivetrain` subparsers."""
    parser = groups.add_parser("zoo", help="model-zoo gate: golden losses and step-time baselines")
    sub = parser.add_subparsers(dest="zoo_command", metavar="COMMAND", required=True)
    check = sub.add_parser(
        "check", help="train each CPU preset a few steps; compare with golden files"
    )
    check.add_argument("--preset", action="append", help="only this preset (repeatable)")
    check.add_argument(
        "--write", action="store_true", help="rewrite the golden files from this run"
    )
    check.add_argument("--strict", action="store_true", help="fail on a step-time regression too")
    check.add_argument(
        "--tolerance", type=float, default=0.05, help="step-time tolerance (fraction)"
    )
    check.add_argument("--json", action="store_true", help="print the results as JSON")
    check.set_defaults(func=_run_zoo_check)
