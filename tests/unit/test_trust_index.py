"""An index is trusted only as the manifest's: size, sha256, row count, unique keys and every
member range inside its shard are checked when a dataset view opens, each mismatch one line
naming the file and what differs; the sha256 is computed once per node and recorded."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from loading_helpers import write_index_rows, write_test_dataset

from platform_lib.loading.errors import DatasetIndexError
from platform_lib.loading.loader import build_loader
from platform_lib.shards.view import load_view

pytestmark = pytest.mark.timeout(60)
HUGE = (1 << 63) - 1  # int64 max: offset + size wraps around in int64 arithmetic


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    return write_test_dataset(tmp_path / "data", {"loga": 4, "logb": 4})


def _rows(root: Path) -> list[dict]:
    return pq.read_table(root / "index.parquet").to_pylist()


def _open_error(root: Path, **loader_args) -> str:
    """Open the dataset as the loader does; return the one-line DatasetIndexError."""
    with pytest.raises(DatasetIndexError) as info:
        build_loader(
            str(root),
            rank=0,
            world_size=1,
            batch_size=2,
            seed=0,
            **{"num_workers": 0, **loader_args},
        )
    message = str(info.value)
    assert "\n" not in message and f"{root}/index.parquet" in message
    return message


def test_a_duplicated_row_names_the_repeated_key(dataset):
    rows = _rows(dataset)
    write_index_rows(dataset, [*rows, rows[2]])  # manifest counts it: only the key repeats
    message = _open_error(dataset)
    assert f"sample key {rows[2]['key']!r} appears more than once" in message
    assert "rows [2, 8]" in message


def test_a_dropped_row_names_both_counts(dataset):
    rows = _rows(dataset)
    count = json.loads((dataset / "manifest.json").read_text())["num_samples"]
    write_index_rows(dataset, rows[:-1])
    manifest = json.loads((dataset / "manifest.json").read_text())
    manifest["num_samples"] = count  # the manifest still lists every sample
    (dataset / "manifest.json").write_text(json.dumps(manifest))
    assert "7 rows, the manifest says num_samples 8" in _open_error(dataset)


def test_a_member_range_past_its_shard_end(dataset):
    rows = _rows(dataset)
    lidar = next(m for m in rows[3]["members"] if m["name"] == "lidar.npy")
    lidar["size"] = HUGE  # offset + size wraps to a negative end in int64
    write_index_rows(dataset, rows)
    message = _open_error(dataset)
    assert f"row 3 (key {rows[3]['key']!r}" in message
    assert f"member 'lidar.npy' bytes [{lidar['offset']}, {lidar['offset']} + {HUGE})" in message


def test_a_giant_sample_size_never_reaches_the_ring(dataset):
    rows = _rows(dataset)
    row = next(r for r in rows if r["sample_offset"] > 0)
    row["sample_size"] = HUGE  # the end wraps negative; members made to wrap to the same end
    for m in row["members"]:
        m["size"] = HUGE - (m["offset"] - row["sample_offset"])
    write_index_rows(dataset, rows)
    message = _open_error(dataset, num_workers=2)  # before any ring or buffer is sized
    assert f"sample bytes [{row['sample_offset']}, {row['sample_offset']} + {HUGE})" in message
    assert "outside the shard's" in message


def test_an_index_of_another_size_than_the_manifest_says(dataset):
    expected = (dataset / "index.parquet").stat().st_size
    rows = _rows(dataset)
    pq.write_table(  # replaced by a valid index of half the rows; the manifest untouched
        pq.read_table(dataset / "index.parquet").slice(0, len(rows) // 2),
        dataset / "index.parquet",
    )
    size = (dataset / "index.parquet").stat().st_size
    message = _open_error(dataset)
    assert f"{size} bytes, the manifest's index entry says {expected}" in message


def test_an_index_whose_sha256_differs_from_the_manifest(dataset):
    data = bytearray((dataset / "index.parquet").read_bytes())
    at = data.index(b"parquet-cpp")
    data[at] = ord("P")  # same size, still valid Parquet with the same rows: only the sha256
    (dataset / "index.parquet").write_bytes(bytes(data))
    sha = json.loads((dataset / "manifest.json").read_text())["index"]["sha256"]
    assert f"sha256 differs from the manifest's index sha256 {sha}" in _open_error(dataset)


def test_the_index_sha256_is_computed_once_per_node_and_recorded(dataset, tmp_path):
    from platform_lib.shards.index import load_index
    from platform_lib.shards.manifest import load_manifest
    from platform_lib.storage import resolve_fs

    cache = tmp_path / "node-cache"
    load_view(str(dataset), cache_dir=str(cache))
    manifest = load_manifest(dataset)
    record = cache / manifest.dataset_hash[:16] / "verified" / "index.parquet.json"
    saved = json.loads(record.read_text())
    assert saved["ok"] is True and saved["sha256"] == manifest.index.sha256
    before = os.stat(record)
    load_view(str(dataset), cache_dir=str(cache))  # a second open (another rank, a restart)
    after = os.stat(record)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not rewritten

    fs, root, _ = resolve_fs(str(dataset), {})
    _, hashed = load_index(
        fs, f"{root}/index.parquet", manifest.index, is_local=True, where="x", record=record
    )
    assert hashed is False  # the record vouches for this file version: no hash
    # an in-place rewrite of the same size with mtime put back is a new version: hashed again
    path = dataset / "index.parquet"
    st = os.stat(path)
    data = bytearray(path.read_bytes())
    data[data.index(b"parquet-cpp")] = ord("P")
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(DatasetIndexError, match="sha256 differs"):
        load_view(str(dataset), cache_dir=str(cache))
    assert json.loads(record.read_text())["ok"] is False
