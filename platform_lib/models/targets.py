"""BEV occupancy targets: cuboid footprints rasterised onto an ego-frame grid.

Shape legend (K cuboids, G class groups, H x W BEV cells):
    center  (K, 3) float64   box centre x, y, z in m, ego frame (x forward, y left, z up)
    size    (K, 3) float64   length (along heading), width, height in m
    yaw     (K,)   float64   heading in rad about ego +z, counter-clockwise from +x
    target  (G, H, W) float32  1.0 where the footprint of a box of group g covers the cell

Grid convention (shared by every BEV tensor of the model zoo): row `i` spans ego
x in [x_min + i * res, x_min + (i + 1) * res), column `j` spans ego y in
[y_min + j * res, y_min + (j + 1) * res). Row 0 is the rearmost strip, column 0 the
rightmost strip.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypedDict

import numpy as np
import pydantic
from pydantic import ConfigDict

from schemas.classes import CLASS_GROUPS

__all__ = ["BEVGrid", "Extent", "GridModelConfig", "rasterise_cuboids", "square_extent"]


@dataclass(kw_only=True, frozen=True)
class BEVGrid:
    """An axis-aligned bird's-eye-view grid in the ego frame."""

    x_min: float
    """rear edge of the grid, in m (ego x)"""
    x_max: float
    """front edge of the grid, in m (ego x)"""
    y_min: float
    """right edge of the grid, in m (ego y)"""
    y_max: float
    """left edge of the grid, in m (ego y)"""
    resolution: float
    """cell edge length, in m/cell"""

    def __post_init__(self) -> None:
        if not self.resolution > 0:
            raise ValueError(f"resolution must be > 0 m/cell, got {self.resolution}")
        if not (self.x_max > self.x_min and self.y_max > self.y_min):
            raise ValueError(
                f"x_max/y_max must exceed x_min/y_min, got x [{self.x_min}, {self.x_max}], "
                f"y [{self.y_min}, {self.y_max}]"
            )
        for name, extent in (("x", self.x_max - self.x_min), ("y", self.y_max - self.y_min)):
            cells = extent / self.resolution
            if abs(cells - round(cells)) > 1e-6:
                raise ValueError(
                    f"{name}_max - {name}_min ({extent} m) is not a whole number of cells of "
                    f"resolution {self.resolution} m"
                )

    @property
    def height(self) -> int:
        """Number of rows H (cells along ego x)."""
        return round((self.x_max - self.x_min) / self.resolution)

    @property
    def width(self) -> int:
        """Number of columns W (cells along ego y)."""
        return round((self.y_max - self.y_min) / self.resolution)

    def cell_centres(self) -> tuple[np.ndarray, np.ndarray]:
        """Return the cell centres as two (H, W) float64 arrays (ego x, ego y), in m."""
        xs = self.x_min + (np.arange(self.height) + 0.5) * self.resolution
        ys = self.y_min + (np.arange(self.width) + 0.5) * self.resolution
        return np.meshgrid(xs, ys, indexing="ij")

    def cell_index(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Map ego-frame points to cells.

        Args:
            x: (N,) ego x, in m.
            y: (N,) ego y, in m.

        Returns:
            rows (N,) int64, cols (N,) int64 and inside (N,) bool; rows/cols are only
            meaningful where `inside` is True.
        """
        rows = np.floor((np.asarray(x) - self.x_min) / self.resolution).astype(np.int64)
        cols = np.floor((np.asarray(y) - self.y_min) / self.resolution).astype(np.int64)
        inside = (rows >= 0) & (rows < self.height) & (cols >= 0) & (cols < self.width)
        return rows, cols, inside


@pydantic.dataclasses.dataclass(kw_only=True, frozen=True, config=ConfigDict(strict=True))
class GridModelConfig:
    """The fields every zoo model config opens with: its preset name and its BEV grid.

    Model configs subclass it, so these fields come first in each, in this order (recorded
    config hashes depend on it). Fields are validated (pydantic, strict types) at construction.
    """

    name: str
    """preset name, recorded with exported weights"""
    x_min: float = -25.6
    """rear edge of the BEV grid, in m (ego x)"""
    x_max: float = 25.6
    """front edge of the BEV grid, in m (ego x)"""
    y_min: float = -25.6
    """right edge of the BEV grid, in m (ego y)"""
    y_max: float = 25.6
    """left edge of the BEV grid, in m (ego y)"""
    resolution: float = 0.8
    """BEV cell edge length, in m/cell"""

    @property
    def grid(self) -> BEVGrid:
        """The BEV grid (H = rows along ego x, W = columns along ego y)."""
        return BEVGrid(**{f.name: getattr(self, f.name) for f in fields(BEVGrid)})


class Extent(TypedDict):
    """The extent fields of a `GridModelConfig`, in m (ego frame)."""

    x_min: float
    x_max: float
    y_min: float
    y_max: float


def square_extent(half_m: float) -> Extent:
    """Return the extent fields of a square grid of +-`half_m` m around the ego origin."""
    return Extent(x_min=-half_m, x_max=half_m, y_min=-half_m, y_max=half_m)


def rasterise_cuboids(
    cuboids: Mapping[str, Any],
    grid: BEVGrid,
    class_groups: Sequence[str] = CLASS_GROUPS,
) -> np.ndarray:
    """Rasterise cuboid footprints (rotated rectangles) into a per-group occupancy grid.

    A cell is occupied by a box when the cell centre lies inside the box footprint. The
    cell that contains the box centre is always marked as well, so boxes smaller than a
    cell (pedestrians at 0.8 m/cell) never vanish. Boxes of groups not in `class_groups`
    (e.g. "other") and the parts of boxes outside the grid are ignored.

    Args:
        cuboids: decoded `cuboids.json` (see docs/format.md): "class_group" (K,) str,
            "center" (K, 3), "size" (K, 3), "yaw" (K,); ego frame, m, rad.
        grid: the BEV grid.
        class_groups: group names, one output channel each, in this order.

    Returns:
        (G, H, W) float32 occupancy in {0, 1}.

    Raises:
        ValueError: if the cuboid arrays disagree in length or a size is not positive.
    """
    groups = list(cuboids.get("class_group", []))
    k = len(groups)
    center = np.asarray(cuboids.get("center", np.zeros((0, 3))), dtype=np.float64).reshape(-1, 3)
    size = np.asarray(cuboids.get("size", np.zeros((0, 3))), dtype=np.float64).reshape(-1, 3)
    yaw = np.asarray(cuboids.get("yaw", np.zeros((0,))), dtype=np.float64).reshape(-1)
    if not (len(center) == len(size) == len(yaw) == k):
        raise ValueError(
            f"cuboids disagree in length: class_group {k}, center {len(center)}, "
            f"size {len(size)}, yaw {len(yaw)}"
        )
    if k and not np.all(size[:, :2] > 0):
        raise ValueError(f"cuboid sizes must be > 0 m, got min {size[:, :2].min()}")
    target = np.zeros((len(class_groups), grid.height, grid.width), dtype=np.float32)
    channel = {name: c for c, name in enumerate(class_groups)}
    res = grid.resolution
    for b in range(k):
        c = channel.get(groups[b])
        if c is None:
            continue
        cx, cy = center[b, 0], center[b, 1]
        half_l, half_w = size[b, 0] / 2.0, size[b, 1] / 2.0
        cos_t, sin_t = math.cos(yaw[b]), math.sin(yaw[b])
        ext_x = abs(half_l * cos_t) + abs(half_w * sin_t)
        ext_y = abs(half_l * sin_t) + abs(half_w * cos_t)
        i0 = max(0, math.floor((cx - ext_x - grid.x_min) / res))
        i1 = min(grid.height - 1, math.floor((cx + ext_x - grid.x_min) / res))
        j0 = max(0, math.floor((cy - ext_y - grid.y_min) / res))
        j1 = min(grid.width - 1, math.floor((cy + ext_y - grid.y_min) / res))
        if i0 <= i1 and j0 <= j1:
            xs = grid.x_min + (np.arange(i0, i1 + 1) + 0.5) * res - cx
            ys = grid.y_min + (np.arange(j0, j1 + 1) + 0.5) * res - cy
            dx, dy = np.meshgrid(xs, ys, indexing="ij")
            along = dx * cos_t + dy * sin_t
            across = -dx * sin_t + dy * cos_t
            inside = (np.abs(along) <= half_l) & (np.abs(across) <= half_w)
            target[c, i0 : i1 + 1, j0 : j1 + 1][inside] = 1.0
        rows, cols, ok = grid.cell_index(np.array([cx]), np.array([cy]))
        if ok[0]:
            target[c, rows[0], cols[0]] = 1.0
    return target
