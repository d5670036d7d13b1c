"""`pyflyte run ... --overrides` with a bad override: one line naming the field, exit code 2,
no traceback, nothing trained or registered (the config is the workflow's first task).

Wall time is reported by docs/pipeline.md's command, not asserted here (timed tests flake on
a shared machine). The three runs start together (each in its own isolated environment).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from platform_lib.training.overrides import list_fields
from tests.support.parallel import run_concurrently
from tests.support.pipeline import isolated_environ, run_pipeline_cli

#: id -> (overrides, start of the one error line)
CASES = {
    "unknown": ('{"max_stepz": 5}', "error: unknown field 'max_stepz' (overrides): use one of "),
    "type": (
        '{"max_steps": "ten"}',
        "error: optimizer.max_steps='ten' is of the wrong type (overrides): "
        "give an int >= 1 and <= 9223372036854775807",
    ),
    "overflow": (
        '{"max_steps": 99999999999999999999999}',
        "error: optimizer.max_steps=99999999999999999999999 is out of range (overrides): give an int "
        ">= 1 and <= 9223372036854775807",
    ),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """id -> (finished `pyflyte run --overrides ...`, its isolated environment)."""
    envs = {case: isolated_environ(tmp_path_factory.mktemp(case)) for case in CASES}
    results = run_concurrently(
        {
            case: lambda case=case: run_pipeline_cli(
                ["--overrides", CASES[case][0]], envs[case], timeout=300
            )
            for case in CASES
        }
    )
    return {case: (results[case], envs[case]) for case in CASES}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_override_fails_in_one_line(case: str, runs: dict) -> None:
    line = CASES[case][1]
    result, isolated_env = runs[case]
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
