"""The one error hierarchy of dataset reading and building: everything under `DatasetError`.

Each message says what, where and what to do; `DatasetError` has the rules.

    DatasetError
    ├── ManifestMissingError   no manifest.json (unfinished build, wrong path); also FileNotFoundError
    ├── ManifestError          manifest.json unreadable or off-contract (incl. unsafe shard paths)
    ├── DatasetIndexError      index.parquet unreadable, off-schema or inconsistent with the manifest
    ├── ShardFormatError       shard bytes off-contract: missing, truncated, bad tar header
    │   └── SampleIntegrityError   member bytes differ from the index checksum (xxh3_64 / sha256)
    ├── SampleDecodeError      member bytes that pass the checks but do not decode
    └── BuildError             a build refused or failed (per-reason report of bad frames)
"""

from __future__ import annotations

__all__ = [
    "BuildError",
    "DatasetError",
    "DatasetIndexError",
    "ManifestError",
    "ManifestMissingError",
    "SampleDecodeError",
    "SampleIntegrityError",
    "ShardFormatError",
]


class DatasetError(Exception):
    """A dataset folder, manifest, index or shard does not satisfy docs/format.md.

    Each message says what, where (folder, shard, member, byte offset, sample key) and what to
    do. Every subclass can be rebuilt from its message alone (`cls(message)`), which is how
    `torch.utils.data` re-raises a worker's exception in the main process.
    """


class ManifestMissingError(DatasetError, FileNotFoundError):
    """The folder holds no manifest.json: it is not (or not yet) a complete dataset."""


class ManifestError(DatasetError):
    """manifest.json is not valid JSON, misses or mistypes a field, or lists an unsafe shard path."""


class DatasetIndexError(DatasetError):
    """index.parquet is unreadable, off-schema, or a row disagrees with the manifest."""


class ShardFormatError(DatasetError):
    """A shard's bytes are off-contract (missing file, truncated, tampered tar header).

    Attributes:
        shard: shard path (relative to the dataset root, or a URL), or None when rebuilt from
            a message only.
        member: offending tar member name (`<key>.<ext>`), or None.
        offset: byte offset in the shard (tar header, member data, or where the data ends), or None.
        reason: the message without the location prefix.
    """

    def __init__(
        self,
        message: str,
        *,
        shard: str | None = None,
        member: str | None = None,
        offset: int | None = None,
    ) -> None:
        where = []
        if shard is not None:
            where.append(f"shard {shard}")
        if member is not None:
            where.append(f"member {member!r}")
        if offset is not None:
            where.append(f"byte offset {offset}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.reason = message
        self.shard = shard
        self.member = member
        self.offset = offset


class SampleIntegrityError(ShardFormatError):
    """A member's bytes differ from the checksum recorded in the index (bit rot or tampering)."""


class SampleDecodeError(DatasetError):
    """A member's bytes could not be decoded (corrupt JPEG, bad .npy header, bad JSON)."""


class BuildError(DatasetError):
    """A build was refused or failed; `report` holds per-reason counts of bad frames.

    Attributes:
        report: reason -> {"count": int, "examples": [str, ...]} (empty for non-frame errors).
    """

    def __init__(self, message: str, *, report: dict | None = None) -> None:
        super().__init__(message)
        self.report = report or {}
