"""BEV fusion network: LiDAR, camera and radar branches fused into per-class occupancy logits.

Shapes (B batch, N camera slots, H x W BEV cells, h x w camera image, P pillars of M points):
lidar_bev (B, 4 + Z, H, W) or lidar_pillars (B, P, M, 9) with lidar_pillar_index (B, P, 2)
int64 (`pillars.py`); radar_bev (B, 2, H, W); camera_images (B, N, 3, h, w); camera_index
(B, N, H, W) int64, -1 = not seen; logits (B, 3, H, W), one occupancy logit per class group
and cell. With temporal_frames T > 1 the inputs gain a time axis after B (oldest frame
first) and `ego_motion` (B, T, 4, 4) joins them (`temporal.py`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from platform_lib.models.bev_fusion.config import BEVFusionConfig
from platform_lib.models.bev_fusion.pillars import PillarEncoder
from platform_lib.models.bev_fusion.resnet import ResNetFPN
from platform_lib.models.bev_fusion.temporal import warp_bev

__all__ = ["BEVFusion", "CameraEncoder", "ConvBlock"]


class ConvBlock(nn.Sequential):
    """3x3 convolution, GroupNorm (batch-size independent) and ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        groups = 8 if c_out % 8 == 0 else 1
        super().__init__(
            nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
            nn.GroupNorm(groups, c_out),
            nn.ReLU(inplace=True),
        )


