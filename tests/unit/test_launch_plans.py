"""Launch plans: the cron schedule as serialised, team defaults, and bad cron expressions
failing at serialisation time with the field named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from platform_lib.scheduling import check_cron


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
