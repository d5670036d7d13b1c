"""PandaSet cuboids: world-frame annotation tables -> ego-frame `Cuboids` with class groups.

PandaSet `yaw` = 0 points the box's length side along world +y (devkit docs), so the heading in
world is yaw + pi/2; `dimensions.y` is the length, `dimensions.x` the width. Boxes annotated twice
for the overlap of the two LiDARs (`cuboids.sensor_id` 0 and 1, linked by `cuboids.sibling_id`)
are kept once: the sensor 0 copy wins; then one row per uuid (sensor_id -1, then 0, then 1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from platform_lib.sources.frame import Cuboids
from platform_lib.sources.geometry import transform_points
from platform_lib.sources.pandaset_files import load_pickled_frame, require_columns
from platform_lib.sources.raw_files import RawFiles

__all__ = ["map_pandaset_label", "read_pandaset_cuboids", "select_cuboid_rows"]

_VEHICLE = {
    "Car",
    "Pickup Truck",
    "Medium-sized Truck",
    "Semi-truck",
    "Bus",
    "Emergency Vehicle",
    "Towed Object",
}
_PEDESTRIAN = {"Pedestrian", "Pedestrian with Object"}
_CYCLIST = {"Bicycle", "Motorcycle", "Motorized Scooter", "Personal Mobility Device"}
_CUBOID_COLUMNS = (
    "uuid",
    "label",
    "yaw",
    "position.x",
    "position.y",
    "position.z",
    "dimensions.x",
    "dimensions.y",
    "dimensions.z",
)


def map_pandaset_label(label: str) -> str:
    """Return the class group ("vehicle", "pedestrian", "cyclist" or "other") of a label."""
    if label in _VEHICLE or label.startswith("Other Vehicle - "):
        return "vehicle"
    if label in _PEDESTRIAN:
        return "pedestrian"
    if label in _CYCLIST:
        return "cyclist"
    return "other"


def select_cuboid_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Drop the sensor-1 copy of overlap boxes and duplicate uuids (see module docstring)."""
    if "cuboids.sensor_id" not in df.columns:
        return df.drop_duplicates("uuid", keep="first")
    sensor = df["cuboids.sensor_id"].to_numpy()
    if "cuboids.sibling_id" in df.columns:
        sensor0 = set(df["uuid"][sensor == 0])
        is_copy = (sensor == 1) & df["cuboids.sibling_id"].isin(sensor0).to_numpy()
        df = df[~is_copy]
    rank = df["cuboids.sensor_id"].map({-1: 0, 0: 1, 1: 2}).fillna(3)
    order = np.lexsort((np.arange(len(df)), rank.to_numpy()))
    kept = df.iloc[order].drop_duplicates("uuid", keep="first")
    return kept.sort_index(kind="stable")


def read_pandaset_cuboids(
    path: Path, log_id: str, i: int, ego_from_world: np.ndarray, *, files: RawFiles
) -> Cuboids:
    """Read annotations/cuboids/NN.pkl.gz of frame `i` into ego-frame `Cuboids`.

    `path` is opened through `files`; `ego_from_world` (4, 4) maps world points to the ego frame.

    Raises:
        FrameError: "missing_cuboids", "corrupt_cuboids", "missing_column".
    """
    df = load_pickled_frame(
        path, files=files, reason="corrupt_cuboids", log_id=log_id, frame_index=i
    )
    require_columns(df, _CUBOID_COLUMNS, path, log_id=log_id, frame_index=i)
    df = select_cuboid_rows(df)
    center_w = df[["position.x", "position.y", "position.z"]].to_numpy(np.float64)
    heading_w = df["yaw"].to_numpy(np.float64) + np.pi / 2.0
    direction_w = np.stack([np.cos(heading_w), np.sin(heading_w), np.zeros_like(heading_w)], 1)
    direction_e = direction_w @ ego_from_world[:3, :3].T
    labels = [str(x) for x in df["label"]]
    return Cuboids(
        label=labels,
        class_group=[map_pandaset_label(x) for x in labels],
        center=transform_points(ego_from_world, center_w),
        size=df[["dimensions.y", "dimensions.x", "dimensions.z"]].to_numpy(np.float64),
        yaw=np.arctan2(direction_e[:, 1], direction_e[:, 0]),
        track_id=[str(x) for x in df["uuid"]],
    )
