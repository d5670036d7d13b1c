"""ShardWriter: appends samples to size-capped tar shards and records where every byte went.

Shards are written as `shards/shard-NNNNNN.tar.tmp-<pid>`, hashed while written (no re-read),
fsynced, and renamed to `shard-NNNNNN.tar` when closed. A shard is closed when adding the next
sample would push it past the target size; a sample is never split across shards.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from platform_lib.shards.tar import (
    BLOCK_SIZE,
    END_OF_ARCHIVE_SIZE,
    TAR_FORMAT,
    check_member_name,
    make_tarinfo,
    padded_size,
    write_member,
)

__all__ = [
    "SampleLocation",
    "ShardInfo",
    "ShardWriter",
    "fsync_dir",
    "sample_content_hash",
    "write_file_atomic",
]

_COPY_BUFSIZE = 8 << 20
_USTAR_NAME_MAX = 100  # bytes of the ustar name field
_USTAR_SIZE_MAX = 8**11  # octal size field limit, in bytes


@dataclass(kw_only=True, frozen=True)
class SampleLocation:
    """Where one sample landed."""

    shard: str
    """shard path relative to the dataset root, e.g. shards/shard-000000.tar"""
    shard_id: int
    """position of the shard in manifest["shards"]"""
    sample_offset: int
    """byte offset of the first tar header of the sample"""
    sample_size: int
    """bytes from sample_offset to the end of the last member's padded data"""
    members: list[dict[str, Any]]
    """[{name, offset (data start, bytes), size (bytes), sha256 (hex), xxh3_64}] in tar order"""
    content_hash: str
    """sha256 hex over `name\\0sha256\\n` of the members in order"""

    def as_row(self) -> dict[str, Any]:
        """Return the index columns of this location (shallow; members list shared)."""
        return {
            "shard": self.shard,
            "shard_id": self.shard_id,
            "sample_offset": self.sample_offset,
            "sample_size": self.sample_size,
            "members": self.members,
            "content_hash": self.content_hash,
        }


@dataclass(kw_only=True, frozen=True)
class ShardInfo:
    """A closed, published shard (one manifest["shards"] entry)."""

    path: str
    """shard path relative to the dataset root"""
    sha256: str
    """hex digest of the whole shard file"""
    bytes: int
    """shard file size, in bytes"""
    num_samples: int
    """samples in the shard"""


class _HashingFile:
    """Write-only file wrapper that hashes bytes as they pass through."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "xb")  # noqa: SIM115 - closed in close()
        self._hash = hashlib.sha256()
        self._position = 0

    def write(self, data: bytes) -> int:
        self._hash.update(data)
        written = self._file.write(data)
        self._position += written
        return written

    def tell(self) -> int:
        return self._position

    def close(self) -> tuple[str, int]:
        """Flush, fsync and close; return (sha256 hex, size in bytes)."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        return self._hash.hexdigest(), self._position


def sample_content_hash(members: list[dict[str, Any]]) -> str:
    r"""Return a sample's content hash: sha256 hex over `name\0sha256\n` of its members in order."""
    return hashlib.sha256(
        "".join(f"{m['name']}\0{m['sha256']}\n" for m in members).encode()
    ).hexdigest()


