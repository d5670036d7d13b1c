"""Record a verdict on an MLflow run: `triage.*` tags plus the evidence as `triage/` artifacts.

`drivetrain triage <run id>` reads those artifacts back (`commands.fetch_run_evidence`).
"""

from __future__ import annotations

import tempfile
from typing import Any

from platform_lib.triage.classifier import Verdict
from platform_lib.triage.logs import Evidence, save_evidence

__all__ = ["EVIDENCE_ARTIFACT_PATH", "record_verdict"]

#: MLflow artifact folder that holds a failed attempt's evidence (`save_evidence` layout).
EVIDENCE_ARTIFACT_PATH = "triage"


def record_verdict(client: Any, run_id: str, verdict: Verdict, evidence: Evidence) -> None:
    """Tag MLflow run `run_id` with the verdict and upload its evidence under `triage/`.

    Args:
        client: an `mlflow.tracking.MlflowClient` (the caller's tracking store).
        run_id: the run of the failed attempt.
        verdict: from `classify(evidence)`.
        evidence: what the verdict was made from (logs, exit codes, pod status).
    """
    for key, value in verdict.mlflow_tags().items():
        client.set_tag(run_id, key, value)
    with tempfile.TemporaryDirectory(prefix="drivetrain-triage-") as tmp:
        client.log_artifacts(run_id, str(save_evidence(evidence, tmp)), EVIDENCE_ARTIFACT_PATH)
