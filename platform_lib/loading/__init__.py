"""Streaming loader over Drivetrain shards: exact epochs, elastic resume, cache tier, mixing."""

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.errors import (
    CacheFullError,
    DatasetIndexError,
    DatasetNotFoundError,
    LoaderError,
    ObjectStoreUnreachableError,
    ResumeStateError,
    SampleDecodeError,
    SampleIntegrityError,
    ShardReadError,
)
from platform_lib.loading.input_wait import InputWaitMeter
from platform_lib.loading.loader import LoaderStats, StreamingLoader, build_loader

__all__ = [
    "CacheFullError",
    "DatasetIndexError",
    "DatasetNotFoundError",
    "InputWaitMeter",
    "LoaderConfig",
    "LoaderError",
    "LoaderStats",
    "ObjectStoreUnreachableError",
    "ResumeStateError",
    "SampleDecodeError",
    "SampleIntegrityError",
    "ShardReadError",
    "StreamingLoader",
    "build_loader",
]
