"""train() in one process (world size 1): outputs, exact resume from DCP, export, evaluation."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from platform_lib.loading.loader import build_loader
from platform_lib.models.catalog import build_model
from platform_lib.training.checkpoint import find_latest_checkpoint, load_weights
from platform_lib.training.evaluate import evaluate
from platform_lib.training.overrides import apply_overrides
from platform_lib.training.presets import small
from platform_lib.training.train import resume_loader, train
from tests.support.golden_run import build_golden_dataset

METRIC_KEYS = {
    "step",
    "loss",
    "lr",
    "grad_norm",
    "input_wait_s",
    "step_time_s",
    "samples_per_s",
    "world_size",
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return build_golden_dataset(tmp_path_factory.mktemp("golden"))


@pytest.fixture(scope="module")
def straight_run(dataset, tmp_path_factory):
    out = tmp_path_factory.mktemp("straight")
    return train(small(), str(dataset), str(out)), out


def _losses(path) -> list[float]:
    return [json.loads(line)["loss"] for line in Path(path).read_text().splitlines()]


def test_outputs_metrics_and_checkpoints(straight_run):
    result, out = straight_run
    cfg = small()
    assert result.num_steps == cfg.optimizer.max_steps and result.world_size == 1
    rows = [json.loads(line) for line in Path(result.metrics_path).read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, cfg.optimizer.max_steps + 1))
    assert all(METRIC_KEYS <= set(r) for r in rows)
    assert rows[0]["lr"] == pytest.approx(cfg.optimizer.lr / cfg.optimizer.warmup_steps)
    assert result.first_loss == rows[0]["loss"] and result.final_loss < result.first_loss
    steps = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert steps == ["step-000006", "step-000012"]  # keep_checkpoints=2, no temporary folders left
    assert result.checkpoint_dir == find_latest_checkpoint(out / "checkpoints")
    assert (Path(result.checkpoint_dir) / ".metadata").is_file()  # DCP's own commit record
    assert (
        json.loads((out / "train_result.json").read_text())["num_steps"] == cfg.optimizer.max_steps
    )


def test_resume_from_checkpoint_continues_exactly(straight_run, dataset, tmp_path):
    """Interrupt after the step-6 checkpoint (drop everything later) and resume: same losses."""
    result, out = straight_run
    interrupted = tmp_path / "run"
    shutil.copytree(out, interrupted)
    shutil.rmtree(interrupted / "checkpoints" / "step-000012")
    (interrupted / "model.safetensors").unlink()
    resumed = train(small(), str(dataset), str(interrupted))
    assert resumed.num_steps == 12
    straight, again = _losses(result.metrics_path), _losses(resumed.metrics_path)
    assert len(again) == 12  # metrics past the checkpoint were dropped, then rewritten
    assert again[6:] == pytest.approx(straight[6:], rel=1e-6)
    assert torch.equal(
        load_weights(resumed.weights_path)["head.weight"],
        load_weights(result.weights_path)["head.weight"],
    )


def test_exported_weights_load_into_a_plain_model_and_evaluation_reproduces(
    straight_run, dataset, tmp_path
):
    result, _ = straight_run
    weights = load_weights(result.weights_path)
    model = build_model(small().model.name)
    model.load_state_dict(weights, strict=True)
    assert all(t.dtype == torch.float32 for t in weights.values())
    a = evaluate(
        result.weights_path, small(), str(dataset), split="val", output_dir=str(tmp_path / "a")
    )
    b = evaluate(
        result.weights_path, small(), str(dataset), split="val", output_dir=str(tmp_path / "b")
    )
    assert a.num_samples == 4 and a.split == "val"
    assert (a.iou, a.mean_iou, a.baseline_iou) == (b.iou, b.mean_iou, b.baseline_iou)
    padded = evaluate(
        result.weights_path,
        apply_overrides(small(), {"batch_size": 6}),
        str(dataset),
        output_dir=str(tmp_path / "c"),
    )  # 4 samples padded to a batch of 6: repeats dropped
    assert padded.num_samples == 4 and padded.iou == a.iou
    assert 0.0 <= a.mean_iou <= 1.0 and set(a.iou) == {"vehicle", "pedestrian", "cyclist"}
    table = json.loads(Path(a.metrics_json).read_text())
    assert table["mean_iou"] == a.mean_iou and table["table"][-1]["class"] == "mean"
    with open(a.metrics_csv) as f:
        rows = list(csv.DictReader(f))
    assert [r["class"] for r in rows] == ["vehicle", "pedestrian", "cyclist", "mean"]
    for row in rows[:3]:
        if row["iou"]:
            assert float(row["iou"]) == pytest.approx(int(row["intersection"]) / int(row["union"]))


def test_bad_inputs_fail_fast_with_a_named_cause(dataset, tmp_path):
    with pytest.raises(ValueError, match="'test'"):
        train(apply_overrides(small(), {"train_split": "test"}), str(dataset), str(tmp_path / "a"))
    with pytest.raises(Exception, match="manifest"):
        train(small(), str(tmp_path / "nothing-here"), str(tmp_path / "b"))
    with pytest.raises(FileNotFoundError, match="weights"):
        evaluate(str(tmp_path / "missing.safetensors"), small(), str(dataset))


def test_apply_fsdp_shards_fp32_master_weights_and_computes_in_bf16():
    from torch.distributed.tensor import DTensor

    from platform_lib.models.bev_fusion.prepare import prepare_sample
    from platform_lib.training.distributed import destroy_distributed, init_distributed
    from platform_lib.training.parallel import apply_fsdp, build_mesh, build_mp_policy

    ctx = init_distributed("gloo")
    try:
        model = apply_fsdp(build_model("bev_fusion_small"), build_mesh(ctx), build_mp_policy(True))
        assert all(isinstance(p, DTensor) and p.dtype == torch.float32 for p in model.parameters())
        cfg = model.cfg
        sample = {"lidar": np.zeros((1, 4), np.float32), "cuboids": {}, "cameras": {}, "calib": {}}
        batch = torch.utils.data.default_collate([prepare_sample(sample, cfg)])
        logits = model(
            batch["lidar_bev"], batch["radar_bev"], batch["camera_images"], batch["camera_index"]
        )
        assert logits.dtype == torch.bfloat16
    finally:
        destroy_distributed(ctx)


def test_loader_state_from_another_global_batch_restarts_the_saved_epoch(dataset):
    loader = build_loader(
        str(dataset), rank=0, world_size=1, batch_size=2, num_workers=0, seed=0, split="train"
    )
    state = {**loader.state_dict(), "epoch": 3, "consumed_samples": 1}  # 1 is not a multiple of 2
    with pytest.warns(UserWarning, match="epoch 3 restarts"):
        resume_loader(loader, state)
    assert loader.epoch == 3
    assert loader.state_dict()["consumed_samples"] == 0


def test_batch_larger_than_the_split_warns_naming_batch_size(dataset):
    from platform_lib.models.catalog import build_model_transform
    from platform_lib.training.data import build_train_loader

    data = apply_overrides(small(), {"batch_size": 9}).data  # the golden train split holds 8
    with pytest.warns(UserWarning) as caught:
        build_train_loader(
            dataset, data, build_model_transform("bev_fusion_small"), rank=0, world_size=1, seed=0
        )
    assert [str(w.message) for w in caught] == [
        "batch of 9 x world size 1 is larger than split 'train' (8 samples): every step repeats samples "
        "(data.batch_size): lower batch_size to at most 8"
    ]


class _RecordingHooks:
    """A real `StepHooks` that records where the loop called it and changes nothing."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def at_step(self, step: int) -> None:
        self.calls.append(("at_step", step))

    def on_batch(self, step: int, batch: dict) -> dict:
        self.calls.append(("on_batch", step))
        return batch

    def wrap_storage(self, writer, step: int):
        self.calls.append(("wrap_storage", step))
        return writer


