"""Configuration of the BEV fusion model and its sample preparation."""

from __future__ import annotations

from typing import Annotated, Literal

import pydantic
from pydantic import ConfigDict, Field, PositiveFloat, PositiveInt

from platform_lib.models.targets import GridModelConfig

__all__ = ["BEVFusionConfig"]


@pydantic.dataclasses.dataclass(kw_only=True, frozen=True, config=ConfigDict(strict=True))
class BEVFusionConfig(GridModelConfig):
    """BEV grid, sensor inputs and channel widths of a `BEVFusion` model.

    Flat scalar fields only (no tuples or nested configs), so the config serialises
    unchanged as a Flyte / MLflow parameter. Sizes and counts are >= 1.
    """

    name: str = "bev_fusion_small"
    """preset name, recorded with exported weights"""
    z_min: float = -3.0
    """lowest LiDAR/radar point kept, in m (ego z; the ego origin is the LiDAR)"""
    z_max: float = 3.0
    """highest LiDAR/radar point kept, in m (ego z)"""
    lidar_z_bins: PositiveInt = 4
    """number of height slices with their own LiDAR occupancy channel"""
    intensity_scale: PositiveFloat = 255.0
    """LiDAR intensity that maps to 1.0 (sensor units)"""
    max_cameras: PositiveInt = 6
    """camera slots per sample; fewer cameras are zero-padded and masked, more is an error"""
    camera_height: PositiveInt = 48
    """height of the downsampled camera image fed to the CNN, in pixels"""
    camera_width: PositiveInt = 80
    """width of the downsampled camera image fed to the CNN, in pixels"""
    camera_anchor_y: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    """vertical place of the aspect-ratio crop of each camera before the resize to camera_height
    x camera_width: 0 keeps the top rows, 1 the bottom rows (road); see imaging/decode.py"""
    camera_stride: PositiveInt = 4
    """downsampling of the camera CNN (power of 2); image columns per feature column"""
    backbone: Literal["tiny", "resnet18", "resnet34"] = "tiny"
    """camera CNN shared by the cameras: "tiny" conv blocks (`camera_stride` a power of 2), or a
    ResNet + FPN-lite neck (`resnet.py`; `camera_stride` 8, 16 or 32)"""
    neck_channels: PositiveInt = 256
    """channels of the FPN-lite neck after a ResNet backbone (unused by "tiny")"""
    lift_depth_bins: PositiveInt = 4
    """depth bins per camera feature column in the lift to BEV"""
    lift_max_depth: PositiveFloat = 40.0
    """farthest distance along the optical axis that camera features are lifted to, in m"""
    lift_z: float = -1.0
    """ego height of the BEV cell centre projected into the cameras, in m"""
    lidar_encoder: Literal["bev", "pillars"] = "bev"
    """LiDAR branch: "bev" statistics + conv block, or "pillars" (PointPillars feature net +
    scatter, `pillars.py`)"""
    max_pillars: PositiveInt = 12000
    """non-empty BEV cells (pillars) kept per sample by "pillars", most points first"""
    max_points_per_pillar: PositiveInt = 32
    """LiDAR points kept per pillar by "pillars" (the first ones in sensor order)"""
    lidar_channels: PositiveInt = 32
    """channels of the LiDAR BEV encoder"""
    camera_channels: PositiveInt = 16
    """channels of the camera features lifted to BEV"""
    radar_channels: PositiveInt = 8
    """channels of the radar BEV encoder"""
    fusion_channels: PositiveInt = 48
    """channels of the fused BEV trunk"""
    num_classes: PositiveInt = 3
    """occupancy heads: vehicle, pedestrian, cyclist"""
    temporal_frames: PositiveInt = 1
    """frames per sample: 1 = single frame; T > 1 fuses the BEV features of the T - 1 previous
    frames, warped into the current ego frame by the relative ego pose (`temporal.py`)"""

    def __post_init__(self) -> None:
        self.grid  # validates extent and resolution  # noqa: B018
        if self.backbone != "tiny" and self.camera_stride not in (8, 16, 32):
            raise ValueError(
                f"camera_stride must be 8, 16 or 32 with backbone {self.backbone!r}, "
                f"got {self.camera_stride}"
            )
        if self.camera_stride & (self.camera_stride - 1):
            raise ValueError(f"camera_stride must be a power of 2, got {self.camera_stride}")
        if self.camera_width % self.camera_stride or self.camera_height % self.camera_stride:
            raise ValueError(
                f"camera_height/camera_width ({self.camera_height}x{self.camera_width}) must be "
                f"multiples of camera_stride ({self.camera_stride})"
            )
        if not self.z_max > self.z_min:
            raise ValueError(f"z_max ({self.z_max}) must exceed z_min ({self.z_min})")
        if (self.grid.height % 2) or (self.grid.width % 2):
            raise ValueError(
                f"the BEV grid ({self.grid.height}x{self.grid.width} cells from x_min/x_max/"
                f"y_min/y_max/resolution) must have an even number of rows and columns"
            )

    @property
    def lidar_features(self) -> int:
        """Input channels of the LiDAR BEV tensor (4 statistics + one per height slice)."""
        return 4 + self.lidar_z_bins

    @property
    def camera_columns(self) -> int:
        """Feature columns per camera after the CNN (camera_width // camera_stride)."""
        return self.camera_width // self.camera_stride
