"""Data tasks: raw logs -> content hash -> validated dataset.

Cache keys: `materialize_raw_logs` on (source, raw_logs, synthetic config); `hash_raw_logs`
and `list_raw_logs` are deliberately NOT cached (they are the cheap probes that tell whether
the raw bytes changed and which logs are present); `build_log_part` on (source, log_hash,
config) with the location `log` excluded (`Cache(ignored_inputs=...)`), so moving or copying
identical logs is a cache hit and changing one byte is a miss for that log only;
`merge_dataset` on the part locations, which are content addresses. Its output carries the
manifest's dataset_hash as its Flyte hash, so downstream cache keys follow the dataset's
content, not the temporary folder it landed in.

Fanned-out build (`workflows/training_pipeline.py`): `list_raw_logs` (uncached probe: the logs
present now and their content hashes) -> `build_log_parts`, a map task running
`build_log_part` once per log (on a cluster each log is its own pod, cached by the log's
content hash; everywhere the part lands content-addressed in the part store, so an unchanged
log is never rebuilt, locally either) -> `merge_dataset`, which writes index + manifest over
the parts' shards without copying them (`platform_lib.shards.merge`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, NamedTuple

from flytekit import Cache, HashMethod, Resources, current_context, map_task, task
from flytekit.core.context_manager import FlyteContextManager
from flytekit.types.directory import FlyteDirectory

from platform_lib import pipeline
from platform_lib.registry.lineage import hash_raw_location
from platform_lib.shards import BuildConfig, load_manifest
from platform_lib.shards.merge import build_part, merge_parts
from platform_lib.sources.synthetic import SyntheticConfig, write_synthetic_logs
from tasks.errors import recoverable_storage_errors
from tasks.image import TASK_IMAGE

__all__ = [
    "RawLogList",
    "build_log_part",
    "build_log_parts",
    "dataset_config",
    "hash_raw_logs",
    "list_raw_logs",
    "materialize_raw_logs",
    "merge_dataset",
]


def _dataset_hash(directory: FlyteDirectory) -> str:
    return load_manifest(directory.path)["dataset_hash"]


#: A dataset folder whose Flyte literal hash is its manifest dataset_hash.
Dataset = Annotated[FlyteDirectory, HashMethod(_dataset_hash)]


@task(container_image=TASK_IMAGE, cache=Cache(version="1"), retries=3, requests=Resources(cpu="1", mem="2Gi"))
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


@task(container_image=TASK_IMAGE, retries=3)
def hash_raw_logs(source: str, raw_logs: str) -> str:
    """Return the content hash of the raw logs (uncached on purpose: it detects changes)."""
    pipeline.check_source(source)
    with recoverable_storage_errors(f"hashing raw_logs={raw_logs!r}"):
        return hash_raw_location(raw_logs)


@task(container_image=TASK_IMAGE, cache=Cache(version="1"), retries=1)
def dataset_config(source: str) -> BuildConfig:
    """Return the dataset build config of `source` (its train/val split rule)."""
    return pipeline.resolve_build_config(source)


class RawLogList(NamedTuple):
    """The raw logs present at a location: one folder URL and content hash per log, sorted."""

    logs: list[str]
    log_hashes: list[str]


@task(container_image=TASK_IMAGE, retries=3)
def list_raw_logs(source: str, raw_logs: str) -> RawLogList:
    """Return the logs under `raw_logs` now and their content hashes (uncached: the probe)."""
    with recoverable_storage_errors(f"listing raw_logs={raw_logs!r}"):
        logs = pipeline.list_raw_log_urls(source, raw_logs)
        return RawLogList(logs=logs, log_hashes=[hash_raw_location(log) for log in logs])


@task(
    container_image=TASK_IMAGE, cache=Cache(version="1", ignored_inputs=("log",)), retries=3,
    requests=Resources(cpu="1", mem="2Gi"),
)
def build_log_part(source: str, log: str, log_hash: str, config: BuildConfig) -> str:
    """Build (or find) the part of one raw log in the part store; return its location."""
    with recoverable_storage_errors(f"building the part of raw log {log!r}"):
        local = pipeline.fetch_raw_logs(log, current_context().working_directory)
        part = build_part(source, local, config, log_hash=log_hash)
        if part.built:
            pipeline.check_raw_logs_unchanged(log, log_hash)
    return part.location


def build_log_parts(source, logs, log_hashes, config):
    """The map task over the logs (one `build_log_part` per log; any order, any parallelism)."""
    mapper = map_task(functools.partial(build_log_part, source=source, config=config))
    return mapper(log=logs, log_hash=log_hashes)


@task(container_image=TASK_IMAGE, cache=Cache(version="1"), retries=3, requests=Resources(cpu="1", mem="2Gi"))
def merge_dataset(source: str, parts: list[str], config: BuildConfig) -> Dataset:
    """Write index + manifest over `parts` (no shard bytes copied) and validate the dataset."""
    out = Path(current_context().working_directory) / "dataset"
    with recoverable_storage_errors("reading the parts' manifests and indexes"):
        merge_parts(parts, out, config, source=source)
        pipeline.check_dataset(out)
    return FlyteDirectory(str(out))
