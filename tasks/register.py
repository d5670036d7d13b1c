"""Registration task: MLflow run (params, step metrics, eval table) + model version + aliases."""

from __future__ import annotations

from flytekit import Cache, task
from flytekit.types.directory import FlyteDirectory
from flytekit.types.file import FlyteFile

from platform_lib import pipeline
from platform_lib.registry.record import record_training_run
from platform_lib.training.config import TrainConfig
from tasks.errors import recoverable_storage_errors

__all__ = ["register_model"]


@task(cache=Cache(version="1"), retries=3)
def register_model(
    model_name: str,
    source: str,
    raw_logs_hash: str,
    dataset: FlyteDirectory,
    run: FlyteDirectory,
    eval_table: FlyteFile,
    config: TrainConfig,
) -> str:
    """Register the run's model with lineage tags; return `models:/<name>/<version>`."""
    with recoverable_storage_errors("logging to MLflow"):
        registration = record_training_run(
            model_name=pipeline.resolve_model_name(model_name, source),
            run_dir=run.download(), dataset_dir=dataset.download(),
            eval_json=eval_table.download(), config=config, raw_logs_hash=raw_logs_hash,
        )
    return registration.model_uri
