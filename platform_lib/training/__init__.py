"""Training: FSDP2 data-parallel train loop, distributed checkpoints, evaluation (see README.md).

Submodules are imported on first use (PEP 562): a task that needs only `TrainConfig` (e.g.
registration) or the report maths does not import torch.
"""

from typing import TYPE_CHECKING

from platform_lib.lazy import lazy_exports

_EXPORTS = {
    "TrainConfig": "platform_lib.training.config",
    "hash_config": "platform_lib.training.config",
    "EvalResult": "platform_lib.training.evaluate",
    "evaluate": "platform_lib.training.evaluate",
    "launch_local": "platform_lib.training.launch",
    "apply_overrides": "platform_lib.training.overrides",
    "get_preset": "platform_lib.training.presets",
    "list_presets": "platform_lib.training.presets",
    "TrainResult": "platform_lib.training.train",
    "train": "platform_lib.training.train",
}

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:  # the same names, imported explicitly for type checkers and IDEs
    from platform_lib.training.config import (
        TrainConfig,
        hash_config,
    )
    from platform_lib.training.evaluate import (
        EvalResult,
        evaluate,
    )
    from platform_lib.training.launch import (
        launch_local,
    )
    from platform_lib.training.overrides import (
        apply_overrides,
    )
    from platform_lib.training.presets import (
        get_preset,
        list_presets,
    )
    from platform_lib.training.train import (
        TrainResult,
        train,
    )

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
