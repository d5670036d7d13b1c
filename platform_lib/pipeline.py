"""Glue the Flyte tasks call: config resolution, input checks, error classification, run dirs.

Everything here runs without Flyte, so tests and notebooks call it directly; `tasks/` wraps it
in decorators (cache, retries, Elastic) and converts errors (`is_transient_storage_error`).
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import fsspec

from platform_lib.registry.lineage import hash_raw_location
from platform_lib.shards import BuildConfig, load_manifest, validate_dataset
from platform_lib.sources import list_logs

__all__ = [
    "SOURCES",
    "check_dataset",
    "check_raw_logs_unchanged",
    "check_source",
    "fetch_raw_logs",
    "is_transient_storage_error",
    "list_raw_log_urls",
    "resolve_build_config",
    "resolve_model_name",
    "resolve_train_dir",
]

#: Raw-log formats the pipeline can build datasets from.
SOURCES: tuple[str, ...] = ("synthetic", "pandaset")

#: errno values of storage errors that are worth retrying (network and contention).
_TRANSIENT_ERRNOS = frozenset({
    errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EPIPE,
    errno.EAGAIN, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN, errno.ESTALE,
})


def check_source(source: str) -> str:
    """Return `source` if it is a known raw-log format.

    Raises:
        ValueError: naming the input `source` and the known formats.
    """
    if source not in SOURCES:
        raise ValueError(f"input source={source!r} is not a known raw-log format; use one of {SOURCES}")
    return source


def resolve_model_name(model_name: str, source: str) -> str:
    """Return the registered model name: `model_name`, or "drivetrain-bev-<source>" when empty."""
    return model_name or f"drivetrain-bev-{source}"


def is_transient_storage_error(exc: BaseException) -> bool:
    """Return True for storage errors worth retrying (connection resets, timeouts, contention).

    Missing files, permissions and bad data are not transient: retrying cannot fix them.
    """
    if isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError):
        return False
    if isinstance(exc, TimeoutError | ConnectionError):
        return True
    return isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS


def fetch_raw_logs(location: str, workdir: str | Path) -> Path:
    """Return a local folder with the raw logs of `location`, downloading remote URLs.

    Args:
        location: local folder, `file://` URL or fsspec URL (`s3://bucket/logs/`).
        workdir: local scratch folder receiving a download.

    Raises:
        FileNotFoundError: naming the input `raw_logs` when the location is not a folder.
    """
    fs, root = fsspec.core.url_to_fs(location)
    if not fs.isdir(root):
        raise FileNotFoundError(f"input raw_logs={location!r} does not exist or is not a folder")
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if "file" in protocols or "local" in protocols:
        return Path(root)
    local = Path(workdir) / "raw_logs"
    fs.get(root.rstrip("/") + "/", str(local), recursive=True)
    return local


def list_raw_log_urls(source: str, location: str) -> list[str]:
    """Return one folder URL (or path) per raw log of `source` at `location`, sorted by log id.

    Local folders are listed by the source's own rules (`platform_lib.sources.list_logs`: a
    root of log folders, or one log folder). On object storage every sub-folder is a log.

    Raises:
        FileNotFoundError: naming the input `raw_logs` when the location is not a folder or
            holds no logs.
    """
    check_source(source)
    fs, root = fsspec.core.url_to_fs(location)
    if not fs.isdir(root):
        raise FileNotFoundError(f"input raw_logs={location!r} does not exist or is not a folder")
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if "file" in protocols or "local" in protocols:
        try:
            return [str(p) for p in list_logs(source, root)]
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise FileNotFoundError(f"input raw_logs={location!r} holds no {source} logs "
                                    f"({exc})") from exc
    scheme = location.split("://", 1)[0]
    logs = sorted(p for p in fs.ls(root, detail=False)
                  if fs.isdir(p) and not p.rstrip("/").rsplit("/", 1)[-1].startswith("."))
    if not logs:
        raise FileNotFoundError(f"input raw_logs={location!r} holds no log folders")
    return [f"{scheme}://{p.rstrip('/')}" for p in logs]


def resolve_train_dir(dataset_hash: str, config_hash: str) -> Path:
    """Return the run folder shared by the ranks of one elastic launch.

    All ranks of a launch are children of the same elastic agent process, so the agent's pid
    (`os.getppid()` in a worker) plus the dataset and config hashes name a folder that every
    rank agrees on without communicating, and that an elastic restart (`max_restarts`) finds
    again to resume from its last checkpoint. It lives under `$TMPDIR/drivetrain-train/`;
    the task uploads it as its output.
    """
    name = f"{dataset_hash[:16]}-{config_hash[:16]}-{os.getppid()}"
    path = Path(tempfile.gettempdir()) / "drivetrain-train" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def resolve_build_config(source: str) -> BuildConfig:
    """Return how the pipeline splits `source` into train/val.

    synthetic: whole held-out logs go to val (`by_log`, 25 % of the logs).
    pandaset: the last 2 frames of every sequence go to val (`by_frame_range`), so one
    sequence (e.g. the 10-frame sample 002) gives 8 train and 2 val frames.
    """
    check_source(source)
    if source == "synthetic":
        return BuildConfig(split="by_log", val_fraction=0.25)
    return BuildConfig(split="by_frame_range", val_frames_per_log=2)


def check_raw_logs_unchanged(raw_logs: str, raw_logs_hash: str) -> None:
    """Fail when the raw logs changed between hashing and building (the cache key would lie).

    Raises:
        ValueError: naming the input `raw_logs`.
    """
    now = hash_raw_location(raw_logs)
    if now != raw_logs_hash:
        raise ValueError(
            f"input raw_logs={raw_logs!r} changed while the dataset was built (content hash "
            f"{raw_logs_hash[:12]} -> {now[:12]}); stop writing to it and re-run"
        )


def check_dataset(dataset_dir: str | Path, *, splits: tuple[str, ...] = ("train", "val")) -> dict:
    """Validate a built dataset and check that every split in `splits` has samples.

    Returns:
        The manifest.

    Raises:
        ValueError: the dataset violates docs/format.md (every problem listed), or a split is
            empty (naming the split and the counts).
    """
    report = validate_dataset(str(dataset_dir))
    if not report.ok:
        raise ValueError(report.describe())
    manifest = load_manifest(dataset_dir)
    counts = manifest["splits"].get("counts", {})
    empty = [s for s in splits if counts.get(s, 0) < 1]
    if empty:
        raise ValueError(
            f"dataset {dataset_dir} has no samples in split(s) {empty} (counts {counts}); "
            "give the raw_logs more frames/logs or change the split"
        )
    return manifest
