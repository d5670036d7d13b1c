"""DRIVETRAIN_FAULTS: a bad value is one line naming the variable; a skipped switch is said.

The values are those a new user tried (TRIAL2): each must be refused as `FaultSpecError`
(a `UserError`, so the tasks print it as `error: <what> (DRIVETRAIN_FAULTS): <fix>`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from platform_lib.errors import UserError, format_user_error
from platform_lib.faults import ENV_VAR, FaultPlan

BAD = {
    "unknown-kind": ('[{"kind": "explode", "step": 1}]', "kind must be one of crash"),
    "step-negative": ('[{"kind": "kill", "step": -2}]', "step: Input should be greater"),
    "unknown-field": ('[{"kind": "kill", "step": 1, "stepp": 2}]', "unknown fault field 'stepp'"),
    "object-not-list": ('{"kind": "kill", "step": 1}', "must be a JSON list of objects"),
    "not-json": ("kill@3", "value is not JSON"),
    "seconds-text": (
        '[{"kind": "batch_delay", "seconds": "lots"}]',
        "seconds: Input should be a valid number",
    ),
    "times-negative": (
        '[{"kind": "storage_error", "step": 1, "times": -5}]',
        "times: Input should be greater",
    ),
    "step-missing": ('[{"kind": "kill"}]', "kill needs step"),
}


@pytest.mark.parametrize("value,match", BAD.values(), ids=BAD.keys())
def test_bad_value_is_one_line_naming_the_variable(value: str, match: str) -> None:
    with pytest.raises(UserError, match=match) as caught:
        FaultPlan.from_env(rank=0, environ={ENV_VAR: value})
    line = format_user_error(caught.value)
    assert "\n" not in line
    assert line.startswith("error: ") and f"({ENV_VAR}): fix or unset the variable" in line


def test_rank_beyond_the_world_size_is_refused() -> None:
    value = '[{"kind": "kill", "rank": 99, "step": 3}]'
    with pytest.raises(UserError, match=r"fault 0 \(kill\) is on rank 99, but the run has 2 rank"):
        FaultPlan.from_env(rank=0, environ={ENV_VAR: value}, world_size=2)
    assert not FaultPlan.from_env(rank=0, environ={ENV_VAR: value})  # world size unknown


def test_batch_delay_needs_no_step_as_documented() -> None:
    value = json.dumps([{"kind": "batch_delay", "rank": 1, "seconds": 0.01}])
    plan = FaultPlan.from_env(rank=1, environ={ENV_VAR: value}, world_size=2)
    assert [(f.kind, f.step) for f in plan.faults] == [("batch_delay", 1)]


def test_a_cached_run_says_its_faults_were_not_injected(tmp_path: Path) -> None:
    from platform_lib.faults import record_faults, skipped_faults_warning

    env = {ENV_VAR: '[{"kind": "crash", "step": 2}]'}
    old = tmp_path / "old-run"
    old.mkdir()
    assert "cache hit" in (skipped_faults_warning(str(old), time.time(), env) or "")  # no record
    record_faults(old, {})
    checked_at = time.time()
    warning = skipped_faults_warning(str(old), checked_at, env)
    assert warning and warning.startswith(f"warning: {ENV_VAR} is set but no fault was injected")
    assert "\n" not in warning
    fresh = tmp_path / "fresh-run"
    fresh.mkdir()
    record_faults(fresh, env)
    assert skipped_faults_warning(str(fresh), checked_at, env) is None  # trained after the check
    assert skipped_faults_warning(str(old), checked_at, {}) is None  # switch unset: nothing
