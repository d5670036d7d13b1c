"""A bad DRIVETRAIN_FAULTS fails the pipeline's first task in one line; a cached training says so.

`pyflyte run ... training_pipeline` with a bad fault switch: exit code 2, one `error:` line
naming the variable, no traceback, nothing built or trained (before the check, the value was
read inside every rank: ~290 lines, 12-16 tracebacks and an elastic restart). The three runs
start together, each in its own isolated environment.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from platform_lib.faults import ENV_VAR, record_faults
from tests.support.parallel import run_concurrently
from tests.support.pipeline import isolated_environ, run_pipeline_cli

#: id -> (DRIVETRAIN_FAULTS, what the one error line says)
CASES = {
    "not-json": ("kill@3", "value is not JSON"),
    "unknown-kind": ('[{"kind": "explode", "step": 1}]', "kind must be one of crash"),
    "rank-beyond-world": (
        '[{"kind": "kill", "rank": 99, "step": 3}]',
        "fault 0 (kill) is on rank 99, but the run has 2 rank(s) (0..1): it would never fire",
    ),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """id -> (finished `pyflyte run` with the bad switch, its isolated environment)."""
    envs = {case: isolated_environ(tmp_path_factory.mktemp(case)) for case in CASES}
    for case, env in envs.items():
        env[ENV_VAR] = CASES[case][0]
    results = run_concurrently(
        {case: lambda case=case: run_pipeline_cli([], envs[case], timeout=300) for case in CASES}
    )
    return {case: (results[case], envs[case]) for case in CASES}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_fault_switch_fails_in_one_line_before_anything_runs(case: str, runs: dict) -> None:
    result, env = runs[case]
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    errors = [x for x in result.stderr.splitlines() if x.startswith("error")]
    assert len(errors) == 1, output[-3000:]
    assert errors[0].startswith("error: ") and CASES[case][1] in errors[0], errors[0]
    assert f"({ENV_VAR}): fix or unset the variable" in errors[0]
    assert "Traceback" not in output and "Root Cause" not in output
    assert not list(Path(env["TMPDIR"]).glob("drivetrain-train-*")), "training started"


def test_cached_training_warns_that_no_fault_was_injected(
    local_flyte: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from flytekit.types.directory import FlyteDirectory

    from tasks.train import check_fault_switch, warn_skipped_faults

    run = local_flyte / "cached-run"
    run.mkdir()
    record_faults(run, {})  # trained earlier, without faults: what a cache hit returns
    monkeypatch.setenv(ENV_VAR, '[{"kind": "crash", "rank": 1, "step": 2}]')
    time.sleep(0.01)
    checked_at = check_fault_switch()
    warn_skipped_faults(run=FlyteDirectory(str(run)), checked_at=checked_at)
    err = capfd.readouterr().err
    warnings = [x for x in err.splitlines() if x.startswith("warning:")]
    assert warnings == [
        f"warning: {ENV_VAR} is set but no fault was injected: train_model was a cache hit (its "
        "output was trained by an earlier run); to inject faults, change the seed or the "
        "overrides, or run with --overwrite-cache"
    ], err
    fresh = local_flyte / "fresh-run"
    fresh.mkdir()
    record_faults(fresh)  # trained after the check, with the switch: no warning
    warn_skipped_faults(run=FlyteDirectory(str(fresh)), checked_at=checked_at)
    assert "warning:" not in capfd.readouterr().err
