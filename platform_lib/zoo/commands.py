"""`drivetrain zoo check`: the model-zoo gate (golden losses and step-time baselines).

drivetrain zoo check [--preset NAME ...] [--write] [--strict] [--json]
    Trains each CPU preset a few steps on a fixed synthetic dataset, compares the losses
    with the golden files and the median step time with the workload's baseline (MLflow
    store); exit 1 on a loss mismatch (and with --strict on a step-time regression).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

__all__ = ["add_zoo_commands"]


def _run_zoo_check(args: argparse.Namespace) -> int:
    from platform_lib.shards.manifest import load_manifest
    from platform_lib.telemetry.baseline import workload_of
    from platform_lib.telemetry.mlflow_goodput import compare_with_workload_baseline
    from platform_lib.zoo.check import CPU_PRESETS, check_zoo_preset
    from platform_lib.zoo.dataset import build_golden_dataset

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
