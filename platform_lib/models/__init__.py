"""Model zoo: BEV fusion networks and BEV occupancy targets (see README.md).

Submodules are imported on first use (PEP 562): the config layer reads the preset names
(`presets`) without importing torch.
"""

from typing import TYPE_CHECKING

from platform_lib.lazy import lazy_exports

_EXPORTS = {
    "MODEL_PRESETS": "platform_lib.models.presets",
    "get_model_config": "platform_lib.models.presets",
    "list_models": "platform_lib.models.presets",
    "build_model": "platform_lib.models.registry",
    "build_model_transform": "platform_lib.models.registry",
    "BEVGrid": "platform_lib.models.targets",
    "rasterise_cuboids": "platform_lib.models.targets",
}

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:  # the same names, imported explicitly for type checkers and IDEs
    from platform_lib.models.presets import (
        MODEL_PRESETS,
        get_model_config,
        list_models,
    )
    from platform_lib.models.registry import (
        build_model,
        build_model_transform,
    )
    from platform_lib.models.targets import (
        BEVGrid,
        rasterise_cuboids,
    )

__all__ = [
    "BEVGrid",
    "MODEL_PRESETS",
    "build_model",
    "build_model_transform",
    "get_model_config",
    "list_models",
    "rasterise_cuboids",
]
