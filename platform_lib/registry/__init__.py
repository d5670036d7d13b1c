"""MLflow tracking, lineage tags and model registration (see README.md)."""

from platform_lib.registry.lineage import (
    Lineage,
    build_lineage,
    hash_val_split,
    resolve_code_version,
    resolve_flyte_execution_id,
)
from platform_lib.registry.mlflow_store import (
    configure_mlflow,
    log_eval_table,
    log_params,
    log_step_metrics,
    resolve_drivetrain_home,
    resolve_tracking_uri,
    start_training_run,
)
from platform_lib.registry.register import (
    Registration,
    load_champion,
    load_model_version,
    promote_champion,
    register_model_version,
)

__all__ = [
    "Lineage",
    "Registration",
    "build_lineage",
    "configure_mlflow",
    "hash_val_split",
    "load_champion",
    "load_model_version",
    "log_eval_table",
    "log_params",
    "log_step_metrics",
    "promote_champion",
    "register_model_version",
    "resolve_code_version",
    "resolve_drivetrain_home",
    "resolve_flyte_execution_id",
    "resolve_tracking_uri",
    "start_training_run",
]
