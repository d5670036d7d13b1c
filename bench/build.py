"""Build throughput against the limit of merely reading (and decompressing) the raw files.

For each input (synthetic logs generated once, and the PandaSet sample) it times, on a warm
page cache (every stage reads the same files once before timing):
    read raw          read every byte of the raw log folder (the I/O limit)
    read+decompress   PandaSet only: read + gunzip + unpickle the .pkl.gz, parse the JSON
    source frames     iterate the source reader's Frames (parse, transform, validate)
    build (N proc)    drivetrain build: frames -> shards + index + manifest, published, with
                      1 and N reader/encoder processes
    fan-out (N proc)  the pipeline's build: one part per raw log (`shards.merge.build_part`,
                      what each map-task instance runs) on N processes, then `merge_parts`
                      (index + manifest only, no shard bytes copied)
    +1 log (1 proc)   the same after one new log arrived: the other parts are found in the
                      part store (their raw logs are hashed for the lookup), one part is
                      built, then the merge
    merge only        `merge_parts` over the parts
and prints frames/s, raw MB/s (input bytes / s) and each stage's time relative to `read raw`.

Usage: python bench/build.py [--num-logs 40 --frames-per-log 50] [--work DIR] [--repeat 1]
       [--workers N]
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import multiprocessing
import os
import pickle
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from platform_lib.shards.build import BuildConfig, build_dataset
from platform_lib.shards.merge import build_part, merge_parts
from platform_lib.shards.sources import open_source
from platform_lib.sources.catalog import list_logs
from platform_lib.sources.frame import Frame
from platform_lib.sources.synthetic import SyntheticConfig, write_synthetic_logs

PANDASET = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "pandaset"


def list_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))


def read_raw(root: Path) -> int:
    """Read every raw byte; return the byte count."""
    total = 0
    for path in list_files(root):
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
    return total


def read_decompress(root: Path) -> int:
    """Read every raw file, gunzip+unpickle the .pkl.gz, parse the JSON; return byte count."""
    total = 0
    for path in list_files(root):
        data = path.read_bytes()
        total += len(data)
        if path.name.endswith(".pkl.gz"):
            pickle.loads(gzip.decompress(data))
        elif path.suffix == ".json":
            json.loads(data)
    return total


def iterate_frames(source: str, root: Path) -> int:
    frames, _, _ = open_source(source, root)
    return sum(isinstance(f, Frame) for f in frames)


def _part(log: Path, *, source: str, store: str) -> str:
    return build_part(source, log, BuildConfig(progress=False), store=store).location


def fan_out(source: str, root: Path, store: Path, out: Path, workers: int) -> dict:
    """Build every log's part on `workers` processes (parts already in `store` are reused),
    then merge them into `out`; return the manifest."""
    logs = list_logs(source, root)
    build = functools.partial(_part, source=source, store=str(store))
    if workers == 1:
        parts = [build(log) for log in logs]
    else:
        with multiprocessing.get_context("spawn").Pool(min(workers, len(logs))) as pool:
            parts = pool.map(build, logs, chunksize=1)
    shutil.rmtree(out, ignore_errors=True)
    return merge_parts(parts, out, BuildConfig(progress=False), source=source)


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def bench_input(
    name: str, source: str, root: Path, work: Path, repeat: int, workers: int
) -> list[dict]:
    raw_bytes = read_raw(root)  # warm the page cache
    rows = []
    read_s, _ = timed(lambda: read_raw(root), repeat)
    rows.append({"stage": "read raw", "seconds": read_s})
    if source == "pandaset":
        s, _ = timed(lambda: read_decompress(root), repeat)
        rows.append({"stage": "read+decompress", "seconds": s})
    s, num_frames = timed(lambda: iterate_frames(source, root), repeat)
    rows.append({"stage": "source frames", "seconds": s})

    for n in sorted({1, workers}):

        def build(n: int = n) -> dict:
            out = work / f"ds-{source}"
            shutil.rmtree(out, ignore_errors=True)
            return build_dataset(source, root, out, BuildConfig(progress=False, workers=n))

        s, manifest = timed(build, repeat)
        rows.append(
            {
                "stage": f"build ({n} proc)",
                "seconds": s,
                "out_bytes": manifest.total_bytes,
                "shards": manifest.num_shards,
            }
        )
    store, merged = work / f"parts-{source}", work / f"merged-{source}"
    for n in sorted({1, workers}):

        def fresh(n: int = n) -> dict:
            shutil.rmtree(store, ignore_errors=True)
            return fan_out(source, root, store, merged, n)

        s, manifest = timed(fresh, repeat)
        rows.append(
            {
                "stage": f"fan-out ({n} proc)",
                "seconds": s,
                "out_bytes": manifest.total_bytes,
                "shards": manifest.num_shards,
            }
        )
    if len(list_logs(source, root)) > 1:

        def one_new_log() -> dict:  # the newest part disappears = a log that just arrived
            newest = max((store / source).iterdir(), key=lambda p: p.stat().st_mtime)
            shutil.rmtree(newest)
            return fan_out(source, root, store, merged, 1)  # one part to build: no pool

        s, manifest = timed(one_new_log, repeat)
        rows.append(
            {
                "stage": "+1 log (1 proc)",
                "seconds": s,
                "out_bytes": manifest.total_bytes,
                "shards": manifest.num_shards,
            }
        )
    parts = [_part(log, source=source, store=str(store)) for log in list_logs(source, root)]
    s, manifest = timed(
        lambda: merge_parts(
            parts,
            work / f"merge-{source}-{time.monotonic_ns()}",
            BuildConfig(progress=False),
            source=source,
        ),
        repeat,
    )
    rows.append(
        {
            "stage": "merge only",
            "seconds": s,
            "out_bytes": manifest.total_bytes,
            "shards": manifest.num_shards,
        }
    )
    for row in rows:
        row.update(
            input=name,
            frames=num_frames,
            raw_bytes=raw_bytes,
            fps=num_frames / row["seconds"],
            mbps=raw_bytes / 1e6 / row["seconds"],
            vs_read=row["seconds"] / read_s,
        )
    return rows


def print_table(rows: list[dict]) -> None:
    header = (
        f"{'input':<28} {'stage':<17} {'frames':>6} {'raw MB':>8} {'s':>7} "
        f"{'frames/s':>9} {'raw MB/s':>9} {'time / read':>11}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['input']:<28} {r['stage']:<17} {r['frames']:>6} {r['raw_bytes'] / 1e6:>8.1f} "
            f"{r['seconds']:>7.2f} {r['fps']:>9.1f} {r['mbps']:>9.1f} {r['vs_read']:>10.1f}x"
        )
    for r in rows:
        if r["stage"].startswith(("build", "fan-out", "+1 log")):
            print(
                f"{r['input']}, {r['stage']}: reaches {100 / r['vs_read']:.1f}% of the raw read limit; "
                f"wrote {r['out_bytes'] / 1e6:.1f} MB in {r['shards']} shard(s) "
                f"({r['out_bytes'] / 1e6 / r['seconds']:.1f} MB/s written)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-logs", type=int, default=40)
    parser.add_argument("--frames-per-log", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, help="scratch folder (default: a temp folder)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per stage (best is kept)")
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="also time a build with this many processes (default: all CPUs)",
    )
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-build-"))
    work.mkdir(parents=True, exist_ok=True)
    config = SyntheticConfig(
        num_logs=args.num_logs, frames_per_log=args.frames_per_log, seed=args.seed
    )
    raw = work / "synthetic-raw"
    start = time.perf_counter()
    if not any(raw.glob("synth-*")):
        write_synthetic_logs(config, raw, progress=False)
    print(
        f"synthetic raw logs: {config.num_logs} x {config.frames_per_log} frames, "
        f"{config.image_width}x{config.image_height} images, {config.lidar_beams} beams "
        f"(generated/reused in {time.perf_counter() - start:.1f} s); cpus={os.cpu_count()}"
    )
    rows = bench_input(
        f"synthetic {config.num_logs}x{config.frames_per_log}",
        "synthetic",
        raw,
        work,
        args.repeat,
        args.workers,
    )
    if PANDASET.is_dir():
        rows += bench_input(
            "pandaset sample (002)", "pandaset", PANDASET, work, args.repeat, args.workers
        )
    print_table(rows)
    single = {r["input"]: r["seconds"] for r in rows if r["stage"] == "build (1 proc)"}
    for r in rows:
        if r["stage"].startswith(("fan-out", "+1 log", "merge")):
            print(
                f"{r['input']}, {r['stage']}: {single[r['input']] / r['seconds']:.2f}x the "
                "throughput of the single-process build"
            )
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
