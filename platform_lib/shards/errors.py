"""Exceptions of the shard layer.

Each message says what, where (folder, shard, member, byte offset, sample key) and what to do.
"""

from __future__ import annotations

__all__ = ["BuildError", "DatasetError", "ManifestMissingError", "ShardFormatError"]


class DatasetError(Exception):
    """A dataset folder, shard or index does not satisfy docs/format.md."""


class ManifestMissingError(DatasetError, FileNotFoundError):
    """The folder holds no manifest.json: it is not (or not yet) a complete dataset."""


class ShardFormatError(DatasetError):
    """A shard is malformed (unsafe member name, truncated, tampered).

    Attributes:
        shard: shard path as given to the reader.
        member: offending tar member name, or None.
        offset: byte offset in the shard (tar header or data), or None.
    """

    def __init__(self, message: str, *, shard: str, member: str | None = None,
                 offset: int | None = None) -> None:
        where = f"shard {shard}"
        if member is not None:
            where += f", member {member!r}"
        if offset is not None:
            where += f", byte offset {offset}"
        super().__init__(f"{where}: {message}")
        self.shard = shard
        self.member = member
        self.offset = offset


class BuildError(DatasetError):
    """A build was refused or failed; `report` holds per-reason counts of bad frames.

    Attributes:
        report: reason -> {"count": int, "examples": [str, ...]} (empty for non-frame errors).
    """

    def __init__(self, message: str, *, report: dict | None = None) -> None:
        super().__init__(message)
        self.report = report or {}
