"""Raw-log sources the builder knows: name -> (log listing, per-log frame iterator).

Each source lists its logs (sorted), hashes each raw log folder for the manifest
(`platform_lib.sources.hashing.hash_raw_log`) and yields `Frame | FrameError` per frame.
A log-level `FrameError` (e.g. a missing poses file) is yielded in place of that log's frames,
so it is counted (and quarantined) like any bad frame instead of aborting other logs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from platform_lib.shards.errors import BuildError
from platform_lib.sources.frame import Frame, FrameError
from platform_lib.sources.hashing import hash_raw_log

__all__ = ["SOURCE_NAMES", "hash_logs", "iter_log", "list_logs", "open_source"]

SOURCE_NAMES = ("pandaset", "synthetic")


def _resolve(source: str) -> tuple[Callable[[Path], list[Path]],
                                   Callable[[Path], Iterator[Frame | FrameError]]]:
    if source == "pandaset":
        from platform_lib.sources.pandaset import iter_pandaset_frames, list_pandaset_logs

        return list_pandaset_logs, iter_pandaset_frames
    if source == "synthetic":
        from platform_lib.sources.synthetic import iter_synthetic_frames, list_synthetic_logs

        return list_synthetic_logs, iter_synthetic_frames
    raise BuildError(f"unknown source {source!r}; choose one of {SOURCE_NAMES}")


def iter_log(source: str, log_dir: Path) -> Iterator[Frame | FrameError]:
    """Yield the frames of one raw log of `source`; a log-level FrameError is yielded last."""
    _, iter_frames = _resolve(source)
    try:
        yield from iter_frames(log_dir)
    except FrameError as exc:  # log-level problem: counted like a bad frame
        if getattr(exc, "log_id", None) is None:
            exc.log_id = log_dir.name
        yield exc


def list_logs(source: str, input_path: Path) -> list[Path]:
    """Return the sorted raw log folders of `source` under `input_path`.

    Raises:
        BuildError: unknown source, or `input_path` holds no logs of that source.
    """
    list_fn, _ = _resolve(source)
    try:
        return [Path(p) for p in list_fn(input_path)]
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise BuildError(f"{input_path}: no {source} logs found ({exc})") from exc


def hash_logs(log_dirs: list[Path]) -> list[dict[str, Any]]:
    """Return [{"log_id", "content_hash"}] (`hash_raw_log`) for the manifest."""
    return [{"log_id": p.name, "content_hash": hash_raw_log(p)} for p in log_dirs]


def open_source(source: str, input_path: Path) -> tuple[Iterator[Frame | FrameError],
                                                        list[dict[str, Any]], int | None]:
    """Return (frames of every log in order, [{"log_id", "content_hash"}], total or None).

    Raises:
        BuildError: unknown source, or `input_path` holds no logs of that source.
    """
    log_dirs = list_logs(source, input_path)
    frames = (item for log_dir in log_dirs for item in iter_log(source, log_dir))
    return frames, hash_logs(log_dirs), None
