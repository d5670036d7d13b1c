"""Streaming loader over Drivetrain shards: exact epochs, elastic resume, cache tier, mixing."""

from typing import TYPE_CHECKING

from platform_lib.lazy import lazy_exports

# Submodules are imported on first use (PEP 562), so that importing a light submodule
# such as the CLI's commands does not pull in the heavy dependencies of the others.
_EXPORTS = {
    "LoaderConfig": "platform_lib.loading.config",
    "CacheFullError": "platform_lib.loading.errors",
    "DatasetError": "platform_lib.loading.errors",
    "DatasetIndexError": "platform_lib.loading.errors",
    "LoaderError": "platform_lib.loading.errors",
    "ManifestError": "platform_lib.loading.errors",
    "ManifestMissingError": "platform_lib.loading.errors",
    "ObjectStoreUnreachableError": "platform_lib.loading.errors",
    "ResumeStateError": "platform_lib.loading.errors",
    "RingError": "platform_lib.loading.errors",
    "SampleDecodeError": "platform_lib.loading.errors",
    "SampleIntegrityError": "platform_lib.loading.errors",
    "ShardFormatError": "platform_lib.loading.errors",
    "InputWaitMeter": "platform_lib.loading.input_wait",
    "LoaderStats": "platform_lib.loading.loader",
    "StreamingLoader": "platform_lib.loading.loader",
    "build_loader": "platform_lib.loading.loader",
}


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:  # the same names, imported explicitly for type checkers and IDEs
    from platform_lib.loading.config import LoaderConfig
    from platform_lib.loading.errors import (
        CacheFullError,
        DatasetError,
        DatasetIndexError,
        LoaderError,
        ManifestError,
        ManifestMissingError,
        ObjectStoreUnreachableError,
        ResumeStateError,
        RingError,
        SampleDecodeError,
        SampleIntegrityError,
        ShardFormatError,
    )
    from platform_lib.loading.input_wait import InputWaitMeter
    from platform_lib.loading.loader import (
        LoaderStats,
        StreamingLoader,
        build_loader,
    )


__all__ = [
    "CacheFullError",
    "DatasetError",
    "DatasetIndexError",
    "InputWaitMeter",
    "LoaderConfig",
    "LoaderError",
    "LoaderStats",
    "ManifestError",
    "ManifestMissingError",
    "ObjectStoreUnreachableError",
    "ResumeStateError",
    "RingError",
    "SampleDecodeError",
    "SampleIntegrityError",
    "ShardFormatError",
    "StreamingLoader",
    "build_loader",
]
