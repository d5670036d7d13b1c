"""Lineage: the content hashes and ids that tie a model version to what produced it.

Every registered model version carries these tags (see `build_lineage`):

    dataset_hash        manifest["dataset_hash"] of the dataset it was trained on
    val_split_hash      sha256 over the content hashes of the validation samples (`hash_val_split`)
    raw_logs_hash       content hash of the raw-log location the dataset was built from
    source_log_hashes   JSON {log_id: content_hash} from manifest["source_logs"]
    code_version        git commit of the caller's work tree (suffix "+dirty" when it has
                        uncommitted changes), `$DRIVETRAIN_CODE_VERSION`, or "drivetrain==<version>"
    config_hash         sha256 of the canonical JSON of the TrainConfig
                        (`platform_lib.training.config.hash_config`)
    seed                training seed
    flyte_execution_id  Flyte execution name (given by the task), or "local"

Raw-log content keys: `platform_lib.sources.hashing.hash_raw_location`.
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

from platform_lib.redact import redact
from platform_lib.shards.manifest import Manifest
from platform_lib.shards.reader import open_dataset
from platform_lib.training.config import hash_config

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
    """manifest dataset_hash of the training dataset"""
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
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
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
    """
    logs = {log.log_id: log.content_hash for log in manifest.source_logs}
    return Lineage(
        dataset_hash=manifest.dataset_hash,
        val_split_hash=hash_val_split(dataset_dir),
        raw_logs_hash=raw_logs_hash or "unknown",
        source_log_hashes=json.dumps(logs, sort_keys=True, separators=(",", ":")),
        code_version=code_version or resolve_code_version(),
        config_hash=hash_config(config),
        seed=int(seed),
        flyte_execution_id=execution_id or resolve_flyte_execution_id(),
    )
