"""The object-store model of a fleet (`platform_lib.loading.fleet`) and `drivetrain data plan`:
determinism, throttling of one key prefix at 1,024 nodes, hit ratio and GETs by hand, the
refactored eviction and retry rules it shares with the loader, impossible layouts refused."""

from __future__ import annotations

import pytest
import tenacity

from platform_lib.cli import main
from platform_lib.loading.cache import evict_lru
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.fleet import FleetSpec, simulate_fleet, synthetic_dataset
from platform_lib.storage import retry_delay_s

MB = 1_000_000


def _table(report) -> tuple:
    return (
        report.gets,
        report.throttled,
        report.hits,
        report.opens,
        report.gets_per_shard.tolist(),
        report.bytes_per_node.tolist(),
        report.first_batch_s.tolist(),
        report.end_s,
        {p: s.tolist() for p, s in report.gets_per_second.items()},
    )


def test_same_inputs_give_the_same_report():
    data = synthetic_dataset(num_samples=600, sample_bytes=2 * MB, shard_bytes=16 * MB, prefixes=1)
    # a throttling rate low enough that botocore's random retry delays are exercised
    spec = FleetSpec(
        nodes=4, ranks_per_node=2, workers=2, batch_size=4, epochs=2, prefix_gets_per_s=20
    )
    first, second = simulate_fleet(spec, data), simulate_fleet(spec, data)
    assert first.throttled > 0
    assert _table(first) == _table(second)
    other = simulate_fleet(spec.model_copy(update={"seed": 1}), data)
    assert other.gets_per_shard.tolist() != first.gets_per_shard.tolist()


def test_one_prefix_at_1024_nodes_is_throttled_and_four_prefixes_are_not():
    # 1,024 nodes x 8 ranks, one sample per shard: 8,192 GETs at the start, over S3's 5,500/s
    spec = FleetSpec(
        nodes=1024,
        ranks_per_node=8,
        workers=1,
        batch_size=1,
        max_steps=1,
        shuffle=False,
        epoch_ahead=False,
        loader=LoaderConfig(shards_ahead=0),
    )
    one = simulate_fleet(spec, synthetic_dataset(num_samples=8192, sample_bytes=MB, shard_bytes=MB))
    spread = simulate_fleet(
        spec, synthetic_dataset(num_samples=8192, sample_bytes=MB, shard_bytes=MB, prefixes=4)
    )
    assert one.throttled > 0 and one.busiest_prefix()[1] > 5500
    assert one.gets == 8192 + one.throttled  # every 503 is retried until it succeeds
    assert spread.throttled == 0 and spread.gets == 8192
    assert spread.busiest_prefix()[1] == 2048  # 8,192 GETs over 4 prefixes in the first second
    assert one.first_batch_s.max() > spread.first_batch_s.max()  # the 503s cost time


def test_hit_ratio_is_one_minus_unique_over_total_by_hand():
    # 1 node, 1 rank, 1 worker, natural order, 4 samples per shard, batch 4: each epoch opens
    # every shard once (ShardFiles is per epoch); 3 epochs -> 3 x 10 opens, 10 unique shards
    data = synthetic_dataset(num_samples=40, sample_bytes=MB, shard_bytes=4 * MB)
    spec = FleetSpec(
        nodes=1,
        ranks_per_node=1,
        workers=1,
        batch_size=4,
        epochs=3,
        shuffle=False,
        epoch_ahead=False,
        loader=LoaderConfig(shards_ahead=0),
    )
    report = simulate_fleet(spec, data)
    assert report.gets == 10 and report.gets_per_shard.tolist() == [1] * 10
    assert report.opens == 30 and report.hit_ratio == pytest.approx(1 - 10 / 30)
    assert report.bytes_per_node.tolist() == [40 * MB]
    # a cache of 2 shards evicts (LRU) before each shard comes round again: every open misses
    small = spec.model_copy(
        update={"loader": LoaderConfig(shards_ahead=0, cache_limit_bytes=8 * MB)}
    )
    evicting = simulate_fleet(small, data)
    assert evicting.gets == 30 and evicting.hit_ratio == 0.0 and evicting.evictions == 28


