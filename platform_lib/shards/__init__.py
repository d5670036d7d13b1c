"""Shard writer/reader pair over one index: frames -> tar shards + index.parquet + manifest.json.

See README.md in this folder and docs/format.md for the on-disk contract.
"""

from platform_lib.shards.build import BuildConfig, build_dataset, write_dataset
from platform_lib.shards.codec import check_frame, decode_sample, encode_frame
from platform_lib.shards.errors import (
    BuildError,
    DatasetError,
    ManifestMissingError,
    ShardFormatError,
)
from platform_lib.shards.manifest import compute_dataset_hash, load_manifest
from platform_lib.shards.reader import DatasetReader, iter_tar_samples, open_dataset
from platform_lib.shards.validate import ValidationReport, validate_dataset

__all__ = [
    "BuildConfig",
    "BuildError",
    "DatasetError",
    "DatasetReader",
    "ManifestMissingError",
    "ShardFormatError",
    "ValidationReport",
    "build_dataset",
    "check_frame",
    "compute_dataset_hash",
    "decode_sample",
    "encode_frame",
    "iter_tar_samples",
    "load_manifest",
    "open_dataset",
    "validate_dataset",
    "write_dataset",
]
