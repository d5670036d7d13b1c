"""Loader correctness edges (issue 7, item 7): each test failed on the loader before the fix.

Stale iterators of an earlier epoch, node-cache writes outside its folder, the orphaned-temp
sweep across PID namespaces, the source of each sample in mixed batches, and the byte offset
where a truncated shard ends.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import fsspec
import pyarrow.parquet as pq
import pytest
from loading_helpers import write_test_dataset

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader
from platform_lib.shards.errors import DatasetError, ShardFormatError
from platform_lib.shards.reader import open_dataset

pytestmark = pytest.mark.timeout(120)


@pytest.fixture()
def dataset(tmp_path) -> Path:
    return write_test_dataset(tmp_path / "data", {"loga": 6, "logb": 6})


def _upload(local: Path, url: str) -> None:
    """Copy a dataset folder to an in-memory fsspec store (a remote dataset without a server)."""
    fs = fsspec.filesystem("memory")
    fs.rm(url, recursive=True) if fs.exists(url) else None
    for path in sorted(local.rglob("*")):
        if path.is_file():
            fs.pipe_file(f"{url}/{path.relative_to(local).as_posix()}", path.read_bytes())


def test_a_stale_iterator_of_an_earlier_epoch_does_not_move_the_loader_state(dataset):
    loader = build_loader(str(dataset), rank=0, world_size=1, batch_size=2, num_workers=0, seed=1)
    old = iter(loader)
    next(old)  # epoch 0, one batch consumed; the iterator stays alive
    loader.set_epoch(1)
    current = iter(loader)
    next(current)
    next(current)
    assert loader.state_dict()["epoch"] == 1 and loader.state_dict()["consumed_samples"] == 4
    assert next(old, None) is None  # superseded: it ends without yielding
    state = loader.state_dict()
    assert (state["epoch"], state["consumed_samples"]) == (1, 4)
    resumed = build_loader(str(dataset), rank=0, world_size=1, batch_size=2, num_workers=0, seed=1)
    resumed.load_state_dict(state)
    assert [k for b in resumed for k in b["__key__"]] == resumed.epoch_keys(1)[4:]


@pytest.mark.parametrize(
    "escape",
    [
        "../../escaped.tar",
        "/tmp/drivetrain-escaped.tar",
        "shards/../../escaped.tar",
        "shards/x.tar",
    ],
)
def test_the_node_cache_never_writes_outside_its_folder(dataset, tmp_path, escape):
    manifest = json.loads((dataset / "manifest.json").read_text())
    shard = (dataset / manifest["shards"][0]["path"]).read_bytes()
    manifest["shards"][0]["path"] = escape
    (dataset / "manifest.json").write_text(json.dumps(manifest))
    url = "memory://escape-test/ds"
    _upload(dataset, url)
    # the remote object behind the unsafe path is a complete shard: nothing but the path is wrong
    fsspec.filesystem("memory").pipe_file(f"memory://escape-test/ds/{escape}", shard)
    cache = tmp_path / "cache" / "node"
    before = {p for p in tmp_path.rglob("*")}
    with pytest.raises(DatasetError, match="shard") as info:
        loader = build_loader(
            url,
            rank=0,
            world_size=1,
            batch_size=12,
            num_workers=0,
            seed=0,
            config=LoaderConfig(cache_dir=str(cache)),
        )
        list(loader)
    assert escape in str(info.value) and "shards/shard-NNNNNN.tar" in str(info.value)
    assert not Path("/tmp/drivetrain-escaped.tar").exists()
    assert not cache.exists()  # refused before any cache file was created
    assert {p for p in tmp_path.rglob("*")} == before


def _unused_pid() -> int:
    pid = 4_000_000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid += 1


def test_the_temp_sweep_keeps_a_download_locked_by_another_pid_namespace(dataset, tmp_path):
    from platform_lib.loading.cache import ShardCache

    url = "memory://sweep-test/ds"
    _upload(dataset, url)
    manifest = json.loads((dataset / "manifest.json").read_text())
    cache = ShardCache(
        url=url,
        root="/sweep-test/ds",
        storage_options={},
        dataset_hash=manifest["dataset_hash"],
        cache_dir=str(tmp_path / "cache"),
        limit_bytes=10**9,
        max_retries=0,
        backoff_s=0.0,
    )
    folder = cache.folder / "shards"
    folder.mkdir(parents=True)
    # A live download of another container: its pid does not exist in our PID namespace.
    live = folder / f".shard-000005.tar.tmp-{_unused_pid()}-deadbeef"
    # An orphan whose pid happens to be alive here (pids are reused, or another namespace's).
    dead = folder / f".shard-000006.tar.tmp-{os.getpid()}-cafef00d"
    live.write_bytes(b"partial")
    dead.write_bytes(b"partial")
    holder = open(live, "rb")  # noqa: SIM115 - the other container's open file
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        shard = manifest["shards"][0]
        os.close(cache.open(shard["path"], shard["bytes"]))  # runs the sweep
        assert live.exists(), "a locked (live) download was deleted"
        assert not dead.exists(), "an unlocked (orphaned) temp file was kept"
    finally:
        holder.close()
    shard = manifest["shards"][1]
    os.close(cache.open(shard["path"], shard["bytes"]))
    assert not live.exists()  # its writer is gone (lock released): swept


def test_mixed_batches_carry_the_source_of_each_sample(tmp_path):
    first = write_test_dataset(tmp_path / "a", {"log": 6})
    second = write_test_dataset(tmp_path / "b", {"log": 6})  # the very same keys
    mixed = [(str(first), 0.5), (str(second), 0.5)]
    loader = build_loader(
        mixed,
        rank=0,
        world_size=1,
        batch_size=4,
        num_workers=1,
        seed=0,
        config=LoaderConfig(mix_epoch_samples=12),
    )
    sources, keys = [], []
    for batch in loader:
        assert len(batch["__source__"]) == len(batch["__key__"])
        sources += batch["__source__"].tolist()
        keys += batch["__key__"]
    source, unit = loader.epoch_order(0)
    assert sources == [int(s) for s in source]
    assert sorted(set(sources)) == [0, 1] and len(set(keys)) < len(keys)  # keys collide


def test_a_truncated_shard_error_gives_the_offset_where_the_data_ends(dataset):
    row = pq.read_table(dataset / "index.parquet").to_pylist()[1]
    cut = row["sample_offset"] + 700  # inside the sample, after its first header
    key = row["key"]
    with open(dataset / row["shard"], "r+b") as f:
        f.truncate(cut)
    with pytest.raises(ShardFormatError) as info:
        open_dataset(dataset).read_sample(key)
    assert info.value.offset == cut and f"byte offset {cut}" in str(info.value)
    assert "truncated" in str(info.value)
