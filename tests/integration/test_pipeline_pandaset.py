"""End to end on the real PandaSet sample: `pyflyte run` -> registered, traceable champion.

One `pyflyte run` (2 elastic workers, gloo on CPU, pandaset_smoke preset) on
../shared/data/pandaset/002 (8 train / 2 val frames), then checks against the MLflow store
the run wrote: lineage tags, falling loss, and that the champion reloads from safetensors and
reproduces its logged validation metrics on an independently rebuilt dataset. The preset's
model takes 80 x 48 camera images from 1920 x 1080 cameras, so it trains on a training view
(built once, a cache hit the second time) and its lineage names the view and its parent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.pipeline import run_pipeline_cli

pytestmark = pytest.mark.distributed

#: Tasks of training_pipeline with a cache (all but the hash_raw_logs probe).
CACHED_TASKS = 12  # 2 checks (model name, promotion rule), materialize, 2 configs,
# map_build_log_part, merge, choose + build view, train, evaluate, register


def test_pandaset_pipeline_registers_reproducible_champion(
    pandaset_002: Path, isolated_env: dict[str, str], tmp_path: Path
) -> None:
    result = run_pipeline_cli(
        ["--source", "pandaset", "--raw_logs", str(pandaset_002), "--preset", "pandaset_smoke"],
        isolated_env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert result.stdout.strip().splitlines()[-1] == "models:/drivetrain-bev-pandaset/1"

    # An identical second run executes nothing: every cached task is a hit (flytekit logs each
    # cache lookup at INFO), so the same model version comes back and none is added.
    again = run_pipeline_cli(
        ["--source", "pandaset", "--raw_logs", str(pandaset_002), "--preset", "pandaset_smoke"],
        {**isolated_env, "FLYTE_SDK_LOGGING_LEVEL": "20"},
    )
    assert again.returncode == 0, again.stderr[-5000:]
    log = again.stdout + again.stderr
    assert log.count("Cache hit") == CACHED_TASKS and "Cache miss" not in log, log[-5000:]
    assert again.stdout.strip().splitlines()[-1] == "models:/drivetrain-bev-pandaset/1"

    from platform_lib.mlflow_store import configure_mlflow
    from platform_lib.registry.register import load_champion, load_model_version
    from platform_lib.shards.build import BuildConfig, build_dataset
    from platform_lib.sources.catalog import DEFAULT_SPLITS
    from platform_lib.sources.hashing import hash_raw_location, hash_raw_log
    from platform_lib.training.config import hash_config
    from platform_lib.training.evaluate import evaluate
    from platform_lib.training.presets import pandaset_smoke

    # The manifests the pipeline wrote (in flytekit's raw outputs under TMPDIR): the dataset
    # and its one training view (the second run built none), at the model's camera size.
    manifests = [
        json.loads(p.read_text()) for p in Path(isolated_env["TMPDIR"]).rglob("manifest.json")
    ]
    datasets = {m["dataset_hash"]: m for m in manifests if m.get("view") is None}
    views = {m["dataset_hash"]: m for m in manifests if m.get("view") is not None}
    assert len(datasets) == 1 and len(views) == 1, [m["dataset_hash"] for m in manifests]
    (manifest,), (view,) = datasets.values(), views.values()
    assert manifest["splits"]["counts"] == view["splits"]["counts"] == {"train": 8, "val": 2}
    assert view["view"]["parent_dataset_hash"] == manifest["dataset_hash"]
    assert (view["view"]["camera_width"], view["view"]["camera_height"]) == (80, 48)
    # ... equals a fresh, independent build of the same raw logs (the builder is deterministic).
    rebuilt = tmp_path / "rebuilt"
    rebuilt_manifest = build_dataset(
        "pandaset", pandaset_002, rebuilt, BuildConfig(**DEFAULT_SPLITS["pandaset"])
    )
    assert rebuilt_manifest.dataset_hash == manifest["dataset_hash"]

    client = configure_mlflow()
    name = "drivetrain-bev-pandaset"
    version = client.get_model_version(name, "1")
    tags = version.tags
    config = pandaset_smoke()
    assert tags["dataset_hash"] == manifest["dataset_hash"]
    # trained on the view (the training rank's record of what it read), evaluated on the parent
    assert tags["train_dataset_hash"] == view["dataset_hash"]
    assert json.loads(tags["train_view"]) == view["view"]
    assert json.loads(tags["source_log_hashes"]) == {"002": hash_raw_log(pandaset_002)}
    assert tags["raw_logs_hash"] == hash_raw_location(str(pandaset_002))
    assert tags["config_hash"] == hash_config(config)
    assert tags["seed"] == "0" and tags["flyte_execution_id"] == "local"
    assert tags["code_version"]
    assert tags["champion_decision"] == "promoted:first"
    assert len(client.search_model_versions(f"name='{name}'")) == 1
    for alias in ("candidate", "champion"):
        assert str(client.get_model_version_by_alias(name, alias).version) == "1"

    run = client.get_run(version.run_id)
    losses = sorted(client.get_metric_history(run.info.run_id, "loss"), key=lambda m: m.step)
    assert [m.step for m in losses] == list(range(1, config.optimizer.max_steps + 1))
    first, last5 = losses[0].value, sum(m.value for m in losses[-5:]) / 5
    assert last5 < 0.7 * first, f"loss did not go down: first {first}, last 5 mean {last5}"
    assert run.data.params["train.preset"] == "pandaset_smoke"
    assert run.data.metrics["world_size"] == 2  # two elastic workers trained

    model, cfg = load_champion(name)
    assert cfg == config
    assert sum(p.numel() for p in model.parameters()) > 0
    _, _, local = load_model_version(f"models:/{name}@champion")
    reproduced = evaluate(
        str(local / "model.safetensors"),
        cfg,
        str(rebuilt),
        split="val",
        output_dir=str(tmp_path / "eval"),
    )
    logged = run.data.metrics
    assert reproduced.num_samples == 2
    assert reproduced.mean_iou == pytest.approx(logged["val_mean_iou"], abs=1e-12)
    assert reproduced.baseline_mean_iou == pytest.approx(logged["val_baseline_mean_iou"], abs=1e-12)
    for cls, iou in reproduced.iou.items():
        if iou is not None:
            assert iou == pytest.approx(logged[f"val_iou_{cls}"], abs=1e-12)
    assert float(tags["mean_iou"]) == pytest.approx(logged["val_mean_iou"], abs=1e-12)
