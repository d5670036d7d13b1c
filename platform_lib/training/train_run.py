"""One rank of a training run as the training task runs it: train, streaming metrics from rank 0.

Called on every rank of an elastic launch (torchrun, Flyte's `Elastic`). Rank 0 records the
dataset it trained on, streams metrics to MLflow while it trains (`MlflowMetricsStream`) and,
when `train()` returns, closes the stream and names its MLflow run in `mlflow_run.json`. The
goodput report (baseline comparison, MLflow logging, `goodput.html`) is finished later, off the
accelerators, by the registration task (`finish_goodput`, docs/goodput.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from platform_lib.faults import check_faults, record_faults
from platform_lib.telemetry.mlflow_goodput import MlflowMetricsStream, record_streamed_run
from platform_lib.training.config import TrainConfig, hash_config
from platform_lib.training.train import train
from platform_lib.training.trained_on import record_trained_on

__all__ = ["train_and_publish"]


def train_and_publish(
    config: TrainConfig, dataset_dir: str | Path, run_dir: str | Path, *, dataset_hash: str
) -> Path:
    """Train this rank; rank 0 streams its metrics to MLflow and records the run for what follows.

    `run_dir` is the run folder the launch's ranks share; `dataset_hash` (the hash the
    dataset's manifest names) tags the MLflow run and keys the baseline's workload.

    Returns:
        The run folder. Rank 0 adds `trained_on.json` (the dataset's hash, its view lineage),
        `faults.json` (the DRIVETRAIN_FAULTS it trained with, `platform_lib.faults.RECORD`)
        and `mlflow_run.json` (the MLflow run it streamed to, the dataset's hash).

    Raises:
        FaultSpecError: DRIVETRAIN_FAULTS is invalid or names a rank beyond the world size.
    """
    run_dir = Path(run_dir)
    check_faults(world_size=int(os.environ.get("WORLD_SIZE", "1")))  # set by torch elastic
    main = int(os.environ.get("RANK", "0")) == 0
    stream = None
    if main:
        record_faults(run_dir)  # a later cached run warns that its faults were not injected
        record_trained_on(run_dir, dataset_dir)  # registration names the view and its parent
        if config.metrics.mlflow_interval:
            stream = MlflowMetricsStream(
                run_name=f"train-{config.preset}-{hash_config(config)[:8]}",
                tags={"dataset_hash": dataset_hash, "preset": config.preset},
            )
    if train(config, str(dataset_dir), str(run_dir), sink=stream) is not None:
        record_streamed_run(run_dir, dataset_hash=dataset_hash, stream=stream)
    return run_dir
