"""Model catalog: preset name or config -> network and loader-side sample transform (`presets`: names)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from platform_lib.models.bev_fusion.model import BEVFusion
from platform_lib.models.bev_fusion.prepare import build_sample_transform
from platform_lib.models.bev_fusion.temporal import prepare_window
from platform_lib.models.presets import ModelSpec, get_model_config
from platform_lib.models.world_model.config import WorldModelConfig
from platform_lib.models.world_model.model import WorldModel, prepare_world_window

__all__ = ["build_model", "build_model_transform"]


def build_model(cfg: ModelSpec | str) -> nn.Module:
    """Build the network (fp32, on CPU, randomly initialised from the current torch RNG)."""
    model_cfg = get_model_config(cfg) if isinstance(cfg, str) else cfg
    if isinstance(model_cfg, WorldModelConfig):
        return WorldModel(model_cfg)
    return BEVFusion(model_cfg)


def build_model_transform(
    cfg: ModelSpec | str,
) -> Callable[[Mapping[str, Any]], dict[str, torch.Tensor]]:
    """Return the picklable decoded-sample -> tensors transform for the loader workers.

    A world model takes loader windows of k + 1 frames (`prepare_world_window`); a temporal
    BEV fusion model (`temporal_frames` > 1) windows of its frames (`temporal.prepare_window`).
    """
    model_cfg = get_model_config(cfg) if isinstance(cfg, str) else cfg
    if isinstance(model_cfg, WorldModelConfig):
        return functools.partial(prepare_world_window, cfg=model_cfg)
    if model_cfg.temporal_frames > 1:
        return functools.partial(prepare_window, cfg=model_cfg)
    return build_sample_transform(model_cfg)