class CameraEncoder(nn.Module):
    """Image CNN -> per-column features -> lift slots (column x depth bin) -> BEV.

    The CNN (`cfg.backbone`: a few conv blocks, or a ResNet + FPN-lite neck shared by the
    cameras) reduces the image by `camera_stride`, averages each feature column over the
    image height and predicts `camera_channels` features for each of the
    `lift_depth_bins` depth bins of that column. Each BEV cell then gathers the slot that
    `camera_index` names for it and averages over the cameras that see it.
    """

    def __init__(self, cfg: BEVFusionConfig) -> None:
        super().__init__()
        self.cnn: nn.Module
        if cfg.backbone == "tiny":
            width = max(8, cfg.camera_channels // 2)
            layers: list[nn.Module] = [ConvBlock(3, width)]
            for _ in range(cfg.camera_stride.bit_length() - 1):
                layers.append(ConvBlock(width, cfg.camera_channels, stride=2))
                width = cfg.camera_channels
            self.cnn = nn.Sequential(*layers)
        else:
            self.cnn = ResNetFPN(cfg.backbone, cfg.camera_stride, cfg.neck_channels)
            width = cfg.neck_channels
        self.to_slots = nn.Conv1d(width, cfg.camera_channels * cfg.lift_depth_bins, 1)
        self.channels = cfg.camera_channels
        self.depth_bins = cfg.lift_depth_bins

    def forward(self, images: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Lift camera features to BEV.

        Args:
            images: (B, N, 3, h, w) float.
            index: (B, N, H, W) int64 lift slot per cell, -1 = not seen.

        Returns:
            (B, camera_channels, H, W) mean feature over the cameras that see each cell.
        """
        b, n = images.shape[:2]
        feats = self.cnn(images.flatten(0, 1)).mean(dim=2)  # (B*N, C', w')
        slots = self.to_slots(feats)  # (B*N, C*D, w')
        cols = slots.shape[-1]
        slots = slots.view(b, n, self.channels, self.depth_bins, cols).transpose(3, 4)
        slots = slots.reshape(b, n, self.channels, cols * self.depth_bins)
        h, w = index.shape[-2:]
        seen = (index >= 0).flatten(2)  # (B, N, H*W)
        gather = index.clamp(min=0).flatten(2).unsqueeze(2).expand(b, n, self.channels, h * w)
        bev = torch.gather(slots, 3, gather) * seen.unsqueeze(2).to(slots.dtype)
        count = seen.sum(dim=1).clamp(min=1).to(slots.dtype).view(b, 1, h, w)
        return bev.sum(dim=1).view(b, self.channels, h, w) / count


class BEVFusion(nn.Module):
    """LiDAR + camera + radar BEV fusion with per-class occupancy heads.

    Trunk: the concatenated branch features are fused at half resolution (stride-2 block,
    two blocks at H/2 x W/2), upsampled and joined with the full-resolution LiDAR features
    for the per-cell heads, so small objects keep full-resolution evidence.

    Temporal (`cfg.temporal_frames` T > 1): every frame of the window goes through the same
    branches; the concatenated branch features of the T - 1 previous frames are warped into
    the current ego frame (`temporal.warp_bev`), joined with the current frame's and reduced
    back to the trunk's width by one more block (`temporal_fusion`) before the trunk.
    """

    #: batch keys `forward` consumes, in argument order: the train loop reads them from here,
    #: so a model of the zoo declares its own inputs (shapes in `prepare.py`). The instance
    #: attribute replaces the LiDAR key with the pillar keys when lidar_encoder is "pillars".
    input_keys: tuple[str, ...] = ("lidar_bev", "radar_bev", "camera_images", "camera_index")
    #: batch key of the (B, num_classes, H, W) {0, 1} occupancy target the loss compares with.
    target_key: str = "target"

    def __init__(self, cfg: BEVFusionConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c_l, c_c, c_r = cfg.lidar_channels, cfg.camera_channels, cfg.radar_channels
        c_f = cfg.fusion_channels
        self.lidar_encoder: nn.Module
        if cfg.lidar_encoder == "pillars":
            self.lidar_encoder = PillarEncoder(cfg, context=ConvBlock(c_l, c_l))
            self.input_keys = ("lidar_pillars", *self.input_keys[1:], "lidar_pillar_index")
        else:
            self.lidar_encoder = ConvBlock(cfg.lidar_features, c_l)
        self.camera_encoder = CameraEncoder(cfg)
        self.radar_encoder = ConvBlock(2, c_r)
        self.fusion_down = nn.Sequential(
            ConvBlock(c_l + c_c + c_r, c_f, stride=2), ConvBlock(c_f, c_f), ConvBlock(c_f, c_f)
        )
        self.fusion_up = ConvBlock(c_f + c_l, c_l)
        self.head = nn.Conv2d(c_l, cfg.num_classes, 1)
        if self.head.bias is not None:
            nn.init.constant_(self.head.bias, -2.0)  # start near the (sparse) occupancy prior
        if cfg.temporal_frames > 1:
            self.input_keys = (*self.input_keys, "ego_motion")
            c_b = c_l + c_c + c_r
            self.temporal_fusion = ConvBlock(cfg.temporal_frames * c_b, c_b)

    def blocks(self) -> list[str]:
        """Return the dotted names of the blocks that parallelism treats as units, disjoint.

        `training.parallel` shards each with FSDP (and checkpoints its activations when
        asked); the root holds the rest. Tiny backbone: the top-level branches and trunk
        blocks; ResNet: its stem, each stage, the neck and the lift's slot layer instead of
        the whole camera encoder.
        """
        names = [n for n, child in self.named_children() if any(True for _ in child.parameters())]
        if isinstance(self.camera_encoder.cnn, ResNetFPN):
            stages = ("stem", "layer1", "layer2", "layer3", "layer4")
            camera = [f"camera_encoder.cnn.backbone.{stage}" for stage in stages]
            camera += ["camera_encoder.cnn.neck", "camera_encoder.to_slots"]
            at = names.index("camera_encoder")
            names[at : at + 1] = camera
        return names

    def forward(
        self,
        lidar: torch.Tensor,
        radar_bev: torch.Tensor,
        camera_images: torch.Tensor,
        camera_index: torch.Tensor,
        *extra: torch.Tensor,
    ) -> torch.Tensor:
        """Return (B, num_classes, H, W) occupancy logits; shapes in the module docstring.

        `lidar` is lidar_bev, or lidar_pillars (lidar_encoder "pillars"); `extra` holds, in
        `input_keys` order, lidar_pillar_index (lidar_encoder "pillars"), then ego_motion
        (temporal_frames > 1).

        Raises:
            ValueError: `ego_motion` given to a single-frame model, missing for a temporal
                one, or a window of another length than `temporal_frames`.
        """
        rest = list(extra)
        pillar_index = rest.pop(0) if self.cfg.lidar_encoder == "pillars" and rest else None
        ego_motion = rest.pop(0) if rest else None
        frames = self.cfg.temporal_frames
        if rest or (ego_motion is None) != (frames == 1):
            raise ValueError(
                f"model {self.cfg.name} has temporal_frames={frames}: ego_motion must be "
                f"{'given' if frames > 1 else 'left out'}"
            )
        inputs = (lidar, radar_bev, camera_images, camera_index, pillar_index)
        if ego_motion is None:
            lidar, fused = self._encode(*inputs)
        else:
            lidar, fused = self._encode_window(*inputs, ego_motion)
        coarse = F.interpolate(self.fusion_down(fused), size=lidar.shape[-2:], mode="nearest")
        return self.head(self.fusion_up(torch.cat([coarse, lidar], dim=1)))

    def _encode(
        self,
        lidar: torch.Tensor,
        radar_bev: torch.Tensor,
        camera_images: torch.Tensor,
        camera_index: torch.Tensor,
        pillar_index: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return one frame's LiDAR features (B, c_l, H, W) and branch features (B, c_l+c_c+c_r, H, W)."""
        pillars = () if pillar_index is None else (pillar_index,)
        lidar = self.lidar_encoder(lidar, *pillars)
        camera = self.camera_encoder(camera_images, camera_index)
        return lidar, torch.cat([lidar, camera, self.radar_encoder(radar_bev)], dim=1)

    def _encode_window(
        self,
        lidar: torch.Tensor,
        radar_bev: torch.Tensor,
        camera_images: torch.Tensor,
        camera_index: torch.Tensor,
        pillar_index: torch.Tensor | None,
        ego_motion: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode a (B, T, ...) window: the current frame's LiDAR features and the fused history."""
        b, t = lidar.shape[:2]
        if t != self.cfg.temporal_frames or ego_motion.shape[:2] != (b, t):
            raise ValueError(
                f"model {self.cfg.name} fuses windows of {self.cfg.temporal_frames} frames, got "
                f"inputs of {t} and ego_motion of shape {tuple(ego_motion.shape)}"
            )
        lidar, fused = self._encode(
            lidar.flatten(0, 1),
            radar_bev.flatten(0, 1),
            camera_images.flatten(0, 1),
            camera_index.flatten(0, 1),
            None if pillar_index is None else pillar_index.flatten(0, 1),
        )
        fused = fused.unflatten(0, (b, t))
        grid = self.cfg.grid
        history = [warp_bev(fused[:, i], ego_motion[:, i], grid) for i in range(t - 1)]
        fused = self.temporal_fusion(torch.cat([*history, fused[:, -1]], dim=1))
        return lidar.unflatten(0, (b, t))[:, -1], fused
