"""Model zoo: BEV fusion networks and BEV occupancy targets (see README.md)."""

from platform_lib.models.registry import (
    MODEL_PRESETS,
    build_model,
    build_model_transform,
    get_model_config,
    list_models,
)
from platform_lib.models.targets import BEVGrid, rasterise_cuboids

__all__ = [
    "BEVGrid",
    "MODEL_PRESETS",
    "build_model",
    "build_model_transform",
    "get_model_config",
    "list_models",
    "rasterise_cuboids",
]
