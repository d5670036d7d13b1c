"""`python deploy/check.py` run as a process on the repository's deploy/ folder; the checks
themselves are tested in tests/unit/test_deploy_schemas.py.
"""

from __future__ import annotations

import subprocess
import sys

from tests.support.deploy import CHECK_PY, load_check

check = load_check()


def test_the_cli_passes_on_the_repository() -> None:
    result = subprocess.run(
        [sys.executable, str(CHECK_PY)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("deploy/ OK: ")
