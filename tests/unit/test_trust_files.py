"""Only regular files, only inside their root: dataset manifests, indexes and shards.

Every test has a deadline (pytest-timeout): a FIFO opened the old way blocks forever, so a
regression fails here instead of hanging the run.
"""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

import pytest

import platform_lib.loading.files as loading_files
import platform_lib.shards.reader as shards_reader
from platform_lib.errors import format_user_error
from platform_lib.fsguard import NotRegularFileError
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader
from platform_lib.shards.errors import ManifestError, ShardFormatError
from platform_lib.shards.manifest import (
    SHARD_ROOTS_ENV,
    ShardEntry,
    ShardLocationError,
    load_manifest,
    shard_location,
)
from platform_lib.shards.reader import open_dataset
from platform_lib.shards.validate import validate_dataset
from platform_lib.shards.view import load_view
from tests.support.datasets import write_test_dataset

pytestmark = pytest.mark.timeout(30)

SHARD = "shards/shard-000000.tar"


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    return write_test_dataset(tmp_path / "data", {"loga": 4, "logb": 4})


@pytest.fixture()
def replace():
    """Return `replace(path, kind)`: the file at `path` becomes a FIFO, a character device
    (/dev/null's numbers; a link to /dev/null leaves the folder: test_trust_links.py) or a
    listening Unix socket (closed after the test)."""
    sockets: list[socket.socket] = []

    def replace_with(path: Path, kind: str) -> None:
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "device":
            try:
                os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
            except PermissionError:
                pytest.skip("creating a device node needs CAP_MKNOD")
        else:
            sockets.append(socket.socket(socket.AF_UNIX))
            sockets[-1].bind(str(path))
            sockets[-1].listen(1)

    yield replace_with
    for sock in sockets:
        sock.close()


_KINDS = {"fifo": "a FIFO", "device": "a character device", "socket": "a socket"}


def _one_line(error: BaseException, path: Path) -> str:
    line = format_user_error(error)
    assert "\n" not in str(error) and str(path) in line and line.startswith("error: ")
    return line


@pytest.mark.parametrize("kind", sorted(_KINDS))
def test_shard_that_is_not_a_regular_file_is_refused_by_the_reader(dataset, kind, replace):
    replace(dataset / SHARD, kind)
    reader = open_dataset(dataset)
    key = reader.index.filter(reader.index["shard_id"].to_numpy() == 0)["key"][0].as_py()
    with pytest.raises(NotRegularFileError) as info:
        reader.read_sample(key)
    assert f"it is {_KINDS[kind]}" in _one_line(info.value, dataset / SHARD)
    with pytest.raises(NotRegularFileError):
        list(reader.iter_shard_samples(0))
    reader.close()


@pytest.mark.parametrize("kind", sorted(_KINDS))
def test_shard_that_is_not_a_regular_file_is_refused_by_the_loader(dataset, kind, replace):
    replace(dataset / SHARD, kind)
    for policy in ("raise", "skip"):  # never skipped as bad data: the dataset is unsafe
        loader = build_loader(
            str(dataset),
            rank=0,
            world_size=1,
            batch_size=4,
            num_workers=0,
            seed=0,
            config=LoaderConfig(error_policy=policy),
        )
        with pytest.raises(NotRegularFileError) as info:
            [k for b in loader for k in b["__key__"]]
        assert f"it is {_KINDS[kind]}" in _one_line(info.value, dataset / SHARD)


@pytest.mark.parametrize("kind", sorted(_KINDS))
def test_index_that_is_not_a_regular_file_is_refused(dataset, kind, replace):
    replace(dataset / "index.parquet", kind)
    for opener in (open_dataset, load_view, validate_dataset):
        with pytest.raises(NotRegularFileError) as info:
            opener(str(dataset))
        _one_line(info.value, dataset / "index.parquet")


@pytest.mark.parametrize("kind", sorted(_KINDS))
def test_manifest_that_is_not_a_regular_file_is_refused(dataset, kind, replace):
    replace(dataset / "manifest.json", kind)
    for opener in (load_manifest, open_dataset, load_view, validate_dataset):
        with pytest.raises(NotRegularFileError) as info:
            opener(str(dataset))
        _one_line(info.value, dataset / "manifest.json")


def test_validate_refuses_a_fifo_shard(dataset, replace):
    replace(dataset / SHARD, "fifo")
    with pytest.raises(NotRegularFileError) as info:
        validate_dataset(str(dataset))
    assert "it is a FIFO" in _one_line(info.value, dataset / SHARD)


def test_oversized_manifest_is_refused_before_it_is_read(dataset):
    with open(dataset / "manifest.json", "r+b") as f:
        f.truncate(64 * 2**20 + 1)  # sparse: no 64 MiB written
    with pytest.raises(ManifestError, match="more than 67108864 bytes"):
        load_manifest(dataset)


def test_index_range_past_the_real_shard_size_is_refused_before_reading(dataset):
    reader = open_dataset(dataset)
    row = reader.index.filter(reader.index["shard_id"].to_numpy() == 0).to_pylist()[-1]
    start, end = row["sample_offset"], row["sample_offset"] + row["sample_size"]
    os.truncate(dataset / SHARD, start + 10)  # the manifest and index still say more
    with pytest.raises(ShardFormatError) as info:
        reader.read_sample(row["key"])
    message = str(info.value)
    assert SHARD in message and f"[{start}, {end})" in message
    assert f"file has {start + 10} bytes" in message and "\n" not in message
    reader.close()