def write_file_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a temporary name + fsync + rename (no half file is seen)."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with open(tmp, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def fsync_dir(path: Path) -> None:
    """Fsync a directory so renames inside it survive a power cut (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _encoded_size(key: str, members: list[tuple[str, bytes]]) -> int:
    """Bytes the sample will occupy in a shard (headers incl. PAX extensions + padded data)."""
    total = 0
    for name, data in members:
        full = f"{key}.{name}"
        if full.isascii() and len(full) < _USTAR_NAME_MAX and len(data) < _USTAR_SIZE_MAX:
            header_size = BLOCK_SIZE  # fits a plain ustar header: no PAX extension block
        else:
            header_size = len(
                # typeshed types `format` as Literal[0, 1, 2]; TAR_FORMAT is tarfile's int constant
                make_tarinfo(full, len(data)).tobuf(TAR_FORMAT, "utf-8", "surrogateescape")  # type: ignore[arg-type]
            )
        total += header_size + padded_size(len(data))
    return total


class ShardWriter:
    """Write samples into `<root>/shards/shard-NNNNNN.tar`, rolling at `target_bytes`.

    Use as a context manager or call `close()`; on an exception inside `with`, the open
    temporary shard is removed (closed shards stay; the caller discards the staging folder).
    """

    def __init__(self, root: Path, *, target_bytes: int) -> None:
        if target_bytes <= 0:
            raise ValueError(f"target_bytes must be > 0, got {target_bytes}")
        self.root = Path(root)
        self.target_bytes = target_bytes
        (self.root / "shards").mkdir(parents=True, exist_ok=True)
        self.shards: list[ShardInfo] = []
        self._file: _HashingFile | None = None
        self._tar: tarfile.TarFile | None = None
        self._tmp_path: Path | None = None
        self._num_samples = 0

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    @property
    def _shard_rel(self) -> str:
        return f"shards/shard-{len(self.shards):06d}.tar"

    def _open(self) -> None:
        self._tmp_path = self.root / f"{self._shard_rel}.tmp-{os.getpid()}"
        self._file = _HashingFile(self._tmp_path)
        self._tar = tarfile.open(fileobj=self._file, mode="w", format=TAR_FORMAT)  # type: ignore[call-overload]  # noqa: SIM115  # _HashingFile is a file object
        self._tar.copybufsize = _COPY_BUFSIZE  # type: ignore[union-attr]  # TarFile attribute without a stub  # few large writes instead of 16 KiB chunks
        self._num_samples = 0

    def _close_shard(self) -> None:
        assert self._tar is not None and self._file is not None and self._tmp_path is not None
        self._tar.close()  # writes the end-of-archive blocks and record padding
        sha256, size = self._file.close()
        final = self.root / self._shard_rel
        os.replace(self._tmp_path, final)
        self.shards.append(
            ShardInfo(
                path=self._shard_rel, sha256=sha256, bytes=size, num_samples=self._num_samples
            )
        )
        self._tar = self._file = self._tmp_path = None

    def add(self, key: str, members: list[tuple[str, bytes]]) -> SampleLocation:
        """Append sample `key` with its ordered (ext, bytes) members; return its location.

        Raises:
            ValueError: a member name `<key>.<ext>` is unsafe or malformed.
        """
        for name, _ in members:
            problem = check_member_name(f"{key}.{name}")
            if problem:
                raise ValueError(f"sample {key}: member {key}.{name}: {problem}")
        size = _encoded_size(key, members)
        if (
            self._tar is not None
            and self._num_samples > 0
            and self._tar.offset + size + END_OF_ARCHIVE_SIZE > self.target_bytes
        ):
            self._close_shard()
        if self._tar is None:
            self._open()
        assert self._tar is not None
        sample_offset = self._tar.offset
        records = []
        for name, data in members:
            records.append(
                {
                    "name": name,
                    "offset": write_member(self._tar, f"{key}.{name}", data),
                    "size": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "xxh3_64": xxhash.xxh3_64_intdigest(data),
                }
            )
        self._num_samples += 1
        return SampleLocation(
            shard=self._shard_rel,
            shard_id=len(self.shards),
            sample_offset=sample_offset,
            sample_size=self._tar.offset - sample_offset,
            members=records,
            content_hash=sample_content_hash(records),
        )

    def close(self) -> list[ShardInfo]:
        """Close and publish the open shard; return every shard written, in order."""
        if self._tar is not None:
            self._close_shard()
        return list(self.shards)

    def abort(self) -> None:
        """Drop the open temporary shard (after a failure)."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
        if self._tmp_path is not None:
            self._tmp_path.unlink(missing_ok=True)
        self._tar = self._file = self._tmp_path = None
