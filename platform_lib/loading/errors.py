"""Errors raised by the streaming loader: all under `platform_lib.shards.errors.DatasetError`.

Bad data (manifest, index, shard bytes, checksums, decoding) raises the shard layer's errors,
re-exported here; `LoaderError` covers what only the loader does (object store, node cache,
shared memory, resume state, worker deadlines). Every message names what went wrong, where (dataset URL, shard,
member, byte offset, sample key) and what to do. All classes can be rebuilt from their message
alone, so `torch.utils.data` re-raises them in the main process with the worker's traceback.
"""

from __future__ import annotations

from platform_lib.shards.errors import (
    DatasetError,
    DatasetIndexError,
    ManifestError,
    ManifestMissingError,
    SampleDecodeError,
    SampleIntegrityError,
    ShardFormatError,
)

__all__ = [
    "CacheFullError",
    "DatasetError",
    "DatasetIndexError",
    "LoaderError",
    "ManifestError",
    "ManifestMissingError",
    "ObjectStoreUnreachableError",
    "ResumeStateError",
    "RingError",
    "SampleDecodeError",
    "SampleIntegrityError",
    "ShardFormatError",
    "WorkerTimeoutError",
]


class LoaderError(DatasetError):
    """Base class of the loader's own errors (not about the dataset's bytes)."""


class ObjectStoreUnreachableError(LoaderError):
    """The object store did not answer after the configured retries."""


class CacheFullError(LoaderError):
    """The node-local cache cannot hold a shard: byte limit below one shard, or disk full."""


class RingError(LoaderError):
    """The shared-memory ring cannot be set up, or a sample does not fit a slot.

    /dev/shm too small or a file size limit; a sample larger than its slot means the index
    changed or was tampered with after the loader sized the ring from it.
    """


class ResumeStateError(LoaderError, ValueError):
    """A loader state dict does not fit this loader (other dataset, seed or global batch)."""


class WorkerTimeoutError(LoaderError, TimeoutError):
    """No batch came from a loader worker within `LoaderConfig.worker_timeout_s`.

    The message names the worker's pid, the epoch, step and shards it was making, and the fix.
    """
