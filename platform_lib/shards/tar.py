"""Tar members: deterministic writing, the one member parser, and member-name safety.

Writing: every header has mtime 0, uid/gid 0, empty uname/gname and mode 0o644, so the same
member bytes give the same tar bytes on any machine (Python's `tarfile`, PAX format).

Reading: `iter_tar_members` is the one tar walk of the code base (sequential scans, the
per-sample header check, validation). It parses ustar/PAX headers (POSIX.1-2001 pax
interchange format; GNU base-256 sizes) from a buffer without copying member data, or from
a stream. Offsets are byte offsets in the shard file.
"""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from platform_lib.shards.errors import ShardFormatError

__all__ = [
    "BLOCK_SIZE",
    "TarMember",
    "iter_tar_members",
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


_ZERO_BLOCK = bytes(BLOCK_SIZE)
_REGULAR = (b"0", b"\0", b"7")
_PAX = (b"x", b"g")


@dataclass(frozen=True, slots=True)
class TarMember:
    """One tar entry as found in a shard."""

    name: str
    """member name (`<key>.<ext>`), from the PAX `path` record when present"""
    kind: bytes
    """tar type flag: b"0" regular file, b"5" folder, b"2" symlink, ..."""
    header_offset: int
    """byte offset of the member's first header block (PAX extension included)"""
    data_offset: int
    """byte offset of the member's data"""
    size: int
    """data length, in bytes"""
    data: memoryview | bytes | None
    """the data (a view into the buffer when parsing a buffer), None when not read"""

    @property
    def is_regular(self) -> bool:
        """True for a regular file member."""
        return self.kind in _REGULAR


def _octal(field: bytes, *, shard: str | None, offset: int) -> int:
    if field[:1] and field[0] & 0x80:  # GNU base-256 (sizes >= 8 GiB)
        return int.from_bytes(field[1:], "big")
    try:
        return int(field.rstrip(b"\0 ").lstrip(b" ") or b"0", 8)
    except ValueError:
        raise ShardFormatError(
            f"corrupt tar header: numeric field {field!r} is not octal; "
            "rebuild or re-download the shard",
            shard=shard,
            offset=offset,
        ) from None


def _pax_path(records: bytes | memoryview) -> bytes | None:
    """Return the raw `path` value of a PAX extended header, if any."""
    buf, path, pos = bytes(records), None, 0
    while pos < len(buf) and buf[pos] != 0:
        space = buf.index(b" ", pos)
        length = int(buf[pos:space])
        key, _, value = buf[space + 1 : pos + length - 1].partition(b"=")
        if key == b"path":
            path = value
        pos += length
    return path


class _Buffer:
    """Sequential reads over a buffer, returning views (no copies)."""

    def __init__(self, data: bytes | memoryview) -> None:
        self._view, self._pos = memoryview(data).cast("B"), 0

    def read(self, size: int) -> memoryview:
        chunk = self._view[self._pos : self._pos + size]
        self._pos += len(chunk)
        return chunk

    def skip(self, size: int) -> int:
        return len(self.read(size))


class _Stream:
    """Sequential reads over a binary stream (no seeking needed)."""

    def __init__(self, fileobj: IO[bytes]) -> None:
        self._file = fileobj

    def read(self, size: int) -> bytes:
        parts, left = [], size
        while left > 0:
            chunk = self._file.read(left)
            if not chunk:
                break
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    def skip(self, size: int) -> int:
        return len(self.read(size))


def iter_tar_members(
    source: bytes | memoryview | IO[bytes],
    *,
    base_offset: int = 0,
    shard: str | None = None,
    read_data: bool = True,
) -> Iterator[TarMember]:
    """Yield the entries of a tar archive (or of a sample's byte range) in order.

    Args:
        source: a buffer holding whole tar entries (data are yielded as views into it, no
            copy) or a readable binary stream positioned at an entry's header.
        base_offset: shard byte offset of the source's first byte.
        shard: shard name for error messages.
        read_data: False skips member data (`TarMember.data` is None).

    Yields:
        `TarMember` per entry except PAX extension headers (their `path` names the next
        member). Stops at an all-zero block (end of archive) or at the end of the source.

    Raises:
        ShardFormatError: a header with a bad checksum or size field, a member name that is
            not UTF-8, or member data cut short (truncated shard: the offset is where the data
            ends); names shard, member and byte offset.
    """
    reader = (
        _Buffer(source) if isinstance(source, bytes | bytearray | memoryview) else _Stream(source)
    )
    pos, pax_name, pax_start = base_offset, None, None
    while True:
        header = reader.read(BLOCK_SIZE)
        if len(header) < BLOCK_SIZE or header == _ZERO_BLOCK:
            return
        header = bytes(header)
        stored = _octal(header[148:156], shard=shard, offset=pos)
        if stored != sum(header[:148]) + 256 + sum(header[156:]):
            raise ShardFormatError(
                "corrupt tar header (checksum mismatch); rebuild or re-download the shard",
                shard=shard,
                offset=pos,
            )
        size, kind = _octal(header[124:136], shard=shard, offset=pos), header[156:157]
        data_offset = pos + BLOCK_SIZE
        if kind in _PAX:
            records = reader.read(size)
            if len(records) < size:
                raise ShardFormatError(
                    f"tar data ends at byte {data_offset + len(records)} inside "
                    "a PAX header (truncated shard); rebuild or re-download it",
                    shard=shard,
                    offset=data_offset + len(records),
                )
            reader.skip(padded_size(size) - size)
            pax_name = _pax_path(records) or pax_name
            pax_start = pos if pax_start is None else pax_start
            pos = data_offset + padded_size(size)
            continue
        if pax_name is not None:
            raw = pax_name
        else:
            short, prefix = header[0:100].split(b"\0", 1)[0], header[345:500].split(b"\0", 1)[0]
            raw = prefix + b"/" + short if prefix else short
        try:
            name: str = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ShardFormatError(
                f"the tar member name {raw!r} is not valid UTF-8; rebuild the "
                "shard with `drivetrain data build` (keys are ASCII)",
                shard=shard,
                member=raw.decode("utf-8", "replace"),
                offset=data_offset,
            ) from None
        data = None
        if read_data:
            data = reader.read(size)
            got = len(data)
        else:
            got = reader.skip(size)
        if got < size:
            raise ShardFormatError(
                f"truncated shard: the data ends at byte {data_offset + got}, "
                f"inside this member's {size} bytes; rebuild or re-download it",
                shard=shard,
                member=name,
                offset=data_offset + got,
            )
        reader.skip(padded_size(size) - size)
        yield TarMember(
            name=name,
            kind=kind,
            header_offset=pax_start if pax_start is not None else pos,
            data_offset=data_offset,
            size=size,
            data=data,
        )
        pos, pax_name, pax_start = data_offset + padded_size(size), None, None
