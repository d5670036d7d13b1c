"""Data tasks: raw logs -> content hash -> validated dataset.

Cache keys: `materialize_raw_logs` on (source, raw_logs, synthetic config); `hash_raw_logs`
and `list_raw_logs` are deliberately NOT cached (they are the cheap probes that tell whether
the raw bytes changed and which logs are present); `build_log_part` on (source, log_hash,
config) with the location `log` excluded (`Cache(ignored_inputs=...)`), so moving or copying
identical logs is a cache hit and changing one byte (or the log's folder name, its log id) is a
miss for that log only;
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
import os
from pathlib import Path
from typing import Annotated, NamedTuple

from flytekit import Cache, HashMethod, Resources, current_context, map_task, task
from flytekit.core.context_manager import FlyteContextManager
from flytekit.types.directory import FlyteDirectory

from platform_lib.errors import UserError
from platform_lib.shards.build import BuildConfig
from platform_lib.shards.check import check_dataset, explain_dataset_error
from platform_lib.shards.errors import DatasetError
from platform_lib.shards.manifest import load_manifest
from platform_lib.shards.merge import build_part, merge_parts, resolve_part_store
from platform_lib.shards.split import SPLIT_METHODS
from platform_lib.sources.catalog import DEFAULT_SPLITS, check_source, list_log_urls
from platform_lib.sources.hashing import (
    check_raw_logs_unchanged,
    hash_log_location,
    hash_raw_location,
)
from platform_lib.sources.synthetic import SyntheticConfig, write_synthetic_logs
from platform_lib.storage import fetch_folder, is_local_url
from tasks.errors import stale_cache_error, task_errors
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
    "part_store",
]


def _dataset_hash(directory: FlyteDirectory) -> str:
    return load_manifest(directory.path).dataset_hash


#: A dataset folder whose Flyte literal hash is its manifest dataset_hash.
Dataset = Annotated[FlyteDirectory, HashMethod(_dataset_hash)]


@task(
    container_image=TASK_IMAGE,
    cache=Cache(version="1"),
    retries=3,
    requests=Resources(cpu="1", mem="2Gi"),
)
def materialize_raw_logs(source: str, raw_logs: str, synthetic: SyntheticConfig) -> str:
    """Return the raw-log location: `raw_logs`, or freshly generated synthetic logs when empty."""
    with task_errors("generating synthetic logs"):
        check_source(source)
        if raw_logs:
            return raw_logs
        if source != "synthetic":
            raise UserError(
                "no raw logs given",
                "raw_logs",
                f"source {source!r} needs --raw_logs <folder of raw logs>",
            )
        local = Path(current_context().working_directory) / "synthetic_logs"
        write_synthetic_logs(synthetic, local)
    file_access = FlyteContextManager.current_context().file_access
    remote = file_access.get_random_remote_directory()
    with task_errors("uploading synthetic logs to", remote):
        file_access.put_data(str(local), remote, is_multipart=True)
    return remote


@task(container_image=TASK_IMAGE, retries=3)
def hash_raw_logs(source: str, raw_logs: str, requested: str) -> str:
    """Return the content hash of the raw logs (uncached on purpose: it detects changes).

    Args:
        source: raw-log format.
        raw_logs: the location `materialize_raw_logs` returned.
        requested: the workflow's `raw_logs` input ("" when synthetic logs were generated), to
            tell a deleted cached output from a wrong input.
    """
    with task_errors("hashing raw_logs", raw_logs):
        check_source(source)
        if (
            not requested
            and is_local_url(raw_logs)
            and not Path(raw_logs.removeprefix("file://")).exists()
        ):
            raise stale_cache_error(raw_logs, "materialize_raw_logs")
        return hash_raw_location(raw_logs)


@task(container_image=TASK_IMAGE, cache=Cache(version="1"), retries=1)
def dataset_config(source: str, split: str, quarantine: bool) -> BuildConfig:
    """Return the dataset build config: the source's default split unless `split` names one."""
    with task_errors("choosing the split"):
        check_source(source)
        if split and split not in SPLIT_METHODS:
            raise UserError(
                f"unknown split method {split!r}",
                "split",
                f"use one of {', '.join(SPLIT_METHODS)}, or '' for the source's default",
            )
        rule = dict(DEFAULT_SPLITS[source]) | ({"split": split} if split else {})
        return BuildConfig(**rule, quarantine=quarantine)


