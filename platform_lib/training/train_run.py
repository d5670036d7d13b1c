"""One rank of a training run as the training task runs it: train, then (rank 0) publish goodput.

Called on every rank of an elastic launch (torchrun, Flyte's `Elastic`). Rank 0 streams
metrics to MLflow while it trains (`MlflowMetricsStream`), imports what the goodput report
needs in a background thread meanwhile, and when `train()` returns compares the run with its
workload's baseline, logs the report to MLflow and writes `goodput.html`
(`finish_goodput`, docs/goodput.md).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from platform_lib.telemetry.mlflow_goodput import (
    MlflowMetricsStream,
    finish_goodput,
    warm_up_finish,
)
from platform_lib.telemetry.publish import GOODPUT_HTML
from platform_lib.training.config import TrainConfig, hash_config
from platform_lib.training.train import train
from platform_lib.training.trained_on import record_trained_on

__all__ = ["TrainedRun", "train_and_publish"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainedRun:
    """What one rank leaves: the run folder, and on rank 0 the goodput page (else None)."""

    run_dir: Path
    goodput_html: Path | None


def train_and_publish(
    config: TrainConfig, dataset_dir: str | Path, run_dir: str | Path, *, dataset_hash: str
) -> TrainedRun:
    """Train this rank; on rank 0 publish the run's goodput report before returning.

    Args:
        config: the run's TrainConfig.
        dataset_dir: the published dataset (its manifest names `dataset_hash`).
        run_dir: the run folder shared by the launch's ranks.
        dataset_hash: the dataset's hash (MLflow tags, the baseline's workload key).

    Returns:
        The run folder (rank 0 adds `trained_on.json`: the dataset's hash, its view lineage),
        and on rank 0 its `goodput.html`.

    Raises:
        Whatever `train()` raises; `finish_goodput`'s errors on rank 0 (a missing report).
    """
    run_dir = Path(run_dir)
    main = int(os.environ.get("RANK", "0")) == 0  # set by torch elastic
    stream = None
    if main:
        record_trained_on(run_dir, dataset_dir)  # registration names the view and its parent
        threading.Thread(target=_warm_up, name="goodput-warm-up", daemon=True).start()
        if config.metrics.mlflow_interval:
            stream = MlflowMetricsStream(
                run_name=f"train-{config.preset}-{hash_config(config)[:8]}",
                tags={"dataset_hash": dataset_hash, "preset": config.preset},
            )
    if train(config, str(dataset_dir), str(run_dir), sink=stream) is None:
        return TrainedRun(run_dir, None)
    finish_goodput(run_dir, config=config, dataset_hash=dataset_hash, stream=stream)
    return TrainedRun(run_dir, run_dir / GOODPUT_HTML)


def _warm_up() -> None:
    try:
        warm_up_finish()
    except Exception:  # noqa: BLE001 - best effort: finish_goodput imports them again
        logger.warning("warming up for the goodput report failed", exc_info=True)
