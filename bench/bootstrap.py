"""Bootstrap over logs: time of 1,000 resamples over 300 frames vs the 5 s target (issue 18).

Builds per-frame TP/FP/FN counts of two models (3 classes, "all" + 3 range bands) for 300
frames, grouped into 30 logs of 10 frames and, as the worst case for the resampling matrix,
300 logs of 1 frame; then times one paired interval (`paired_intervals`, the primary metric)
and a whole promotion decision over 5 slices (2 metric rows per slice + 4 range-band rows),
best of `--repeat` runs, and prints them next to the target and the load average, which says
how quiet the machine was.

    python bench/bootstrap.py [--resamples 1000] [--frames 300] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial

import numpy as np

from platform_lib.evaluation.bootstrap import BootstrapConfig, paired_intervals
from platform_lib.evaluation.metrics import FrameCounts, MetricSpec
from platform_lib.evaluation.promotion import PromotionConfig, decide_promotion

TARGET_S = 5.0
CLASSES = ("vehicle", "pedestrian", "cyclist")
BANDS = ("all", "0-20m", "20-35m", "35-50m")


def make_counts(frames: int, frames_per_log: int, seed: int = 0) -> tuple[FrameCounts, FrameCounts]:
    """Return champion and challenger counts (frames, 3 classes, 4 bands, TP/FP/FN)."""
    rng = np.random.default_rng(seed)
    keys = tuple(f"log-{i // frames_per_log:04d}_{i % frames_per_log:06d}" for i in range(frames))
    shape = (frames, len(CLASSES), len(BANDS), 3)
    out = []
    for _ in range(2):
        counts = rng.integers(0, 500, size=shape).astype(np.int64)
        out.append(FrameCounts(keys, CLASSES, BANDS, counts))
    return out[0], out[1]


def best_of(repeat: int, fn) -> float:
    """Return the shortest wall time of `repeat` calls of `fn`, in s."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    boot = BootstrapConfig(num_resamples=args.resamples)
    slices = ("all", "s1", "s2", "s3", "s4")
    config = PromotionConfig(
        gated_metric=MetricSpec(class_group="pedestrian"), gated_slices=slices, bootstrap=boot
    )
    print(f"load average (1, 5, 15 min): {os.getloadavg()}")
    print(f"{args.resamples} resamples over {args.frames} frames; target {TARGET_S:g} s")
    for per_log in (10, 1):
        a, b = make_counts(args.frames, per_log)
        everything = np.ones(args.frames, dtype=bool)
        masks = {
            s: everything if s == "all" else np.arange(args.frames) % 5 != int(s[1]) for s in slices
        }
        one = best_of(args.repeat, partial(paired_intervals, a, b, everything, MetricSpec(), boot))
        full = best_of(args.repeat, partial(decide_promotion, a, b, masks, config))
        logs = args.frames // per_log
        print(
            f"{logs:4d} logs x {per_log:2d} frames: one paired interval {one:.4f} s "
            f"({one / TARGET_S:.4f} of target); promotion decision, 14 intervals {full:.4f} s "
            f"({full / TARGET_S:.4f} of target)"
        )


if __name__ == "__main__":
    main()
