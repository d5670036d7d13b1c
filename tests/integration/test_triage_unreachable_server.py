"""`drivetrain triage <run id>` with the tracking server's port closed: one line within seconds.

MLflow's own HTTP retries would wait ~255 s and then report "no MLflow run"; the command bounds
them and says the server cannot be reached, with the URI's password masked. A real process
against a real closed port on 127.0.0.1.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_closed_tracking_server_port_is_one_line_within_the_deadline(tmp_path):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(
        PYTHONPATH=str(REPO),
        DRIVETRAIN_HOME=str(tmp_path / "home"),
        MLFLOW_TRACKING_URI=f"http://u:SECRETMARK123@127.0.0.1:{port}",
    )
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "platform_lib.cli", "triage", "0123456789abcdef" * 2],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    took = time.monotonic() - start
    output = result.stdout + result.stderr
    assert took < 30, f"took {took:.0f} s: {output}"
    assert result.returncode != 0 and "Traceback" not in output, output
    lines = output.splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith(
        f"error: cannot reach the MLflow tracking server (http://u:***@127.0.0.1:{port}): "
        "check MLFLOW_TRACKING_URI"
    ), lines[0]
    assert "no MLflow run" not in output and "SECRETMARK123" not in output
