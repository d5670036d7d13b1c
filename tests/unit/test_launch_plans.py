"""Launch plans: the cron schedule as serialised, team defaults, and bad cron expressions
failing at serialisation time with the field named."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from flyteidl.admin.launch_plan_pb2 import LaunchPlan as LaunchPlanPb

from platform_lib.scheduling import check_cron

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


def test_packaged_schedule_fixed_inputs_and_team_defaults(tmp_path: Path) -> None:
    done = _package(
        tmp_path,
        DRIVETRAIN_RETRAIN_CRON="30 2 * * 1-5",
        DRIVETRAIN_RETRAIN_RAW_LOGS="s3://fleet-logs/incoming/",
    )
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


@pytest.mark.parametrize(
    ("cron", "field"),
    [
        ("0 25 * * *", "hour"),
        ("61 3 * * *", "minute"),
        ("0 3 32 * *", "day-of-month"),
        ("0 3 * 13 *", "month"),
        ("0 3 * * funday", "day-of-week"),
    ],
)
def test_bad_cron_names_the_field(cron: str, field: str) -> None:
    with pytest.raises(
        ValueError, match=rf"DRIVETRAIN_RETRAIN_CRON='{re.escape(cron)}': cron field {field}"
    ):
        check_cron(cron, field="DRIVETRAIN_RETRAIN_CRON")


def test_bad_cron_shapes() -> None:
    with pytest.raises(
        ValueError, match=r"schedule='0 3 \* \*' has 4 fields; a cron expression has 5"
    ):
        check_cron("0 3 * *")
    with pytest.raises(ValueError, match="is not a cron alias"):
        check_cron("@sometimes")
    assert check_cron("  0  3 * * *") == "0 3 * * *"
    assert check_cron("@daily") == "@daily"


def test_packaging_with_a_bad_cron_fails_naming_the_setting_and_field(tmp_path: Path) -> None:
    done = _package(tmp_path, DRIVETRAIN_RETRAIN_CRON="0 24 * * *")
    assert done.returncode != 0
    assert "DRIVETRAIN_RETRAIN_CRON='0 24 * * *': cron field hour" in done.stdout + done.stderr
    assert not (tmp_path / "pkg.tgz").exists()


def test_part_store_follows_the_cluster_raw_output_prefix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from flytekit.core.context_manager import FlyteContextManager
    from flytekit.core.data_persistence import FileAccessProvider

    from tasks.data import part_store

    monkeypatch.delenv("DRIVETRAIN_PART_STORE", raising=False)
    monkeypatch.setenv("DRIVETRAIN_HOME", str(tmp_path))
    ctx = FlyteContextManager.current_context()
    remote = FileAccessProvider(
        local_sandbox_dir=str(tmp_path / "sandbox"),
        raw_output_prefix="s3://flyte-data/raw/ab/exec-1",
    )
    with FlyteContextManager.with_context(ctx.with_file_access(remote)):
        assert part_store() == "s3://flyte-data/raw/ab/exec-1/drivetrain-parts"
        monkeypatch.setenv("DRIVETRAIN_PART_STORE", "s3://team-bucket/parts/")
        assert part_store() == "s3://team-bucket/parts"
    monkeypatch.delenv("DRIVETRAIN_PART_STORE")
    local = FileAccessProvider(
        local_sandbox_dir=str(tmp_path / "sandbox"), raw_output_prefix=str(tmp_path / "raw")
    )
    with FlyteContextManager.with_context(ctx.with_file_access(local)):
        assert part_store() == str(tmp_path.resolve() / "parts")
