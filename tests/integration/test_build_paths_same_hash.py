"""The CLI build and the pipeline build of the same logs and settings give the same dataset hash.

Why they used to differ: not nondeterminism, the layout. `drivetrain data build` packs samples
of all logs into shards of up to `--shard-size-mb` in one folder; the pipeline builds one part
per log (`build_log_part`, a shard never spans two logs) and merges them (`merge_dataset`).
The shards differ, so does the hash over them. `data inspect` now shows the layout
(`build_config.parts`), and `data build --parts per-log` is the pipeline's build. The pipeline
side here is the training pipeline's own dataset tasks, wired as `training_pipeline` wires them
(the map task included), run locally in this process; the CLI builds its parts into a part
store of its own, so equal hashes mean equal bytes, not shared parts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flytekit import workflow
from flytekit.types.directory import FlyteDirectory

from platform_lib.cli import main
from platform_lib.shards.manifest import load_manifest
from platform_lib.sources.synthetic import SyntheticConfig, write_synthetic_logs
from tasks.data import build_log_parts, dataset_config, list_raw_logs, merge_dataset


@workflow
def pipeline_dataset(source: str, raw_logs: str) -> FlyteDirectory:
    """The dataset steps of `workflows.training_pipeline.training_pipeline` (default split)."""
    build_config = dataset_config(source=source, split="", quarantine=False)
    present = list_raw_logs(source=source, raw_logs=raw_logs)
    parts = build_log_parts(source, present.logs, present.log_hashes, build_config)
    return merge_dataset(source=source, parts=parts, config=build_config)


def _inspect(dataset: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    assert main(["data", "inspect", str(dataset), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_cli_and_the_pipeline_give_one_hash_for_the_same_logs_and_settings(
    local_flyte: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = local_flyte / "raw"
    write_synthetic_logs(SyntheticConfig(num_logs=3, frames_per_log=4), raw, progress=False)
    monkeypatch.setenv("DRIVETRAIN_PART_STORE", str(local_flyte / "pipeline-parts"))
    pipeline = Path(pipeline_dataset(source="synthetic", raw_logs=str(raw)).path)

    monkeypatch.setenv("DRIVETRAIN_PART_STORE", str(local_flyte / "cli-parts"))  # built anew
    build = ["data", "build", "--source", "synthetic", "--input", str(raw), "--output"]
    assert main([*build, str(local_flyte / "per-log"), "--parts", "per-log"]) == 0
    assert main([*build, str(local_flyte / "packed")]) == 0
    assert list((local_flyte / "cli-parts").rglob("shard-*.tar"))  # the CLI built its own parts

    shown = {
        name: _inspect(path, capsys)
        for name, path in {
            "pipeline": pipeline,
            "per-log": local_flyte / "per-log",
            "packed": local_flyte / "packed",
        }.items()
    }
    assert shown["per-log"]["dataset_hash"] == shown["pipeline"]["dataset_hash"]
    assert shown["per-log"]["build_config"] == shown["pipeline"]["build_config"]
    assert shown["pipeline"]["build_config"]["parts"] == "per-log"
    # the default CLI build differs by its layout alone, and inspect shows it
    assert shown["packed"]["dataset_hash"] != shown["pipeline"]["dataset_hash"]
    assert shown["packed"]["build_config"] == shown["pipeline"]["build_config"] | {
        "parts": "packed"
    }
    assert (shown["packed"]["num_shards"], shown["pipeline"]["num_shards"]) == (1, 3)
    packed, merged = load_manifest(local_flyte / "packed"), load_manifest(pipeline)
    assert packed.num_samples == merged.num_samples == 12
    assert dict(packed.splits.counts) == dict(merged.splits.counts)
