"""`drivetrain triage <log file | folder | MLflow run id> [--json]`: classify a failed run.

Everything it prints is `platform_lib.redact`ed: the tracking URI in an error may carry a
password, and a failed run's logs may quote tokens. Fetching a run's evidence from an MLflow
server has a deadline: MLflow's own HTTP knobs are bounded for the call (`MLFLOW_HTTP_LIMITS`)
unless the user set them, and an unreachable server is said so, not "no such run".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from platform_lib.errors import UserError, format_user_error, to_user_error
from platform_lib.redact import redact
from platform_lib.storage import is_transient
from platform_lib.triage.record import EVIDENCE_ARTIFACT_PATH

__all__ = [
    "EVIDENCE_ARTIFACT_PATH",
    "MLFLOW_HTTP_LIMITS",
    "add_triage_command",
    "fetch_run_evidence",
]

_RUN_ID = re.compile(r"^[0-9a-f]{32}$")

#: MLflow's HTTP settings during `fetch_run_evidence`, each unless already in the environment
#: (MLflow's defaults retry for ~255 s): retries after the first attempt, backoff factor (s),
#: and the timeout of one request (s): at most 3 requests of 10 s plus backoff, about 35 s for
#: an address that never answers.
MLFLOW_HTTP_LIMITS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}


@contextlib.contextmanager
def _bounded_mlflow_http() -> Iterator[None]:
    """Set the `MLFLOW_HTTP_LIMITS` the environment lacks for the block (MLflow reads them per request)."""
    added = [name for name in MLFLOW_HTTP_LIMITS if name not in os.environ]
    os.environ.update({name: MLFLOW_HTTP_LIMITS[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def fetch_run_evidence(run_id: str, dst: str | Path) -> Path:
    """Download the `triage/` evidence artifacts of MLflow run `run_id` into `dst`.

    Uses the platform's tracking store (`MLFLOW_TRACKING_URI`, else
    `$DRIVETRAIN_HOME/mlflow.db`), with MLflow's HTTP retries and timeout bounded
    (`MLFLOW_HTTP_LIMITS`; set those variables to allow more).

    Raises:
        LookupError: the run does not exist or has no `triage/` artifacts.
        UserError: the tracking server did not answer (refused, timed out) within the limits.
    """
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from platform_lib.mlflow_store import resolve_tracking_uri

    uri = resolve_tracking_uri()
    client = MlflowClient(uri)
    try:
        with _bounded_mlflow_http():
            client.get_run(run_id)
            if not client.list_artifacts(run_id, EVIDENCE_ARTIFACT_PATH):
                raise LookupError(
                    f"MLflow run {run_id} has no '{EVIDENCE_ARTIFACT_PATH}/' artifacts "
                    "(logged when a training task fails); pass a log file instead"
                )
            return Path(client.download_artifacts(run_id, EVIDENCE_ARTIFACT_PATH, str(dst)))
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST" and is_transient(exc):
            raise UserError(
                "cannot reach the MLflow tracking server",
                uri,
                "check MLFLOW_TRACKING_URI and that the server is up, then retry (a slow server: "
                "raise MLFLOW_HTTP_REQUEST_TIMEOUT or MLFLOW_HTTP_REQUEST_MAX_RETRIES); or pass "
                "the run's log file",
            ) from exc
        raise LookupError(f"no MLflow run {run_id} in {uri}: {exc.message}") from exc


def _run_triage(args: argparse.Namespace) -> int:
    from platform_lib.triage.classifier import classify
    from platform_lib.triage.logs import load_evidence

    target = Path(args.target)
    try:
        with tempfile.TemporaryDirectory(prefix="drivetrain-triage-") as tmp:
            if not target.exists() and _RUN_ID.match(args.target):
                target = fetch_run_evidence(args.target, tmp)
            elif not target.exists():
                raise LookupError(
                    f"{args.target} is neither a log file, a folder of logs nor an "
                    "MLflow run id (32 hex digits)"
                )
            verdict = classify(load_evidence(target))
    except (LookupError, ValueError, OSError) as exc:
        print(format_user_error(to_user_error(exc) or exc), file=sys.stderr)
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
