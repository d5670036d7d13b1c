"""Launch plans: nightly incremental retraining, on-demand runs, the champion on each new dataset.

`drivetrain_scheduled_retrain` runs on a cron schedule over the raw-log location new logs
land in, building only logs it has not built before; `drivetrain_on_demand` carries the
team's defaults; `drivetrain_champion_eval` evaluates the champion on the dataset of the same
raw-log location after the retraining (its build is a cache hit of the retraining's). Registration-time
settings (read at import by `pyflyte package` / `register`): DRIVETRAIN_RETRAIN_CRON (default
"0 3 * * *", UTC), DRIVETRAIN_CHAMPION_EVAL_CRON (default "0 5 * * *"),
DRIVETRAIN_RETRAIN_RAW_LOGS, DRIVETRAIN_RETRAIN_SOURCE; a bad cron expression fails the
import naming the setting and field. Registering and activating: docs/pipeline.md.
"""

from __future__ import annotations

import os

from flytekit import CronSchedule, LaunchPlan

from platform_lib.scheduling import check_cron
from workflows.evaluation import evaluate_champion_on_raw_logs
from workflows.training_pipeline import training_pipeline

__all__ = [
    "champion_eval",
    "champion_eval_plan",
    "on_demand",
    "on_demand_plan",
    "scheduled_retrain",
    "scheduled_retrain_plan",
]

#: Team defaults of on-demand runs (overridable per launch).
TEAM_DEFAULTS = {"source": "synthetic", "preset": "synthetic_default", "seed": 0}


def scheduled_retrain_plan(
    cron: str,
    raw_logs: str,
    *,
    source: str = "synthetic",
    name: str = "drivetrain_scheduled_retrain",
) -> LaunchPlan:
    """Return the launch plan retraining on `raw_logs` on the cron schedule `cron`.

    Raises:
        ValueError: `cron` is not a valid cron expression (naming the field), or `raw_logs`
            is empty (a schedule needs a location where logs arrive).
    """
    schedule = check_cron(cron, field="DRIVETRAIN_RETRAIN_CRON")
    if not raw_logs:
        raise ValueError(
            "DRIVETRAIN_RETRAIN_RAW_LOGS is empty: the scheduled retraining needs "
            "the folder (e.g. s3://bucket/raw-logs/) where new logs arrive"
        )
    return LaunchPlan.get_or_create(
        workflow=training_pipeline,
        name=name,
        schedule=CronSchedule(schedule=schedule),
        fixed_inputs={"source": source, "raw_logs": raw_logs},
    )


def champion_eval_plan(
    cron: str,
    raw_logs: str,
    *,
    source: str = "synthetic",
    name: str = "drivetrain_champion_eval",
) -> LaunchPlan:
    """Return the launch plan evaluating the champion on the dataset of `raw_logs` on `cron`.

    Schedule it after the retraining's (`scheduled_retrain_plan`) over the same `raw_logs`:
    the dataset build is then a cache hit and the champion is the one the retraining left.

    Raises:
        ValueError: `cron` is not a valid cron expression (naming the field), or `raw_logs`
            is empty.
    """
    schedule = check_cron(cron, field="DRIVETRAIN_CHAMPION_EVAL_CRON")
    if not raw_logs:
        raise ValueError(
            "DRIVETRAIN_RETRAIN_RAW_LOGS is empty: the champion evaluation needs the folder "
            "the scheduled retraining reads"
        )
    return LaunchPlan.get_or_create(
        workflow=evaluate_champion_on_raw_logs,
        name=name,
        schedule=CronSchedule(schedule=schedule),
        fixed_inputs={"source": source, "raw_logs": raw_logs},
    )


def on_demand_plan(name: str = "drivetrain_on_demand", **defaults) -> LaunchPlan:
    """Return the on-demand launch plan with the team defaults (`TEAM_DEFAULTS` + `defaults`)."""
    return LaunchPlan.get_or_create(
        workflow=training_pipeline, name=name, default_inputs={**TEAM_DEFAULTS, **defaults}
    )


scheduled_retrain = scheduled_retrain_plan(
    os.environ.get("DRIVETRAIN_RETRAIN_CRON", "0 3 * * *"),
    os.environ.get("DRIVETRAIN_RETRAIN_RAW_LOGS", "s3://drivetrain-raw-logs/synthetic/"),
    source=os.environ.get("DRIVETRAIN_RETRAIN_SOURCE", "synthetic"),
)
on_demand = on_demand_plan()
champion_eval = champion_eval_plan(
    os.environ.get("DRIVETRAIN_CHAMPION_EVAL_CRON", "0 5 * * *"),
    os.environ.get("DRIVETRAIN_RETRAIN_RAW_LOGS", "s3://drivetrain-raw-logs/synthetic/"),
    source=os.environ.get("DRIVETRAIN_RETRAIN_SOURCE", "synthetic"),
)
