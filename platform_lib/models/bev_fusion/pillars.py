"""PointPillars LiDAR encoder: points -> pillars (loader side) -> pillar feature net -> BEV.

After Lang et al., "PointPillars: Fast Encoders for Object Detection from Point Clouds" (CVPR
2019), Sec. 2.1; what is simplified is listed in the models README ("LiDAR pillars").

Shape legend (P = max_pillars, M = max_points_per_pillar, C = lidar_channels, H x W cells):
    lidar_pillars       (P, M, 9) float32  x, y, z, r, x_c, y_c, z_c, x_p, y_p; zero padded
    lidar_pillar_index  (P, 2)    int64    [flat cell row * W + col or -1, number of points]
    BEV features        (B, C, H, W)       (batched inputs gain a leading B)
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from platform_lib.models.bev_fusion.config import BEVFusionConfig

__all__ = ["POINT_FEATURES", "PillarEncoder", "build_pillars"]

#: Features per decorated point.
POINT_FEATURES = 9


def build_pillars(points: np.ndarray, cfg: BEVFusionConfig) -> tuple[np.ndarray, np.ndarray]:
    """Group LiDAR points into pillars of the BEV grid and decorate them (Lang et al., Sec. 2.1).

    Args:
        points: (N, 4) float, x/y/z in m (ego frame), intensity in sensor units.
        cfg: model config (grid, z range, `intensity_scale`, `max_pillars`,
            `max_points_per_pillar`).

    Returns:
        lidar_pillars (P, M, 9) float32 and lidar_pillar_index (P, 2) int64 (module docstring);
        pillars sorted by cell, unused slots zero / [-1, 0].
    """
    grid = cfg.grid
    p_max, m_max = cfg.max_pillars, cfg.max_points_per_pillar
    feats = np.zeros((p_max, m_max, POINT_FEATURES), dtype=np.float32)
    index = np.zeros((p_max, 2), dtype=np.int64)
    index[:, 0] = -1
    pts = np.asarray(points, dtype=np.float32).reshape(-1, 4)
    rows, cols, inside = grid.cell_index(pts[:, 0], pts[:, 1])
    keep = inside & (pts[:, 2] >= cfg.z_min) & (pts[:, 2] < cfg.z_max)
    if not keep.any():
        return feats, index
    pts, cell = pts[keep], rows[keep] * grid.width + cols[keep]
    order = np.argsort(cell, kind="stable")  # by cell, sensor order within a cell
    pts, cell = pts[order], cell[order]
    cells, starts, counts = np.unique(cell, return_index=True, return_counts=True)
    if len(cells) > p_max:  # keep the fullest pillars (ties: lower cell), then cell order
        chosen = np.sort(np.argsort(-counts, kind="stable")[:p_max])
    else:
        chosen = np.arange(len(cells))
    slot_of = np.full(len(cells), -1, dtype=np.int64)
    slot_of[chosen] = np.arange(len(chosen))
    pillar = np.repeat(np.arange(len(cells)), counts)  # pillar of each point
    rank = np.arange(len(cell)) - starts[pillar]  # position of the point in its pillar
    take = (slot_of[pillar] >= 0) & (rank < m_max)
    slot, rank, pts = slot_of[pillar[take]], rank[take], pts[take]
    n = np.bincount(slot, minlength=len(chosen)).astype(np.float32)
    mean = np.stack([np.bincount(slot, weights=pts[:, k]) for k in range(3)], axis=1) / n[:, None]
    centre_x = grid.x_min + (cells[chosen] // grid.width + 0.5) * grid.resolution
    centre_y = grid.y_min + (cells[chosen] % grid.width + 0.5) * grid.resolution
    decorated = np.concatenate(
        [
            pts[:, :3],
            pts[:, 3:4] / cfg.intensity_scale,
            pts[:, :3] - mean[slot],
            (pts[:, 0] - centre_x[slot])[:, None],
            (pts[:, 1] - centre_y[slot])[:, None],
        ],
        axis=1,
    )
    feats[slot, rank] = decorated
    index[: len(chosen), 0] = cells[chosen]
    index[: len(chosen), 1] = n
    return feats, index


class PillarEncoder(nn.Module):
    """Pillar feature net (linear + LayerNorm + ReLU, max over points), scatter, one conv block."""

    def __init__(self, cfg: BEVFusionConfig, context: nn.Module) -> None:
        """Build the net; `context` maps the scattered (B, C, H, W) canvas to the branch output."""
        super().__init__()
        c = cfg.lidar_channels
        self.pfn = nn.Sequential(
            nn.Linear(POINT_FEATURES, c, bias=False), nn.LayerNorm(c), nn.ReLU(inplace=True)
        )
        self.context = context
        self.channels = c
        self.height, self.width = cfg.grid.height, cfg.grid.width

    def forward(self, pillars: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """(B, P, M, 9) decorated points and (B, P, 2) index -> (B, C, H, W) BEV features."""
        b, p, m, _ = pillars.shape
        valid = torch.arange(m, device=pillars.device) < index[..., 1:2]  # (B, P, M)
        # ReLU output is >= 0, so zeroed padding rows leave the max over real points unchanged
        per_pillar = (self.pfn(pillars) * valid.unsqueeze(-1).to(pillars.dtype)).amax(dim=2)
        cells = self.height * self.width
        target = torch.where(index[..., 0] >= 0, index[..., 0], cells)  # padding -> spare slot
        canvas = per_pillar.new_zeros(b, cells + 1, self.channels)
        canvas.scatter_(1, target.unsqueeze(-1).expand(b, p, self.channels), per_pillar)
        bev = canvas[:, :cells].transpose(1, 2).reshape(b, self.channels, self.height, self.width)
        return self.context(bev)
