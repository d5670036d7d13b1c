"""Fuzzed indexes reach `load_view`: rows with random sizes, offsets (negative, giant, int64
extremes) and repeated keys, recorded in the manifest as a build would; and random bytes as
index.parquet. Only `DatasetIndexError` may come out, in bounded time and memory per example,
and a view that opens holds only byte ranges inside their shards."""

from __future__ import annotations

import copy
import hashlib
import json
import resource
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platform_lib.shards.errors import DatasetIndexError
from platform_lib.shards.index import read_index
from platform_lib.shards.manifest import compute_dataset_hash
from platform_lib.shards.view import load_view
from tests.support.datasets import write_index_rows, write_test_dataset

#: Most the process's peak memory may grow over the whole file, in KiB (ru_maxrss). Not
#: tracemalloc: its stop() races with pyarrow's threads on Python 3.11 (a crash).
MAX_GROWTH_KIB = 256 << 10
FUZZ = settings(
    max_examples=200,
    deadline=2000,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
INT64 = st.one_of(
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.sampled_from([-1, 0, 1, 511, 512, (1 << 62), (1 << 63) - 1, -(1 << 63)]),
)


@pytest.fixture(scope="module")
def baseline_kib() -> int:
    """The process's peak memory (KiB) when this file starts: a test worker runs other files
    before it, whose peaks are not this file's."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, baseline_kib) -> tuple[Path, list[dict], pa.Schema, str]:
    root = write_test_dataset(tmp_path_factory.mktemp("fuzz") / "data", {"loga": 3, "logb": 3})
    table = pq.read_table(root / "index.parquet")
    return root, table.to_pylist(), table.schema, (root / "manifest.json").read_text()


def _open(root: Path, cache: Path, baseline_kib: int) -> None:
    """Open the view; when it opens, every range must lie inside its shard (exact integers)."""
    try:
        view = load_view(str(root), cache_dir=str(cache))
    except DatasetIndexError as exc:
        assert "\n" not in str(exc) and "index.parquet" in str(exc)
        return
    finally:
        growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - baseline_kib
        assert growth < MAX_GROWTH_KIB
    for i in range(len(view)):
        lo, size = int(view.sample_offset[i]), int(view.sample_size[i])
        assert 0 <= lo and 0 < size and lo + size <= int(view.shard_bytes[view.shard_id[i]])
        for m in view.members_of(i):
            m_lo, m_size = int(view.member_offset[m]), int(view.member_size[m])
            assert lo <= m_lo and 0 <= m_size and m_lo + m_size <= lo + size
    keys = view.keys()
    assert len(set(keys)) == len(keys)


@FUZZ
@given(data=st.data())
def test_random_index_rows(dataset, baseline_kib, tmp_path, data):
    root, rows, schema, manifest = dataset
    (root / "manifest.json").write_text(manifest)
    rows = copy.deepcopy(rows)
    for _ in range(data.draw(st.integers(1, 4))):
        row = data.draw(st.sampled_from(rows))
        what = data.draw(st.sampled_from(["sample", "member", "duplicate", "drop", "shard_id"]))
        if what == "sample":
            row[data.draw(st.sampled_from(["sample_offset", "sample_size"]))] = data.draw(INT64)
        elif what == "member":
            member = data.draw(st.sampled_from(row["members"]))
            member[data.draw(st.sampled_from(["offset", "size"]))] = data.draw(INT64)
        elif what == "duplicate":
            rows.append(copy.deepcopy(row))
        elif what == "drop" and len(rows) > 1:
            rows.remove(row)
        elif what == "shard_id":
            row["shard_id"] = data.draw(st.integers(-(1 << 31), (1 << 31) - 1))
    write_index_rows(root, rows, schema)
    if data.draw(st.booleans()):  # or the manifest keeps its count: dropped/added rows
        count = json.loads(manifest)["num_samples"]
        stamped = json.loads((root / "manifest.json").read_text())
        (root / "manifest.json").write_text(json.dumps({**stamped, "num_samples": count}))
    _open(root, tmp_path / "cache", baseline_kib)


@FUZZ
@given(blob=st.binary(max_size=4096), parquet_magic=st.booleans())
def test_random_bytes_as_the_index(dataset, baseline_kib, tmp_path, blob, parquet_magic):
    root, _, _, manifest = dataset
    if parquet_magic:  # reach the Parquet footer parser, not just the magic check
        blob = b"PAR1" + blob + len(blob).to_bytes(4, "little") + b"PAR1"
    (root / "index.parquet").write_bytes(blob)
    stamped = json.loads(manifest)
    stamped["index"] = {
        "path": "index.parquet",
        "sha256": hashlib.sha256(blob).hexdigest(),
        "bytes": len(blob),
    }
    stamped["dataset_hash"] = compute_dataset_hash(stamped["index"]["sha256"], stamped["shards"])
    (root / "manifest.json").write_text(json.dumps(stamped))  # recorded: the parser sees it
    _open(root, tmp_path / "cache", baseline_kib)
    with pytest.raises(DatasetIndexError):
        read_index(pa.BufferReader(blob), where="fuzz")
