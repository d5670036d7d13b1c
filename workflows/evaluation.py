r"""Evaluate any registered model version (or alias) on any dataset version.

    pyflyte run workflows/evaluation.py evaluate_model \
        --model_uri models:/drivetrain-bev-synthetic@champion --dataset build/ds

Wiring only; tasks in `tasks/evaluation.py`, logic in `platform_lib/registry/model_eval.py`.
The evaluation is cached by (model version, dataset hash, spec, split); results become the
version's tags `eval.<dataset_hash[:12]>.*` and an artifact of its run. See docs/pipeline.md.
"""

from __future__ import annotations

from flytekit import workflow

from tasks.data import (
    build_log_parts,
    dataset_config,
    list_raw_logs,
    materialize_raw_logs,
    merge_dataset,
)
from tasks.evaluation import (
    champion_uri,
    dataset_location,
    evaluate_version,
    hash_dataset,
    resolve_model,
    resolve_slice_spec,
)
from workflows.training_pipeline import DEFAULT_SYNTHETIC

__all__ = ["evaluate_champion_on_raw_logs", "evaluate_model"]


@workflow
def evaluate_model(model_uri: str, dataset: str, spec: str = "", split: str = "val") -> str:
    """Evaluate `model_uri` on `split` of `dataset`; return a one-line summary.

    Args:
        model_uri: `models:/<name>/<version>` or `models:/<name>@<alias>`.
        dataset: a published dataset folder or URL (`drivetrain data build --output ...`).
        spec: slice spec file (.yaml/.json, platform_lib/evaluation/README.md); "" uses the
            built-in slices.
        split: dataset split to evaluate ("val", "train").
    """
    version = resolve_model(model_uri=model_uri)
    dataset_hash = hash_dataset(dataset=dataset)
    spec_json = resolve_slice_spec(spec=spec)
    return evaluate_version(
        model_version=version,
        dataset=dataset,
        dataset_hash=dataset_hash,
        spec=spec_json,
        split=split,
    )


@workflow
def evaluate_champion_on_raw_logs(
    source: str = "synthetic", raw_logs: str = "", model_name: str = "", spec: str = ""
) -> str:
    """Build (a cache hit after the retraining built it) the dataset of `raw_logs`; evaluate the champion.

    Args:
        source: raw-log format.
        raw_logs: the raw-log location the scheduled retraining reads.
        model_name: registered model name; empty: "drivetrain-bev-<source>".
        spec: slice spec file; "" uses the built-in slices.
    """
    build_config = dataset_config(source=source, split="", quarantine=False)
    logs = materialize_raw_logs(source=source, raw_logs=raw_logs, synthetic=DEFAULT_SYNTHETIC)
    present = list_raw_logs(source=source, raw_logs=logs)
    parts = build_log_parts(source, present.logs, present.log_hashes, build_config)
    dataset = merge_dataset(source=source, parts=parts, config=build_config)
    location = dataset_location(dataset=dataset)
    version = resolve_model(model_uri=champion_uri(source=source, model_name=model_name))
    return evaluate_version(
        model_version=version,
        dataset=location,
        dataset_hash=hash_dataset(dataset=location),
        spec=resolve_slice_spec(spec=spec),
        split="val",
    )
