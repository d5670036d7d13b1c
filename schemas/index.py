"""Contract of `index.parquet`: one row per sample, byte ranges of every shard member.

The Arrow schema (`INDEX_SCHEMA`) is what the shard builder writes and readers check; the
pandera model (`IndexModel`) validates the same table after `to_pandas()` with value rules
(non-negative offsets, split names, hash format). See docs/format.md, section "Index".
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa_pd
import pyarrow as pa
from pandera.typing import Series

__all__ = [
    "INDEX_SCHEMA",
    "INDEX_SCHEMA_WITHOUT_XXH3",
    "MEMBER_TYPE",
    "SPLITS",
    "IndexModel",
    "validate_index_frame",
]

#: Split names a sample can be assigned to.
SPLITS: tuple[str, ...] = ("train", "val")

_MEMBER_FIELDS = [
    pa.field("name", pa.string(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("size", pa.int64(), nullable=False),
    pa.field("sha256", pa.string(), nullable=False),
]

#: One tar member of a sample: ext name, byte offset of its DATA in the shard, length, sha256
#: hex, and xxh3_64 of the data (the cheap per-read check; xxHash spec, XXH3 64-bit, seed 0).
MEMBER_TYPE = pa.struct([*_MEMBER_FIELDS, pa.field("xxh3_64", pa.uint64(), nullable=False)])


def _index_schema(member_type: pa.StructType) -> pa.Schema:
    return pa.schema(
        [
            pa.field("key", pa.string(), nullable=False),
            pa.field("log_id", pa.string(), nullable=False),
            pa.field("frame_index", pa.int32(), nullable=False),
            pa.field("timestamp", pa.float64(), nullable=False),
            pa.field("split", pa.string(), nullable=False),
            pa.field("shard", pa.string(), nullable=False),
            pa.field("shard_id", pa.int32(), nullable=False),
            pa.field("sample_offset", pa.int64(), nullable=False),
            pa.field("sample_size", pa.int64(), nullable=False),
            pa.field(
                "members", pa.list_(pa.field("item", member_type, nullable=False)), nullable=False
            ),
            pa.field("num_lidar_points", pa.int32(), nullable=False),
            pa.field("num_radar_points", pa.int32(), nullable=False),
            pa.field("num_cuboids", pa.int32(), nullable=False),
            pa.field("num_vehicle", pa.int32(), nullable=False),
            pa.field("num_pedestrian", pa.int32(), nullable=False),
            pa.field("num_cyclist", pa.int32(), nullable=False),
            pa.field("content_hash", pa.string(), nullable=False),
        ]
    )


#: Arrow schema of index.parquet (column order is part of the contract).
INDEX_SCHEMA = _index_schema(MEMBER_TYPE)
#: Schema of indexes built before members carried `xxh3_64`; still readable (sha256 checks only).
INDEX_SCHEMA_WITHOUT_XXH3 = _index_schema(pa.struct(_MEMBER_FIELDS))

_SHA256_HEX = r"^[0-9a-f]{64}$"


class IndexModel(pa_pd.DataFrameModel):
    """Value rules of index.parquet rows (pandas view of `INDEX_SCHEMA`)."""

    key: Series[str] = pa_pd.Field(unique=True, str_matches=r"^[A-Za-z0-9-]+_\d{6,}$")
    """sample key `<log_id>_<frame_index:06d>`; no dots, unique in the dataset"""
    log_id: Series[str] = pa_pd.Field(str_matches=r"^[A-Za-z0-9-]{1,64}$")
    """log (sequence) id"""
    frame_index: Series[pd.Int32Dtype] = pa_pd.Field(ge=0, coerce=True)
    """0-based sweep index within the log"""
    timestamp: Series[float] = pa_pd.Field()
    """LiDAR sweep time, in s"""
    split: Series[str] = pa_pd.Field(isin=list(SPLITS))
    """`train` or `val`"""
    shard: Series[str] = pa_pd.Field(str_matches=r"^shards/shard-\d{6}\.tar$")
    """shard path relative to the dataset root"""
    shard_id: Series[pd.Int32Dtype] = pa_pd.Field(ge=0, coerce=True)
    """position of the shard in manifest["shards"]"""
    sample_offset: Series[pd.Int64Dtype] = pa_pd.Field(ge=0, coerce=True)
    """byte offset of the sample's first tar header in the shard (multiple of 512)"""
    sample_size: Series[pd.Int64Dtype] = pa_pd.Field(gt=0, coerce=True)
    """bytes from sample_offset to the end of the last member's padded data"""
    members: Series[object] = pa_pd.Field()
    """list of {name, offset (bytes, data start), size (bytes), sha256 (hex)} in tar order"""
    num_lidar_points: Series[pd.Int32Dtype] = pa_pd.Field(ge=0, coerce=True)
    """LiDAR points of the sweep (rows of lidar.npy)"""
    num_radar_points: Series[pd.Int32Dtype] = pa_pd.Field(ge=0, coerce=True)
    """radar returns (rows of radar.npy); 0 when no radar"""
    num_cuboids: Series[pd.Int32Dtype] = pa_pd.Field(ge=0, coerce=True)
    """labelled boxes in the frame, all classes"""
    num_vehicle: Series[pd.Int32Dtype] = pa_pd.Field(ge=0, coerce=True)
    """boxes of class group `vehicle`"""
    num_pedestrian: Series[pd.Int32Dtype] = pa_pd.Field(ge=0, coerce=True)
    """boxes of class group `pedestrian`"""
    num_cyclist: Series[pd.Int32Dtype] = pa_pd.Field(ge=0, coerce=True)
    """boxes of class group `cyclist`"""
    content_hash: Series[str] = pa_pd.Field(str_matches=_SHA256_HEX)
    """sha256 hex over `name\\0sha256\\n` of every member in order"""

    @pa_pd.dataframe_check
    def check_sample_offsets_aligned(cls, df: pd.DataFrame) -> Series[bool]:  # type: ignore[misc]  # pandera makes it a classmethod
        """Tar headers start on 512-byte blocks."""
        return df["sample_offset"] % 512 == 0

    @pa_pd.dataframe_check
    def check_class_counts_bounded(cls, df: pd.DataFrame) -> Series[bool]:  # type: ignore[misc]  # pandera makes it a classmethod
        """Per-class counts never exceed the total cuboid count."""
        return df["num_vehicle"] + df["num_pedestrian"] + df["num_cyclist"] <= df["num_cuboids"]

    class Config:
        strict = True
        ordered = True


def validate_index_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Validate an index table (pandas) against `IndexModel`, collecting every failure.

    Raises:
        pandera.errors.SchemaErrors: listing each failing column, check and row.
    """
    return IndexModel.validate(frame, lazy=True)
