"""`drivetrain triage <MLflow run id>` against a real MLflow store (SQLite, temp DRIVETRAIN_HOME)."""

from __future__ import annotations

import json
from pathlib import Path

from platform_lib.cli import main
from platform_lib.mlflow_store import configure_mlflow
from platform_lib.triage.classifier import classify
from platform_lib.triage.logs import load_evidence
from platform_lib.triage.record import record_verdict

CASE = (
    Path(__file__).resolve().parents[1]
    / "data"
    / "triage"
    / "public"
    / ("06_host_oom_kernel_kill_then_watchdog")
)


def test_triage_by_run_id_reads_recorded_evidence(mlflow_home, capsys) -> None:
    client = configure_mlflow("triage-test")
    experiment = client.get_experiment_by_name("triage-test").experiment_id
    evidence = load_evidence(CASE)
    verdict = classify(evidence)
    run = client.create_run(experiment)
    record_verdict(client, run.info.run_id, verdict, evidence)

    tags = client.get_run(run.info.run_id).data.tags
    assert tags["triage.class"] == "oom_host" and tags["triage.rank"] == "1"
    assert tags["triage.root_line"].startswith("[Tue Dec  1 16:02:55 2026] Memory cgroup out")

    assert main(["triage", run.info.run_id, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["class"] == "oom_host" and printed["root_line"] == verdict.root_line
    assert printed["fingerprint"] == verdict.fingerprint

    bare = client.create_run(experiment)
    assert main(["triage", bare.info.run_id]) == 2
    assert "has no 'triage/' artifacts" in capsys.readouterr().err
    assert main(["triage", "0" * 32]) == 2
    assert "no MLflow run" in capsys.readouterr().err
