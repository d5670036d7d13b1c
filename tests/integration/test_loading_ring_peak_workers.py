"""/dev/shm stays within the ring's budget with worker processes: a 2-worker run under a budget, a
pass left mid-epoch and the next one started (workers abandon the batches nobody will receive
instead of shipping them in private shared-memory blocks), and full-size images decoded
straight into the ring. Each run has a private tmpfs on /dev/shm (a private mount namespace),
so the peak of its used bytes is this loader's alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import simplejpeg

import platform_lib
from platform_lib.shards.build import BuildConfig, write_dataset
from platform_lib.shards.reader import open_dataset
from tests.support.datasets import CAMERAS, make_frame

pytestmark = pytest.mark.timeout(300)
#: Bytes of /dev/shm beside the ring's arena: the shared epoch orders (16 bytes per sample)
#: and the ring's header, rounded up to the 1 MiB steps pages are allocated in.
SLACK_BYTES = 2 * 2**20

_RUN = r"""
import json, os, sys, threading, time, zlib
import torch
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader

root, decode, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.setswitchinterval(0.0005)  # the sampler runs often, whatever the other threads do

def big(sample):  # 4 MiB per sample, a function of its key
    seed = zlib.crc32(sample["__key__"].encode()) % 251
    return {"x": torch.full((2**20,), seed, dtype=torch.int32)}

def used():
    st = os.statvfs("/dev/shm")
    return (st.f_blocks - st.f_bfree) * st.f_frsize

base, peak, stop = used(), [0], threading.Event()
def sample():  # the private /dev/shm holds this loader's files only
    while not stop.wait(0.0002):
        peak[0] = max(peak[0], used() - base)
threading.Thread(target=sample, daemon=True).start()

options = {} if decode == "cpu" else {"sample_transform": big}
loader = build_loader(root, rank=0, world_size=1, batch_size=4, num_workers=2, seed=0,
                      decode=decode,
                      config=LoaderConfig(prefetch_depth=2, shm_budget_bytes=budget, **options))
with loader:
    batches = iter(loader)
    for _ in range(2):
        next(batches)  # dropped at once: the ring holds the next three batches
    ring, deadline = loader._stream.ring, time.monotonic() + 120
    while int(ring.control[6]) < 5 and time.monotonic() < deadline:  # _NEXT_STEP
        time.sleep(0.01)  # until batch 4 has its extent and batch 5 waits for room
    left_at = int(ring.control[6])
    del batches  # leave the pass mid-epoch
    loader.set_epoch(1)
    keys = []
    for batch in loader:
        if decode == "cpu":
            assert all(im.shape == (1080, 1920, 3) for c in batch["cameras"] for im in c.values())
        else:
            for key, x in zip(batch["__key__"], batch["x"]):
                assert int(x[0]) == int(x[-1]) == zlib.crc32(key.encode()) % 251
        keys += batch["__key__"]
    stats = loader.stats
stop.set()
print(json.dumps({"peak": peak[0], "samples": len(keys), "left_at": left_at,
                  "in_flight": stats.ring_peak_bytes_in_flight, "ring": stats.shm_peak_bytes,
                  "fallbacks": stats.ring_fallbacks}))
"""


def _aligned(n: int) -> int:
    return -(-n // 64) * 64


def _budget(root: Path, outputs: int) -> int:
    """Three batches of 4 of the loader's own estimate (largest sample + outputs + margin)."""
    largest = int(open_dataset(root).view.sample_size.max())
    return 3 * 4 * (_aligned(largest) + _aligned(outputs + outputs // 16 + 1024))


def _run_in_private_shm(dataset: Path, decode: str, budget: int) -> dict:
    """Run `_RUN` over `dataset` with a private 2 GiB tmpfs on /dev/shm; return its figures."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a private tmpfs on /dev/shm")
    script = f'mount -t tmpfs -o size=2g tmpfs /dev/shm && exec {sys.executable} -c "$0" "$@"'
    tree = Path(platform_lib.__file__).resolve().parents[1]
    result = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, _RUN, str(dataset), decode, str(budget)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    assert result.returncode == 0, (result.stdout, result.stderr[-3000:])
    got = json.loads(result.stdout.splitlines()[-1])
    assert got["left_at"] == 5  # batches 2-4 in the ring, batch 5 waiting for room
    return got


def _write(root: Path, frames: list, shard_size_mb: float) -> Path:
    logs = [{"log_id": log, "content_hash": "0" * 64} for log in sorted({f.log_id for f in frames})]
    config = BuildConfig(
        shard_size_mb=shard_size_mb, split="by_log", val_fraction=0.0, progress=False
    )
    write_dataset(frames, root, config, source="synthetic", source_logs=logs)
    return root


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """36 small frames (two logs)."""
    frames = [make_frame(log, i) for log, n in (("loga", 20), ("logb", 16)) for i in range(n)]
    return _write(tmp_path_factory.mktemp("peak") / "small", frames, 0.2)


@pytest.fixture(scope="module")
def full_size(tmp_path_factory) -> Path:
    """24 frames whose cameras are full-size (1920 x 1080) JPEGs of a smooth image."""
    y, x = np.mgrid[0:1080, 0:1920]
    image = np.stack([x % 256, y % 256, (x + y) % 256], axis=-1).astype(np.uint8)
    jpeg = simplejpeg.encode_jpeg(image, quality=75)
    frames = []
    for i in range(24):
        frame = make_frame("logc", i)
        for camera in frame.cameras.values():
            camera.jpeg, camera.width, camera.height = jpeg, 1920, 1080
            camera.intrinsics = np.array([[1000.0, 0, 960], [0, 1000.0, 540], [0, 0, 1]])
        frames.append(frame)
    return _write(tmp_path_factory.mktemp("peak") / "full", frames, 64)


# The peak's ratio to the bytes in flight depends on how released extents happen to fit the
# next batches (timing); bench/loader.py reports it. What the ring guarantees is its budget.


def test_shm_stays_within_the_budget_across_a_pass_left_mid_epoch(small):
    budget = _budget(small, 4 * 2**20)
    got = _run_in_private_shm(small, "none", budget)
    assert got["samples"] == 36 and got["fallbacks"] == 0
    # Abandoned batches are never shipped in private shared-memory blocks (they were: 2x the
    # bytes in flight, beyond the budget). Only batch 5, waiting for room when the pass is
    # left, may take the fallback first on a loaded machine (its stall timer runs out before
    # the abandonment reaches it): at most one batch (a third of the budget) beside the ring.
    assert 0 < got["in_flight"] and 0 < got["peak"] <= budget * 4 // 3 + SLACK_BYTES, got


def test_full_size_decode_stays_within_the_budget(full_size):
    outputs = len(CAMERAS) * 1080 * 1920 * 3 + 4096  # + the calib arrays parsed from JSON
    budget = _budget(full_size, outputs)
    got = _run_in_private_shm(full_size, "cpu", budget)
    assert got["samples"] == 24 and got["fallbacks"] == 0
    # in flight counts reserved extents, whose pages are allocated only as they are written
    assert 0 < got["in_flight"] and 0 < got["peak"] <= budget * 4 // 3 + SLACK_BYTES, got
