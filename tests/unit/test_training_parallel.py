"""FSDP per model block and activation checkpointing (world size 1, gloo, in this process)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from torch.distributed.fsdp import FSDPModule

from platform_lib.models.bev_fusion.config import BEVFusionConfig
from platform_lib.models.bev_fusion.prepare import prepare_sample
from platform_lib.models.catalog import build_model
from platform_lib.models.presets import get_model_config
from platform_lib.training.config import ModelConfig, ParallelConfig, TrainConfig, hash_config
from platform_lib.training.distributed import destroy_distributed, init_distributed
from platform_lib.training.loop import forward_backward
from platform_lib.training.overrides import apply_overrides
from platform_lib.training.parallel import (
    apply_activation_checkpointing,
    apply_fsdp,
    build_mesh,
    build_mp_policy,
    list_blocks,
)
from platform_lib.training.presets import small

SMALL_HASH = "d3968486e3a06f17c7dcae41caf41fb1290e457b924e147a7c42b448ca7e896d"


@pytest.fixture(scope="module")
def ctx():
    context = init_distributed("gloo")
    yield context
    destroy_distributed(context)


def _reduced_base() -> BEVFusionConfig:
    """bev_fusion_base narrowed, on one small camera and a 16 x 16 grid: every block kind, fast."""
    return dataclasses.replace(
        get_model_config("bev_fusion_base"),
        backbone="resnet18",
        camera_height=32,
        camera_width=96,
        max_cameras=1,
        neck_channels=32,
        lift_depth_bins=4,
        max_pillars=64,
        max_points_per_pillar=4,
        lidar_channels=16,
        camera_channels=16,
        radar_channels=8,
        fusion_channels=32,
        x_min=-6.4,
        x_max=6.4,
        y_min=-6.4,
        y_max=6.4,
    )


def _batch(cfg: BEVFusionConfig) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(0)
    points = np.concatenate(
        [
            rng.uniform(-6, 6, (400, 2)),
            rng.uniform(-2, 2, (400, 1)),
            rng.uniform(0, 255, (400, 1)),
        ],
        axis=1,
    )
    cuboids = {
        "class_group": ["vehicle"],
        "center": np.array([[3.0, 2.0, -1.0]]),
        "size": np.array([[4.5, 2.0, 1.6]]),
        "yaw": np.array([0.3]),
    }
    sample = {"__key__": "s", "lidar": points, "cuboids": cuboids, "cameras": {}, "calib": {}}
    batch = torch.utils.data.default_collate([prepare_sample(sample, cfg)])
    batch["camera_images"] = torch.randn(
        batch["camera_images"].shape, generator=torch.Generator().manual_seed(1)
    )
    return batch


def _loss_and_grads(cfg, ctx, batch, checkpointing: bool):
    torch.manual_seed(0)
    model = build_model(cfg)
    if checkpointing:
        apply_activation_checkpointing(model)
    model = apply_fsdp(model, build_mesh(ctx), build_mp_policy(False))
    loss = forward_backward(model, batch, ModelConfig())
    grads = {n: p.grad.full_tensor().clone() for n, p in model.named_parameters()}
    return model, loss, grads


@pytest.mark.parametrize("name", ["bev_fusion_small", "reduced base"])
def test_activation_checkpointing_gives_the_same_loss_and_gradients(ctx, name):
    cfg = _reduced_base() if name == "reduced base" else get_model_config(name)
    batch = _batch(cfg)
    _, loss, grads = _loss_and_grads(cfg, ctx, batch, checkpointing=False)
    wrapped, loss_ac, grads_ac = _loss_and_grads(cfg, ctx, batch, checkpointing=True)
    assert sum(isinstance(m, CheckpointWrapper) for m in wrapped.modules()) == len(
        list_blocks(wrapped)
    )
    torch.testing.assert_close(loss_ac, loss, rtol=1e-6, atol=0.0)
    strip = "_checkpoint_wrapped_module."
    assert {n.replace(strip, ""): g for n, g in grads_ac.items()}.keys() == grads.keys()
    for n, g in grads_ac.items():
        torch.testing.assert_close(g, grads[n.replace(strip, "")], rtol=1e-5, atol=1e-7)
    assert set(get_model_state_dict(wrapped)) == set(build_model(cfg).state_dict())


def test_fsdp_wraps_every_resnet_stage_the_lift_and_the_decoder_blocks(ctx):
    model = apply_fsdp(build_model(_reduced_base()), build_mesh(ctx), build_mp_policy(True))
    blocks = list_blocks(model)
    assert blocks == [
        "lidar_encoder",
        "camera_encoder.cnn.backbone.stem",
        "camera_encoder.cnn.backbone.layer1",
        "camera_encoder.cnn.backbone.layer2",
        "camera_encoder.cnn.backbone.layer3",
        "camera_encoder.cnn.backbone.layer4",
        "camera_encoder.cnn.neck",
        "camera_encoder.to_slots",
        "radar_encoder",
        "fusion_down",
        "fusion_up",
        "head",
    ]
    assert all(isinstance(model.get_submodule(b), FSDPModule) for b in blocks)
    assert isinstance(model, FSDPModule)


def test_activation_checkpointing_is_off_by_default_and_keeps_old_config_hashes():
    assert ParallelConfig().activation_checkpointing is False
    cfg = small()
    assert "activation_checkpointing" not in cfg.to_dict()["parallel"]
    assert hash_config(cfg) == hash_config(cfg.to_dict()) == SMALL_HASH
    explicit = {
        **cfg.to_dict(),
        "parallel": {**cfg.to_dict()["parallel"], "activation_checkpointing": False},
    }
    assert hash_config(explicit) == SMALL_HASH
    on = apply_overrides(cfg, {"activation_checkpointing": True})
    assert on.parallel.activation_checkpointing is True
    assert on.to_dict()["parallel"]["activation_checkpointing"] is True
    assert hash_config(on) != SMALL_HASH
    assert TrainConfig.from_dict(on.to_dict()) == on and TrainConfig.from_dict(cfg.to_dict()) == cfg


def test_activation_checkpointing_override_of_the_wrong_type_is_one_line():
    from platform_lib.training.config import ConfigError

    with pytest.raises(ConfigError) as info:
        apply_overrides(small(), {"parallel.activation_checkpointing": "yes"})
    assert str(info.value) == (
        "parallel.activation_checkpointing='yes' is of the wrong type (overrides): give true or false"
    )
