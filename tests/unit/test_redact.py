"""`platform_lib.redact`: every secret form is masked, ordinary text (MLflow model URIs too) is
left alone, and the one-line user errors, log records, MLflow values and the Deck page go through it."""

from __future__ import annotations

import logging

import pytest

from platform_lib.errors import UserError, format_user_error
from platform_lib.redact import (
    MASK,
    RedactingFilter,
    is_secret_variable,
    redact,
    register_secret,
    register_uri_secrets,
)

MARKER = "MARKERpw9z"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://user:MARKERpw9z@127.0.0.1:9/api", "http://user:***@127.0.0.1:9/api"),
        (
            "postgresql+psycopg2://drivetrain:MARKERpw9z@db:5432/mlflow",
            "postgresql+psycopg2://drivetrain:***@db:5432/mlflow",
        ),
        ("s3://key:MARKERpw9z@bucket/logs/", "s3://key:***@bucket/logs/"),
        ("clone https://MARKERpw9z@github.com/org/repo", "clone https://***@github.com/org/repo"),
        ("'http://u:p@ss:MARKERpw9z@h/x'", "'http://u:***@h/x'"),  # unencoded @ in a password
        ("s3:/key:MARKERpw9z@bucket/logs/", "s3:/key:***@bucket/logs/"),  # Path() normalised it
        (
            "champion models:/bev@champion, store http://u:MARKERpw9z@h/",
            "champion models:/bev@champion, store http://u:***@h/",
        ),
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            "&X-Amz-Credential=MARKERpw9z%2F20240101&X-Amz-Signature=MARKERpw9z&x=1",
            "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            "&X-Amz-Credential=***&X-Amz-Signature=***&x=1",
        ),
        ("https://h/blob?sv=1&sig=MARKERpw9z", "https://h/blob?sv=1&sig=***"),
        ("https://maps/api?key=MARKERpw9z&z=3", "https://maps/api?key=***&z=3"),
        ("login with password=MARKERpw9z now", "login with password=*** now"),
        ("MLFLOW_TRACKING_TOKEN=MARKERpw9z python x.py", "MLFLOW_TRACKING_TOKEN=*** python x.py"),
        ("?access_token=MARKERpw9z", "?access_token=***"),
        ('{"password": "MARKERpw9z", "n": 1}', '{"password": "***", "n": 1}'),
        ("{'client_secret': 'MARKERpw9z'}", "{'client_secret': '***'}"),
        ("Authorization: Bearer MARKERpw9z.x.y", "Authorization: Bearer ***"),
        ('{"Authorization": "Basic MARKERpw9z=="}', '{"Authorization": "Basic ***"}'),
        ("sent bearer MARKERpw9z-abc", "sent bearer ***"),
        ("key id AKIAMARKERPW9Z012345 used", "key id *** used"),
        ("aws wJalrXUtnFI/K7MDENG/bPxRfiCYMARKERpw9zKE end", "aws *** end"),
        ("ghp_MARKERpw9zMARKERpw9z0123 leaked", "*** leaked"),
        ("dapi0123456789abcdef0123456789abcdef", "***"),
    ],
    ids=lambda v: v[:24],
)
def test_secret_forms_are_masked(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert MARKER not in redact(text) and MARKER.upper() not in redact(text)


@pytest.mark.parametrize(
    "text",
    [
        "http://127.0.0.1:5000/api/2.0/mlflow/runs/get?run_id=0123456789abcdef0123456789abcdef",
        "s3://bucket/pandaset/002/lidar/00.pkl.gz",
        "evaluating models:/drivetrain-bev-synthetic@champion on the dataset",
        "models:/drivetrain-bev-synthetic/3",
        "commit 0123456789abcdef0123456789abcdef01234567+dirty",
        "sha256 " + "ab" * 32,
        "exit code=1, sample key=log0/000012, num_tokens=5, token_count=7",
        "Secret(group='mlflow', key='password')",
        "error: unknown field 'max_stepz' (overrides): use one of batch_size, lr",
        "data:image/png;base64," + "iVBORw0KGgoAAAANSUhEUgAA" * 50,
    ],
)
def test_ordinary_text_is_kept(text: str) -> None:
    assert redact(text) == text


def test_secret_variables_values_are_masked_raw_and_encoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = {
        "MLFLOW_TRACKING_PASSWORD": "pw:MARKER1@/x y",
        "AWS_SECRET_ACCESS_KEY": "MARKER2secret",
        "AWS_SESSION_TOKEN": "MARKER3session",
        "DATABRICKS_TOKEN": "MARKER4dbx",
        "MY_SERVICE_TOKEN": "MARKER5svc",
        "PGPASSWORD": "MARKER6pg",  # no underscore before PASSWORD: not a pattern match...
        "_FSEC_MLFLOW_PASSWORD": "MARKER7flyte",
        "WANDB_CLIENT_SECRET_VALUE": "MARKER8wb",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    text = " | ".join(
        [*values.values(), "pw%3AMARKER1%40%2Fx%20y", "pw%3AMARKER1%40%2Fx+y"]  # quoted forms
    )
    out = redact(text)
    assert "MARKER6pg" in out  # ...so PGPASSWORD's value stays (not a known secret variable)
    assert [
        m
        for m in ("MARKER1", "MARKER2", "MARKER3", "MARKER4", "MARKER5", "MARKER7", "MARKER8")
        if m in out
    ] == []
    monkeypatch.delenv("AWS_SESSION_TOKEN")
    assert redact("MARKER3session") == "MARKER3session"  # read at call time


def test_secret_variable_names() -> None:
    for name in ("MLFLOW_TRACKING_PASSWORD", "AWS_ACCESS_KEY_ID", "HF_TOKEN", "X_SECRET_KEY"):
        assert is_secret_variable(name), name
    for name in (
        "MLFLOW_TRACKING_USERNAME",
        "_FSEC_MLFLOW_USERNAME",
        "PATH",
        "HOME",
        "TOKENIZERS_PARALLELISM",
    ):
        assert not is_secret_variable(name), name


def test_short_values_are_not_masked_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_TOKEN", "1")
    assert redact("step 1 of 10") == "step 1 of 10"
    assert redact("http://u:1@h/") == f"http://u:{MASK}@h/"  # but a URI still hides it


def test_registered_secret_is_masked() -> None:
    register_secret("MARKERregistered")
    assert redact("value MARKERregistered here") == "value *** here"


def test_user_error_line_is_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "MARKERenvpw")
    error = UserError(
        "cannot reach http://admin:MARKERpw9z@mlflow:5000 with MARKERenvpw",
        "MLFLOW_TRACKING_URI",
        "fix it",
    )
    line = format_user_error(error)
    assert line == (
        "error: cannot reach http://admin:***@mlflow:5000 with *** (MLFLOW_TRACKING_URI): fix it"
    )


def test_log_filter_redacts_message_args_and_traceback(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test_redact.filter")
    logger.addFilter(RedactingFilter())
    try:
        with caplog.at_level(logging.INFO, logger=logger.name):
            logger.info("tracking %s", "http://u:MARKERpw9z@h/")
            try:
                raise ValueError("token=MARKERpw9z")
            except ValueError:
                logger.exception("failed")
    finally:
        logger.filters.clear()
    text = caplog.text
    assert "http://u:***@h/" in text and "token=***" in text and "Traceback" in text
    assert MARKER not in text


def test_mlflow_params_tags_and_artifacts_are_redacted(tmp_path, mlflow_db) -> None:
    from mlflow.tracking import MlflowClient

    from platform_lib.mlflow_store import log_json, log_params, start_training_run

    client = MlflowClient(mlflow_db(tmp_path / "mlflow.db"))
    client.create_experiment("x", artifact_location=(tmp_path / "art").as_uri())
    run_id = start_training_run(
        client, experiment="x", run_name="r", tags={"raw_logs": "s3://k:MARKERpw9z@b/logs"}
    )
    log_params(client, run_id, {"data": {"url": "https://h/x?sig=MARKERpw9z"}})
    log_json(client, run_id, {"raw_logs": "s3://k:MARKERpw9z@b/logs"}, "lineage.json")
    run = client.get_run(run_id)
    assert run.data.tags["raw_logs"] == "s3://k:***@b/logs"
    assert run.data.params["data.url"] == "https://h/x?sig=***"
    stored = "".join(p.read_text() for p in (tmp_path / "art").rglob("*.json"))
    assert "s3://k:***@b/logs" in stored and MARKER not in stored


def test_deck_page_is_redacted() -> None:
    from platform_lib.telemetry.deck import render_deck_html
    from platform_lib.telemetry.report import build_report
    from tests.support.timelines import restart_timeline

    timeline = restart_timeline(rank=0)
    report = build_report(timeline, min_step_s=0.0)
    report["baseline"] = {
        "workload_key": "bev/s3://k:MARKERpw9z@b/ws1",
        "runs": 0,
        "flags": {"step_time": "slower at https://h/x?token=MARKERpw9z"},
    }
    page = render_deck_html(timeline, report, [{"step": 1, "loss": 1.0}])
    assert "bev/s3://k:***@b/ws1" in page and "token=***" in page and MARKER not in page


def test_uri_passwords_are_masked_where_a_library_echoes_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://user:MARKERtrk%40x@mlflow:5000")
    register_uri_secrets("drivetrain data validate s3://key:MARKERargv@bucket/ds")
    echoed = 'Invalid bucket name "key:MARKERargv@bucket" / auth MARKERtrk@x / MARKERtrk%40x'
    assert redact(echoed) == 'Invalid bucket name "key:***@bucket" / auth *** / ***'
