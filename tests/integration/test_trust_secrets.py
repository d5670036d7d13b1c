"""No secret leaves the platform: marker values in the secret environment variables and in the
tracking URI's userinfo never appear in any output.

(a) Every `drivetrain` error path we can trigger, each in its own process: stdout, stderr and
`$DRIVETRAIN_HOME/logs/errors.log`. (b) A full `pyflyte run` of the training pipeline against a
real `mlflow server` on 127.0.0.1 reached through `http://user:<marker>@...`, with marker
secrets in the environment: its stdout/stderr, every file it wrote (MLflow store with params
and tags, artifacts, Deck HTML, run folders, logs).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.pipeline import STEPS, run_pipeline_cli
from tests.support.services import start_plain_mlflow, stop

#: Marker values of the secrets; none may appear in any output.
SECRETS = {
    "MLFLOW_TRACKING_PASSWORD": "MARKERmlflowpw",
    "AWS_SECRET_ACCESS_KEY": "MARKERawssecret",
    "MLFLOW_TRACKING_TOKEN": "MARKERmlflowtoken",
    "AWS_SESSION_TOKEN": "MARKERawssession",
}
URI_MARKER = "MARKERuripw"
MARKERS = (*SECRETS.values(), URI_MARKER)
RUN_ID = "0123456789abcdef0123456789abcdef"


def _leaks(text: str) -> list[str]:
    return [marker for marker in MARKERS if marker in text]


@pytest.fixture
def secret_env(isolated_env: dict[str, str]) -> dict[str, str]:
    """The isolated environment plus marker secrets and an unreachable tracking URI with a password."""
    return {
        **isolated_env,
        **SECRETS,
        "MLFLOW_TRACKING_URI": f"http://user:{URI_MARKER}@127.0.0.1:9/",
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9",  # nothing listens: fails at once
        "AWS_MAX_ATTEMPTS": "1",
    }


#: (argv, text the one-line error must hold or None for a traceback) of every error path.
CASES = {
    "triage_run_id": (["triage", RUN_ID], "http://user:***@127.0.0.1:9/"),
    "triage_run_id_debug": (["--debug", "triage", RUN_ID], "http://user:***@127.0.0.1:9/"),
    "triage_secret_in_path": (["triage", "/no/such/MARKERmlflowtoken"], "/no/such/***"),
    "goodput_run_id": (["goodput", RUN_ID], "http://user:***@127.0.0.1:9/"),
    "goodput_secret_in_path": (["goodput", "/no/MARKERawssecret"], "error: no goodput report"),
    "build_url_password": (
        ["data", "build", "--source", "pandaset", "--input", f"s3://key:{URI_MARKER}@b/x"],
        ":***@b/x",
    ),
    "build_url_password_debug": (
        ["--debug", "data", "build", "--source", "pandaset", "--input", f"s3://k:{URI_MARKER}@b/x"],
        None,
    ),
    "build_bad_choice": (
        ["data", "build", "--source", f"http://u:{URI_MARKER}@h/", "--input", "x"],
        "invalid choice: 'http://u:***@h/'",
    ),
    "inspect_signed_url": (["data", "inspect", f"s3://b/ds?X-Amz-Signature={URI_MARKER}"], None),
    "inspect_url_password": (["data", "inspect", f"http://u:{URI_MARKER}@127.0.0.1:9/ds"], None),
    "validate_secret_in_path": (
        ["data", "validate", "/no/such/MARKERmlflowpw"],
        "(/no/such/***)",
    ),
    "validate_url_password": (["data", "validate", f"s3://k:{URI_MARKER}@b/ds"], None),
    "zoo_unreachable_store": (["zoo", "check", "--preset", "small"], None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_cli_error_paths_show_no_secret(
    case: str, secret_env: dict[str, str], tmp_path: Path
) -> None:
    argv, expected = CASES[case]
    if "build" in argv:
        argv = [*argv, "--output", str(tmp_path / "out")]
    result = subprocess.run(
        [sys.executable, "-m", "platform_lib.cli", *argv],
        cwd=tmp_path,
        env=secret_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    log = Path(secret_env["DRIVETRAIN_HOME"]) / "logs" / "errors.log"
    output = result.stdout + result.stderr + (log.read_text() if log.exists() else "")
    assert result.returncode != 0, output[-3000:]
    assert _leaks(output) == [], output[-3000:]
    if expected is not None:
        assert expected in result.stderr, result.stderr[-3000:]
    else:
        assert "Traceback" in result.stderr or "error" in result.stderr, result.stderr[-3000:]


@pytest.mark.distributed
def test_pipeline_run_shows_no_secret(
    secret_env: dict[str, str], tmp_path: Path, mlflow_db
) -> None:
    server_root = tmp_path / "mlflow-server"
    server_root.mkdir()
    proc, server = start_plain_mlflow(server_root, mlflow_db(server_root / "mlflow.db"))
    try:
        port = server.rsplit(":", 1)[1]
        env = {**secret_env, "MLFLOW_TRACKING_URI": f"http://user:{URI_MARKER}@127.0.0.1:{port}"}
        tiny = {
            "num_logs": 2,
            "frames_per_log": 2,
            "image_width": 64,
            "image_height": 48,
            "lidar_beams": 8,
            "lidar_azimuth_bins": 64,
        }
        result = run_pipeline_cli(
            ["--overrides", STEPS, "--synthetic", json.dumps(tiny)], env, timeout=840
        )
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-5000:]
        assert result.stdout.strip().splitlines()[-1] == "models:/drivetrain-bev-synthetic/1"
        assert _leaks(output) == [], output[-5000:]

        # it really went through the server: the run, its params, tags and artifacts are there
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=server, registry_uri=server)
        version = client.get_model_version("drivetrain-bev-synthetic", "1")
        run = client.get_run(version.run_id)
        assert run.data.params and "dataset_hash" in run.data.tags
        assert list((server_root / "artifacts").rglob("model.safetensors"))
        decks = [p for p in tmp_path.rglob("*.html") if "Goodput" in p.read_text(errors="replace")]
        assert decks, "the training task wrote no Deck page"
        written = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()]
        leaks = {
            str(p.relative_to(tmp_path)): found
            for p in written
            if (found := [m for m in MARKERS if m.encode() in p.read_bytes()])
        }
        assert leaks == {}, leaks
    finally:
        stop(proc)
