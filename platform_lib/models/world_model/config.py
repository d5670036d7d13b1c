"""Configuration of the world model: BEV grid, context frames, patches and transformer sizes.

No torch here: the config layer (`platform_lib.training.config`) and placement read it. The
parameter count formula is the model's exactly (`world_model/model.py`): per layer two
RMSNorm weights (2d), attention q/k/v/o (4 d^2, no biases) and a SwiGLU MLP (3 d f).
"""

from __future__ import annotations

from dataclasses import fields

import pydantic
from pydantic import ConfigDict, PositiveInt

from platform_lib.models.bev_fusion.config import BEVFusionConfig
from platform_lib.models.targets import GridModelConfig

__all__ = ["WorldModelConfig"]

#: Radar BEV channels of a frame (`prepare_sample`: log1p(count), mean radial velocity).
RADAR_FEATURES = 2
#: Ego-motion features of a frame: the (4, 4) pose of the predicted frame seen from it.
MOTION_FEATURES = 16


@pydantic.dataclasses.dataclass(kw_only=True, frozen=True, config=ConfigDict(strict=True))
class WorldModelConfig(GridModelConfig):
    """Sizes of a `WorldModel` (each >= 1); flat scalar fields, so it serialises as a Flyte / MLflow parameter."""

    name: str = "world_model_small"
    """preset name, recorded with exported weights"""
    lidar_z_bins: PositiveInt = 4
    """LiDAR height slices of each frame's BEV input (`prepare_sample`)"""
    context_frames: PositiveInt = 2
    """k: past frames the model sees; a loader window holds k + 1 frames (the last is predicted)"""
    patch_size: PositiveInt = 8
    """BEV cells per token edge: a token is a patch_size x patch_size patch of one frame"""
    dim: PositiveInt = 32
    """transformer width, in features"""
    layers: PositiveInt = 4
    """transformer blocks (the pipeline splits between them)"""
    heads: PositiveInt = 4
    """attention heads (tensor parallelism splits them: tp must divide heads)"""
    mlp_hidden: PositiveInt = 64
    """SwiGLU hidden width of each block, in features"""
    num_classes: PositiveInt = 3
    """occupancy classes predicted per cell: vehicle, pedestrian, cyclist"""

    def __post_init__(self) -> None:
        grid = self.grid
        if grid.height % self.patch_size or grid.width % self.patch_size:
            raise ValueError(
                f"patch_size ({self.patch_size}) must divide the BEV grid "
                f"({grid.height}x{grid.width} cells)"
            )
        if self.dim % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide dim ({self.dim})")

    @property
    def temporal_frames(self) -> int:
        """Frames per loader window: the k context frames and the predicted one."""
        return self.context_frames + 1

    @property
    def input_features(self) -> int:
        """BEV input channels of a frame: LiDAR (4 statistics + z slices) and radar."""
        return 4 + self.lidar_z_bins + RADAR_FEATURES

    @property
    def tokens_per_frame(self) -> int:
        """Patches of one frame's BEV grid."""
        return (self.grid.height // self.patch_size) * (self.grid.width // self.patch_size)

    @property
    def num_split_points(self) -> int:
        """Places a pipeline can be cut: between consecutive blocks."""
        return self.layers - 1

    @property
    def tp_divisor(self) -> int:
        """Every tensor-parallel degree must divide this (heads; dim and mlp_hidden follow)."""
        return self.heads

    def count_parameters(self) -> int:
        """Return the model's parameter count (exact; see the module docstring)."""
        d, f, p = self.dim, self.mlp_hidden, self.patch_size
        patch_in = self.input_features * p * p
        embed = patch_in * d + d + MOTION_FEATURES * d + d
        positions = (self.tokens_per_frame + self.context_frames) * d
        block = 2 * d + 4 * d * d + 3 * d * f
        head = d + d * self.num_classes * p * p + self.num_classes * p * p
        return embed + positions + self.layers * block + head

    def bev_config(self) -> BEVFusionConfig:
        """Return the BEV fusion config whose `prepare_window` builds this model's inputs."""
        return BEVFusionConfig(
            **{f.name: getattr(self, f.name) for f in fields(GridModelConfig)},
            lidar_z_bins=self.lidar_z_bins,
            temporal_frames=self.temporal_frames,
        )
