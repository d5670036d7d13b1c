"""Input wait of the loader under a simulated accelerator step, and the meter's accuracy.

For each step time T (ms) and worker count, the training loop `time.sleep(T)`s per batch (an
accelerator step leaves the host CPUs to the loader workers) and `InputWaitMeter` records the
time blocked on the next batch. Printed: input wait as % of step time, mean and p99 wait,
excluding the first `--warmup` steps (worker start-up). Then a stall of known length is
injected before one batch and the meter's reading is compared with it (must be within 10%).

With --metrics, the input wait of real training runs (their metrics.jsonl, e.g. of `make run`)
is printed first, computed the same way (wait / step time, first step left out).

Usage: python bench/input_wait.py [--dataset DIR] [--steps-ms 0 10 50 100] [--workers 1 2 4]
       [--batch-size 8] [--steps 60] [--metrics RUN/metrics.jsonl ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import torch

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.input_wait import InputWaitMeter
from platform_lib.loading.loader import build_loader

MAX_POINTS = 32768


def to_model_inputs(sample: dict) -> dict:
    """What a training `sample_transform` does: fixed-size tensors (cameras stacked, points padded).

    Returns: images (C, H, W, 3) uint8, points (MAX_POINTS, 4) float32, num_points () int64.
    """
    images = torch.from_numpy(
        np.stack([sample["cameras"][name] for name in sorted(sample["cameras"])])
    )
    lidar = sample["lidar"][:MAX_POINTS]
    points = torch.zeros(MAX_POINTS, 4)
    points[: len(lidar)] = torch.from_numpy(lidar)
    return {"images": images, "points": points, "num_points": torch.tensor(len(lidar))}


def ensure_dataset(path: str | None) -> Path:
    """Use `path`, else the bench/loader.py dataset when built, else build a small synthetic one."""
    if path:
        return Path(path)
    shared = Path(tempfile.gettempdir()) / "drivetrain-bench-loader" / "synthetic" / "dataset"
    if (shared / "manifest.json").exists():
        return shared
    from platform_lib.shards.build import BuildConfig, build_dataset
    from platform_lib.sources.synthetic import SyntheticConfig, write_synthetic_logs

    work = Path(tempfile.gettempdir()) / "drivetrain-bench-input-wait"
    dataset = work / "dataset"
    if not (dataset / "manifest.json").exists():
        config = SyntheticConfig(num_logs=6, frames_per_log=20, image_width=480, image_height=272)
        write_synthetic_logs(config, work / "raw")
        build_dataset(
            "synthetic",
            work / "raw",
            dataset,
            BuildConfig(shard_size_mb=16, val_fraction=0.0, overwrite=True),
        )
    return dataset


def _epochs(loader) -> Iterator:
    while True:  # successive epochs, so a small dataset can feed many steps
        yield from loader


def _stalled(batches: Iterable, *, at: int, stall_s: float) -> Iterator:
    for i, batch in enumerate(batches):
        if i == at:
            time.sleep(stall_s)
        yield batch


def measure(
    dataset: Path,
    *,
    step_ms: float,
    workers: int,
    batch_size: int,
    steps: int,
    warmup: int,
    raw: bool,
    stall: tuple[int, float] | None = None,
) -> dict:
    config = LoaderConfig(sample_transform=None if raw else to_model_inputs)
    loader = build_loader(
        str(dataset),
        rank=0,
        world_size=1,
        batch_size=batch_size,
        num_workers=workers,
        seed=0,
        decode="cpu",
        config=config,
    )
    meter = InputWaitMeter(skip_first=warmup)
    batches: Iterable = _epochs(loader)
    if stall is not None:
        batches = _stalled(batches, at=stall[0], stall_s=stall[1])
    for i, _ in enumerate(meter.wrap(batches)):
        time.sleep(step_ms / 1000)
        if i + 1 >= steps:
            break
    return {**meter.summary(), "waits_s": meter.waits_s}


def training_input_wait(path: Path, skip_first: int = 1) -> dict:
    """Input wait of a training run, from its metrics.jsonl (rank 0's lines: "step",
    "input_wait_s", "step_time_s"), leaving out the first `skip_first` steps (start-up), as
    the training loop's own `InputWaitMeter(skip_first=1)` does.

    Returns: steps, input_wait_fraction (sum wait / sum step time), mean/max wait in s, and
    the steps whose wait exceeded 10% of their step time.
    """
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "input_wait_s" in r and r["step"] > skip_first]
    if not rows:
        raise ValueError(f"{path}: no metrics lines with input_wait_s after step {skip_first}")
    waits = np.array([r["input_wait_s"] for r in rows])
    steps = np.array([r["step_time_s"] for r in rows])
    return {
        "path": str(path),
        "steps": len(rows),
        "input_wait_fraction": float(waits.sum() / steps.sum()),
        "mean_wait_s": float(waits.mean()),
        "max_wait_s": float(waits.max()),
        "mean_step_s": float(steps.mean()),
        "stalled_steps": [
            int(r["step"]) for r, w, t in zip(rows, waits, steps, strict=True) if w > 0.1 * t
        ],
    }


def print_training_input_wait(paths: list[str]) -> list[dict]:
    """Print `training_input_wait` of each metrics.jsonl; return the results."""
    results = [training_input_wait(Path(p)) for p in paths]
    print(
        f"{'training run (metrics.jsonl)':<60} {'steps':>6} {'input wait %':>13} {'mean wait ms':>13} "
        f"{'max wait ms':>12} {'mean step ms':>13}  steps waiting > 10% of their time"
    )
    for r in results:
        stalled = r["stalled_steps"]
        shown = ", ".join(map(str, stalled[:12])) + (" ..." if len(stalled) > 12 else "")
        print(
            f"{r['path'][-60:]:<60} {r['steps']:6d} {100 * r['input_wait_fraction']:12.2f}% "
            f"{1000 * r['mean_wait_s']:13.2f} {1000 * r['max_wait_s']:12.2f} {1000 * r['mean_step_s']:13.1f}  "
            f"{len(stalled)}: {shown}"
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset")
    parser.add_argument("--steps-ms", type=float, nargs="+", default=[0, 10, 50, 100])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=60, help="steps per measurement")
    parser.add_argument(
        "--warmup", type=int, default=5, help="leading steps left out (worker start-up)"
    )
    parser.add_argument("--stall-s", type=float, default=0.5, help="injected stall, in s")
    parser.add_argument(
        "--raw",
        action="store_true",
        help="no sample_transform: batches of decoded sample dicts (many small arrays)",
    )
    parser.add_argument(
        "--metrics",
        nargs="*",
        default=[],
        help="metrics.jsonl of training runs (e.g. `make run`) to report next to the grid",
    )
    parser.add_argument("--json", help="also write the results as JSON here")
    args = parser.parse_args(argv)
    training = print_training_input_wait(args.metrics) if args.metrics else []
    dataset = ensure_dataset(args.dataset)
    print(
        f"dataset {dataset}, batch {args.batch_size}, {args.steps} steps (first {args.warmup} excluded), "
        f"{os.cpu_count()} CPUs, decode cpu, "
        + ("decoded sample dicts" if args.raw else "sample_transform -> fixed-size tensors"),
        flush=True,
    )
    print(
        f"{'step ms':>8} {'workers':>8} {'input wait %':>13} {'mean wait ms':>13} {'p99 wait ms':>12}"
    )
    results = []
    for step_ms in args.steps_ms:
        for workers in args.workers:
            r = measure(
                dataset,
                step_ms=step_ms,
                workers=workers,
                batch_size=args.batch_size,
                steps=args.steps,
                warmup=args.warmup,
                raw=args.raw,
            )
            results.append(
                {
                    "step_ms": step_ms,
                    "workers": workers,
                    **{k: v for k, v in r.items() if k != "waits_s"},
                }
            )
            print(
                f"{step_ms:8.0f} {workers:8d} {100 * r['input_wait_fraction']:12.2f}% "
                f"{1000 * r['mean_wait_s']:13.2f} {1000 * r['p99_wait_s']:12.2f}",
                flush=True,
            )
    steps_per_epoch = len(
        build_loader(
            str(dataset), rank=0, world_size=1, batch_size=args.batch_size, num_workers=0, seed=0
        )
    )
    at = max(args.warmup + 1, steps_per_epoch // 2)  # mid-epoch: no worker start-up in the reading
    if at % steps_per_epoch == 0:
        at += 1
    stalled = measure(
        dataset,
        step_ms=50,
        workers=max(args.workers),
        batch_size=args.batch_size,
        steps=at + 10,
        warmup=args.warmup,
        raw=args.raw,
        stall=(at, args.stall_s),
    )
    measured = stalled["waits_s"][at]
    error = abs(measured - args.stall_s) / args.stall_s
    print(
        f"injected stall {1000 * args.stall_s:.0f} ms before step {at}: measured {1000 * measured:.1f} ms "
        f"(error {100 * error:.1f}%, {'within' if error <= 0.10 else 'OUTSIDE'} 10%)"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "grid": results,
                    "training": training,
                    "stall_s": args.stall_s,
                    "stall_measured_s": measured,
                },
                indent=2,
            )
        )
    return 0 if error <= 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
