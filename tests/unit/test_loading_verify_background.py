"""verify="shard" on a node that never hashed the shards: the first batch does not wait for the
whole-shard sha256; until a shard's background check is recorded its members are read with the
per-member sha256 checks (same trust), and loader close stops the check cleanly."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import filelock
import pyarrow.parquet as pq
import pytest

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.files import ShardVerifications
from platform_lib.loading.loader import build_loader
from platform_lib.shards.errors import SampleIntegrityError
from platform_lib.shards.manifest import load_manifest
from tests.support.datasets import write_test_dataset

pytestmark = pytest.mark.timeout(60)


def _loader(root: Path, cache: Path, **options):
    return build_loader(
        str(root),
        rank=0,
        world_size=1,
        batch_size=2,
        num_workers=0,
        seed=0,
        shuffle=False,
        decode="none",
        config=LoaderConfig(cache_dir=str(cache), **options),
    )


def _shard_records(cache: Path) -> list[Path]:
    """Shard verification records (and their temporary files) of the node cache `cache`."""
    return sorted(p for p in cache.rglob("shards/*") if not p.name.endswith(".lock"))


def _hash_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "drivetrain-shard-hash"}


def test_a_tampered_member_is_refused_before_its_shard_is_hashed(tmp_path):
    root = write_test_dataset(tmp_path / "d", {"loga": 6})
    row = pq.read_table(root / "index.parquet").to_pylist()[1]  # in the first batch
    member = next(m for m in row["members"] if m["name"] == "lidar.npy")
    with open(root / row["shard"], "r+b") as f:  # one flipped byte, mtime moves on
        f.seek(member["offset"] + member["size"] // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))
    before = _hash_threads()
    loader = _loader(root, tmp_path / "cache")
    with pytest.raises(SampleIntegrityError) as info:
        next(iter(loader))
    message = str(info.value)
    assert f"{row['key']}.lidar.npy" in message and "sha256" in message
    assert f"byte offset {member['offset']}" in message
    assert _shard_records(tmp_path / "cache") == []  # refused by the interim check alone
    loader.close()
    assert _hash_threads() <= before


def test_the_first_batch_comes_before_the_shard_check_which_the_pass_records(tmp_path):
    root = write_test_dataset(tmp_path / "d", {"loga": 6})
    cache = tmp_path / "cache"
    shards = len(load_manifest(root).shards)
    before = _hash_threads()
    first = _loader(root, cache)
    batches = iter(first)
    assert len(next(batches)["__key__"]) == 2
    assert _shard_records(cache) == []  # nothing hashed before the first batch
    assert first.stats.interim_checked == 2 and first.stats.shards_hashed == 0
    assert sum(len(b["__key__"]) for b in batches) == 4
    assert first.stats.shards_hashed == shards  # the pass ends with every check recorded
    records = _shard_records(cache)
    assert len(records) == shards
    for record in records:
        saved = json.loads(record.read_text())
        assert set(saved) == {"size", "mtime_ns", "inode", "device", "sha256", "ok"}
        assert saved["ok"] is True
    first.close()
    second = _loader(root, cache)  # same node: reads the records, hashes nothing
    assert sum(len(b["__key__"]) for b in second) == 6
    assert second.stats.shards_hashed == 0 and second.stats.interim_checked == 0
    second.close()
    assert _hash_threads() <= before


def test_close_during_a_background_check_leaves_no_thread_and_no_record(tmp_path):
    root = write_test_dataset(tmp_path / "d", {"loga": 6})
    cache = tmp_path / "cache"
    manifest = load_manifest(root)
    where = ShardVerifications(str(cache), manifest.dataset_hash)
    held = []
    for entry in manifest.shards:  # another process is checking every shard: ours must wait
        fd = os.open(root / entry.path, os.O_RDONLY)
        try:
            record, _ = where.record(fd, root / entry.path, entry)
        finally:
            os.close(fd)
        record.parent.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(f"{record}.lock")
        lock.acquire(timeout=0)
        held.append(lock)
    before = _hash_threads()
    try:
        loader = _loader(root, cache, worker_timeout_s=1.0)  # reads wait 0.5 s for a check
        batches = iter(loader)
        next(batches)
        next(batches)  # the first batch is out: the background check has started
        assert len(_hash_threads() - before) == 1
        loader.close()
        assert _hash_threads() <= before
        assert _shard_records(cache) == []  # nothing recorded, no temporary file left
        assert loader.stats.shards_hashed == 0 and loader.stats.interim_checked == 4
    finally:
        for lock in held:
            lock.release()
