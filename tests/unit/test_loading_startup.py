"""What a fresh loader does before its first batch: shard records reused across copies of a
dataset, the ring's output area sized without a measuring child, ring pages mapped at once."""

from __future__ import annotations

import resource
import shutil
from pathlib import Path

import numpy as np
import pytest

from platform_lib.imaging.decode import CameraResize
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader
from platform_lib.loading.ring import Ring, SlotWriter
from tests.support.datasets import write_test_dataset

pytestmark = pytest.mark.timeout(120)


def _hashed(root: Path) -> int:
    loader = build_loader(str(root), rank=0, world_size=1, batch_size=4, num_workers=0, seed=0)
    list(loader)
    return loader.stats.shards_hashed


def test_two_copies_of_a_dataset_keep_their_own_shard_records(tmp_path):
    first = write_test_dataset(tmp_path / "a", {"loga": 6})
    second = tmp_path / "b"
    shutil.copytree(first, second)  # same dataset hash, other files (inodes)
    assert _hashed(first) > 0
    assert _hashed(second) > 0
    # reading the second copy left the first copy's records alone: nothing hashed again
    assert _hashed(first) == 0
    assert _hashed(second) == 0


@pytest.mark.parametrize(
    ("resize", "window"), [(None, 1), (CameraResize(width=12, height=8), 1), (None, 3)]
)
def test_decoded_sizes_from_jpeg_headers_equal_a_decoded_unit(tmp_path, resize, window):
    root = write_test_dataset(tmp_path / "d", {"loga": 6})
    config = LoaderConfig(camera_resize=resize, window_frames=window)
    loader = build_loader(
        str(root), rank=0, world_size=1, batch_size=2, num_workers=0, seed=0, config=config
    )
    stream = loader._build_stream()
    decoded, _ = stream.output_bytes_per_unit()
    assert decoded > 0
    assert stream.output_bytes_per_unit(from_headers=True) == (decoded, {"shards_hashed": 0})


def test_a_worker_writes_its_extent_without_a_page_fault_per_page():
    mib = 1 << 20
    ring = Ring(num_workers=2, slots_per_worker=2, budget_bytes=64 * mib, batch_bytes=mib)
    try:
        nbytes = 32 * mib
        extent = ring.reserve(0, 0, nbytes, generation=ring.enter(0), timeout_s=5)
        assert extent is not None
        writer = SlotWriter(ring, extent, raw_bytes=nbytes)
        raw = np.frombuffer(writer.raw_buffer(nbytes, what="x"), dtype=np.uint8)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        raw[::4096] = 1  # one write per 4 KiB page, as preadv fills a sample
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        assert faults < 64, faults  # mapped with the extent, not faulted in page by page (8192)
        assert np.all(raw[::4096] == 1)
    finally:
        ring.close()
