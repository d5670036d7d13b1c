"""Tasks of the evaluation workflow: three uncached probes and one cached evaluation.

The probes resolve what the cache key is made of: the model URI to its version (an alias moves),
the dataset location to its manifest hash, the slice spec file to its canonical JSON. The
evaluation is cached on (model version, dataset hash, spec, split); the dataset's location is
left out of the key, so the same dataset at another path is a cache hit. Logic:
`platform_lib.registry.model_eval`.
"""

from __future__ import annotations

from flytekit import Cache, Resources, current_context, task
from flytekit.types.directory import FlyteDirectory

from platform_lib.errors import UserError
from platform_lib.registry.model_eval import (
    attach_evaluation,
    evaluate_model_version,
    read_slice_spec,
    resolve_dataset_hash,
    resolve_model_version,
    summarize,
)
from platform_lib.shards.check import explain_dataset_error
from platform_lib.shards.errors import DatasetError
from platform_lib.storage import fetch_folder
from tasks.errors import task_errors
from tasks.image import TASK_IMAGE
from tasks.secrets import MLFLOW_SECRETS, mlflow_credentials

__all__ = [
    "champion_uri",
    "dataset_location",
    "evaluate_version",
    "hash_dataset",
    "resolve_model",
    "resolve_slice_spec",
]


@task(container_image=TASK_IMAGE, retries=3, secret_requests=MLFLOW_SECRETS)
def resolve_model(model_uri: str) -> str:
    """Return `models:/<name>/<version>` of `model_uri` (uncached: an alias may have moved)."""
    with task_errors("resolving the model URI"), mlflow_credentials():
        return resolve_model_version(model_uri)


@task(container_image=TASK_IMAGE, retries=3)
def hash_dataset(dataset: str) -> str:
    """Return the dataset hash of the dataset at `dataset` (uncached: the location may change)."""
    with task_errors("reading the dataset manifest", dataset):
        if not dataset:
            raise UserError(
                "no dataset given", "dataset", "pass --dataset <published dataset folder or URL>"
            )
        return resolve_dataset_hash(dataset)


@task(container_image=TASK_IMAGE, retries=1)
def resolve_slice_spec(spec: str) -> str:
    """Return the canonical JSON of the slice spec file `spec`, "" for the built-in spec."""
    with task_errors("reading the slice spec", spec):
        return read_slice_spec(spec)


@task(container_image=TASK_IMAGE, cache=Cache(version="1"), retries=1)
def champion_uri(source: str, model_name: str) -> str:
    """Return `models:/<model_name>@champion` ("" names "drivetrain-bev-<source>")."""
    return f"models:/{model_name or f'drivetrain-bev-{source}'}@champion"


@task(container_image=TASK_IMAGE, cache=Cache(version="1"), retries=1)
def dataset_location(dataset: FlyteDirectory) -> str:
    """Return the location of a dataset output of `merge_dataset` (for `evaluate_version`)."""
    return str(dataset.remote_source or dataset.path)


@task(
    container_image=TASK_IMAGE,
    cache=Cache(version="1", ignored_inputs=("dataset",)),
    retries=2,
    requests=Resources(cpu="2", mem="4Gi"),
    secret_requests=MLFLOW_SECRETS,
)
def evaluate_version(
    model_version: str, dataset: str, dataset_hash: str, spec: str, split: str
) -> str:
    """Evaluate `model_version` on `split` of the dataset; tag the version; return a summary line.

    Args:
        model_version: `models:/<name>/<version>` (`resolve_model`).
        dataset: location of the dataset (not in the cache key).
        dataset_hash: its hash (`hash_dataset`): in the cache key.
        spec: canonical slice spec JSON (`resolve_slice_spec`).
        split: dataset split to evaluate.
    """
    with task_errors("evaluating the model on the dataset", dataset), mlflow_credentials():
        local = fetch_folder(dataset, current_context().working_directory)
        if resolve_dataset_hash(str(local)) != dataset_hash:
            raise UserError(
                f"the dataset changed while it was evaluated (hash {dataset_hash[:12]} expected)",
                dataset,
                "publish datasets to new folders, then run the evaluation again",
            )
        try:
            result = evaluate_model_version(model_version, local, spec, split=split)
        except DatasetError as exc:  # e.g. a shard whose bytes differ from its index
            raise explain_dataset_error(exc, dataset) from exc
        attach_evaluation(result)
        return summarize(result)
