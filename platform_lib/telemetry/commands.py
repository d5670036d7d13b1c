"""`drivetrain goodput`: where a training run's accelerator-hours went.

drivetrain goodput RUN [--json] [--html FILE]
    RUN is a training run folder (holds telemetry/) or an MLflow run id (its goodput/
    artifacts). Prints the report (docs/goodput.md); --json prints the whole record.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from platform_lib.redact import redact

__all__ = ["add_goodput_commands"]


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

    from platform_lib.telemetry.mlflow_goodput import load_goodput_from_mlflow

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
        "--min-step-s", type=float, help="recompute with this anomaly minimum step time, in s"
    )
    parser.set_defaults(func=_run_goodput)
