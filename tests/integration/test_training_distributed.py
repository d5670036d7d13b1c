"""Two-process gloo training through torch elastic (`launch_local`): FSDP2 + bf16 + DCP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torch.distributed.checkpoint import FileSystemReader

from platform_lib.models.catalog import build_model
from platform_lib.training.checkpoint import load_weights
from platform_lib.training.launch import launch_local
from platform_lib.training.overrides import apply_overrides
from platform_lib.training.presets import small

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def two_rank_run(golden_dataset, tmp_path_factory):
    work, dataset = tmp_path_factory.mktemp("dist"), golden_dataset
    cfg = apply_overrides(
        small(),
        {"max_steps": 16, "checkpoint.interval": 8, "num_workers": 1, "mixed_precision": True},
    )
    return cfg, launch_local(cfg, str(dataset), str(work / "train"), nproc=2), work / "train"


def test_two_ranks_train_and_rank_zero_returns_a_handle(two_rank_run):
    cfg, result, out = two_rank_run
    assert result.world_size == 2 and result.num_steps == cfg.optimizer.max_steps
    rows = [json.loads(line) for line in Path(result.metrics_path).read_text().splitlines()]
    assert len(rows) == cfg.optimizer.max_steps and {r["world_size"] for r in rows} == {2}
    assert rows[0]["samples_per_s"] > 0 and all(r["grad_norm"] > 0 for r in rows)
    assert result.final_loss < result.first_loss  # the loss goes down


def test_sharded_checkpoint_and_full_weight_export(two_rank_run):
    cfg, result, out = two_rank_run
    ckpt = Path(result.checkpoint_dir)
    assert ckpt.name == "step-000016" and (ckpt / ".metadata").is_file()
    assert sorted(p.name for p in ckpt.glob("*.distcp")) == [
        "__0_0.distcp",
        "__1_0.distcp",
    ]  # one file per rank
    saved = FileSystemReader(str(ckpt)).read_metadata().state_dict_metadata
    assert {"rank_state_00000", "rank_state_00001"} <= set(
        saved
    )  # per-rank state inside DCP's commit
    model = build_model(cfg.model.name)
    model.load_state_dict(load_weights(result.weights_path), strict=True)  # full, unsharded
