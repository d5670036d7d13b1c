"""Lineage: the content hashes and ids that tie a model version to what produced it.

`build_lineage` gathers the tags every registered model version carries (the fields of
`Lineage`); what each tag holds: docs/pipeline.md, "Lineage and the registry".
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from platform_lib.errors import UserError
from platform_lib.redact import redact
from platform_lib.shards.manifest import Manifest
from platform_lib.shards.reader import open_dataset
from platform_lib.training.config import hash_config
from platform_lib.training.trained_on import TrainedOn

__all__ = [
    "Lineage",
    "build_lineage",
    "hash_val_split",
    "resolve_code_version",
    "resolve_flyte_execution_id",
]


@dataclass(kw_only=True, frozen=True)
class Lineage:
    """What a model version was made from; every field becomes an MLflow tag."""

    dataset_hash: str
    """manifest dataset_hash of the dataset built from the raw logs (evaluated on; the parent
    of a training view)"""
    val_split_hash: str
    """sha256 over the validation samples' content hashes; identifies the validation set"""
    raw_logs_hash: str
    """content hash of the raw-log location (`platform_lib.sources.hashing.hash_raw_location`)"""
    source_log_hashes: str
    """JSON object {log_id: raw content hash} from the manifest"""
    code_version: str
    """git commit (+dirty) or drivetrain==<version>"""
    config_hash: str
    """sha256 of the canonical JSON of the training config"""
    seed: int
    """training seed"""
    flyte_execution_id: str
    """Flyte execution name, "local" outside Flyte"""
    train_dataset_hash: str = "unknown"
    """manifest dataset_hash of the dataset training read: the training view's, else
    dataset_hash; "unknown" when the run folder does not record it"""
    train_view: str = "none"
    """JSON of the training view's lineage (parent_dataset_hash, camera size, crop anchor,
    quality, encoder); "none" when training read dataset_hash itself"""

    def to_tags(self) -> dict[str, str]:
        """Return the lineage as MLflow tags (all values strings, `redact`ed)."""
        return {f.name: redact(str(getattr(self, f.name))) for f in dataclasses.fields(self)}


def hash_val_split(dataset_dir: str | Path, split: str = "val") -> str:
    r"""Return the identity of a dataset's validation set.

    sha256 over the sorted `key\0content_hash\n` of the index rows of `split`, so two datasets
    whose validation samples are byte-identical share it even if their train splits differ.

    Raises:
        ManifestMissingError: `dataset_dir` is not a built dataset (a FileNotFoundError).
        DatasetError: the manifest or index does not follow docs/format.md.
        ValueError: the split has no samples.
    """
    index = open_dataset(dataset_dir).index
    table = (
        index.filter(pc.equal(index["split"], split)).select(["key", "content_hash"]).to_pydict()
    )
    rows = sorted(zip(table["key"], table["content_hash"], strict=True))
    if not rows:
        raise ValueError(f"dataset {dataset_dir} has no {split!r} samples in index.parquet")
    return hashlib.sha256("".join(f"{k}\0{h}\n" for k, h in rows).encode()).hexdigest()


def resolve_code_version(root: str | Path | None = None) -> str:
    """Return the version of the code that trained: a git commit, or the package version.

    Args:
        root: a git work tree to ask (the caller's checkout, e.g. the task layer's); None:
            `$DRIVETRAIN_CODE_VERSION` (set it when building an image from a commit), else
            "drivetrain==<installed version>". The library never looks for a checkout itself.

    A work tree with uncommitted changes to tracked files gets the suffix "+dirty"; a `root`
    outside git falls back like None does.
    """
    fallback = (
        os.environ.get("DRIVETRAIN_CODE_VERSION") or f"drivetrain=={metadata.version('drivetrain')}"
    )
    if root is None:
        return fallback
    try:
        commit, dirty = [
            subprocess.run(
                ["git", "-C", str(root), *args],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout.strip()
            for args in (["rev-parse", "HEAD"], ["status", "--porcelain", "--untracked-files=no"])
        ]
        return f"{commit}+dirty" if dirty else commit
    except (OSError, subprocess.SubprocessError):
        return fallback


def resolve_flyte_execution_id() -> str:
    """Return the Flyte execution name from the pod's environment, or "local" outside a cluster.

    Flyte sets `FLYTE_INTERNAL_EXECUTION_ID` in every task pod; the task layer passes the
    execution id explicitly where it knows it (`record_training_run(execution_id=...)`), so
    the library never imports flytekit.
    """
    return os.environ.get("FLYTE_INTERNAL_EXECUTION_ID") or "local"


def build_lineage(
    *,
    manifest: Manifest,
    dataset_dir: str | Path,
    config: Any,
    seed: int,
    raw_logs_hash: str = "",
    execution_id: str | None = None,
    code_version: str | None = None,
    trained_on: TrainedOn | None = None,
) -> Lineage:
    """Collect the lineage of a model trained on `dataset_dir` with `config`.

    Args:
        manifest: the dataset's manifest (`platform_lib.shards.manifest.load_manifest`).
        dataset_dir: local dataset folder (for the validation split hash).
        config: the training config dataclass.
        seed: training seed.
        raw_logs_hash: content hash of the raw-log location ("" when unknown).
        execution_id: Flyte execution id; `resolve_flyte_execution_id()` when None.
        code_version: version of the training code; `resolve_code_version()` when None.
        trained_on: the dataset training read (`load_trained_on` of the run folder): this
            dataset or a training view of it; None when unknown.

    Raises:
        UserError: `trained_on` is neither this dataset nor a view of it (names both hashes).
    """
    logs = {log.log_id: log.content_hash for log in manifest.source_logs}
    train_view = _train_view(manifest, trained_on)
    return Lineage(
        dataset_hash=manifest.dataset_hash,
        val_split_hash=hash_val_split(dataset_dir),
        raw_logs_hash=raw_logs_hash or "unknown",
        source_log_hashes=json.dumps(logs, sort_keys=True, separators=(",", ":")),
        code_version=code_version or resolve_code_version(),
        config_hash=hash_config(config),
        seed=int(seed),
        flyte_execution_id=execution_id or resolve_flyte_execution_id(),
        train_dataset_hash=trained_on.dataset_hash if trained_on else "unknown",
        train_view=train_view,
    )


def _train_view(manifest: Manifest, trained_on: TrainedOn | None) -> str:
    """Return the train_view tag: the view's lineage as JSON, "none" for the dataset itself."""
    if trained_on is None or (
        trained_on.view is None and trained_on.dataset_hash == manifest.dataset_hash
    ):
        return "none"
    if trained_on.view is None or trained_on.view.parent_dataset_hash != manifest.dataset_hash:
        raise UserError(
            f"the run trained on dataset {trained_on.dataset_hash[:16]}..., which is neither "
            f"dataset {manifest.dataset_hash[:16]}... nor a training view of it",
            "run",
            "register the run with the dataset its training read was built from",
        )
    return json.dumps(
        trained_on.view.model_dump(mode="json"), sort_keys=True, separators=(",", ":")
    )
