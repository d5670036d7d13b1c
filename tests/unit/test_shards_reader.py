"""Writer/reader pair: shard layout, WebDataset compatibility, random access vs sequential scan."""

from __future__ import annotations

import hashlib
import io
import itertools
import tarfile

import pytest
import webdataset as wds
from shard_helpers import make_frames

from platform_lib.shards.build import BuildConfig, write_dataset
from platform_lib.shards.codec import encode_frame
from platform_lib.shards.errors import ShardFormatError
from platform_lib.shards.reader import iter_tar_samples, open_dataset
from platform_lib.shards.writer import ShardWriter

SOURCE_LOGS = [
    {"log_id": "log-a", "content_hash": "a" * 64},
    {"log_id": "log-b", "content_hash": "b" * 64},
]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    frames = make_frames(per_log=5)
    root = tmp_path_factory.mktemp("ds") / "ds"
    manifest = write_dataset(
        frames,
        root,
        BuildConfig(shard_size_mb=0.03, progress=False),
        source="test",
        source_logs=SOURCE_LOGS,
    )
    return root, manifest, frames


def test_shards_roll_at_target_size(dataset):
    root, manifest, frames = dataset
    assert manifest.num_samples == len(frames) == 10
    assert manifest.num_shards > 2
    assert sum(s.num_samples for s in manifest.shards) == 10
    for shard in manifest.shards:
        size = (root / shard.path).stat().st_size
        assert size == shard.bytes
        assert hashlib.sha256((root / shard.path).read_bytes()).hexdigest() == shard.sha256
        if shard.num_samples > 1:
            assert size <= 30_000 + 10240  # + tarfile's end-of-archive record padding


def test_tar_headers_are_deterministic(dataset):
    root, manifest, _ = dataset
    with tarfile.open(root / manifest.shards[0].path) as tar:
        infos = tar.getmembers()
    assert infos[0].name == "log-a_000000.back_camera.jpg"
    for info in infos:
        assert (info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode) == (
            0,
            0,
            0,
            "",
            "",
            0o644,
        )


def test_webdataset_reads_every_sample(dataset):
    root, manifest, frames = dataset
    urls = [str(root / s.path) for s in manifest.shards]
    samples = list(wds.WebDataset(urls, shardshuffle=False))
    assert [s["__key__"] for s in samples] == [f.key for f in frames]
    for sample, frame in zip(samples, frames, strict=True):
        for name, data in encode_frame(frame):
            assert sample[name] == data


def test_random_access_equals_sequential_scan(dataset):
    root, manifest, _ = dataset
    reader = open_dataset(root)
    scanned = list(reader.iter_samples())
    assert [s["__key__"] for s in scanned] == reader.keys
    members_checked = 0
    for sample in scanned:
        key = sample["__key__"]
        ranged = reader.read_sample(key)
        assert ranged == sample
        for name, data in sample.items():
            if not name.startswith("__"):
                assert reader.read_member(key, name) == data
                members_checked += 1
    assert members_checked == 10 * 8


def test_index_offsets_point_at_member_data(dataset):
    root, _, _ = dataset
    reader = open_dataset(root)
    row = reader.index.slice(3, 1).to_pylist()[0]
    raw = (root / row["shard"]).read_bytes()
    for m in row["members"]:
        data = raw[m["offset"] : m["offset"] + m["size"]]
        assert hashlib.sha256(data).hexdigest() == m["sha256"]
    assert row["sample_offset"] % 512 == 0


def test_read_member_unknown_names(dataset):
    reader = open_dataset(dataset[0])
    with pytest.raises(KeyError, match="nope"):
        reader.read_member("log-a_000000", "nope.npy")
    with pytest.raises(KeyError, match="log-z_000000"):
        reader.read_sample("log-z_000000")


def _craft_tar(name: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in ("k_000000.lidar.npy", name):
            info = tarfile.TarInfo(member)
            info.size = 3
            tar.addfile(info, io.BytesIO(b"abc"))
    return buffer.getvalue()


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "k/../../x.jpg", "a/b.jpg"])
def test_reader_refuses_escaping_member(name):
    data = _craft_tar(name)
    with pytest.raises(ShardFormatError) as info:
        list(iter_tar_samples(io.BytesIO(data), shard="shards/evil.tar"))
    message = str(info.value)
    assert "shards/evil.tar" in message and repr(name) in message
    assert "byte offset 1024" in message  # header of the second member
    assert info.value.member == name


def test_writer_refuses_unsafe_member(tmp_path):
    with (
        ShardWriter(tmp_path, target_bytes=10**6) as writer,
        pytest.raises(ValueError, match="escape"),
    ):
        writer.add("k_000000", [("../../x", b"1")])


def _copy(dataset, tmp_path):
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(dataset[0], root)
    return root


def test_sequential_scan_does_not_end_silently_at_corrupt_header(dataset, tmp_path):
    root = _copy(dataset, tmp_path)
    reader = open_dataset(root)
    rows = reader.index.to_pylist()
    row = next(r for prev, r in itertools.pairwise(rows) if r["shard_id"] == prev["shard_id"])
    path = root / row["shard"]
    data = bytearray(path.read_bytes())
    data[row["sample_offset"] + 10] ^= 0x41  # breaks the header checksum
    path.write_bytes(data)
    with pytest.raises(ShardFormatError, match=rf"first missing sample {row['key']}") as info:
        list(reader.iter_shard_samples(row["shard"]))
    assert info.value.shard == row["shard"]


def test_read_sample_verify_detects_flipped_byte(dataset, tmp_path):
    root = _copy(dataset, tmp_path)
    reader = open_dataset(root)
    row = reader.index.slice(2, 1).to_pylist()[0]
    member = row["members"][4]
    path = root / row["shard"]
    data = bytearray(path.read_bytes())
    data[member["offset"]] ^= 0xFF
    path.write_bytes(data)
    reader.read_sample(row["key"])  # unverified read returns the (bad) bytes
    with pytest.raises(
        ShardFormatError,
        match=rf"member '{row['key']}\.{member['name']}', "
        rf"byte offset {member['offset']}",
    ):
        reader.read_sample(row["key"], verify=True)
    with pytest.raises(ShardFormatError):
        reader.read_member(row["key"], member["name"], verify=True)


def test_reader_refuses_shard_paths_outside_manifest(dataset, tmp_path):
    import json

    root = _copy(dataset, tmp_path)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["shards"][0]["path"] = "../outside.tar"
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(Exception, match=r"outside\.tar.*rebuild"):
        open_dataset(root)
