"""Model-zoo gate: a preset's losses against its golden file, pass and fail."""

from __future__ import annotations

import json

import pytest

from platform_lib.zoo.check import (
    CPU_PRESETS,
    ZOO_CUTS,
    ZOO_STEPS,
    check_zoo_preset,
    golden_path,
    zoo_config,
)
from platform_lib.zoo.dataset import build_golden_dataset


@pytest.fixture(scope="module")
def zoo_dataset(tmp_path_factory):
    return build_golden_dataset(tmp_path_factory.mktemp("zoo"))


def test_every_cpu_preset_has_a_golden_file():
    for preset in CPU_PRESETS:
        golden = json.loads(golden_path(preset).read_text())
        steps = zoo_config(preset).optimizer.max_steps
        assert golden["preset"] == preset and len(golden["losses"]) == steps
        assert steps == ZOO_STEPS or preset in ZOO_CUTS
        assert golden["config"] == json.loads(json.dumps(zoo_config(preset).to_dict())), (
            f"preset {preset} changed: regenerate with `drivetrain zoo check --write`"
        )


def test_small_matches_its_golden_file_and_a_changed_golden_fails(zoo_dataset, tmp_path):
    result = check_zoo_preset("small", zoo_dataset, tmp_path / "runs")
    assert result["loss_ok"], result["max_rel_error"]
    assert result["precision"] == "fp32" and result["rtol"] == 1e-4
    assert result["report"]["steps"]["kept"] == ZOO_STEPS and result["median_step_s"] > 0

    golden = json.loads(golden_path("small").read_text())
    golden["losses"][3] *= 1.001  # 1e-3 relative: ten times the fp32 tolerance
    (tmp_path / "golden").mkdir()
    golden_path("small", tmp_path / "golden").write_text(json.dumps(golden))
    failed = check_zoo_preset(
        "small", zoo_dataset, tmp_path / "runs2", golden_dir=tmp_path / "golden"
    )
    assert not failed["loss_ok"] and failed["max_rel_error"] == pytest.approx(1e-3, rel=1e-2)


def test_base_is_a_cpu_preset_cut_to_two_steps_of_one_sample():
    cfg = zoo_config("base")
    assert "base" in CPU_PRESETS and cfg.model.name == "bev_fusion_base"
    assert (cfg.optimizer.max_steps, cfg.data.batch_size, cfg.parallel.num_threads) == (2, 1, 2)
    golden = json.loads(golden_path("base").read_text())
    assert golden["precision"] == "bf16" and golden["losses"][-1] < golden["losses"][0]


def test_a_preset_without_golden_file_says_how_to_make_one(zoo_dataset, tmp_path):
    with pytest.raises(FileNotFoundError, match="drivetrain zoo check --write"):
        check_zoo_preset("small", zoo_dataset, tmp_path / "runs", golden_dir=tmp_path / "none")


def test_small_with_activation_checkpointing_matches_the_golden_losses(zoo_dataset, tmp_path):
    """Same losses with activation checkpointing as the golden run without it; DCP save and export work."""
    from platform_lib.training.overrides import apply_overrides
    from platform_lib.training.train import train

    cfg = apply_overrides(zoo_config("small"), {"activation_checkpointing": True})
    result = train(cfg, str(zoo_dataset), str(tmp_path / "run"))
    with open(result.metrics_path) as metrics:
        losses = [json.loads(line)["loss"] for line in metrics]
    golden = json.loads(golden_path("small").read_text())["losses"]
    assert losses == pytest.approx(golden, rel=1e-4)
    assert result.weights_path and (tmp_path / "run" / "checkpoints" / "step-000006").is_dir()


@pytest.mark.parametrize("preset", ["small", "temporal"])
def test_flops_counted_on_the_meta_device_equal_a_real_count(zoo_dataset, preset):
    """The run's FLOPs per sample (counted without arithmetic) equal those of a real pass."""
    import torch

    from platform_lib.models.catalog import build_model, build_model_transform
    from platform_lib.models.presets import get_model_config
    from platform_lib.telemetry.mfu import count_flops_per_sample
    from platform_lib.training.data import build_train_loader
    from platform_lib.training.loop import forward_backward
    from platform_lib.training.observe import count_model_flops

    cfg = zoo_config(preset)
    model_cfg = get_model_config(cfg.model.name)
    loader = build_train_loader(
        zoo_dataset, cfg.data, build_model_transform(model_cfg), rank=0, world_size=1, seed=0
    )
    batch = next(iter(loader))
    model = build_model(model_cfg)
    real = count_flops_per_sample(
        lambda: forward_backward(model, batch, cfg.model), cfg.data.batch_size
    )
    state = torch.random.get_rng_state()
    assert count_model_flops(cfg, batch) == real > 0
    assert torch.equal(torch.random.get_rng_state(), state)  # training's stream untouched
