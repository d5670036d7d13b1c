"""Redaction installed in a fresh interpreter (new loggers, uncaught tracebacks), run as a child
process; the in-process cases are in tests/unit/test_redact.py.
"""

from __future__ import annotations

import subprocess
import sys

MARKER = "MARKERpw9z"


def test_installed_redaction_covers_new_loggers_and_uncaught_tracebacks() -> None:
    code = (
        "import logging, sys\n"
        "from platform_lib.redact import install_redaction\n"
        "install_redaction()\n"
        "logging.basicConfig(stream=sys.stdout)\n"
        "logging.getLogger('any.new.logger').warning('uri %s', 'http://u:MARKERpw9z@h/')\n"
        "raise RuntimeError('password=MARKERpw9z')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert "http://u:***@h/" in result.stdout and "password=***" in result.stderr
    assert "Traceback" in result.stderr and MARKER not in result.stdout + result.stderr
