"""Loader units: single frames, or temporal windows of k consecutive frames of one log.

A unit is a tuple of index rows yielded as one sample. With k = 1 each row is a unit. With
k > 1 a unit is frames f, f+1, ..., f+k-1 of one log (frame indices consecutive, never
crossing logs; gaps in a log end a window run), first frames `stride` apart.
"""

from __future__ import annotations

import numpy as np

from platform_lib.shards.view import DatasetView

__all__ = ["build_units"]


def build_units(view: DatasetView, *, window_frames: int, window_stride: int) -> np.ndarray:
    """Return (U, k) int64 row indices of `view`, units sorted by (shard, offset) of their first row.

    Raises:
        ValueError: k > 1 and no log has k consecutive frames.
    """
    num_rows = len(view)
    if window_frames == 1:
        return np.arange(num_rows, dtype=np.int64)[:, None]
    by_log = np.lexsort((view.frame_index, view.log_code))
    log_ids = view.log_code[by_log]
    frames = view.frame_index[by_log]
    # A run breaks where the log changes or a frame index is skipped.
    breaks = np.ones(num_rows, dtype=bool)
    breaks[1:] = (log_ids[1:] != log_ids[:-1]) | (frames[1:] != frames[:-1] + 1)
    run_id = np.cumsum(breaks) - 1
    run_start = np.flatnonzero(breaks)
    pos_in_run = np.arange(num_rows) - run_start[run_id]
    run_len = np.diff(np.append(run_start, num_rows))[run_id]
    first = (pos_in_run % window_stride == 0) & (pos_in_run + window_frames <= run_len)
    starts = np.flatnonzero(first)
    if len(starts) == 0:
        raise ValueError(
            f"no log has {window_frames} consecutive frames (LoaderConfig.window_frames); "
            "lower window_frames or check the split"
        )
    units = by_log[starts[:, None] + np.arange(window_frames)[None, :]]
    return units[np.argsort(units[:, 0], kind="stable")]
