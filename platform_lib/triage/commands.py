"""`drivetrain triage <log file | folder | MLflow run id> [--json]`: classify a failed run.

Everything it prints is `platform_lib.redact`ed: the tracking URI in an error may carry a
password, and a failed run's logs may quote tokens.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

from platform_lib.redact import redact
from platform_lib.triage.record import EVIDENCE_ARTIFACT_PATH

__all__ = ["EVIDENCE_ARTIFACT_PATH", "add_triage_command", "fetch_run_evidence"]

_RUN_ID = re.compile(r"^[0-9a-f]{32}$")


def fetch_run_evidence(run_id: str, dst: str | Path) -> Path:
    """Download the `triage/` evidence artifacts of MLflow run `run_id` into `dst`.

    Uses the platform's tracking store (`MLFLOW_TRACKING_URI`, else
    `$DRIVETRAIN_HOME/mlflow.db`).

    Raises:
        LookupError: the run does not exist or has no `triage/` artifacts.
    """
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from platform_lib.registry.mlflow_store import resolve_tracking_uri

    client = MlflowClient(resolve_tracking_uri())
    try:
        client.get_run(run_id)
        if not client.list_artifacts(run_id, EVIDENCE_ARTIFACT_PATH):
            raise LookupError(
                f"MLflow run {run_id} has no '{EVIDENCE_ARTIFACT_PATH}/' artifacts "
                "(logged when a training task fails); pass a log file instead"
            )
        return Path(client.download_artifacts(run_id, EVIDENCE_ARTIFACT_PATH, str(dst)))
    except MlflowException as exc:
        raise LookupError(
            f"no MLflow run {run_id} in {resolve_tracking_uri()}: {exc.message}"
        ) from exc


def _run_triage(args: argparse.Namespace) -> int:
    from platform_lib.triage.classifier import classify
    from platform_lib.triage.logs import load_evidence

    target = Path(args.target)
    try:
        with tempfile.TemporaryDirectory(prefix="drivetrain-triage-") as tmp:
            if not target.exists() and _RUN_ID.match(args.target):
                target = fetch_run_evidence(args.target, tmp)
            elif not target.exists():
                print(
                    redact(
                        f"error: {args.target} is neither a log file, a folder of logs nor an "
                        "MLflow run id (32 hex digits)"
                    ),
                    file=sys.stderr,
                )
                return 2
            verdict = classify(load_evidence(target))
    except (LookupError, ValueError, OSError) as exc:
        print(redact(f"error: {exc}"), file=sys.stderr)
        return 2
    if args.json:
        print(redact(json.dumps(verdict.to_dict(), indent=2)))
    else:
        print(redact(verdict.describe()))
    return 0


def add_triage_command(groups: argparse._SubParsersAction) -> None:
    """Add `triage` to the top-level subparsers."""
    p = groups.add_parser(
        "triage",
        help="classify a failed run: root cause, cascades, class, action",
        description="Classify a failed run from a log file, a folder of logs (torchelastic "
        "log_dir, pod_status.json, exit_codes.json) or an MLflow run id.",
    )
    p.add_argument("target", metavar="LOG_FILE|FOLDER|RUN_ID")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.set_defaults(func=_run_triage)
