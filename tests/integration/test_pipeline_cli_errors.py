"""`pyflyte run ... --overrides` with a bad override: one line naming the field, exit code 2,
no traceback, nothing trained or registered (the config is the workflow's first task).

Wall time is reported by docs/pipeline.md's command, not asserted here (timed tests flake on
a shared machine).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from platform_lib.training.overrides import list_fields
from tests.support.pipeline import run_pipeline_cli


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        ('{"max_stepz": 5}', "error: unknown field 'max_stepz' (overrides): use one of "),
        (
            '{"max_steps": "ten"}',
            "error: optimizer.max_steps='ten' is of the wrong type (overrides): "
            "give an int >= 1 and <= 9223372036854775807",
        ),
        (
            '{"max_steps": 99999999999999999999999}',
            "error: optimizer.max_steps=99999999999999999999999 is out of range (overrides): give an int "
            ">= 1 and <= 9223372036854775807",
        ),
    ],
    ids=["unknown", "type", "overflow"],
)
def test_bad_override_fails_in_one_line(overrides, line, isolated_env: dict[str, str]) -> None:
    result = run_pipeline_cli(["--overrides", overrides], isolated_env, timeout=300)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-3000:]
    errors = [x for x in result.stderr.splitlines() if x.startswith("error")]
    assert len(errors) == 1 and errors[0].startswith(line), result.stderr[-3000:]
    assert "Traceback" not in result.stdout + result.stderr
    if "unknown" in line:
        assert (
            all(path in errors[0] for path in list_fields())
            and "did you mean 'max_steps'" in errors[0]
        )
    home = Path(isolated_env["DRIVETRAIN_HOME"])
    assert not (home / "mlflow.db").exists()  # nothing registered: registration never started
    assert "Traceback (most recent call last)" in (home / "logs" / "errors.log").read_text()
    assert not list(Path(isolated_env["TMPDIR"]).glob("drivetrain-train*/*"))  # no training started
