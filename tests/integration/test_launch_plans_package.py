"""Launch plans packaged by `pyflyte package` (run for real): schedule, fixed inputs, team
defaults, a bad cron refused; the in-process launch-plan tests are in tests/unit/test_launch_plans.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from flyteidl.admin.launch_plan_pb2 import LaunchPlan as LaunchPlanPb

from tests.support.parallel import run_concurrently

REPO = Path(__file__).resolve().parents[2]
PYFLYTE = str(Path(sys.executable).parent / "pyflyte")


def _package(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            PYFLYTE,
            "--pkgs",
            "workflows",
            "package",
            "--image",
            "localhost/drivetrain:dev",
            "--output",
            str(tmp_path / "pkg.tgz"),
            "--force",
        ],
        cwd=REPO,
        env={**os.environ, "HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _launch_plans(archive: Path) -> dict[str, LaunchPlanPb]:
    plans = {}
    with tarfile.open(archive) as tar:
        for name in tar.getnames():
            if name.endswith(("drivetrain_scheduled_retrain_3.pb", "drivetrain_on_demand_3.pb")):
                plan = LaunchPlanPb()
                plan.ParseFromString(tar.extractfile(name).read())
                plans[plan.id.name] = plan
    return plans


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """name -> (finished packaging, its output folder): both packagings started together."""
    envs = {
        "schedule": {
            "DRIVETRAIN_RETRAIN_CRON": "30 2 * * 1-5",
            "DRIVETRAIN_RETRAIN_RAW_LOGS": "s3://fleet-logs/incoming/",
        },
        "bad_cron": {"DRIVETRAIN_RETRAIN_CRON": "0 24 * * *"},
    }
    folders = {name: tmp_path_factory.mktemp(name) for name in envs}
    results = run_concurrently(
        {name: lambda name=name: _package(folders[name], **envs[name]) for name in envs}
    )
    return {name: (results[name], folders[name]) for name in envs}


def test_packaged_schedule_fixed_inputs_and_team_defaults(packaged: dict) -> None:
    done, tmp_path = packaged["schedule"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    plans = _launch_plans(tmp_path / "pkg.tgz")
    assert set(plans) == {"drivetrain_scheduled_retrain", "drivetrain_on_demand"}
    scheduled = plans["drivetrain_scheduled_retrain"].spec
    assert scheduled.entity_metadata.schedule.cron_schedule.schedule == "30 2 * * 1-5"
    fixed = scheduled.fixed_inputs.literals
    assert fixed["raw_logs"].scalar.primitive.string_value == "s3://fleet-logs/incoming/"
    assert fixed["source"].scalar.primitive.string_value == "synthetic"
    on_demand = plans["drivetrain_on_demand"].spec
    assert not on_demand.entity_metadata.HasField("schedule")
    defaults = on_demand.default_inputs.parameters
    assert defaults["preset"].default.scalar.primitive.string_value == "synthetic_default"
    assert not on_demand.fixed_inputs.literals  # every input stays overridable


def test_packaging_with_a_bad_cron_fails_naming_the_setting_and_field(packaged: dict) -> None:
    done, tmp_path = packaged["bad_cron"]
    assert done.returncode != 0
    assert "DRIVETRAIN_RETRAIN_CRON='0 24 * * *': cron field hour" in done.stdout + done.stderr
    assert not (tmp_path / "pkg.tgz").exists()