def test_evict_lru_removes_oldest_first_skipping_keep_and_shards_in_use():
    cached = [(3, 10, "c"), (1, 10, "a"), (2, 10, "b"), (4, 10, "d")]
    assert evict_lru(cached, limit_bytes=20, keep="d", remove=lambda s: True) == ["a", "b"]
    assert evict_lru(cached, limit_bytes=20, keep="a", remove=lambda s: s != "b") == ["c", "d"]
    assert evict_lru(cached, limit_bytes=40, keep="a", remove=lambda s: True) == []


def test_retry_delay_is_the_schedule_tenacity_used():
    for backoff in (0.0, 0.1, 0.5, 3.0):
        wait = tenacity.wait_exponential(multiplier=backoff, max=8.0)  # the former policy
        for attempt in range(1, 9):
            state = tenacity.RetryCallState(None, None, (), {})
            state.attempt_number = attempt
            assert retry_delay_s(attempt, backoff) == pytest.approx(wait(state))


@pytest.mark.parametrize(
    ("argv", "culprit"),
    [
        (["--nodes", "0", "--ranks-per-node", "8"], "(--nodes)"),
        (["--nodes", "8", "--ranks-per-node", "-1"], "(--ranks-per-node)"),
        (["--nodes", "8,x", "--ranks-per-node", "8"], "(--nodes)"),
        (["--nodes", "8", "--ranks-per-node", "8", "--sample-mb", "0"], "(--sample-mb)"),
        (["--nodes", "64", "--ranks-per-node", "8"], "(--nodes/--ranks-per-node)"),
    ],
)
def test_plan_refuses_impossible_layouts_in_one_line(argv, culprit, capsys):
    # 100 samples: 64 nodes x 8 ranks is more ranks than samples
    assert main(["data", "plan", "--samples", "100", *argv]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and culprit in err and "\n" not in err


def test_plan_prints_one_row_per_nodes_and_shard_size(capsys):
    argv = ["data", "plan", "--samples", "2000", "--nodes", "2,4", "--ranks-per-node", "2"]
    assert main([*argv, "--shard-size-mb", "8,32", "--workers", "2"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 4  # header + 2 shard sizes x 2 node counts
    assert [r.split("|")[1].strip() for r in rows[1:]] == ["2", "4", "2", "4"]


def test_key_prefixes_move_shards_but_keep_bytes_hash_and_what_the_loader_reads(tmp_path):
    from platform_lib.loading.loader import build_loader
    from platform_lib.shards.manifest import load_manifest
    from tests.support.datasets import write_test_dataset

    logs = {"loga": 6, "logb": 5}
    flat = write_test_dataset(tmp_path / "flat", logs)
    spread = write_test_dataset(tmp_path / "spread", logs, key_prefixes=3)
    a, b = load_manifest(flat), load_manifest(spread)
    assert a.dataset_hash == b.dataset_hash and a.num_shards == b.num_shards > 3
    for i, (x, y) in enumerate(zip(a.shards, b.shards, strict=True)):
        assert (x.path, x.sha256, x.location) == (y.path, y.sha256, None)
        assert y.location == f"shards/p{i % 3:02d}/{x.path.removeprefix('shards/')}"
        assert (spread / y.location).read_bytes() == (flat / x.path).read_bytes()
    assert not list((spread / "shards").glob("*.tar"))  # every shard moved under a prefix

    def read(root):
        loader = build_loader(
            root, rank=0, world_size=1, batch_size=3, num_workers=0, seed=5, decode="none"
        )
        return [(k, b["lidar"][i].tobytes()) for b in loader for i, k in enumerate(b["__key__"])]

    assert read(spread) == read(flat)
