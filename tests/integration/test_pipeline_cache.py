"""Caching: an identical re-run executes nothing; one changed raw byte re-runs build and after.

Runs `training_pipeline` in this process (a tiny synthetic log set written by the test, 2
elastic workers, 2 steps) against an isolated flytekit local cache, counting the real
executions (cache misses) of every task. `hash_raw_logs` is the one uncached task by design:
it is the cheap probe of the raw bytes that the dataset build's cache key is made of.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from platform_lib.sources.synthetic import write_synthetic_logs
from tests.support.pipeline import STEPS, tiny_synthetic

pytestmark = (
    pytest.mark.distributed
)  # ~100 s: two full pipeline runs; in `make test` (CI) on purpose

TINY = tiny_synthetic(num_logs=3)
DOWNSTREAM = ("merge_dataset", "train_model", "evaluate_model", "register_model")
PROBES = {
    "hash_raw_logs": 1,
    "list_raw_logs": 1,
    "check_fault_switch": 1,  # reads each run's DRIVETRAIN_FAULTS
    "warn_skipped_faults": 1,
}


def _run(raw_logs: str) -> str:
    from workflows.training_pipeline import training_pipeline

    return training_pipeline(
        source="synthetic",
        raw_logs=raw_logs,
        preset="small",
        overrides=STEPS,
        seed=0,
        model_name="cache-test",
    )


def test_rerun_hits_cache_and_changed_raw_file_reruns_downstream(
    local_flyte: Path,
    registry_store: str,
    executions: collections.Counter,
    parts_built: list[str],
    tmp_path: Path,
) -> None:
    raw = tmp_path / "raw"
    write_synthetic_logs(TINY, raw, progress=False)

    assert _run(str(raw)) == "models:/cache-test/1"
    assert all(executions[name] == 1 for name in DOWNSTREAM), executions
    assert executions["hash_raw_logs"] == 1 and executions["resolve_config"] == 1
    assert sorted(parts_built) == ["synth-0000", "synth-0001", "synth-0002"]

    executions.clear()
    assert _run(str(raw)) == "models:/cache-test/1"  # same version: registration not re-run
    assert executions == collections.Counter(PROBES), executions

    # Same bytes at another path: the dataset and everything after are cache hits (their key
    # is the content hash, not the location); only the location pass-through and the probe run.
    executions.clear()
    moved = raw.rename(tmp_path / "moved")
    assert _run(str(moved)) == "models:/cache-test/1"
    assert set(executions) <= {*PROBES, "materialize_raw_logs", "map_build_log_part"}, executions
    assert sorted(parts_built) == ["synth-0000", "synth-0001", "synth-0002"]  # nothing rebuilt

    # One changed raw file (one LiDAR point of one frame): build and everything after re-run.
    parts_built.clear()
    lidar = sorted(moved.rglob("*.npy"))[0]
    data = bytearray(lidar.read_bytes())
    data[-1] ^= 0x01
    lidar.write_bytes(bytes(data))
    executions.clear()
    assert _run(str(moved)) == "models:/cache-test/2"
    assert all(executions[name] == 1 for name in DOWNSTREAM), executions
    assert executions["resolve_config"] == 0 and executions["dataset_config"] == 0
    assert parts_built == [lidar.relative_to(moved).parts[0]]  # only the changed log's part
