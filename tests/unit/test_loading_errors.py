"""Bad input: each case raises a specific error naming shard, member and byte offset, or is
skipped and counted under error_policy="skip"; a worker crash surfaces with its traceback."""

from __future__ import annotations

import os
import shutil
import socket
import tarfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from loading_helpers import rename_keys, write_index_rows, write_test_dataset

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.errors import (
    DatasetIndexError,
    ManifestMissingError,
    ObjectStoreUnreachableError,
    SampleIntegrityError,
    ShardFormatError,
)
from platform_lib.loading.loader import build_loader
from platform_lib.shards.tar import iter_tar_members

pytestmark = pytest.mark.timeout(120)
SKIP = LoaderConfig(error_policy="skip")


@pytest.fixture()
def dataset(tmp_path_factory) -> Path:
    return write_test_dataset(tmp_path_factory.mktemp("bad") / "data", {"loga": 6, "logb": 6})


def _keys(loader) -> list[str]:
    return [k for b in loader for k in b["__key__"]]


def _index(root: Path):
    return pq.read_table(root / "index.parquet").to_pylist(), pq.read_schema(root / "index.parquet")


def test_truncated_tar_names_shard_member_and_offset_or_is_skipped(dataset):
    rows, _ = _index(dataset)
    victim = rows[-1]
    shard = dataset / victim["shard"]
    cut = victim["members"][2]["offset"] + 10  # inside the third member of the shard's last sample
    with open(shard, "r+b") as f:
        f.truncate(cut)
    loader = build_loader(str(dataset), rank=0, world_size=1, batch_size=4, num_workers=2, seed=0)
    with pytest.raises(ShardFormatError) as info:
        _keys(loader)
    message = str(info.value)
    assert "truncated" in message and victim["shard"] in message and str(cut) in message
    assert f"{victim['key']}.{victim['members'][2]['name']}" in message
    # raised in a worker, re-raised here as itself: one line, no worker traceback
    assert "\n" not in message and "Traceback" not in message
    skip = build_loader(
        str(dataset), rank=0, world_size=1, batch_size=4, num_workers=2, seed=0, config=SKIP
    )
    keys = _keys(skip)
    assert victim["key"] not in keys and len(set(keys)) == 11
    assert skip.stats.skipped == 1 and skip.stats.skipped_samples[0][0] == victim["key"]


def test_changed_member_bytes_fail_the_sha256_check(dataset):
    rows, _ = _index(dataset)
    victim = rows[4]
    lidar = next(m for m in victim["members"] if m["name"] == "lidar.npy")
    with open(dataset / victim["shard"], "r+b") as f:
        f.seek(lidar["offset"] + lidar["size"] - 3)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    loader = build_loader(str(dataset), rank=0, world_size=1, batch_size=12, num_workers=0, seed=0)
    with pytest.raises(SampleIntegrityError) as info:
        _keys(loader)
    assert f"{victim['key']}.lidar.npy" in str(info.value) and str(lidar["offset"]) in str(
        info.value
    )
    assert victim["shard"] in str(info.value)
    skip = build_loader(
        str(dataset), rank=0, world_size=1, batch_size=12, num_workers=0, seed=0, config=SKIP
    )
    assert victim["key"] not in _keys(skip) and skip.stats.skipped == 1


def test_member_missing_from_an_index_row(dataset):
    rows, schema = _index(dataset)
    rows[3]["members"] = [m for m in rows[3]["members"] if m["name"] != "lidar.npy"]
    write_index_rows(dataset, rows, schema)  # a build that wrote this row: the manifest agrees
    with pytest.raises(DatasetIndexError) as info:
        build_loader(str(dataset), rank=0, world_size=1, batch_size=4, num_workers=0, seed=0)
    assert (
        "row 3" in str(info.value)
        and rows[3]["key"] in str(info.value)
        and "lidar.npy" in str(info.value)
    )
    skip = build_loader(
        str(dataset), rank=0, world_size=1, batch_size=4, num_workers=0, seed=0, config=SKIP
    )
    assert rows[3]["key"] not in _keys(skip) and skip.stats.index_skipped[0][0] == rows[3]["key"]


def test_non_utf8_member_name_in_the_tar_header(dataset):
    rows, _ = _index(dataset)
    victim = rows[7]
    member = victim["members"][0]
    header_at = member["offset"] - 512  # short names: the ustar header directly precedes the data
    with open(dataset / victim["shard"], "r+b") as f:
        f.seek(header_at)
        header = bytearray(f.read(512))
        header[2] = 0xFF  # invalid UTF-8 start byte inside the name
        header[148:156] = b"        "
        header[148:156] = b"%06o\0 " % sum(header)
        f.seek(header_at)
        f.write(header)
    loader = build_loader(str(dataset), rank=0, world_size=1, batch_size=12, num_workers=0, seed=0)
    with pytest.raises(ShardFormatError) as info:
        _keys(loader)
    message = str(info.value)
    assert (
        "not valid UTF-8" in message
        and victim["shard"] in message
        and str(member["offset"]) in message
    )
    skip = build_loader(
        str(dataset), rank=0, world_size=1, batch_size=12, num_workers=0, seed=0, config=SKIP
    )
    assert victim["key"] not in _keys(skip) and skip.stats.skipped == 1


