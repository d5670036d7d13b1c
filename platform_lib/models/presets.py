"""Model zoo presets: name -> model config (no torch: the config layer and registration use it)."""

from __future__ import annotations

from collections.abc import Callable

from platform_lib.models.bev_fusion.config import BEVFusionConfig
from platform_lib.models.targets import square_extent
from platform_lib.models.world_model.config import WorldModelConfig

__all__ = ["MODEL_PRESETS", "ModelSpec", "get_model_config", "list_models"]

#: A model preset's config: the model family's own dataclass.
ModelSpec = BEVFusionConfig | WorldModelConfig


def _bev_fusion_small() -> BEVFusionConfig:
    """64 x 64 cells of 0.8 m (+-25.6 m), 48 x 80 camera inputs, ~0.1 M parameters: CPU tests."""
    return BEVFusionConfig(name="bev_fusion_small")


def _bev_fusion_large() -> BEVFusionConfig:
    """256 x 256 cells of 0.4 m (+-51.2 m), 128 x 224 camera inputs, ~0.7 M parameters: GPU runs."""
    return BEVFusionConfig(
        name="bev_fusion_large",
        **square_extent(51.2),
        resolution=0.4,
        lidar_z_bins=8,
        camera_height=128,
        camera_width=224,
        camera_stride=8,
        lift_depth_bins=8,
        lift_max_depth=60.0,
        lidar_channels=64,
        camera_channels=64,
        radar_channels=16,
        fusion_channels=128,
    )


def _bev_fusion_temporal() -> BEVFusionConfig:
    """bev_fusion_small fusing the previous frame's BEV features, ego-motion aligned: windows of 2 frames."""
    return BEVFusionConfig(name="bev_fusion_temporal", temporal_frames=2)


def _bev_fusion_base() -> BEVFusionConfig:
    """128 x 128 cells of 0.8 m (+-51.2 m), 704 x 256 cameras, ResNet-34, pillars, ~25 M params: GPU runs.

    The 6 cameras share a ResNet-34 + FPN-lite neck (256 channels, stride 16); the LiDAR
    branch is the PointPillars encoder (12000 pillars of 32 points). Sizes and costs:
    docs/models.md.
    """
    return BEVFusionConfig(
        name="bev_fusion_base",
        **square_extent(51.2),
        resolution=0.8,
        lidar_z_bins=8,
        camera_height=256,
        camera_width=704,
        camera_anchor_y=0.5,
        camera_stride=16,
        backbone="resnet34",
        lift_depth_bins=32,
        lift_max_depth=60.0,
        lidar_encoder="pillars",
        lidar_channels=64,
        camera_channels=80,
        radar_channels=16,
        fusion_channels=256,
    )


def _world_model_small() -> WorldModelConfig:
    """64 x 64 cells of 0.8 m, 2 context frames, 8 x 8-cell tokens, 4 blocks of width 32: CPU tests."""
    return WorldModelConfig(name="world_model_small")


def _world_model_large() -> WorldModelConfig:
    """128 x 128 cells of 0.8 m (+-51.2 m), 4 context frames, 32 blocks of width 4096: ~6.5 B params.

    Its fp32 weights, gradients and AdamW state alone (16 bytes per parameter, ~104 GB) exceed
    one 80 GB accelerator; memory per rank under each layout: docs/parallelism.md.
    """
    return WorldModelConfig(
        name="world_model_large",
        **square_extent(51.2),
        lidar_z_bins=8,
        context_frames=4,
        patch_size=8,
        dim=4096,
        layers=32,
        heads=32,
        mlp_hidden=11008,
    )


#: name -> zero-argument function returning the model config.
MODEL_PRESETS: dict[str, Callable[[], ModelSpec]] = {
    "bev_fusion_small": _bev_fusion_small,
    "bev_fusion_large": _bev_fusion_large,
    "bev_fusion_temporal": _bev_fusion_temporal,
    "bev_fusion_base": _bev_fusion_base,
    "world_model_small": _world_model_small,
    "world_model_large": _world_model_large,
}


def list_models() -> list[str]:
    """Return the names of the model presets, sorted."""
    return sorted(MODEL_PRESETS)


def get_model_config(name: str) -> ModelSpec:
    """Return the config of model preset `name`.

    Raises:
        KeyError: if `name` is not a preset; the message lists the known names.
    """
    if name not in MODEL_PRESETS:
        raise KeyError(f"unknown model {name!r}; known models: {', '.join(list_models())}")
    return MODEL_PRESETS[name]()
