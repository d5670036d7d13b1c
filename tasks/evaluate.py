"""Evaluation task: per-class BEV IoU and mean IoU on the validation split, next to the prior.

Its output is the evaluation folder: eval_metrics.json/.csv and frame_counts.json (per-frame
counts by class and range band, which the champion gate of `register_model` pairs).
"""

from __future__ import annotations

from pathlib import Path

from flytekit import Cache, Resources, current_context, task
from flytekit.types.directory import FlyteDirectory

from platform_lib.shards.check import explain_dataset_error
from platform_lib.shards.errors import DatasetError
from platform_lib.training.config import TrainConfig
from platform_lib.training.evaluate import evaluate
from tasks.errors import download_input, task_errors
from tasks.image import TASK_IMAGE

__all__ = ["evaluate_model"]


@task(
    container_image=TASK_IMAGE,
    cache=Cache(version="2"),
    retries=2,
    requests=Resources(cpu="2", mem="4Gi"),
)
def evaluate_model(
    dataset: FlyteDirectory, run: FlyteDirectory, config: TrainConfig
) -> FlyteDirectory:
    """Evaluate the run's weights on `config.data.val_split`; return the evaluation folder.

    A dataset that fails its checks while read (a shard whose bytes differ from its index, a
    link out of the folder) ends the task in one line naming it (`explain_dataset_error`).
    """
    url = str(dataset.remote_source or dataset.path)
    with task_errors("evaluating on the dataset", url):
        dataset_dir = download_input(dataset, "merge_dataset")
        run_dir = download_input(run, "train_model")
        out = Path(current_context().working_directory) / "eval"
        try:
            evaluate(
                str(Path(run_dir) / "model.safetensors"),
                config,
                dataset_dir,
                split=config.data.val_split,
                output_dir=str(out),
            )
        except DatasetError as exc:
            raise explain_dataset_error(exc, url) from exc
    return FlyteDirectory(str(out))
