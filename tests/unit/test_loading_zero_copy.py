"""Zero-copy hand-off, verify policies, persistent workers and the columnar index.

The ring path (workers `preadv` into a shared-memory slot, the main process gets views) must
give the same bytes and values as the reference reader (`DatasetReader`, `np.load`,
`json.loads`) for every member of the real PandaSet sample and of synthetic data.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import simplejpeg
import torch
from loading_helpers import write_index_rows, write_test_dataset

from platform_lib.imaging.decode import CameraResize
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.errors import RingError, SampleIntegrityError
from platform_lib.loading.loader import build_loader
from platform_lib.loading.ring import Ring, SlotWriter
from platform_lib.shards.build import BuildConfig, build_dataset
from platform_lib.shards.reader import open_dataset

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def pandaset_dataset(pandaset_root, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("zc-pandaset") / "ds"
    build_dataset("pandaset", pandaset_root, out, BuildConfig(progress=False, shard_size_mb=20))
    return out


@pytest.fixture(scope="module")
def synthetic_dataset(synthetic_root, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("zc-synthetic") / "ds"
    build_dataset("synthetic", synthetic_root, out, BuildConfig(progress=False, shard_size_mb=0.2))
    return out


def _reference(reader, key: str) -> dict:
    """Every member of `key`, read by byte range and parsed the conventional way (copies)."""
    members = reader.read_sample(key, verify=True)
    ref = {"cameras": {n[:-4]: v for n, v in members.items() if n.endswith(".jpg")}}
    for name in ("lidar", "lidar_seg", "radar"):
        data = members.get(f"{name}.npy")
        ref[name] = None if data is None else np.load(io.BytesIO(data), allow_pickle=False)
    for name in ("cuboids", "calib", "pose"):
        ref[name] = json.loads(members[f"{name}.json"])
    return ref


def _same_json(actual, expected) -> bool:
    if isinstance(expected, dict):
        return set(actual) == set(expected) and all(
            _same_json(actual[k], v) for k, v in expected.items()
        )
    if isinstance(actual, np.ndarray):
        return np.array_equal(actual, np.asarray(expected, dtype=actual.dtype))
    return actual == expected


@pytest.mark.parametrize("which", ["synthetic", "pandaset"])
def test_ring_views_equal_the_reference_reader_for_every_member(which, request):
    root = request.getfixturevalue(f"{which}_dataset")
    reader = open_dataset(root)
    loader = build_loader(
        str(root),
        rank=0,
        world_size=1,
        batch_size=3,
        num_workers=2,
        seed=0,
        shuffle=False,
        decode="none",
    )
    seen = 0
    for batch in loader:
        for i, key in enumerate(batch["__key__"]):
            if batch["__padded__"][i]:
                continue
            ref = _reference(reader, key)
            cameras = batch["cameras"][i]
            assert set(cameras) == set(ref["cameras"])
            for name, jpeg in cameras.items():
                assert isinstance(jpeg, memoryview) and bytes(jpeg) == ref["cameras"][name]
            for name in ("lidar", "lidar_seg", "radar"):
                value, expected = batch[name][i], ref[name]
                if expected is None:
                    assert value is None
                    continue
                assert value.dtype == expected.dtype and value.shape == expected.shape
                assert value.tobytes() == expected.tobytes()
                assert not value.flags.owndata  # a view (of the ring slot or of a small copy)
            for name in ("cuboids", "calib", "pose"):
                assert _same_json(batch[name][i], ref[name]), f"{key} {name}"
            seen += 1
    assert seen == len(reader)
    assert loader.stats.ring_fallbacks == 0


def test_decoded_images_in_the_ring_equal_a_plain_decode(synthetic_dataset):
    reader = open_dataset(synthetic_dataset)
    loader = build_loader(
        str(synthetic_dataset),
        rank=0,
        world_size=1,
        batch_size=4,
        num_workers=1,
        seed=0,
        decode="cpu",
    )
    batch = next(iter(loader))
    for i, key in enumerate(batch["__key__"]):
        for name, image in batch["cameras"][i].items():
            expected = simplejpeg.decode_jpeg(
                reader.read_member(key, f"{name}.jpg"), colorspace="RGB"
            )
            assert np.array_equal(image, expected)
    assert loader.stats.ring_fallbacks == 0
    resized = build_loader(
        str(synthetic_dataset),
        rank=0,
        world_size=1,
        batch_size=4,
        num_workers=1,
        seed=0,
        config=LoaderConfig(camera_resize=CameraResize(width=64, height=32)),
    )
    batch = next(iter(resized))
    assert {image.shape for cams in batch["cameras"] for image in cams.values()} == {(32, 64, 3)}
    assert resized.stats.ring_fallbacks == 0  # the measured output area holds resized images


def _pid_transform(sample):
    return {
        "pid": torch.tensor(os.getpid()),
        "points": torch.as_tensor(np.asarray(sample["lidar"][:8])),
    }


def test_workers_persist_across_epochs_and_tensors_are_stacked_in_the_ring(tmp_path):
    root = write_test_dataset(tmp_path / "d", {"loga": 8, "logb": 8})
    cfg = LoaderConfig(sample_transform=_pid_transform, prefetch_depth=3)
    with build_loader(
        str(root), rank=0, world_size=1, batch_size=4, num_workers=2, seed=0, config=cfg
    ) as loader:
        pids = []
        for epoch in range(3):
            loader.set_epoch(epoch)
            epoch_pids = {int(p) for b in loader for p in b["pid"]}
            assert len(epoch_pids) == 2 and os.getpid() not in epoch_pids
            pids.append(epoch_pids)
        assert pids[0] == pids[1] == pids[2]  # the same two processes served every epoch
        batch = next(iter(loader))
        assert batch["points"].shape == (4, 8, 4) and loader.stats.ring_fallbacks == 0


def _flip(root: Path, *, member: str) -> tuple[dict, dict]:
    row = pq.read_table(root / "index.parquet").to_pylist()[3]
    m = next(m for m in row["members"] if m["name"] == member)
    with open(root / row["shard"], "r+b") as f:
        f.seek(m["offset"] + m["size"] // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))
    return row, m


@pytest.mark.parametrize("verify", ["shard", "member", "none"])
def test_each_verify_policy_and_a_flipped_byte(tmp_path, verify):
    root = write_test_dataset(tmp_path / "d", {"loga": 6})
    row, member = _flip(root, member="lidar.npy")
    loader = build_loader(
        str(root),
        rank=0,
        world_size=1,
        batch_size=6,
        num_workers=1,
        seed=0,
        config=LoaderConfig(verify=verify),
    )
    if verify == "none":  # documented: no check, the flipped byte reaches the batch
        batch = next(iter(loader))
        i = batch["__key__"].index(row["key"])
        assert batch["lidar"][i].tobytes() != _good_lidar(tmp_path, row["key"])
        return
    with pytest.raises(SampleIntegrityError) as info:
        next(iter(loader))
    message = str(info.value)
    assert f"{row['key']}.lidar.npy" in message and f"byte offset {member['offset']}" in message
    assert row["shard"] in message and "sha256" in message  # the failed shard falls back to sha256
    skip = build_loader(
        str(root),
        rank=0,
        world_size=1,
        batch_size=6,
        num_workers=1,
        seed=0,
        config=LoaderConfig(verify=verify, error_policy="skip"),
    )
    keys = [k for b in skip for k in b["__key__"]]
    assert row["key"] not in keys and skip.stats.skipped == 1


def _good_lidar(tmp_path: Path, key: str) -> bytes:
    clean = write_test_dataset(tmp_path / "clean", {"loga": 6})
    return np.load(io.BytesIO(open_dataset(clean).read_member(key, "lidar.npy"))).tobytes()


def test_verify_shard_hashes_each_shard_once_per_node_then_checks_xxh3(tmp_path):
    root = write_test_dataset(tmp_path / "d", {"loga": 6})
    shards = len(json.loads((root / "manifest.json").read_text())["shards"])
    first = build_loader(
        str(root), rank=0, world_size=1, batch_size=2, num_workers=2, seed=0, decode="none"
    )
    list(first)
    assert first.stats.shards_hashed == shards  # recorded: the second loader hashes nothing
    second = build_loader(str(root), rank=0, world_size=1, batch_size=2, num_workers=2, seed=0)
    list(second)
    assert second.stats.shards_hashed == 0
    # bit rot after the shard was recorded as good (size, mtime, inode unchanged): the xxh3
    # of every read still catches it
    row = pq.read_table(root / "index.parquet").to_pylist()[3]
    before = os.stat(root / row["shard"])
    _flip(root, member="calib.json")
    os.utime(root / row["shard"], ns=(before.st_atime_ns, before.st_mtime_ns))
    third = build_loader(str(root), rank=0, world_size=1, batch_size=6, num_workers=0, seed=0)
    with pytest.raises(SampleIntegrityError, match=rf"{row['key']}\.calib\.json.*xxh3_64"):
        list(third)
    assert third.stats.shards_hashed == 0


def test_datasets_built_without_xxh3_stay_readable(tmp_path):
    root = write_test_dataset(tmp_path / "d", {"loga": 5})
    table = pq.read_table(root / "index.parquet")
    old_member = pa.struct(
        [f for f in table.schema.field("members").type.value_type if f.name != "xxh3_64"]
    )
    rows = table.to_pylist()
    for row in rows:
        for m in row["members"]:
            del m["xxh3_64"]
    schema = pa.schema(
        [
            f if f.name != "members" else pa.field("members", pa.list_(old_member), nullable=False)
            for f in table.schema
        ]
    )
    write_index_rows(root, rows, schema)
    for verify in ("shard", "member"):
        loader = build_loader(
            str(root),
            rank=0,
            world_size=1,
            batch_size=5,
            num_workers=0,
            seed=0,
            config=LoaderConfig(verify=verify),
        )
        assert sorted(k for b in loader for k in b["__key__"]) == [
            f"loga_{i:06d}" for i in range(5)
        ]
    assert open_dataset(root).view.member_xxh3 is None


def test_the_index_view_has_no_python_object_per_row(tmp_path):
    root = write_test_dataset(tmp_path / "d", {"loga": 7, "logb": 3})
    view = open_dataset(root).view
    arrays = {name: value for name, value in vars(view).items() if isinstance(value, np.ndarray)}
    assert {"key_bytes", "shard_id", "member_offset", "member_sha256", "member_xxh3"} <= set(arrays)
    assert all(a.dtype != object for a in arrays.values())
    assert [view.key(i) for i in range(len(view))] == view.keys()
    assert view.row_of("logb_000002") == view.keys().index("logb_000002")
    with pytest.raises(KeyError, match="nope"):
        view.row_of("nope")


def test_a_sample_larger_than_its_ring_slot_is_a_clear_error():
    ring = Ring(num_workers=1, slots_per_worker=1, raw_bytes=4096, output_bytes=0)
    writer = SlotWriter(ring, ring.acquire(0))
    writer.raw_buffer(4000, what="sample a")
    with pytest.raises(
        RingError, match=r"sample b \(5000 bytes\) does not fit the ring slot.*tampered"
    ):
        writer.raw_buffer(5000, what="sample b")
    ring.close()


def test_a_too_small_dev_shm_is_named_before_anything_is_allocated():
    st = os.statvfs("/dev/shm")
    free = st.f_bavail * st.f_frsize
    before = set(os.listdir("/dev/shm"))
    with pytest.raises(RingError) as info:
        Ring(num_workers=2, slots_per_worker=4, raw_bytes=free // 4, output_bytes=2**20)
    message = str(info.value)
    assert "/dev/shm" in message and "GiB free of" in message and "--shm-size" in message
    assert set(os.listdir("/dev/shm")) == before  # nothing created, nothing left


def test_a_batch_kept_alive_keeps_its_slot_and_later_batches_stay_intact(tmp_path):
    root = write_test_dataset(tmp_path / "d", {"loga": 12})
    loader = build_loader(
        str(root),
        rank=0,
        world_size=1,
        batch_size=1,
        num_workers=1,
        seed=0,
        shuffle=False,
        decode="none",
        config=LoaderConfig(prefetch_depth=1),
    )
    kept = list(loader)  # the consumer keeps every batch: slots run out, fallbacks take over
    reader = open_dataset(root)
    for batch in kept:
        expected = np.load(io.BytesIO(reader.read_member(batch["__key__"][0], "lidar.npy")))
        assert np.array_equal(batch["lidar"][0], expected)
    assert loader.stats.ring_fallbacks > 0
    del kept
