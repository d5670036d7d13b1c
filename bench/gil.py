"""Does each step of the camera decode path release the GIL? The same work in 1 and in N threads.

For every step a loader worker runs on a camera JPEG (simplejpeg decode at full size and
DCT-scaled, Pillow's resize, all of `decode_jpeg_cpu` at WxH, Pillow's own decode) and a
GIL-holding control, it times the PandaSet sample's JPEGs in 1 and `--threads` threads and
prints the speed-up, the cores used and the overlap (share of the threaded run during which two
threads were inside the step, under a 1 s switch interval: only a step that releases the GIL
overlaps, whatever the machine's load). Method: `overlap_share`, bench/README.md.

Usage: python bench/gil.py [--pandaset-root DIR] [--frames 4] [--threads 2] [--repeat 3]
       [--size 704x256] [--json OUT]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import simplejpeg
from PIL import Image

from platform_lib.imaging.decode import (
    CameraResize,
    ResizePlan,
    decode_jpeg_cpu,
    plan_camera_resize,
    resize_camera_image,
)
from platform_lib.shards.commands import parse_camera_size

PANDASET = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "pandaset" / "002"
#: overlap (share of the threaded run's wall time with two threads inside the step) above which
#: a step counts as releasing the GIL; one that holds it stays near 0 (switches between calls)
RELEASES_AT = 0.25


def _dct_size(plan: ResizePlan) -> tuple[int, int]:
    factor = max(plan.scale_x, plan.scale_y)
    return int(np.ceil(plan.source_width * factor)), int(np.ceil(plan.source_height * factor))


def build_steps(jpegs: list[bytes], resize: CameraResize) -> dict[str, tuple[Callable, list]]:
    """Return step name -> (function of one input, inputs): the decode path's steps."""
    height, width, _, _ = simplejpeg.decode_jpeg_header(jpegs[0])
    plan = plan_camera_resize(width, height, resize)
    min_w, min_h = _dct_size(plan)
    scaled = [
        simplejpeg.decode_jpeg(d, colorspace="RGB", min_width=min_w, min_height=min_h)
        for d in jpegs
    ]
    size = f"{resize.width}x{resize.height}"
    return {
        "simplejpeg decode, full size": (
            lambda d: simplejpeg.decode_jpeg(d, colorspace="RGB"),
            jpegs,
        ),
        f"simplejpeg decode, DCT-scaled for {size}": (
            lambda d: simplejpeg.decode_jpeg(
                d, colorspace="RGB", min_width=min_w, min_height=min_h
            ),
            jpegs,
        ),
        f"Pillow resize of the crop to {size}": (lambda im: resize_camera_image(im, plan), scaled),
        f"decode_jpeg_cpu at {size} (decode + resize)": (
            lambda d: decode_jpeg_cpu(d, plan=plan),
            jpegs,
        ),
        "Pillow decode, full size": (
            lambda d: np.asarray(Image.open(io.BytesIO(d)).convert("RGB")),
            jpegs,
        ),
        "control: bytes.upper (C code holding the GIL)": (
            lambda d: d.upper(),
            [d * 16 for d in jpegs],
        ),
    }


def time_serial(fn: Callable, inputs: list, repeat: int) -> float:
    """Best wall time of `repeat` passes of `fn` over `inputs` in this thread, in s."""
    fn(inputs[0])  # warm the code
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for x in inputs:
            fn(x)
        best = min(best, time.perf_counter() - start)
    return best


def _run_part(fn: Callable, part: list, intervals: list) -> None:
    for x in part:
        start = time.perf_counter()
        fn(x)
        intervals.append((start, time.perf_counter()))


def overlap_share(intervals: list[list[tuple[float, float]]], wall: float) -> float:
    """Share of `wall` during which at least two threads' intervals overlap.

    The threaded run sets a 1 s switch interval (`sys.setswitchinterval`), so a thread hands
    the GIL over only where C code releases it: calls of a step that holds the GIL never
    overlap, whatever the load; a step that releases it overlaps even on one free core (the
    kernel interleaves the threads). Speed-up and cores used depend on free CPUs as well.
    """
    events = sorted(
        (t, step) for part in intervals for a, b in part for t, step in ((a, 1), (b, -1))
    )
    inside, since, both = 0, 0.0, 0.0
    for t, step in events:
        if inside >= 2:
            both += t - since
        inside, since = inside + step, t
    return both / wall


def time_threaded(
    fn: Callable, inputs: list, threads: int, repeat: int
) -> tuple[float, float, float]:
    """Best (wall s, process CPU s, overlap share) of `repeat` passes split over `threads` threads."""
    best = (float("inf"), 0.0, 0.0)
    parts = [inputs[t::threads] for t in range(threads)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1.0)  # no forced GIL hand-over inside a pass: only C code releases it
    try:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(fn, inputs[:threads]))  # start the threads, warm the code
            for _ in range(repeat):
                intervals: list[list[tuple[float, float]]] = [[] for _ in parts]
                wall, cpu = time.perf_counter(), time.process_time()
                list(pool.map(_run_part, [fn] * threads, parts, intervals))
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                if wall < best[0]:
                    best = (wall, cpu, overlap_share(intervals, wall))
    finally:
        sys.setswitchinterval(interval)
    return best


def measure(jpegs: list[bytes], resize: CameraResize, threads: int, repeat: int) -> list[dict]:
    """Time every step in 1 and `threads` threads; return one record per step."""
    records = []
    for name, (fn, inputs) in build_steps(jpegs, resize).items():
        one = time_serial(fn, inputs, repeat)
        many, cpu, overlap = time_threaded(fn, inputs, threads, repeat)
        records.append(
            {
                "step": name,
                "ms_per_image_1_thread": one / len(inputs) * 1e3,
                "speedup": one / many,
                "cores_used": cpu / many,
                "overlap": overlap,
                "releases_gil": overlap >= RELEASES_AT,
            }
        )
    return records


def load_jpegs(root: Path, frames: int) -> list[bytes]:
    """Camera JPEGs of the first `frames` frames of every camera of a PandaSet sequence."""
    paths = sorted(p for cam in sorted((root / "camera").iterdir()) for p in cam.glob("*.jpg"))
    by_frame = sorted(paths, key=lambda p: (p.stem, p.parent.name))
    return [p.read_bytes() for p in by_frame[: frames * 6]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pandaset-root", default=str(PANDASET), help="one PandaSet sequence")
    parser.add_argument("--frames", type=int, default=4, help="frames x 6 cameras per pass")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="passes per setting (best kept)")
    parser.add_argument("--size", default="704x256", help="output size of the resized path, WxH")
    parser.add_argument("--json", help="also write the records as JSON here")
    args = parser.parse_args(argv)
    width, height = parse_camera_size(args.size)
    jpegs = load_jpegs(Path(args.pandaset_root), args.frames)
    print(
        f"bench/gil.py: {len(jpegs)} JPEGs, 1 vs {args.threads} threads, best of {args.repeat}; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    records = measure(jpegs, CameraResize(width=width, height=height), args.threads, args.repeat)
    print(f"\n{'step':<48} {'ms/image':>9} {'speed-up':>9} {'cores':>6} {'overlap':>8}  GIL")
    for r in records:
        print(
            f"{r['step']:<48} {r['ms_per_image_1_thread']:9.1f} {r['speedup']:9.2f} "
            f"{r['cores_used']:6.2f} {r['overlap']:8.0%}  {'released' if r['releases_gil'] else 'held'}"
        )
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
