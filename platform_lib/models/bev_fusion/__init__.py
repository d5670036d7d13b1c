"""BEV fusion model: config, sample preparation (loader side) and network."""

from platform_lib.models.bev_fusion.config import BEVFusionConfig
from platform_lib.models.bev_fusion.model import BEVFusion
from platform_lib.models.bev_fusion.prepare import build_sample_transform, prepare_sample

__all__ = ["BEVFusion", "BEVFusionConfig", "build_sample_transform", "prepare_sample"]
