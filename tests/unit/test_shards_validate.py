"""`drivetrain data validate` / validate_dataset on intact, truncated and tampered datasets."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile

import pytest
from shard_helpers import make_frames

from platform_lib.cli import main
from platform_lib.shards.build import BuildConfig, write_dataset
from platform_lib.shards.manifest import Manifest, compute_dataset_hash, write_manifest
from platform_lib.shards.reader import open_dataset
from platform_lib.shards.validate import validate_dataset


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("pristine") / "ds"
    write_dataset(
        make_frames(per_log=3),
        root,
        BuildConfig(shard_size_mb=0.05, progress=False),
        source="t",
        source_logs=[],
    )
    return root


@pytest.fixture
def dataset(pristine, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(pristine, root)
    return root


def _validate_cli(root, capsys) -> tuple[int, str]:
    code = main(["data", "validate", str(root)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_intact_dataset_validates(dataset, capsys):
    code, out = _validate_cli(dataset, capsys)
    assert code == 0 and out.startswith("OK ") and "6 samples" in out


def _member(root, index: int, name: str) -> dict:
    row = open_dataset(root).index.slice(index, 1).to_pylist()[0]
    member = next(m for m in row["members"] if m["name"] == name)
    return {
        **member,
        "shard": row["shard"],
        "key": row["key"],
        "sample_offset": row["sample_offset"],
    }


def test_flipped_byte_in_member_data(dataset, capsys):
    m = _member(dataset, 1, "lidar.npy")
    path = dataset / m["shard"]
    data = bytearray(path.read_bytes())
    data[m["offset"] + 200] ^= 0x01
    path.write_bytes(data)
    code, out = _validate_cli(dataset, capsys)
    assert code == 1
    assert f"shard {m['shard']}: shard sha256 differs" in out
    assert (
        f"shard {m['shard']}, member '{m['key']}.lidar.npy', byte offset {m['offset']}: "
        "sha256 of member data"
    ) in out


def test_flipped_byte_in_tar_header(dataset, capsys):
    m = _member(dataset, 1, "back_camera.jpg")  # first member of the 2nd sample
    path = dataset / m["shard"]
    data = bytearray(path.read_bytes())
    data[m["sample_offset"] + 3] ^= 0x20  # inside the member name -> header checksum fails
    path.write_bytes(data)
    code, out = _validate_cli(dataset, capsys)
    assert code == 1
    assert f"shard {m['shard']}, byte offset {m['sample_offset']}" in out
    assert f"member '{m['key']}.back_camera.jpg'" in out and "did not find it" in out


def test_flipped_byte_in_padding(dataset):
    m = _member(dataset, 0, "pose.json")
    path = dataset / m["shard"]
    data = bytearray(path.read_bytes())
    pad = m["offset"] + m["size"]
    data[pad] = 0x7F
    path.write_bytes(data)
    report = validate_dataset(str(dataset))
    assert not report.ok
    assert any(p.offset == pad and p.member == f"{m['key']}.pose.json" for p in report.problems)


@pytest.mark.parametrize("cut", ["mid_member", "end_blocks"])
def test_truncated_shard(dataset, capsys, cut):
    m = _member(dataset, 1, "lidar.npy")
    path = dataset / m["shard"]
    data = path.read_bytes()
    keep = m["offset"] + 100 if cut == "mid_member" else len(data) - 5000
    path.write_bytes(data[:keep])
    code, out = _validate_cli(dataset, capsys)
    assert code == 1
    assert f"shard {m['shard']}, byte offset {keep}: shard has {keep} bytes" in out
    if cut == "mid_member":
        assert f"member '{m['key']}.lidar.npy', byte offset {m['offset']}" in out


def test_missing_shard_and_manifest(dataset, capsys):
    (dataset / "shards" / "shard-000000.tar").unlink()
    code, out = _validate_cli(dataset, capsys)
    assert code == 1 and "shard shards/shard-000000.tar: shard file is missing" in out
    (dataset / "manifest.json").unlink()
    code, out = _validate_cli(dataset, capsys)
    assert code == 1 and "no manifest.json" in out and str(dataset) in out


def test_tampered_index_detected(dataset):
    manifest = json.loads((dataset / "manifest.json").read_text())
    (dataset / "index.parquet").write_bytes(b"PAR1 not parquet")
    report = validate_dataset(str(dataset))
    messages = [str(p) for p in report.problems]
    assert any("index.parquet sha256/size differ" in m for m in messages)
    assert manifest["num_samples"] == 6


def test_edited_manifest_summary_detected(dataset):
    """`data inspect` shows splits and class counts from the manifest: validate checks them."""
    manifest = json.loads((dataset / "manifest.json").read_text())
    manifest["splits"]["counts"]["train"] += 1
    manifest["class_counts"]["vehicle"] += 5
    write_manifest(dataset, Manifest.from_dict(manifest, where="edited manifest"))
    messages = [str(p) for p in validate_dataset(str(dataset)).problems]
    assert any("splits.counts" in m for m in messages)
    assert any("class_counts" in m for m in messages)


def test_escaping_member_in_shard_is_refused(dataset, capsys):
    """A shard whose tar holds `../x`: the validator names shard, member and header offset."""
    manifest = json.loads((dataset / "manifest.json").read_text())
    entry = manifest["shards"][0]
    path = dataset / entry["path"]
    original = path.read_bytes()
    buffer = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(original)) as src,
        tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as dst,
    ):
        for info in src:
            dst.addfile(info, src.extractfile(info))
        evil = tarfile.TarInfo("../evil.jpg")
        evil.size = 4
        evil_offset = dst.offset
        dst.addfile(evil, io.BytesIO(b"boom"))
    path.write_bytes(buffer.getvalue())
    # re-seal the manifest so only the member name is wrong
    entry["sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()
    entry["bytes"] = len(buffer.getvalue())
    manifest["dataset_hash"] = compute_dataset_hash(manifest["index"]["sha256"], manifest["shards"])
    write_manifest(dataset, Manifest.from_dict(manifest, where="edited manifest"))
    code, out = _validate_cli(dataset, capsys)
    assert code == 1
    assert (
        f"shard {entry['path']}, member '../evil.jpg', byte offset {evil_offset}: "
        "member name contains '..'"
    ) in out
    reader = open_dataset(dataset)
    with pytest.raises(Exception, match=r"shards/shard-000000\.tar, member '\.\./evil\.jpg'"):
        list(reader.iter_shard_samples(0))
