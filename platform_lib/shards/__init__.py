"""Shard writer/reader pair over one index: frames -> tar shards + index.parquet + manifest.json.

See README.md in this folder and docs/format.md for the on-disk contract.
"""

from typing import TYPE_CHECKING

from platform_lib.lazy import lazy_exports

# Submodules are imported on first use (PEP 562), so that importing a light submodule
# such as the CLI's commands does not pull in the heavy dependencies of the others.
_EXPORTS = {
    "BuildConfig": "platform_lib.shards.build",
    "build_dataset": "platform_lib.shards.build",
    "write_dataset": "platform_lib.shards.build",
    "check_frame": "platform_lib.shards.codec",
    "decode_sample": "platform_lib.shards.codec",
    "encode_frame": "platform_lib.shards.codec",
    "BuildError": "platform_lib.shards.errors",
    "DatasetError": "platform_lib.shards.errors",
    "DatasetIndexError": "platform_lib.shards.errors",
    "ManifestError": "platform_lib.shards.errors",
    "ManifestMissingError": "platform_lib.shards.errors",
    "SampleDecodeError": "platform_lib.shards.errors",
    "SampleIntegrityError": "platform_lib.shards.errors",
    "ShardFormatError": "platform_lib.shards.errors",
    "Manifest": "platform_lib.shards.manifest",
    "compute_dataset_hash": "platform_lib.shards.manifest",
    "load_manifest": "platform_lib.shards.manifest",
    "DatasetView": "platform_lib.shards.view",
    "load_view": "platform_lib.shards.view",
    "DatasetReader": "platform_lib.shards.reader",
    "iter_tar_samples": "platform_lib.shards.reader",
    "open_dataset": "platform_lib.shards.reader",
    "ValidationReport": "platform_lib.shards.validate",
    "validate_dataset": "platform_lib.shards.validate",
}


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:  # the same names, imported explicitly for type checkers and IDEs
    from platform_lib.shards.build import (
        BuildConfig,
        build_dataset,
        write_dataset,
    )
    from platform_lib.shards.codec import (
        check_frame,
        decode_sample,
        encode_frame,
    )
    from platform_lib.shards.errors import (
        BuildError,
        DatasetError,
        DatasetIndexError,
        ManifestError,
        ManifestMissingError,
        SampleDecodeError,
        SampleIntegrityError,
        ShardFormatError,
    )
    from platform_lib.shards.manifest import (
        Manifest,
        compute_dataset_hash,
        load_manifest,
    )
    from platform_lib.shards.reader import (
        DatasetReader,
        iter_tar_samples,
        open_dataset,
    )
    from platform_lib.shards.validate import (
        ValidationReport,
        validate_dataset,
    )
    from platform_lib.shards.view import (
        DatasetView,
        load_view,
    )


__all__ = [
    "BuildConfig",
    "BuildError",
    "DatasetError",
    "DatasetIndexError",
    "DatasetReader",
    "DatasetView",
    "Manifest",
    "ManifestError",
    "ManifestMissingError",
    "SampleDecodeError",
    "SampleIntegrityError",
    "ShardFormatError",
    "ValidationReport",
    "build_dataset",
    "check_frame",
    "compute_dataset_hash",
    "decode_sample",
    "encode_frame",
    "iter_tar_samples",
    "load_manifest",
    "load_view",
    "open_dataset",
    "validate_dataset",
    "write_dataset",
]
