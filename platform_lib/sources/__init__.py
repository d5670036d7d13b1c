"""Raw driving-log readers: each source lists its logs and yields canonical `Frame`s.

Chain: raw log folder -> `iter_<source>_frames(log_dir)` -> `Frame | FrameError` per frame
(validated by `validate_frame`) -> shard writer. See README.md in this package.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from platform_lib.sources.frame import Frame, FrameError
from platform_lib.sources.hashing import hash_raw_log
from platform_lib.sources.validation import validate_frame

__all__ = [
    "SOURCE_NAMES",
    "Frame",
    "FrameError",
    "hash_raw_log",
    "iter_log_frames",
    "list_logs",
    "validate_frame",
]

SOURCE_NAMES: tuple[str, ...] = ("pandaset", "synthetic")


def _resolve(source: str) -> tuple[Callable[[Path], list[Path]],
                                   Callable[[Path], Iterator[Frame | FrameError]]]:
    if source == "pandaset":
        from platform_lib.sources.pandaset import iter_pandaset_frames, list_pandaset_logs

        return list_pandaset_logs, iter_pandaset_frames
    if source == "synthetic":
        from platform_lib.sources.synthetic import iter_synthetic_frames, list_synthetic_logs

        return list_synthetic_logs, iter_synthetic_frames
    raise ValueError(f"unknown source {source!r}; choose one of {SOURCE_NAMES}")


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