class RawLogList(NamedTuple):
    """The raw logs present at a location: one folder URL and log hash (id + content) per log."""

    logs: list[str]
    log_hashes: list[str]


@task(container_image=TASK_IMAGE, retries=3)
def list_raw_logs(source: str, raw_logs: str) -> RawLogList:
    """Return the logs under `raw_logs` now and their content hashes (uncached: the probe)."""
    with task_errors("listing raw_logs", raw_logs):
        logs = list_log_urls(source, raw_logs)
        return RawLogList(logs=logs, log_hashes=[hash_log_location(log) for log in logs])


@task(
    container_image=TASK_IMAGE,
    cache=Cache(version="1", ignored_inputs=("log",)),
    retries=3,
    requests=Resources(cpu="1", mem="2Gi"),
)
def build_log_part(source: str, log: str, log_hash: str, config: BuildConfig) -> str:
    """Build (or find) the part of one raw log in the part store; return its location."""
    with task_errors("building the part of raw log", log):
        local = fetch_folder(log, current_context().working_directory)
        try:
            part = build_part(source, local, config, log_hash=log_hash, store=part_store())
        except DatasetError as exc:
            raise explain_dataset_error(exc, log) from exc
        if part.built:
            check_raw_logs_unchanged(log, log_hash)
            check_dataset(part.location, splits=("train",))  # every byte, once per part
    return part.location


def part_store() -> str:
    """Return the part store of this task.

    `$DRIVETRAIN_PART_STORE`; else on a cluster (remote raw output prefix)
    `<raw output prefix>/drivetrain-parts`, so that the merge pod reads what the map-task pods
    wrote; else locally `$DRIVETRAIN_HOME/parts` (`resolve_part_store`).
    """
    if os.environ.get("DRIVETRAIN_PART_STORE"):
        return resolve_part_store()
    prefix = FlyteContextManager.current_context().file_access.raw_output_prefix
    if prefix and not is_local_url(prefix):
        return f"{prefix.rstrip('/')}/drivetrain-parts"
    return resolve_part_store()


def build_log_parts(source, logs, log_hashes, config):
    """The map task over the logs (one `build_log_part` per log; any order, any parallelism)."""
    mapper = map_task(functools.partial(build_log_part, source=source, config=config))
    return mapper(log=logs, log_hash=log_hashes)


@task(
    container_image=TASK_IMAGE,
    cache=Cache(version="1"),
    retries=3,
    requests=Resources(cpu="1", mem="2Gi"),
)
def merge_dataset(source: str, parts: list[str], config: BuildConfig) -> Dataset:
    """Write index + manifest over `parts` (no shard bytes copied) and check the dataset.

    The check (`platform_lib.shards.check.check_dataset`) validates manifest and index (each
    part's shard bytes were validated when it was built, so none is read here) and requires
    samples in train and val; an empty split names the `--split` option that fixes it.
    """
    out = Path(current_context().working_directory) / "dataset"
    with task_errors("merging the parts of the dataset"):
        try:
            merge_parts(parts, out, config, source=source)
            check_dataset(out, read_shards=False)
        except DatasetError as exc:
            raise explain_dataset_error(exc, "raw_logs") from exc
        except UserError as exc:
            if not exc.what.startswith("dataset has no samples"):
                raise
            fix = (
                "pass --split by_frame_range (the last frames of every log go to val) or more logs"
                if config.split == "by_log"
                else "give the logs more frames than val_frames_per_log"
            )
            raise UserError(exc.what, "raw_logs", fix) from exc
    return FlyteDirectory(str(out))
