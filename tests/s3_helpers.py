"""A real S3-compatible server (moto) on 127.0.0.1 for storage tests; see the `s3_env` fixture."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time


def start_moto_server(env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """Start a real moto S3 server on 127.0.0.1 (free port); return (process, endpoint URL).

    `env` adds variables to the server's environment, e.g. {"INITIAL_NO_AUTH_ACTION_COUNT":
    "0"} to make it check credentials (unknown access keys get HTTP 403 InvalidAccessKeyId).
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("moto server did not start within 60 s")