def test_200_character_member_names_load(tmp_path):
    root = write_test_dataset(tmp_path / "d", {"long": 3})
    rename = {f"long_{i:06d}": "L" * 190 + f"_{i:06d}" for i in range(3)}
    rename_keys(root, rename)  # member names are now over 200 characters: PAX long names
    with tarfile.open(root / "shards/shard-000000.tar") as tar:
        assert min(len(n) for n in tar.getnames()) > 200
        listing = [(m.name.encode(), m.offset_data, m.size) for m in tar.getmembers()]
    found = [
        (m.name.encode(), m.data_offset, m.size)
        for m in iter_tar_members((root / "shards/shard-000000.tar").read_bytes())
    ]
    assert found == listing
    loader = build_loader(str(root), rank=0, world_size=1, batch_size=3, num_workers=0, seed=0)
    batch = next(iter(loader))
    assert sorted(batch["__key__"]) == sorted(rename.values())
    assert tuple(batch["cameras"][0]["front_camera"].shape) == (16, 24, 3)


def test_missing_manifest_is_refused(dataset):
    (dataset / "manifest.json").unlink()
    with pytest.raises(ManifestMissingError, match="no manifest.json"):
        build_loader(str(dataset), rank=0, world_size=1, batch_size=4, num_workers=0, seed=0)


def test_a_file_as_dataset_is_not_found_without_retries(tmp_path):
    (tmp_path / "file").write_text("not a dataset")
    start = time.monotonic()
    with pytest.raises(ManifestMissingError, match="no manifest.json"):
        build_loader(
            str(tmp_path / "file"), rank=0, world_size=1, batch_size=4, num_workers=0, seed=0
        )
    assert time.monotonic() - start < 2  # ENOTDIR is permanent: no backoff


def test_unreachable_object_store_fails_fast_with_bounded_retries():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = LoaderConfig(
        max_retries=2,
        retry_backoff_s=0.1,
        storage_options={"endpoint_url": f"http://127.0.0.1:{port}", "key": "x", "secret": "y"},
    )
    start = time.monotonic()
    with pytest.raises(ObjectStoreUnreachableError) as info:
        build_loader(
            "s3://nowhere/data",
            rank=0,
            world_size=1,
            batch_size=4,
            num_workers=0,
            seed=0,
            config=cfg,
        )
    assert time.monotonic() - start < 60
    assert "s3://nowhere/data/manifest.json" in str(info.value) and "3 attempts" in str(info.value)


def _raise_in_transform(sample):
    raise RuntimeError(f"transform exploded on {sample['__key__']}")


def _exit_in_transform(sample):
    os._exit(3)


def test_worker_exception_and_worker_death_surface_in_the_main_process(dataset):
    cfg = LoaderConfig(sample_transform=_raise_in_transform)
    loader = build_loader(
        str(dataset), rank=0, world_size=1, batch_size=4, num_workers=2, seed=0, config=cfg
    )
    with pytest.raises(RuntimeError) as info:
        _keys(loader)
    assert "transform exploded on" in str(info.value) and "_raise_in_transform" in str(info.value)
    assert "DataLoader worker process" in str(info.value)
    dead = build_loader(
        str(dataset),
        rank=0,
        world_size=1,
        batch_size=4,
        num_workers=2,
        seed=0,
        config=LoaderConfig(sample_transform=_exit_in_transform),
    )
    with pytest.raises(RuntimeError, match="exited unexpectedly"):
        _keys(dead)


def test_missing_shard_file(dataset):
    shutil.move(dataset / "shards/shard-000001.tar", dataset / "elsewhere.tar")
    loader = build_loader(str(dataset), rank=0, world_size=1, batch_size=12, num_workers=0, seed=0)
    with pytest.raises(ShardFormatError, match="shard-000001.tar is missing"):
        _keys(loader)


def test_workers_stop_when_a_worker_error_is_raised(dataset):
    """No worker processes outlive a failed epoch (torch keeps the iterator in a reference
    cycle, so without an explicit shutdown they live until a cyclic GC, maybe in a forked child)."""
    import gc
    import multiprocessing

    cfg = LoaderConfig(sample_transform=_raise_in_transform)
    loader = build_loader(
        str(dataset), rank=0, world_size=1, batch_size=4, num_workers=2, seed=0, config=cfg
    )
    gc.collect()  # loaders of earlier tests left in reference cycles stop their (persistent) workers
    gc.disable()
    try:
        with pytest.raises(RuntimeError, match="transform exploded"):
            _keys(loader)
        assert multiprocessing.active_children() == []
    finally:
        gc.enable()