def test_one_open_and_one_fstat_per_shard_never_per_sample(dataset, monkeypatch):
    opened: list[str] = []

    def spy(open_regular):
        def counted(path, **kw):
            opened.append(str(path))
            return open_regular(path, **kw)

        return counted

    monkeypatch.setattr(shards_reader, "open_regular", spy(shards_reader.open_regular))
    monkeypatch.setattr(loading_files, "open_regular", spy(loading_files.open_regular))
    with open_dataset(dataset) as reader:
        for key in reader.keys:
            reader.read_sample(key)
        shards = len(reader.shard_paths)
    assert len(reader.keys) == 8 and sorted(opened) == sorted(set(opened)) and len(opened) == shards
    opened.clear()
    loader = build_loader(str(dataset), rank=0, world_size=1, batch_size=4, num_workers=0, seed=0)
    assert len([k for b in loader for k in b["__key__"]]) == 8
    assert len(opened) == len(set(opened)) == shards  # the measurement pass runs in a child


# -- shard locations ---------------------------------------------------------------------


def _relocate(root: Path, location: str, *, position: int = 0) -> None:
    """Give shard `position` of the manifest at `root` the `location` (a merged dataset's field)."""
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["shards"][position]["location"] = location
    (root / "manifest.json").write_text(json.dumps(manifest))


def test_local_location_escaping_the_dataset_with_dotdot_is_refused(dataset, tmp_path):
    (dataset / "moved").mkdir()
    (dataset / SHARD).rename(dataset / "moved" / "a.tar")
    _relocate(dataset, "moved/../moved/a.tar")  # inside the dataset: read
    reader = open_dataset(dataset)
    assert len([reader.read_sample(k, verify=True) for k in reader.keys]) == 8
    assert validate_dataset(str(dataset)).ok
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (dataset / "moved" / "a.tar").rename(outside / "shard.tar")
    _relocate(dataset, "../elsewhere/shard.tar")
    for opener in (open_dataset, load_view, validate_dataset):
        with pytest.raises(ShardLocationError) as info:
            opener(str(dataset))
        line = format_user_error(info.value)
        assert "../elsewhere/shard.tar" in line and f"{dataset}/manifest.json" in line
        assert "\n" not in line
    # declared by the user: read
    reader = open_dataset(dataset, shard_roots=[str(outside)])
    assert len([reader.read_sample(k) for k in reader.keys]) == 8


def test_absolute_location_and_link_out_of_the_root_are_refused(dataset, tmp_path, monkeypatch):
    secret = tmp_path / "secret.tar"
    secret.write_bytes((dataset / SHARD).read_bytes())
    _relocate(dataset, str(secret))
    with pytest.raises(ShardLocationError):
        open_dataset(dataset)
    monkeypatch.setenv(SHARD_ROOTS_ENV, str(tmp_path))  # declared through the environment
    assert len(open_dataset(dataset).keys) == 8
    monkeypatch.delenv(SHARD_ROOTS_ENV)
    (dataset / "link.tar").symlink_to(secret)  # inside by name, outside once resolved
    _relocate(dataset, "link.tar")
    with pytest.raises(ShardLocationError):
        load_view(str(dataset))


def _entry(location: str) -> ShardEntry:
    return ShardEntry(path=SHARD, sha256="0" * 64, bytes=0, num_samples=0, location=location)


@pytest.mark.parametrize(
    "location",
    [
        "/etc/passwd",
        "file:///tmp/fifo.tar",
        "../other/shards/shard-000000.tar",
        "s3://bucket/ds/../other/shard.tar",
        "s3://bucket/ds-evil/shard.tar",
        "s3://other-bucket/ds/shard.tar",
        "gs://bucket/ds/shard.tar",
        "http://169.254.169.254/latest/meta-data",
    ],
)
def test_remote_manifest_may_not_name_a_shard_outside_its_folder(location, monkeypatch):
    monkeypatch.delenv(SHARD_ROOTS_ENV, raising=False)
    with pytest.raises(ShardLocationError) as info:
        shard_location("s3://bucket/ds", _entry(location))
    assert location in str(info.value) and "s3://bucket/ds/manifest.json" in str(info.value)


def test_remote_manifest_names_shards_under_its_folder_or_an_allow_list(monkeypatch):
    monkeypatch.delenv(SHARD_ROOTS_ENV, raising=False)
    assert shard_location("s3://bucket/ds/", _entry("parts/a.tar")) == "s3://bucket/ds/parts/a.tar"
    assert shard_location("s3://bucket/ds", _entry("s3://bucket/ds/x/a.tar")) == (
        "s3://bucket/ds/x/a.tar"
    )
    store = "s3://bucket/parts/p1/shards/shard-000000.tar"
    with pytest.raises(ShardLocationError):
        shard_location("s3://bucket/ds", _entry(store))
    assert shard_location("s3://bucket/ds", _entry(store), roots=["s3://bucket/parts"]) == store
    with pytest.raises(ShardLocationError):  # the allow-list's local roots only, never others
        shard_location("s3://bucket/ds", _entry("/tmp/x.tar"), roots=["s3://bucket/parts"])
