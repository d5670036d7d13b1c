"""Raw-log sources the builder knows: name -> (log listing, per-log frame iterator).

Each source lists its logs (sorted), hashes each raw log folder for the manifest
(`platform_lib.sources.hashing.hash_raw_log`) and yields `Frame | FrameError` per frame.
A log-level `FrameError` (e.g. a missing poses file) is yielded in place of that log's frames,
so it is counted (and quarantined) like any bad frame instead of aborting other logs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from platform_lib.shards.errors import BuildError
from platform_lib.sources import catalog
from platform_lib.sources.catalog import SOURCE_NAMES
from platform_lib.sources.frame import Frame, FrameError
from platform_lib.sources.hashing import hash_raw_log

__all__ = ["SOURCE_NAMES", "hash_logs", "iter_log", "list_logs", "open_source"]


def iter_log(source: str, log_dir: Path) -> Iterator[Frame | FrameError]:
    """Yield the frames of one raw log of `source`; a log-level FrameError is yielded last."""
    try:
        yield from catalog.iter_log_frames(source, log_dir)
    except FrameError as exc:  # log-level problem: counted like a bad frame
        if getattr(exc, "log_id", None) is None:
            exc.log_id = log_dir.name
        yield exc


def list_logs(source: str, input_path: Path) -> list[Path]:
    """Return the sorted raw log folders of `source` under `input_path`.

    Raises:
        BuildError: unknown source, or `input_path` holds no logs of that source.
    """
    if source not in SOURCE_NAMES:
        raise BuildError(f"unknown source {source!r}; choose one of {SOURCE_NAMES}")
    try:
        return [Path(p) for p in catalog.list_logs(source, input_path)]
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise BuildError(f"{input_path}: no {source} logs found ({exc})") from exc


def hash_logs(log_dirs: list[Path]) -> list[dict[str, Any]]:
    """Return [{"log_id", "content_hash"}] (`hash_raw_log`) for the manifest."""
    return [{"log_id": p.name, "content_hash": hash_raw_log(p)} for p in log_dirs]


def open_source(
    source: str, input_path: Path
) -> tuple[Iterator[Frame | FrameError], list[dict[str, Any]], int | None]:
    """Return (frames of every log in order, [{"log_id", "content_hash"}], total or None).

    Raises:
        BuildError: unknown source, or `input_path` holds no logs of that source.
    """
    log_dirs = list_logs(source, input_path)
    frames = (item for log_dir in log_dirs for item in iter_log(source, log_dir))
    return frames, hash_logs(log_dirs), None
