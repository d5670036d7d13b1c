"""Errors raised by the streaming loader.

Every message names what went wrong, where (dataset URL, shard, member, byte offset, sample
key) and what to do. All classes take a single message argument so that
`torch.utils.data` can re-raise them in the main process with the worker's traceback.
"""

from __future__ import annotations

__all__ = [
    "CacheFullError",
    "DatasetIndexError",
    "DatasetNotFoundError",
    "LoaderError",
    "ObjectStoreUnreachableError",
    "ResumeStateError",
    "SampleDecodeError",
    "SampleIntegrityError",
    "ShardReadError",
]


class LoaderError(Exception):
    """Base class of all loader errors."""


class DatasetNotFoundError(LoaderError):
    """The dataset folder has no manifest.json (unfinished build or wrong path)."""


class DatasetIndexError(LoaderError):
    """An index row is inconsistent: missing member, byte range outside its shard, bad shard id."""


class ShardReadError(LoaderError):
    """A shard could not be read: truncated, missing, or a malformed tar header inside a sample."""


class SampleIntegrityError(LoaderError):
    """A member's bytes do not match the sha256 recorded in the index (tampered or bit rot)."""


class ObjectStoreUnreachableError(LoaderError):
    """The object store did not answer after the configured retries."""


class CacheFullError(LoaderError):
    """The node-local cache cannot hold a shard: byte limit below one shard, or disk full."""


class ResumeStateError(LoaderError, ValueError):
    """A loader state dict does not fit this loader (other dataset, seed or global batch)."""


class SampleDecodeError(LoaderError):
    """A member's bytes could not be decoded (corrupt JPEG, bad .npy or JSON)."""
