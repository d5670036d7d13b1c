"""The merged dataset's hash does not depend on part order, parallelism (parts built in a pool of
2 processes) or location; the in-process merge tests are in tests/unit/test_shards_merge.py.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from platform_lib.shards.build import BuildConfig
from platform_lib.shards.merge import build_part, merge_parts
from platform_lib.sources.catalog import list_logs

CONFIG = BuildConfig(split="by_log", val_fraction=0.25, shard_size_mb=0.05)


def _parts(source_root: Path, store: Path, logs: list[Path] | None = None) -> list:
    logs = logs if logs is not None else list_logs("synthetic", source_root)
    return [build_part("synthetic", log, CONFIG, store=str(store)) for log in logs]


def _build_one(args: tuple[str, str]) -> str:
    log, store = args
    return build_part("synthetic", log, CONFIG, store=store).location


def test_dataset_hash_is_independent_of_part_order_parallelism_and_location(
    synthetic_root: Path, tmp_path: Path
) -> None:
    logs = list_logs("synthetic", synthetic_root)
    serial = [p.location for p in _parts(synthetic_root, tmp_path / "a")]
    with multiprocessing.get_context("spawn").Pool(2) as pool:  # reversed order, 2 processes
        parallel = pool.map(_build_one, [(str(log), str(tmp_path / "b")) for log in reversed(logs)])
    first = merge_parts(serial, tmp_path / "ds1", CONFIG, source="synthetic")
    second = merge_parts(parallel, tmp_path / "ds2", CONFIG, source="synthetic")
    third = merge_parts(serial[::-1], tmp_path / "ds3", CONFIG, source="synthetic")
    assert first.dataset_hash == second.dataset_hash == third.dataset_hash
    assert (tmp_path / "ds1/index.parquet").read_bytes() == (
        tmp_path / "ds2/index.parquet"
    ).read_bytes()
    assert first.shards[0].location != second.shards[0].location
