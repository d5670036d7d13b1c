"""Training: FSDP2 data-parallel train loop, distributed checkpoints, evaluation (see README.md)."""

from platform_lib.training.config import TrainConfig, hash_config
from platform_lib.training.evaluate import EvalResult, evaluate
from platform_lib.training.launch import launch_local
from platform_lib.training.overrides import apply_overrides
from platform_lib.training.presets import get_preset, list_presets
from platform_lib.training.train import TrainResult, train

__all__ = [
    "EvalResult",
    "TrainConfig",
    "TrainResult",
    "apply_overrides",
    "evaluate",
    "get_preset",
    "hash_config",
    "launch_local",
    "list_presets",
    "train",
]
