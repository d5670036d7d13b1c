"""index.parquet: exact Arrow schema, deterministic bytes, pandera value rules."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from pandera.errors import SchemaErrors
from shard_helpers import make_frames

from platform_lib.shards.build import BuildConfig, write_dataset
from platform_lib.shards.errors import DatasetIndexError
from platform_lib.shards.index import build_index_table, read_index, write_index
from platform_lib.shards.reader import open_dataset
from schemas.index import INDEX_SCHEMA, validate_index_frame


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    root = tmp_path_factory.mktemp("idx") / "ds"
    write_dataset(
        make_frames(),
        root,
        BuildConfig(shard_size_mb=0.05, progress=False),
        source="t",
        source_logs=[],
    )
    return open_dataset(root).index.to_pylist()


def test_index_file_has_exact_schema_and_no_pandas_metadata(rows, tmp_path):
    write_index(rows, tmp_path / "index.parquet")
    schema = pq.read_schema(tmp_path / "index.parquet")
    assert schema.equals(INDEX_SCHEMA, check_metadata=False)
    assert b"pandas" not in (schema.metadata or {})
    assert read_index(tmp_path / "index.parquet").to_pylist() == rows
    meta = pq.read_metadata(tmp_path / "index.parquet")
    assert meta.num_rows == 8 and meta.created_by.startswith("parquet-cpp-arrow")


def test_index_bytes_are_deterministic(rows, tmp_path):
    first = write_index(rows, tmp_path / "a.parquet")
    second = write_index([dict(r) for r in rows], tmp_path / "b.parquet")
    assert first == second
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert not list(tmp_path.glob("*.tmp-*"))


def test_pandera_model_accepts_index(rows):
    frame = build_index_table(rows).to_pandas()
    assert len(validate_index_frame(frame)) == 8


def test_pandera_model_reports_bad_values(rows):
    bad = [dict(r) for r in rows]
    bad[1]["split"] = "test"
    bad[2]["sample_offset"] = 513
    bad[3]["content_hash"] = "xyz"
    bad[4]["key"] = bad[5]["key"]
    with pytest.raises(SchemaErrors) as info:
        validate_index_frame(build_index_table(bad).to_pandas())
    cases = info.value.failure_cases
    failing = set(cases["column"].dropna()) | set(cases["check"].astype(str))
    assert {"split", "content_hash", "key"} <= failing
    assert any("aligned" in c for c in cases["check"].astype(str))


def test_read_index_refuses_other_schema(rows, tmp_path):
    table = build_index_table(rows).drop_columns(["num_cyclist"])
    pq.write_table(table, tmp_path / "index.parquet")
    with pytest.raises(DatasetIndexError, match=r"num_cyclist.*rebuild"):
        read_index(tmp_path / "index.parquet")
