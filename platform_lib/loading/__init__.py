"""Streaming loader over Drivetrain shards: exact epochs, elastic resume, cache tier, mixing."""

from platform_lib.lazy import lazy_exports

# Submodules are imported on first use (PEP 562), so that importing a light submodule
# such as the CLI's commands does not pull in the heavy dependencies of the others.
_EXPORTS = {
    "LoaderConfig": "platform_lib.loading.config",
    "CacheFullError": "platform_lib.loading.errors",
    "DatasetIndexError": "platform_lib.loading.errors",
    "DatasetNotFoundError": "platform_lib.loading.errors",
    "LoaderError": "platform_lib.loading.errors",
    "ObjectStoreUnreachableError": "platform_lib.loading.errors",
    "ResumeStateError": "platform_lib.loading.errors",
    "SampleDecodeError": "platform_lib.loading.errors",
    "SampleIntegrityError": "platform_lib.loading.errors",
    "ShardReadError": "platform_lib.loading.errors",
    "InputWaitMeter": "platform_lib.loading.input_wait",
    "LoaderStats": "platform_lib.loading.loader",
    "StreamingLoader": "platform_lib.loading.loader",
    "build_loader": "platform_lib.loading.loader",
}


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)


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
