"""Train/val assignment of samples, recorded in index.parquet (`split`) and the manifest.

Two methods:
    by_log          whole logs go to val: the explicit `val_logs`, or else round(n_logs *
                    val_fraction) logs chosen by the order of sha256(log_id) (stable under
                    adding logs, independent of listing order). With >= 2 logs and a positive
                    fraction at least one log is val; a single log stays train.
    by_frame_range  the last `val_frames_per_log` frames (by frame index) of every log are val.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

__all__ = ["SPLIT_METHODS", "assign_splits"]

SPLIT_METHODS = ("by_log", "by_frame_range")


def _choose_val_logs(logs: list[str], val_fraction: float) -> list[str]:
    if len(logs) < 2 or val_fraction <= 0:
        return []
    count = min(max(int(len(logs) * val_fraction + 0.5), 1), len(logs) - 1)
    ranked = sorted(logs, key=lambda log: hashlib.sha256(log.encode()).hexdigest())
    return sorted(ranked[:count])


def assign_splits(
    samples: list[tuple[str, int]],
    *,
    method: Literal["by_log", "by_frame_range"],
    val_fraction: float = 0.0,
    val_logs: tuple[str, ...] = (),
    val_frames_per_log: int = 0,
) -> tuple[list[str], dict[str, Any]]:
    """Assign "train"/"val" to each (log_id, frame_index) sample (unique pairs).

    Returns:
        (split per sample in input order, manifest["splits"] dict with method, params and counts).

    Raises:
        ValueError: `val_logs` names logs that are not in the build.
    """
    logs = sorted({log for log, _ in samples})
    params: dict[str, Any]
    if method == "by_log":
        if val_logs:
            unknown = sorted(set(val_logs) - set(logs))
            if unknown:
                raise ValueError(f"val_logs {unknown} are not in the build (logs: {logs[:20]})")
            chosen = sorted(set(val_logs))
        else:
            chosen = _choose_val_logs(logs, val_fraction)
        val_set = set(chosen)
        splits = ["val" if log in val_set else "train" for log, _ in samples]
        params = {"val_fraction": val_fraction, "val_logs": chosen}
    else:
        frames_of: dict[str, list[int]] = {}
        for log, frame in samples:
            frames_of.setdefault(log, []).append(frame)
        val = {
            (log, frame)
            for log, frames in frames_of.items()
            for frame in sorted(frames, reverse=True)[:val_frames_per_log]
        }
        splits = ["val" if sample in val else "train" for sample in samples]
        params = {"val_frames_per_log": val_frames_per_log}
    counts = {"train": splits.count("train"), "val": splits.count("val")}
    return splits, {"method": method, "params": params, "counts": counts}
