"""Data tasks: raw logs -> content hash -> validated dataset.

Cache keys: `materialize_raw_logs` on (source, raw_logs, synthetic config); `hash_raw_logs` is
deliberately NOT cached (it is the cheap probe that tells whether the raw bytes changed);
`build_dataset` on (source, raw_logs_hash, config) with the location `raw_logs` excluded
(`Cache(ignored_inputs=...)`), so moving or copying identical logs is a cache hit and changing
one byte is a miss. Its output carries the manifest's dataset_hash as its Flyte hash, so
downstream cache keys follow the dataset's content, not the temporary folder it landed in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from flytekit import Cache, HashMethod, Resources, current_context, task
from flytekit.core.context_manager import FlyteContextManager
from flytekit.types.directory import FlyteDirectory

from platform_lib import pipeline
from platform_lib.registry.lineage import hash_raw_location
from platform_lib.shards import BuildConfig, load_manifest
from platform_lib.shards import build_dataset as build_shards
from platform_lib.sources.synthetic import SyntheticConfig, write_synthetic_logs
from tasks.errors import recoverable_storage_errors

__all__ = ["build_dataset", "dataset_config", "hash_raw_logs", "materialize_raw_logs"]


def _dataset_hash(directory: FlyteDirectory) -> str:
    return load_manifest(directory.path)["dataset_hash"]


#: A dataset folder whose Flyte literal hash is its manifest dataset_hash.
Dataset = Annotated[FlyteDirectory, HashMethod(_dataset_hash)]


@task(cache=Cache(version="1"), retries=3, requests=Resources(cpu="1", mem="2Gi"))
def materialize_raw_logs(source: str, raw_logs: str, synthetic: SyntheticConfig) -> str:
    """Return the raw-log location: `raw_logs`, or freshly generated synthetic logs when empty."""
    pipeline.check_source(source)
    if raw_logs:
        return raw_logs
    if source != "synthetic":
        raise ValueError(f"input raw_logs is empty: source={source!r} needs a folder of raw logs")
    local = Path(current_context().working_directory) / "synthetic_logs"
    write_synthetic_logs(synthetic, local)
    file_access = FlyteContextManager.current_context().file_access
    remote = file_access.get_random_remote_directory()
    with recoverable_storage_errors(f"uploading synthetic logs to {remote}"):
        file_access.put_data(str(local), remote, is_multipart=True)
    return remote


@task(retries=3)
def hash_raw_logs(source: str, raw_logs: str) -> str:
    """Return the content hash of the raw logs (uncached on purpose: it detects changes)."""
    pipeline.check_source(source)
    with recoverable_storage_errors(f"hashing raw_logs={raw_logs!r}"):
        return hash_raw_location(raw_logs)


@task(cache=Cache(version="1"), retries=1)
def dataset_config(source: str) -> BuildConfig:
    """Return the dataset build config of `source` (its train/val split rule)."""
    return pipeline.resolve_build_config(source)


@task(
    cache=Cache(version="1", ignored_inputs=("raw_logs",)), retries=3,
    requests=Resources(cpu="2", mem="4Gi"),
)
def build_dataset(source: str, raw_logs: str, raw_logs_hash: str, config: BuildConfig) -> Dataset:
    """Build and validate the dataset from `raw_logs`; fail if they changed since hashing."""
    out = Path(current_context().working_directory) / "dataset"
    with recoverable_storage_errors(f"reading raw_logs={raw_logs!r}"):
        local = pipeline.fetch_raw_logs(raw_logs, current_context().working_directory)
        build_shards(source, local, out, config)
        pipeline.check_raw_logs_unchanged(raw_logs, raw_logs_hash)
    pipeline.check_dataset(out)
    return FlyteDirectory(str(out))
