"""`drivetrain data inspect|validate <URL>` of a dataset URL that cannot be used: one line, no traceback.

Each URL runs the real command in a process of its own (a closed port on 127.0.0.1, an S3 URL
without credentials, an invalid bucket name, an unknown scheme, a malformed host): the user
gets exactly one `error:` line naming the URL (redacted) and what to do, and exit status 1.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    """Return a port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


PORT = _closed_port()

#: URL -> (what the line says, the URL as the line names it)
CASES = {
    f"http://127.0.0.1:{PORT}/ds": "cannot reach storage",
    f"ftp://127.0.0.1:{PORT}/ds": "cannot reach storage",
    "s3://bucket/ds": "cannot access storage (NoCredentialsError",
    "s3://me:Secret123456@bucket": "not a usable storage location (invalid bucket name",
    "nosuch://x": "not a usable storage location (Protocol not known: nosuch)",
    "http://[::1": "not a usable storage location (Invalid IPv6 URL)",
}


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    """The environment of a user with no cloud credentials and no metadata server."""
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GOOGLE_"))}
    env.update(
        PYTHONPATH=str(REPO),
        DRIVETRAIN_HOME=str(home / "drivetrain"),
        HOME=str(home),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_SHARED_CREDENTIALS_FILE=str(home / "none"),
        AWS_CONFIG_FILE=str(home / "none"),
        DRIVETRAIN_STORAGE_RETRIES="0",
    )
    return env


@pytest.mark.parametrize("command", ["inspect", "validate"])
@pytest.mark.parametrize("url", sorted(CASES), ids=lambda url: url.replace(str(PORT), "PORT"))
def test_unusable_dataset_url_is_one_line(url, command, env):
    result = subprocess.run(
        [sys.executable, "-m", "platform_lib.cli", "data", command, url],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Traceback" not in output, output
    lines = output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    assert CASES[url] in lines[0], lines[0]
    named = url.replace("Secret123456", "***")  # a URL's password never reaches the terminal
    assert f"({named})" in lines[0] and "Secret123456" not in output, lines[0]
