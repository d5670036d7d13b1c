"""Contract of the cuboid table: one row per labelled 3D box of one frame, in the ego frame.

Ego frame of the sweep: x forward, y left, z up, metres, origin at the LiDAR (PandaSet: the
LiDAR pose origin, ~0.3 m above the road). `yaw` is the heading of the box's length axis about
ego +z, counter-clockwise from ego +x, in rad within [-pi, pi]. The Arrow schema
(`CUBOID_SCHEMA`) is the columnar form of `platform_lib.sources.frame.Cuboids` (and of the
`cuboids.json` shard member); `CuboidModel` validates the pandas form with value rules.

Contracts sit below the code: this module imports nothing from `platform_lib`; the sources,
the shard writer and the model zoo import `CLASS_GROUPS` from `schemas.classes`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import pandas as pd
import pandera.pandas as pa_pd
import pyarrow as pa
from pandera.typing import Series

from schemas.classes import CLASS_GROUPS

__all__ = [
    "CENTER_XY_LIMIT_M",
    "CENTER_Z_LIMIT_M",
    "CLASS_GROUPS",
    "CUBOID_SCHEMA",
    "SIZE_LIMIT_M",
    "CuboidArrays",
    "CuboidModel",
    "cuboids_to_frame",
    "validate_cuboid_frame",
]


#: The value bounds of a box, one definition: `CuboidModel` enforces them on the table and
#: `platform_lib.sources.validation.validate_frame` on every frame a source yields.
CENTER_XY_LIMIT_M = 1000.0
"""|centre x|, |centre y| at most this, in m"""
CENTER_Z_LIMIT_M = 100.0
"""|centre z| at most this, in m"""
SIZE_LIMIT_M = 50.0
"""length, width and height in (0, SIZE_LIMIT_M], in m"""


class CuboidArrays(Protocol):
    """The K boxes of one frame, as `platform_lib.sources.frame.Cuboids` holds them."""

    label: Sequence[str]
    class_group: Sequence[str]
    track_id: Sequence[str]
    center: Any  # (K, 3) float, m, ego frame
    size: Any  # (K, 3) float: length, width, height in m
    yaw: Any  # (K,) float, rad


CUBOID_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("label", pa.string(), nullable=False),
        pa.field("class_group", pa.string(), nullable=False),
        pa.field("track_id", pa.string(), nullable=False),
        pa.field("center_x", pa.float64(), nullable=False),
        pa.field("center_y", pa.float64(), nullable=False),
        pa.field("center_z", pa.float64(), nullable=False),
        pa.field("length", pa.float64(), nullable=False),
        pa.field("width", pa.float64(), nullable=False),
        pa.field("height", pa.float64(), nullable=False),
        pa.field("yaw", pa.float64(), nullable=False),
    ]
)
"""Arrow schema of a cuboid table (column order is part of the contract)."""


class CuboidModel(pa_pd.DataFrameModel):
    """Value rules of cuboid rows (pandas view of `CUBOID_SCHEMA`)."""

    key: Series[str] = pa_pd.Field(str_matches=r"^[A-Za-z0-9-]+_\d{6,}$")
    """sample key `<log_id>_<frame_index:06d>` of the frame holding the box"""
    label: Series[str] = pa_pd.Field(str_length={"min_value": 1})
    """source label, e.g. "Car", "Pedestrian with Object" (PandaSet taxonomy)"""
    class_group: Series[str] = pa_pd.Field(isin=[*CLASS_GROUPS, "other"])
    """training class group: vehicle / pedestrian / cyclist / other"""
    track_id: Series[str] = pa_pd.Field()
    """object id, stable across the frames of a log (PandaSet uuid, synthetic `<group>-NNN`)"""
    center_x: Series[float] = pa_pd.Field(ge=-CENTER_XY_LIMIT_M, le=CENTER_XY_LIMIT_M)
    """box centre x, in m, ego frame (forward)"""
    center_y: Series[float] = pa_pd.Field(ge=-CENTER_XY_LIMIT_M, le=CENTER_XY_LIMIT_M)
    """box centre y, in m, ego frame (left)"""
    center_z: Series[float] = pa_pd.Field(ge=-CENTER_Z_LIMIT_M, le=CENTER_Z_LIMIT_M)
    """box centre z (centre of the box, not its bottom), in m, ego frame (up)"""
    length: Series[float] = pa_pd.Field(gt=0.0, le=SIZE_LIMIT_M)
    """extent along the heading, in m (PandaSet `dimensions.y`)"""
    width: Series[float] = pa_pd.Field(gt=0.0, le=SIZE_LIMIT_M)
    """extent across the heading, in m (PandaSet `dimensions.x`)"""
    height: Series[float] = pa_pd.Field(gt=0.0, le=SIZE_LIMIT_M)
    """vertical extent, in m (PandaSet `dimensions.z`)"""
    yaw: Series[float] = pa_pd.Field(ge=-math.pi - 1e-9, le=math.pi + 1e-9)
    """heading about ego +z, in rad, counter-clockwise from ego +x"""

    class Config:
        strict = True
        ordered = True


def cuboids_to_frame(key: str, cuboids: CuboidArrays) -> pd.DataFrame:
    """Return the cuboid table (K rows, `CUBOID_SCHEMA` columns) of one frame's `Cuboids`.

    `yaw` is wrapped into [-pi, pi].
    """
    center = np.asarray(cuboids.center, dtype=np.float64).reshape(-1, 3)
    size = np.asarray(cuboids.size, dtype=np.float64).reshape(-1, 3)
    yaw = np.asarray(cuboids.yaw, dtype=np.float64).reshape(-1)
    return pd.DataFrame(
        {
            "key": [key] * len(cuboids.label),
            "label": list(cuboids.label),
            "class_group": list(cuboids.class_group),
            "track_id": list(cuboids.track_id),
            "center_x": center[:, 0],
            "center_y": center[:, 1],
            "center_z": center[:, 2],
            "length": size[:, 0],
            "width": size[:, 1],
            "height": size[:, 2],
            "yaw": np.arctan2(np.sin(yaw), np.cos(yaw)),
        },
        columns=CUBOID_SCHEMA.names,
    )


def validate_cuboid_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Validate a cuboid table with `CuboidModel` (lazy: reports every failing row).

    Raises:
        pandera.errors.SchemaErrors: listing each failing column, check and row index.
    """
    return CuboidModel.validate(df, lazy=True)
