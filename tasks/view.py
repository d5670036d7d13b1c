"""Training-view tasks: train on the dataset re-encoded at the model's camera size.

`choose_training_view` (cached on the dataset hash and the TrainConfig) asks the library
whether the model's camera input is smaller than the dataset's cameras
(`platform_lib.training.trained_on.choose_training_view`); `build_training_view` (cached on
the dataset hash and the view's parameters only, so a changed learning rate reuses the view)
builds it, or hands the dataset on unchanged (same folder, same hash) when there is none. The
full-size dataset stays the source of truth: evaluation and registration read it. See
docs/pipeline.md, "Training views".
"""

from __future__ import annotations

from pathlib import Path

from flytekit import Cache, Resources, current_context, task
from flytekit.types.directory import FlyteDirectory

from platform_lib.errors import UserError
from platform_lib.shards.check import explain_dataset_error
from platform_lib.shards.errors import DatasetError
from platform_lib.shards.training_view import ViewConfig, build_view
from platform_lib.training.config import TrainConfig
from platform_lib.training.trained_on import choose_training_view as choose_view
from tasks.data import Dataset
from tasks.errors import download_input, task_errors
from tasks.image import TASK_IMAGE

__all__ = ["build_training_view", "choose_training_view"]


@task(container_image=TASK_IMAGE, cache=Cache(version="1"), retries=2)
def choose_training_view(dataset: Dataset, config: TrainConfig) -> ViewConfig | None:
    """Return the training view of `dataset` for `config`'s model, or None to train on it as is."""
    with task_errors("choosing the training view of the dataset"):
        return choose_view(download_input(dataset, "merge_dataset"), config)


@task(
    container_image=TASK_IMAGE,
    cache=Cache(version="1"),
    retries=2,
    requests=Resources(cpu="1", mem="2Gi"),
)
def build_training_view(dataset: Dataset, view: ViewConfig | None) -> Dataset:
    """Build the training view `view` of `dataset` (validated first); None returns `dataset`.

    The view is a complete dataset (shards, index, manifest naming its parent); its Flyte hash
    is its own dataset hash, so training's cache key follows the view's content.
    """
    with task_errors("building the training view of the dataset"):
        local = download_input(dataset, "merge_dataset")
        if view is None:
            return dataset
        out = Path(current_context().working_directory) / "view"
        try:
            build_view(local, out, view)
        except DatasetError as exc:
            raise explain_dataset_error(exc, "raw_logs") from exc
        except UserError as exc:
            if exc.culprit != "--camera-size":  # the CLI's flag; here the model chose the size
                raise
            raise UserError(
                exc.what,
                "raw_logs",
                "give every frame the same cameras, or train a model whose camera input is no "
                "larger than the smallest camera (overrides model.name)",
            ) from exc
    return FlyteDirectory(str(out))
