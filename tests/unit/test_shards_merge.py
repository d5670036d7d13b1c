"""Fanned-out build: per-log parts (content-addressed) + a merge that copies no shard bytes."""

from __future__ import annotations

import multiprocessing
import shutil
from pathlib import Path

import pytest

from platform_lib.shards.build import BuildConfig
from platform_lib.shards.errors import BuildError
from platform_lib.shards.merge import build_part, merge_parts
from platform_lib.shards.reader import open_dataset
from platform_lib.shards.validate import validate_dataset
from platform_lib.sources.catalog import list_logs

CONFIG = BuildConfig(split="by_log", val_fraction=0.25, shard_size_mb=0.05)


def _parts(source_root: Path, store: Path, logs: list[Path] | None = None) -> list:
    logs = logs if logs is not None else list_logs("synthetic", source_root)
    return [build_part("synthetic", log, CONFIG, store=str(store)) for log in logs]


def _build_one(args: tuple[str, str]) -> str:
    log, store = args
    return build_part("synthetic", log, CONFIG, store=store).location


def test_merged_dataset_reads_like_a_built_one_and_holds_no_shard_bytes(
    synthetic_root: Path, tmp_path: Path
) -> None:
    parts = _parts(synthetic_root, tmp_path / "store")
    assert [p.built for p in parts] == [True] * 4
    manifest = merge_parts([p.location for p in parts], tmp_path / "ds", CONFIG, source="synthetic")

    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == ["index.parquet", "manifest.json"]
    roots = [str(tmp_path / "store")]  # the parts' folder: declared, as a part store is
    report = validate_dataset(str(tmp_path / "ds"), shard_roots=roots)
    assert report.ok, report.describe()
    assert manifest.num_shards > 4  # tiny shards: several per log, renumbered globally
    assert manifest.shard_paths == [f"shards/shard-{i:06d}.tar" for i in range(manifest.num_shards)]
    assert [log.log_id for log in manifest.source_logs] == sorted(p.log_id for p in parts)
    assert manifest.splits.counts["val"] == 8 and manifest.splits.counts["train"] == 24
    # every sample reads back with the bytes of its part (merged reader vs the part's own reader)
    merged = open_dataset(tmp_path / "ds", shard_roots=roots)
    for part in parts:
        own = open_dataset(part.location)
        for key in own.keys:
            got, want = merged.read_sample(key, verify=True), own.read_sample(key, verify=True)
            assert {k: v for k, v in got.items() if k != "__shard__"} == {
                k: v for k, v in want.items() if k != "__shard__"
            }
    assert len(merged) == 32
    # the merge's own check reads no shard byte; the full validation still reads them all
    shard = Path(parts[0].location) / "shards" / "shard-000000.tar"
    shard.rename(shard.with_suffix(".moved"))
    assert validate_dataset(str(tmp_path / "ds"), read_shards=False, shard_roots=roots).ok
    missing = validate_dataset(str(tmp_path / "ds"), shard_roots=roots).describe()
    assert "shard file is missing" in missing


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


def test_a_new_log_builds_only_its_part_and_changes_the_dataset_hash(
    synthetic_root: Path, tmp_path: Path
) -> None:
    logs = list_logs("synthetic", synthetic_root)
    store = tmp_path / "store"
    three = _parts(synthetic_root, store, logs[:3])
    before = merge_parts([p.location for p in three], tmp_path / "ds3", CONFIG, source="synthetic")
    four = _parts(synthetic_root, store, logs)
    assert [p.built for p in four] == [False, False, False, True]
    after = merge_parts([p.location for p in four], tmp_path / "ds4", CONFIG, source="synthetic")
    assert after.dataset_hash != before.dataset_hash
    assert {log.content_hash for log in after.source_logs} == {p.log_hash for p in four}
    # a changed byte in a raw log makes a new part of that log only
    changed = tmp_path / "raw" / logs[0].name
    shutil.copytree(logs[0], changed)
    victim = sorted(p for p in changed.rglob("*") if p.is_file())[0]
    victim.write_bytes(victim.read_bytes() + b" ")
    assert build_part("synthetic", changed, CONFIG, store=str(store)).built is True


def test_a_part_built_twice_into_an_object_store_path_is_reused(
    synthetic_root: Path, tmp_path: Path
) -> None:
    log = list_logs("synthetic", synthetic_root)[0]
    first = build_part("synthetic", log, CONFIG, store=f"file://{tmp_path / 'store'}")
    again = build_part("synthetic", log, CONFIG, store=f"file://{tmp_path / 'store'}")
    assert (first.built, again.built, first.location) == (True, False, again.location)


def test_merge_refuses_two_parts_of_one_log(synthetic_root: Path, tmp_path: Path) -> None:
    part = _parts(synthetic_root, tmp_path / "store")[0]
    with pytest.raises(BuildError, match=rf"both hold log '{part.log_id}'"):
        merge_parts([part.location, part.location], tmp_path / "ds", CONFIG, source="synthetic")


def test_merge_refuses_a_part_of_another_shard_size(synthetic_root: Path, tmp_path: Path) -> None:
    part = _parts(synthetic_root, tmp_path / "store")[0]
    with pytest.raises(BuildError, match="shard_size_mb"):
        merge_parts(
            [part.location], tmp_path / "ds", BuildConfig(shard_size_mb=1.0), source="synthetic"
        )


def test_merge_of_nothing_names_the_problem(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="no parts to merge"):
        merge_parts([], tmp_path / "ds", CONFIG, source="synthetic")
