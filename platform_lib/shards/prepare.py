"""Frame -> PreparedFrame: the per-frame CPU work of a build (check, encode, count).

Runs in the builder process, or in worker processes (`BuildConfig.workers > 1`), one raw log
per task; the builder then appends prepared frames to shards in (log, frame) order, so the
output bytes do not depend on the number of workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from platform_lib.shards.codec import check_frame, encode_frame, summarize_frame
from platform_lib.sources.catalog import iter_log_frames
from platform_lib.sources.frame import Frame, FrameError
from platform_lib.sources.raw_files import RawFiles

__all__ = ["PreparedFrame", "prepare_frame", "prepare_log"]


@dataclass(kw_only=True, frozen=True)
class PreparedFrame:
    """A checked frame, encoded into its tar members (picklable)."""

    key: str
    """sample key `<log_id>_<frame:06d>`"""
    log_id: str
    """log id"""
    frame_index: int
    """0-based sweep index in the log"""
    members: list[tuple[str, bytes]]
    """ordered (ext, bytes) tar members"""
    summary: dict[str, Any]
    """index statistics (counts, timestamp), see `codec.summarize_frame`"""
    cameras: tuple[str, ...]
    """sorted camera names"""
    has_seg: bool
    """per-point labels present"""
    has_radar: bool
    """radar returns present"""


def _key_of(frame: Frame) -> str | None:
    try:
        return frame.key
    except FrameError:
        return None


def prepare_frame(item: Frame | PreparedFrame | FrameError) -> PreparedFrame | FrameError:
    """Check and encode one frame; return the FrameError (with `.key` set) when it is bad.

    A `PreparedFrame` or `FrameError` is returned as it is.
    """
    if isinstance(item, FrameError | PreparedFrame):
        return item
    try:
        check_frame(item)
    except FrameError as exc:
        exc.key = _key_of(item)  # type: ignore[attr-defined]  # read back by the builder
        return exc
    return PreparedFrame(
        key=item.key,
        log_id=item.log_id,
        frame_index=item.frame_index,
        members=encode_frame(item),
        summary=summarize_frame(item),
        cameras=tuple(sorted(item.cameras)),
        has_seg=item.lidar_seg is not None,
        has_radar=item.radar is not None,
    )


def prepare_log(task: tuple[str, RawFiles]) -> list[PreparedFrame | FrameError]:
    """Read and prepare every frame of one raw log; `task` is (source name, its hashed listing).

    A log-level FrameError is returned as the only item (counted like a bad frame).

    Raises:
        RawFileChangedError: a file's bytes differ from those hashed (`raw_files`).
    """
    source, files = task
    return [prepare_frame(item) for item in iter_log_frames(source, files.root, files=files)]