def test_the_loop_calls_its_injection_hooks_at_named_points(dataset, tmp_path):
    cfg = apply_overrides(small(), {"optimizer.max_steps": 4, "checkpoint.interval": 2})
    hooks = _RecordingHooks()
    result = train(cfg, str(dataset), str(tmp_path), hooks=[hooks])
    expected = []
    for step in range(1, 5):
        expected += [("at_step", step), ("on_batch", step)]
        expected += [("wrap_storage", step)] if step % 2 == 0 else []
    assert hooks.calls == expected
    assert result.num_steps == 4 and np.isfinite(result.final_loss)


def test_evaluation_keeps_per_frame_counts_that_sum_to_the_pooled_iou(
    straight_run, dataset, tmp_path
):
    from platform_lib.evaluation.metrics import FrameCounts
    from platform_lib.training.evaluate import count_model_frames

    result, _ = straight_run
    report = evaluate(result.weights_path, small(), str(dataset), output_dir=str(tmp_path))
    saved = json.loads(Path(report.frame_counts_json).read_text())
    counts = FrameCounts.from_dict(saved)
    assert saved["split"] == "val" and len(counts.keys) == report.num_samples == 4
    assert counts.bands[0] == "all" and counts.classes == ("vehicle", "pedestrian", "cyclist")
    pooled = counts.counts[:, :, 0].sum(axis=0)  # (G, 3) TP, FP, FN over the frames
    for c, name in enumerate(counts.classes):
        union = int(pooled[c].sum())
        expected = None if union == 0 else int(pooled[c, 0]) / union
        assert report.iou[name] == expected
    again = count_model_frames(result.weights_path, small(), str(dataset), split="val")
    assert again.keys == counts.keys and (again.counts == counts.counts).all()
