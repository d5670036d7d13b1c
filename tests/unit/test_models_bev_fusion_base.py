"""The real-size preset bev_fusion_base: ResNet backbone, PointPillars encoder, size, old presets kept."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest
import torch
from torch import nn

from platform_lib.models.bev_fusion.config import BEVFusionConfig
from platform_lib.models.bev_fusion.pillars import PillarEncoder, build_pillars
from platform_lib.models.bev_fusion.prepare import prepare_sample
from platform_lib.models.bev_fusion.resnet import ResNet, ResNetFPN
from platform_lib.models.catalog import build_model
from platform_lib.models.presets import get_model_config


def _count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_base_preset_has_between_20_and_60_m_parameters():
    model = build_model("bev_fusion_base")
    total = _count(model)
    parts = {name: _count(child) for name, child in model.named_children()}
    print(f"bev_fusion_base: {total:,} parameters; {parts}")
    assert 20_000_000 <= total <= 60_000_000
    cfg = model.cfg
    assert (cfg.backbone, cfg.lidar_encoder, cfg.max_cameras) == ("resnet34", "pillars", 6)
    assert (cfg.camera_width, cfg.camera_height) == (704, 256)
    assert model.input_keys == (
        "lidar_pillars",
        "radar_bev",
        "camera_images",
        "camera_index",
        "lidar_pillar_index",
    )


def test_resnet_layout_is_torchvisions():
    """Parameter counts of torchvision's resnet18 / resnet34 without their fc layer (513,000)."""
    assert _count(ResNet((2, 2, 2, 2))) == 11_689_512 - 513_000
    assert _count(ResNet((3, 4, 6, 3))) == 21_797_672 - 513_000
    features = ResNet((2, 2, 2, 2))(torch.zeros(1, 3, 32, 64))
    assert [tuple(f.shape[1:]) for f in features] == [
        (64, 8, 16),
        (128, 4, 8),
        (256, 2, 4),
        (512, 1, 2),
    ]
    assert ResNetFPN("resnet18", 8, 64)(torch.zeros(2, 3, 32, 64)).shape == (2, 64, 4, 8)


def _signature(name: str) -> str:
    model = build_model(name)
    text = ";".join(f"{k}:{tuple(v.shape)}" for k, v in model.state_dict().items())
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_small_and_large_presets_keep_their_network():
    """State-dict names and shapes as on main before the backbone choice (weights load as before)."""
    assert _count(build_model("bev_fusion_small")) == 96_523
    assert _count(build_model("bev_fusion_large")) == 706_595
    assert _signature("bev_fusion_small") == "8b89ad746d495cdc"
    assert _signature("bev_fusion_large") == "a1a74b30a2e79726"
    for name in ("bev_fusion_small", "bev_fusion_large"):
        cfg = get_model_config(name)
        assert (cfg.backbone, cfg.lidar_encoder) == ("tiny", "bev")


def _reduced_base() -> BEVFusionConfig:
    """bev_fusion_base narrowed, on one small camera and few pillars: the same code paths, fast."""
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
        x_min=-12.8,
        x_max=12.8,
        y_min=-12.8,
        y_max=12.8,
    )


def test_reduced_base_trains_one_sample_end_to_end():
    cfg = _reduced_base()
    rng = np.random.default_rng(0)
    points = np.concatenate(
        [
            rng.uniform(-12, 12, (500, 2)),
            rng.uniform(-2, 2, (500, 1)),
            rng.uniform(0, 255, (500, 1)),
        ],
        axis=1,
    )
    sample = {"__key__": "s", "lidar": points, "cuboids": {}, "cameras": {}, "calib": {}}
    prepared = prepare_sample(sample, cfg)
    assert "lidar_bev" not in prepared
    assert prepared["lidar_pillars"].shape == (64, 4, 9)
    assert prepared["lidar_pillar_index"].shape == (64, 2)
    batch = torch.utils.data.default_collate([prepared])
    torch.manual_seed(0)
    model = build_model(cfg)
    logits = model(*(batch[k] for k in model.input_keys))
    assert logits.shape == (1, 3, 32, 32)
    logits.mean().backward()
    assert model.lidar_encoder.pfn[0].weight.grad.abs().sum() > 0


def test_build_pillars_decorates_points_and_keeps_the_fullest_pillars():
    cfg = dataclasses.replace(
        _reduced_base(), max_pillars=2, max_points_per_pillar=2, intensity_scale=100.0
    )
    grid = cfg.grid  # 32 x 32 cells of 0.8 m from -12.8 m
    points = np.array(
        [
            [0.1, 0.2, 0.0, 10.0],  # cell (16, 16): 3 points, the third over the cap
            [0.5, 0.6, 1.0, 20.0],
            [0.3, 0.3, 0.5, 30.0],
            [-12.7, -12.7, 0.0, 50.0],  # cell (0, 0): 1 point
            [5.0, 5.0, 0.0, 40.0],  # cell (22, 22): 2 points
            [5.1, 5.1, 0.2, 40.0],
            [50.0, 0.0, 0.0, 1.0],  # outside the grid
            [0.0, 0.0, 9.0, 1.0],  # above z_max
        ],
        dtype=np.float32,
    )
    feats, index = build_pillars(points, cfg)
    centre = 16 * grid.width + 16
    assert index.tolist() == [
        [centre, 2],
        [22 * grid.width + 22, 2],
    ]  # cell order, 1-point one left out
    first = feats[0]
    np.testing.assert_allclose(first[0, :4], [0.1, 0.2, 0.0, 0.1], rtol=1e-6)
    np.testing.assert_allclose(first[:, 4:7], [[-0.2, -0.2, -0.5], [0.2, 0.2, 0.5]], atol=1e-6)
    np.testing.assert_allclose(first[:, 7:9], [[-0.3, -0.2], [0.1, 0.2]], atol=1e-6)  # centre 0.4
    empty_feats, empty_index = build_pillars(np.zeros((0, 4)), cfg)
    assert not empty_feats.any() and (empty_index[:, 0] == -1).all()


def test_pillar_encoder_ignores_padding_and_scatters_to_the_pillars_cell():
    cfg = _reduced_base()
    torch.manual_seed(0)
    encoder = PillarEncoder(cfg, context=nn.Identity())
    pillars = torch.randn(1, 3, 4, 9)
    index = torch.tensor([[[5, 2], [40, 1], [-1, 0]]])
    out = encoder(pillars, index)
    changed = pillars.clone()
    changed[0, 0, 2:] = 100.0  # padding rows of pillar 0
    changed[0, 2] = 100.0  # the unused pillar slot
    torch.testing.assert_close(encoder(changed, index), out)
    flat = out.flatten(2)[0]  # (C, H*W)
    expected = encoder.pfn(pillars[0, 0, :2]).amax(dim=0)
    torch.testing.assert_close(flat[:, 5], expected)
    assert flat[:, [c for c in range(flat.shape[1]) if c not in (5, 40)]].abs().sum() == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [("backbone", "resnet50"), ("lidar_encoder", "voxels"), ("max_pillars", 0)],
)
def test_config_rejects_unknown_choices_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(_reduced_base(), **{field: value})
    with pytest.raises(ValueError, match="camera_stride must be 8, 16 or 32"):
        dataclasses.replace(_reduced_base(), camera_stride=4)
