"""Every store access has a deadline: an S3 endpoint that accepts connections and never
answers (a real TCP listener on 127.0.0.1), and an endpoint URL holding credentials, each end
in one line that names the store, in bounded time.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from platform_lib.errors import UserError
from platform_lib.storage import StorageUnreachableError, fetch_folder

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """Yield the URL of a TCP listener that accepts every connection and never sends a byte."""
    server = socket.create_server(("127.0.0.1", 0), backlog=64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except (TimeoutError, OSError):
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        server.close()


def _cli(args: list[str], env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    full = {name: value for name, value in full.items() if value}  # "" unsets
    return subprocess.run(
        [sys.executable, "-m", "platform_lib.cli", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=REPO,
        check=False,
    )


@pytest.mark.timeout(120)
def test_inspect_on_a_silent_store_ends_in_one_line(s3_env, silent_endpoint: str):
    s3_env(silent_endpoint)
    start = time.monotonic()
    result = _cli(
        ["data", "inspect", "s3://bucket/ds"],
        {"DRIVETRAIN_STORAGE_TIMEOUT_S": "1", "HOME": os.environ.get("HOME", "/tmp")},
        timeout_s=60,  # old main: 60 s read timeout x 3 botocore x 5 s3fs attempts
    )
    elapsed = time.monotonic() - start
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: cannot reach storage (ReadTimeoutError")
    assert "(s3://bucket/ds): check the endpoint" in lines[0] and lines[0].endswith("then retry")
    assert elapsed < 30  # 2 attempts x 1 s, plus interpreter start


@pytest.mark.timeout(60)
def test_retries_stop_at_the_deadline(s3_env, silent_endpoint: str, monkeypatch, tmp_path):
    s3_env(silent_endpoint)
    monkeypatch.setenv("DRIVETRAIN_STORAGE_TIMEOUT_S", "1")
    monkeypatch.setenv("DRIVETRAIN_STORAGE_DEADLINE_S", "3")
    start = time.monotonic()
    # each attempt ends after 2 x 1 s; no attempt starts 3 s after the first began
    with pytest.raises(StorageUnreachableError, match="check the endpoint") as info:
        fetch_folder("s3://bucket/logs", tmp_path, max_retries=50)
    message = str(info.value)  # as many as fit in 3 s (about 2), never the 51 allowed
    assert re.search(r"listing s3://bucket/logs failed after [1-4] attempts", message), message
    assert time.monotonic() - start < 15


@pytest.mark.timeout(60)
def test_evaluation_dataset_on_a_silent_store_is_one_line(s3_env, silent_endpoint, monkeypatch):
    from platform_lib.registry.model_eval import resolve_dataset_hash

    s3_env(silent_endpoint)
    monkeypatch.setenv("DRIVETRAIN_STORAGE_TIMEOUT_S", "1")
    monkeypatch.setenv("DRIVETRAIN_STORAGE_DEADLINE_S", "3")
    start = time.monotonic()
    with pytest.raises(UserError) as info:
        resolve_dataset_hash("s3://bucket/ds")
    line = str(info.value)
    assert "\n" not in line and "s3://bucket/ds" in line and "check the endpoint" in line
    assert time.monotonic() - start < 20


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "variable", ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "FSSPEC_S3_ENDPOINT_URL"]
)
def test_endpoint_url_with_credentials_is_one_line_without_the_password(
    s3_env, silent_endpoint: str, variable: str
):
    # a reachable endpoint: old main sent the request and aiohttp refused it in a traceback
    s3_env("http://127.0.0.1:9")
    port = silent_endpoint.rsplit(":", 1)[1]
    endpoints = dict.fromkeys(["AWS_ENDPOINT_URL", "FSSPEC_S3_ENDPOINT_URL"], "")  # only ours
    endpoints[variable] = f"http://u:hunter2pw@127.0.0.1:{port}"
    result = _cli(
        ["data", "inspect", "s3://bucket/ds"],
        {**endpoints, "DRIVETRAIN_STORAGE_TIMEOUT_S": "1"},
        timeout_s=50,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1 and len(output.strip().splitlines()) == 1, output
    assert "hunter2pw" not in output and "Traceback" not in output
    assert f"holds credentials (user:password@) ({variable}=http://***@127.0.0.1:{port})" in output
    assert "AWS_ACCESS_KEY_ID" in output


@pytest.mark.timeout(180)
def test_pipeline_refuses_a_checkpoint_folder_with_credentials_before_training(
    isolated_env: dict[str, str], tmp_path: Path
):
    overrides = '{"checkpoint.folder": "s3://u:hunter2pw@127.0.0.1:9/x"}'
    result = subprocess.run(
        [str(Path(sys.executable).parent / "pyflyte"), "run", "workflows/training_pipeline.py"]
        + ["training_pipeline", "--overrides", overrides],
        capture_output=True,
        text=True,
        timeout=120,  # old main accepted it and trained (755 lines, an elastic restart)
        cwd=REPO,
        env={**isolated_env, "PYTHONPATH": str(REPO)},
        check=False,
    )
    output = result.stdout + result.stderr
    errors = [line for line in output.splitlines() if line.startswith("error")]
    assert result.returncode == 2 and "Traceback" not in output, output[-4000:]
    assert errors == [
        "error: checkpoint.folder='s3://***@127.0.0.1:9/x' is invalid (overrides): credentials "
        "in a URL are refused: they go in the environment or a profile (AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE), never in user:password@"
    ], output[-4000:]
    assert "hunter2pw" not in output
    leaked = [p for p in tmp_path.rglob("*") if p.is_file() and b"hunter2pw" in p.read_bytes()]
    assert leaked == []  # errors.log, flytekit's local outputs


@pytest.mark.timeout(150)
def test_evaluation_task_on_a_silent_store_is_one_line(
    s3_env, silent_endpoint: str, isolated_env: dict[str, str]
):
    s3_env(silent_endpoint)
    timeouts = {"DRIVETRAIN_STORAGE_TIMEOUT_S": "1", "DRIVETRAIN_STORAGE_DEADLINE_S": "3"}
    result = subprocess.run(
        [str(Path(sys.executable).parent / "pyflyte"), "run", "tasks/evaluation.py"]
        + ["hash_dataset", "--dataset", "s3://bucket/ds"],
        capture_output=True,
        text=True,
        timeout=90,  # old main: nothing for 590 s (the first task of evaluate_model)
        cwd=REPO,
        env={**os.environ, **isolated_env, **timeouts, "PYTHONPATH": str(REPO)},
        check=False,
    )
    output = result.stdout + result.stderr
    errors = [line for line in output.splitlines() if line.startswith("error")]
    assert result.returncode == 2 and "Traceback" not in output, output[-4000:]
    assert len(errors) == 1 and "(s3://bucket/ds): check the endpoint" in errors[0], output
    assert errors[0].startswith("error: reading the manifest of s3://bucket/ds failed after")
