"""The raw-log formats by name: which exist, how each is split, and how to list and read its logs.

`check_source(name)` refuses an unknown format; `list_logs` / `iter_log_frames` dispatch to the
format's reader (`pandaset.py`, `synthetic.py`); `list_log_urls` lists logs on a local folder or
on object storage. Importing it costs no numpy or fsspec (the readers and `storage` are
imported when called), so `drivetrain --help` can list the formats.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from platform_lib.errors import UserError

if TYPE_CHECKING:
    from platform_lib.sources.frame import Frame, FrameError

__all__ = [
    "DEFAULT_SPLITS",
    "SOURCE_NAMES",
    "check_source",
    "iter_log_frames",
    "list_log_urls",
    "list_logs",
]

#: The one list of raw-log formats; each has a reader below and a default split.
SOURCE_NAMES: tuple[str, ...] = ("pandaset", "synthetic")

#: How each source is split into train/val unless told otherwise (`BuildConfig` fields):
#: synthetic runs hold out whole logs (25 %); PandaSet holds out the last 2 frames of every
#: sequence, so even one sequence (the 10-frame sample 002: 8 train, 2 val) has val frames.
DEFAULT_SPLITS: dict[str, dict[str, Any]] = {
    "pandaset": {"split": "by_frame_range", "val_frames_per_log": 2},
    "synthetic": {"split": "by_log", "val_fraction": 0.25},
}


def check_source(source: str, *, culprit: str = "source") -> str:
    """Return `source` if it is a known raw-log format.

    Raises:
        UserError: naming `culprit` and the known formats.
    """
    if source not in SOURCE_NAMES:
        raise UserError(
            f"unknown raw-log format {source!r}", culprit, f"use one of {', '.join(SOURCE_NAMES)}"
        )
    return source


def _resolve(
    source: str,
) -> tuple[Callable[[Path], list[Path]], Callable[[Path], Iterator[Frame | FrameError]]]:
    if source == "pandaset":
        from platform_lib.sources.pandaset import iter_pandaset_frames, list_pandaset_logs

        return list_pandaset_logs, iter_pandaset_frames
    if source == "synthetic":
        from platform_lib.sources.synthetic import iter_synthetic_frames, list_synthetic_logs

        return list_synthetic_logs, iter_synthetic_frames
    check_source(source)
    raise AssertionError(f"source {source!r} is listed in SOURCE_NAMES but has no reader")


def list_logs(source: str, root: str | os.PathLike[str]) -> list[Path]:
    """Return the sorted log folders of `source` under `root` (or [root] if it is one log).

    Raises:
        ValueError: unknown source. FileNotFoundError: no log found.
    """
    return _resolve(source)[0](Path(root))


def iter_log_frames(source: str, log_dir: str | os.PathLike[str]) -> Iterator[Frame | FrameError]:
    """Yield each frame of one log, or the `FrameError` of a bad frame in its place.

    Raises:
        ValueError: unknown source. FrameError: log-level problem (frame_index None).
    """
    return _resolve(source)[1](Path(log_dir))


def list_log_urls(source: str, location: str) -> list[str]:
    """Return one folder path or URL per raw log of `source` at `location`, sorted by log id.

    Local folders are listed by the source's own rules (`list_logs`: a root of log folders,
    or one log folder). On object storage every non-hidden sub-folder is a log.

    Raises:
        UserError: unknown source, or the location is not a folder or holds no logs (culprit:
            the location).
        StorageAccessError / StorageUnreachableError: from `platform_lib.storage`.
    """
    from platform_lib.storage import call_with_retries, resolve_fs

    check_source(source)
    fs, root, local = resolve_fs(location)
    if not call_with_retries(lambda: fs.isdir(root), what="listing", url=location):
        raise UserError(
            "raw-log folder does not exist or is not a folder",
            location,
            "pass raw_logs a folder of raw logs (local path or object-storage URL)",
        )
    if local:
        try:
            return [str(p) for p in list_logs(source, root)]
        except (FileNotFoundError, NotADirectoryError) as exc:
            detail, _, fix = str(exc).split(": ", 1)[-1].rpartition("; ")
            raise UserError(
                f"no {source} logs found" + (f" ({detail})" if detail else ""),
                location,
                fix or f"pass raw_logs a folder of {source} logs or one log folder",
            ) from None
    scheme = location.split("://", 1)[0]
    entries = call_with_retries(lambda: fs.ls(root, detail=True), what="listing", url=location)
    logs = sorted(
        e["name"].rstrip("/")
        for e in entries
        if e.get("type") == "directory"
        and not e["name"].rstrip("/").rsplit("/", 1)[-1].startswith(".")
    )
    if not logs:
        raise UserError(
            "no log folders found", location, f"pass raw_logs a folder of {source} log folders"
        )
    return [f"{scheme}://{p}" for p in logs]
