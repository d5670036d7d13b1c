"""Deterministic POSIX tar members (WebDataset convention) and member-name safety.

Every header has mtime 0, uid/gid 0, empty uname/gname and mode 0o644, so the same member
bytes give the same tar bytes on any machine. Offsets are byte offsets in the shard file.
"""

from __future__ import annotations

import io
import re
import tarfile

__all__ = [
    "BLOCK_SIZE",
    "END_OF_ARCHIVE_SIZE",
    "TAR_FORMAT",
    "check_member_name",
    "make_tarinfo",
    "padded_size",
    "split_member_name",
    "write_member",
]

#: Tar block size, in bytes; headers and data start on block boundaries.
BLOCK_SIZE = 512
#: Python's tarfile pads a closed archive to a multiple of this record size, in bytes.
END_OF_ARCHIVE_SIZE = 2 * BLOCK_SIZE
TAR_FORMAT = tarfile.PAX_FORMAT

_EXT_PATTERN = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)*$")
_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_-]+$")


def padded_size(size: int) -> int:
    """Return `size` rounded up to whole 512-byte tar blocks."""
    return -(-size // BLOCK_SIZE) * BLOCK_SIZE


def make_tarinfo(name: str, size: int) -> tarfile.TarInfo:
    """Return a deterministic regular-file header for member `name` of `size` bytes."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


def write_member(tar: tarfile.TarFile, name: str, data: bytes) -> tuple[int, int]:
    """Append member `name` holding `data`; return (header offset, data offset) in bytes."""
    header_offset = tar.offset
    tar.addfile(make_tarinfo(name, len(data)), io.BytesIO(data))
    data_offset = tar.offset - padded_size(len(data))
    return header_offset, data_offset


def check_member_name(name: str) -> str | None:
    """Return why tar member `name` is unsafe or not `<key>.<ext>`, or None when it is fine.

    Refused: absolute paths, `..` components, any path separator, empty key or ext, and
    characters outside [A-Za-z0-9_-] (key) / [a-z0-9_.] (ext).
    """
    if not name:
        return "empty member name"
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "absolute member name (would escape the dataset folder)"
    parts = re.split(r"[/\\]", name)
    if ".." in parts:
        return "member name contains '..' (would escape the dataset folder)"
    if len(parts) > 1:
        return "member name contains a path separator; shards hold flat `<key>.<ext>` members"
    key, dot, ext = name.partition(".")
    if not dot or not _KEY_PATTERN.match(key) or not _EXT_PATTERN.match(ext):
        return "member name is not `<key>.<ext>` with key [A-Za-z0-9_-]+ and ext [a-z0-9_.]+"
    return None


def split_member_name(name: str) -> tuple[str, str]:
    """Split `<key>.<ext>` at the first dot (WebDataset convention) into (key, ext)."""
    key, _, ext = name.partition(".")
    return key, ext
