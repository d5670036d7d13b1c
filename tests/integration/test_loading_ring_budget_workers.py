"""The ring under a /dev/shm budget with worker processes: a 2-worker run stays within its
budget and equals in-process loading byte for byte, pages are reused across epochs and worker
restarts, a too small budget is one line, and a /dev/shm that fills while the ring grows is a
`RingError` (a small tmpfs in a private mount namespace), never a SIGBUS.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
import torch

import platform_lib
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.errors import RingError
from platform_lib.loading.loader import build_loader
from platform_lib.shards.build import BuildConfig, write_dataset
from platform_lib.shards.reader import open_dataset
from tests.support.datasets import make_frame

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]
#: Output of `_transform` per sample, in bytes.
_OUT = 64 * 1024


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """36 samples whose LiDAR sweeps range from 40 to ~5,000 points: batches of varied size."""
    root = tmp_path_factory.mktemp("ring") / "data"
    frames = [
        make_frame(log, i, points=40 + (i * 977) % 5000)
        for log, n in (("loga", 20), ("logb", 16))
        for i in range(n)
    ]
    logs = [{"log_id": log, "content_hash": "0" * 64} for log in ("loga", "logb")]
    config = BuildConfig(shard_size_mb=0.2, split="by_log", val_fraction=0.0, progress=False)
    write_dataset(frames, root, config, source="synthetic", source_logs=logs)
    return root


def _transform(sample):
    """64 KiB of output per sample (a function of its key) plus its LiDAR point count."""
    seed = zlib.crc32(sample["__key__"].encode()) % 251
    return {"x": torch.full((_OUT // 4,), seed, dtype=torch.int32), "n": len(sample["lidar"])}


def _fingerprint(batch) -> list:
    """Every byte a batch carries, as comparable Python values."""
    rows = []
    for i, key in enumerate(batch["__key__"]):
        row = [key, bool(batch["__padded__"][i])]
        if "lidar" in batch:
            row += [batch["lidar"][i].tobytes()]
            row += [bytes(v) for _, v in sorted(batch["cameras"][i].items())]
        else:
            row += [batch["x"][i].numpy().tobytes(), int(batch["n"][i])]
        rows.append(row)
    return rows


def _sample_bytes(root: Path, transform: bool) -> int:
    """The budget rule's bytes of the largest sample: read bytes + outputs (+ their margin)."""
    largest = int(open_dataset(root).view.sample_size.max())
    outputs = _OUT if transform else 0
    return -(-largest // 64) * 64 + -(-(outputs + outputs // 16 + 1024) // 64) * 64


@pytest.mark.parametrize("transform", [False, True], ids=["bytes", "transform"])
def test_the_ring_honours_its_budget_under_a_two_worker_run(dataset, transform):
    batch_size, workers = 4, 2
    # three batches of the largest samples: wherever the batch the loop holds lies, the next
    # one fits beside it; workers must wait for the training loop to release batches
    budget = 3 * batch_size * _sample_bytes(dataset, transform)
    options = {"sample_transform": _transform} if transform else {}
    common = dict(rank=0, world_size=1, batch_size=batch_size, seed=3, decode="none")
    reference = build_loader(str(dataset), num_workers=0, config=LoaderConfig(**options), **common)
    expected = [_fingerprint(b) for b in reference]
    loader = build_loader(
        str(dataset),
        num_workers=workers,
        config=LoaderConfig(shm_budget_bytes=budget, prefetch_depth=2, **options),
        **common,
    )
    with loader:
        got = []
        for batch in loader:
            got.append(_fingerprint(batch))
        ring = loader._stream.ring
        stats = loader.stats
        allocated = os.fstat(ring._fd).st_blocks * 512  # what /dev/shm holds for the ring
    assert got == expected  # byte-identical to reading in the main process
    assert stats.ring_fallbacks == 0  # every batch went through the ring
    assert allocated == stats.shm_peak_bytes <= ring.header_bytes + budget
    assert 0 < stats.ring_peak_bytes_in_flight <= budget
    assert stats.ring_bytes_in_flight <= budget  # the next epoch's first batches, made ahead


def test_batches_the_loop_keeps_beyond_the_budget_take_the_counted_fallback(dataset):
    batch_size = 4
    budget = 3 * batch_size * _sample_bytes(dataset, True)
    loader = build_loader(
        str(dataset),
        rank=0,
        world_size=1,
        batch_size=batch_size,
        num_workers=2,
        seed=0,
        decode="none",
        config=LoaderConfig(shm_budget_bytes=budget, sample_transform=_transform),
    )
    with loader:
        started = time.monotonic()
        kept = list(loader)  # the loop keeps every batch: the ring fills, then fallbacks
        waited = time.monotonic() - started
        stats = loader.stats
        assert len(kept) == 9 and 0 < stats.ring_fallbacks <= 9 - 3
        assert stats.ring_peak_bytes_in_flight <= budget and stats.shm_peak_bytes <= budget + 4096
        for batch in kept:  # every batch intact, in the ring or in its own block
            for key, x in zip(batch["__key__"], batch["x"], strict=True):
                assert torch.equal(x, torch.full_like(x, zlib.crc32(key.encode()) % 251))
    assert waited < 9 * 1.0 + 20  # each fallback waits at most about _STALL_S


def test_pages_are_reused_across_epochs_and_worker_restarts(dataset):
    loader = build_loader(
        str(dataset),
        rank=0,
        world_size=1,
        batch_size=2,
        num_workers=2,
        seed=0,
        decode="none",
        config=LoaderConfig(shm_budget_bytes=256 * 2**20),
    )
    with loader:
        keys = [k for b in loader for k in b["__key__"]]
        assert len(keys) == 36
        first = loader.stats
        ring = loader._stream.ring
        assert first.shm_peak_bytes < 8 * 2**20  # bytes in flight, not the 256 MiB budget
        for epoch in (1, 2):
            loader.set_epoch(epoch)
            assert len([k for b in loader for k in b["__key__"]]) == 36
        loader.set_epoch(5)  # a restart of the workers at another position, mid-epoch
        batches = iter(loader)
        next(batches)
        loader.set_epoch(6)
        assert sum(len(b["__key__"]) for b in loader) == 36
        stats = loader.stats
        assert stats.shm_peak_bytes == first.shm_peak_bytes  # no page added after epoch 0
        assert os.fstat(ring._fd).st_blocks * 512 == stats.shm_peak_bytes
        assert stats.ring_fallbacks == 0


def test_a_budget_too_small_for_one_sample_is_a_one_line_ring_error(dataset):
    loader = build_loader(
        str(dataset),
        rank=0,
        world_size=1,
        batch_size=4,
        num_workers=2,
        seed=0,
        config=LoaderConfig(shm_budget_bytes=10_000, sample_transform=_transform),
    )
    with loader, pytest.raises(RingError) as info:
        next(iter(loader))
    message = str(info.value)
    sample = _sample_bytes(dataset, True)
    assert "\n" not in message
    assert f"of 10000 bytes is too small for one sample ({sample} bytes" in message
    assert f"shm_budget_bytes to at least {4 * sample} bytes" in message


_GROW_PAST_SHM = """
import sys, torch
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader
from platform_lib.loading.errors import RingError

def big(sample):  # 4 MiB per sample: the ring's pages fill the 16 MiB /dev/shm in 4 batches
    return {"x": torch.ones(2**20, dtype=torch.float32)}

loader = build_loader(sys.argv[1], rank=0, world_size=1, batch_size=1, num_workers=1, seed=0,
                      config=LoaderConfig(sample_transform=big, prefetch_depth=1,
                                          shm_budget_bytes=2**30, worker_timeout_s=60))
kept = []  # the training loop keeps every batch: the ring grows until /dev/shm is full
try:
    for batch in loader:
        assert float(batch["x"].sum()) == 2**20  # every batch intact
        kept.append(batch)
except RingError as exc:
    print(len(kept), "RingError:", exc, flush=True)
    sys.exit(0)
print("no error after", len(kept), "batches", flush=True)
sys.exit(1)
"""


def test_a_dev_shm_that_fills_while_the_ring_grows_is_a_ring_error_not_a_sigbus(dataset):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a small tmpfs on /dev/shm privately")
    script = f'mount -t tmpfs -o size=16m tmpfs /dev/shm && exec {sys.executable} -c "$0" $1'
    tree = Path(platform_lib.__file__).resolve().parents[1]
    result = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, _GROW_PAST_SHM, str(dataset)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    assert result.returncode == 0, (result.stdout, result.stderr[-3000:])  # not -SIGBUS
    kept, _, message = result.stdout.partition(" RingError: ")
    assert int(kept) >= 2  # the budget (1 GiB) exceeds /dev/shm: pages come as needed
    line = next(line for line in message.splitlines() if "the ring growing from" in line)
    assert "/dev/shm has" in line and "--shm-size" in line and "shm_budget_bytes" in line
