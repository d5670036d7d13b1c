"""`drivetrain goodput`: text and JSON reports of a run folder, bad arguments in one line."""

from __future__ import annotations

import json

from platform_lib.cli import main
from platform_lib.telemetry.publish import write_run_report
from platform_lib.telemetry.report import build_report
from tests.support.timelines import restart_timeline


def _run_folder(tmp_path):
    timeline = restart_timeline()
    report = build_report(timeline, min_step_s=0.0)
    run = tmp_path / "run"
    write_run_report(run, timeline, report, html=False)
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": n, "loss": 1 / n}) + "\n" for n in range(1, 9))
    )
    return run, report


def test_goodput_json_is_the_stored_report(tmp_path, capsys):
    run, report = _run_folder(tmp_path)
    assert main(["goodput", str(run), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(report))
    assert abs(printed["goodput"]["compatible"] - (6.4 + 1.5) / 36.0) < 1e-12


def test_goodput_text_and_html(tmp_path, capsys):
    run, _ = _run_folder(tmp_path)
    assert main(["goodput", str(run), "--html", str(tmp_path / "page.html")]) == 0
    out = capsys.readouterr().out
    assert "goodput: 21.9% (ml-goodput-measurement compatible)   17.8% (input-adjusted)" in out
    assert "lost_work                      4.000" in out
    assert (tmp_path / "page.html").read_text().count("<img ") == 6


def test_goodput_recomputes_from_rank_files_and_with_another_minimum(tmp_path, capsys):
    run, _ = _run_folder(tmp_path)
    (run / "goodput.json").unlink()
    assert main(["goodput", str(run), "--json", "--min-step-s", "1.2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["anomalies"]["min_step_s"] == 1.2
    assert report["anomalies"]["ideal_step_s"] == 1.5  # only the two 1.5 s checkpoint steps remain


def test_goodput_of_something_else_fails_in_one_line(tmp_path, capsys):
    assert main(["goodput", str(tmp_path)]) == 2
    assert "has no telemetry/ folder" in capsys.readouterr().err
    assert main(["goodput", "no-such-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not an MLflow run id" in err


def test_goodput_of_an_mlflow_run_id(tmp_path, capsys, monkeypatch, mlflow_db):
    from mlflow.tracking import MlflowClient

    from platform_lib.telemetry.mlflow_goodput import log_goodput

    run, report = _run_folder(tmp_path)
    uri = mlflow_db(tmp_path / "mlflow.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DRIVETRAIN_HOME", str(tmp_path / "home"))
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment(
        "drivetrain", artifact_location=(tmp_path / "art").as_uri()
    )
    run_id = client.create_run(experiment).info.run_id
    log_goodput(client, run_id, run, report)
    assert client.get_run(run_id).data.tags["goodput.input_verdict"] == report["input"]["verdict"]
    assert main(["goodput", run_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(report))
