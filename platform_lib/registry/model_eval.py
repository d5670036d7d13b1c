"""Evaluate any registered model version on any dataset version; attach the result to the version.

The evaluation workflow's library side (`workflows/evaluation.py`): a model URI
(`models:/<name>/<version>` or `models:/<name>@<alias>`) is resolved to its version, a slice spec
to its canonical JSON, a dataset to its manifest hash; these three are the cache key. The
result (per-frame counts, the per-slice table with log-bootstrap intervals, the spec) becomes
the version's tags `eval.<dataset_hash[:12]>.*` and the artifact
`evaluations/<dataset_hash[:12]>-<spec_hash[:8]>-<split>/evaluation.json` of the version's run,
so versions can be compared on the same data later.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from platform_lib.errors import UserError
from platform_lib.evaluation.bootstrap import BootstrapConfig, summarize_slices
from platform_lib.evaluation.metrics import MetricSpec
from platform_lib.evaluation.slices import load_slice_spec, parse_slice_spec
from platform_lib.evaluation.text import format_metric
from platform_lib.mlflow_store import configure_mlflow, log_json, redact_values
from platform_lib.registry.gate import DEFAULT_SLICE_SPEC, compute_masks
from platform_lib.shards.manifest import load_manifest
from platform_lib.storage import call_with_retries

__all__ = [
    "EVAL_TAG_PREFIX",
    "attach_evaluation",
    "evaluate_model_version",
    "read_slice_spec",
    "resolve_dataset_hash",
    "resolve_model_version",
    "summarize",
]

EVAL_TAG_PREFIX = "eval."
_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:/(?P<version>[0-9]+)|@(?P<alias>[A-Za-z0-9_-]+))$")


def resolve_model_version(model_uri: str, client: MlflowClient | None = None) -> str:
    """Return `models:/<name>/<version>` of a version or alias URI (an alias resolved now).

    Raises:
        UserError: the URI is malformed, or names no registered model, version or alias.
    """
    match = _URI.match(model_uri.strip())
    fix = (
        "use models:/<name>/<version> or models:/<name>@<alias> of a registered model "
        "(`make mlflow-ui`, Models, lists them)"
    )
    if match is None:
        raise UserError(f"malformed model URI {model_uri!r}", "model_uri", fix)
    client = client or configure_mlflow()
    name = match["name"]
    wanted = f"version {match['version']}" if match["version"] else f"alias {match['alias']!r}"
    try:
        if match["version"]:
            version = client.get_model_version(name, match["version"]).version
        else:
            version = client.get_model_version_by_alias(name, match["alias"]).version
    except MlflowException as exc:
        reason = " ".join(str(exc).split())[:200]
        raise UserError(
            f"model URI does not resolve: registered model {name!r} has no {wanted} ({reason})",
            "model_uri",
            fix,
        ) from None
    return f"models:/{name}/{version}"


def read_slice_spec(spec: str) -> str:
    """Return the canonical JSON of the slice spec file `spec` ("": the built-in spec).

    Raises:
        SliceSpecError: unknown attribute, empty slice, bad value or syntax (one line).
        NotRegularFileError, OSError: the file cannot be read as a regular file.
    """
    parsed = load_slice_spec(spec) if spec else DEFAULT_SLICE_SPEC
    return json.dumps(parsed.model_dump(mode="json", exclude_none=True), sort_keys=True)


def resolve_dataset_hash(dataset: str) -> str:
    """Return the dataset hash in the manifest of the dataset folder or URL `dataset`.

    Transient store errors are retried (`storage.call_with_retries`); what still fails is
    mapped as `drivetrain data inspect` maps it (`errors.to_user_error`, then
    `storage.explain_location_error`, then `shards.check.explain_dataset_error`).

    Raises:
        UserError: no such local folder, not a dataset (no manifest.json, a FIFO, a file),
            a bad manifest, bad credentials or an unreachable store; one line naming `dataset`.
    """
    from platform_lib.shards.commands import check_dataset_folder

    check_dataset_folder(dataset)
    try:
        manifest = call_with_retries(
            lambda: load_manifest(dataset), what="reading the manifest of", url=dataset
        )
    except Exception as exc:
        user = _explain_dataset_read_error(exc, dataset)
        if user is None:
            raise
        raise user from exc
    return manifest.dataset_hash


def evaluate_model_version(
    model_version: str,
    dataset_dir: str | os.PathLike[str],
    spec_json: str,
    *,
    split: str = "val",
    bootstrap: BootstrapConfig | None = None,
) -> dict[str, Any]:
    """Evaluate a registered version on a split of a local dataset; return the result.

    Args:
        model_version: `models:/<name>/<version>` (`resolve_model_version`).
        dataset_dir: local published dataset folder.
        spec_json: canonical slice spec (`read_slice_spec`); a user's slices are strict, a
            built-in slice that selects no frame is left out (listed as `skipped_slices`).
        split: the dataset split to evaluate.
        bootstrap: interval settings; None: the defaults.

    Returns:
        Plain data: model, dataset hash, split, spec and its hash, the per-slice table rows
        ({"slice", "metric", **Interval}), built-in slices left out, and the per-frame counts
        (`FrameCounts.to_dict`).

    Raises:
        SliceSpecError: a slice needs an attribute the dataset lacks or selects no frame.
        UserError: the split is empty (checked before the model is loaded). The errors of
            `load_model_version`.
    """
    from platform_lib.registry.register import load_model_version
    from platform_lib.training.evaluate import count_model_frames

    spec = parse_slice_spec(json.loads(spec_json))
    manifest = load_manifest(os.fspath(dataset_dir))
    splits = dict(manifest.splits.counts)
    if not splits.get(split):
        present = ", ".join(name for name, count in sorted(splits.items()) if count)
        raise UserError(
            f"the dataset has no samples in split {split!r} (splits present: {splits})",
            "split",
            f"pick one of {present}, or rebuild the dataset with a {split!r} split",
        )
    _, cfg, local = load_model_version(model_version)
    counts = count_model_frames(str(local / "model.safetensors"), cfg, str(dataset_dir), split)
    built_in = spec_json == read_slice_spec("")
    masks, skipped = compute_masks(dataset_dir, counts, None if built_in else spec)
    # mean IoU in every band, then each class's IoU over all cells
    metrics = [MetricSpec(band=b) for b in counts.bands]
    metrics += [MetricSpec(class_group=c) for c in counts.classes]
    rows = summarize_slices(counts, masks, metrics, bootstrap or BootstrapConfig())
    return {
        "model": model_version,
        "dataset_hash": manifest.dataset_hash,
        "split": split,
        "spec": json.loads(spec_json),
        "spec_hash": hashlib.sha256(spec_json.encode()).hexdigest(),
        "num_frames": len(counts.keys),
        "skipped_slices": skipped,
        "rows": rows,
        "frame_counts": counts.to_dict(),
    }


def attach_evaluation(result: dict[str, Any], client: MlflowClient | None = None) -> dict[str, str]:
    """Tag the evaluated version with `eval.<dataset_hash[:12]>.*` and log the result's JSON.

    Tags: `.split`, `.num_frames`, `.spec_hash`, `.dataset_hash` and `.<slice>.iou/mean/all`
    per slice (estimate with interval, or the reason there is none). The artifact goes to the
    version's run under `evaluations/`.

    Returns:
        The tags set.
    """
    client = client or configure_mlflow()
    name, version = result["model"].removeprefix("models:/").rsplit("/", 1)
    prefix = f"{EVAL_TAG_PREFIX}{result['dataset_hash'][:12]}."
    tags = {
        f"{prefix}dataset_hash": result["dataset_hash"],
        f"{prefix}split": result["split"],
        f"{prefix}num_frames": str(result["num_frames"]),
        f"{prefix}spec_hash": result["spec_hash"],
    }
    primary = MetricSpec().label
    tags |= {
        f"{prefix}{r['slice']}.{r['metric']}": format_metric(r)
        for r in result["rows"]
        if r["metric"] == primary
    }
    for key, value in sorted(redact_values(tags).items()):
        client.set_model_version_tag(name, version, key, value)
    run_id = client.get_model_version(name, version).run_id
    folder = f"{result['dataset_hash'][:12]}-{result['spec_hash'][:8]}-{result['split']}"
    if run_id:
        log_json(client, run_id, result, f"evaluations/{folder}/evaluation.json")
    return tags


def summarize(result: dict[str, Any]) -> str:
    """Return one line: the version, the dataset, the mean IoU over all frames, the tag prefix."""
    overall = next(
        r for r in result["rows"] if r["slice"] == "all" and r["metric"] == "iou/mean/all"
    )
    return (
        f"{result['model']} on dataset {result['dataset_hash'][:12]} ({result['split']}, "
        f"{result['num_frames']} frames): iou/mean/all {format_metric(overall)}; tags "
        f"{EVAL_TAG_PREFIX}{result['dataset_hash'][:12]}.*"
    )


def _explain_dataset_read_error(error: BaseException, dataset: str) -> UserError | None:
    """The one-line error of reading a dataset's manifest, as `drivetrain data inspect` gives it."""
    from platform_lib.errors import to_user_error
    from platform_lib.shards.check import explain_dataset_error
    from platform_lib.shards.errors import DatasetError
    from platform_lib.storage import explain_location_error

    user = to_user_error(error, where=dataset) or explain_location_error(error, dataset)
    if user is None and isinstance(error, DatasetError):
        user = explain_dataset_error(error, dataset)
    return user
