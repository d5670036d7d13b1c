"""BEV fusion model: config, sample preparation (loader side) and network.

Submodules are imported on first use (PEP 562): `config` needs no torch.
"""

from typing import TYPE_CHECKING

from platform_lib.lazy import lazy_exports

_EXPORTS = {
    "BEVFusionConfig": "platform_lib.models.bev_fusion.config",
    "BEVFusion": "platform_lib.models.bev_fusion.model",
    "build_sample_transform": "platform_lib.models.bev_fusion.prepare",
    "prepare_sample": "platform_lib.models.bev_fusion.prepare",
}

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:  # the same names, imported explicitly for type checkers and IDEs
    from platform_lib.models.bev_fusion.config import (
        BEVFusionConfig,
    )
    from platform_lib.models.bev_fusion.model import (
        BEVFusion,
    )
    from platform_lib.models.bev_fusion.prepare import (
        build_sample_transform,
        prepare_sample,
    )

__all__ = [
    "BEVFusion",
    "BEVFusionConfig",
    "build_sample_transform",
    "prepare_sample",
]
