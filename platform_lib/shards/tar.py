"""Tar members: deterministic writing, the one member walk, and member-name safety.

Written headers have mtime 0, uid/gid 0, empty uname/gname and mode 0o644, so the same member
bytes give the same tar bytes anywhere (`tarfile`, PAX format). `iter_tar_members`, the one
tar walk of the code base, parses headers with `tarfile` and keeps byte offsets in the shard
file, so members are read by byte range from a buffer without copying, or from a stream.
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


def write_member(tar: tarfile.TarFile, name: str, data: bytes) -> int:
    """Append member `name` holding `data`; return the byte offset of its data."""
    tar.addfile(make_tarinfo(name, len(data)), io.BytesIO(data))
    return tar.offset - padded_size(len(data))


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
#: PAX (`x`, `g`) and GNU long-name (`L`, `K`) headers: records that describe the next header.
_EXTENSIONS = (b"x", b"g", b"L", b"K")
#: Most bytes of extension records in front of one member (a PAX path is a few hundred bytes).
_MAX_EXTENSION_BYTES = 1 << 20
#: Stream reads are at most this long, in bytes (a forged size allocates nothing up front).
_READ_CHUNK = 1 << 20
#: Header field parsing: member names are UTF-8; undecodable bytes are kept to be reported.
_ENCODING, _ERRORS = "utf-8", "surrogateescape"


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
    """Sequential reads over a binary stream (no seeking needed), in bounded chunks."""

    def __init__(self, fileobj: IO[bytes]) -> None:
        self._file = fileobj

    def _chunks(self, size: int) -> Iterator[bytes]:
        left = size
        while left > 0:
            chunk = self._file.read(min(left, _READ_CHUNK))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk

    def read(self, size: int) -> bytes:
        return b"".join(self._chunks(size))

    def skip(self, size: int) -> int:
        return sum(len(chunk) for chunk in self._chunks(size))


def _corrupt(why: object, *, shard: str | None, offset: int) -> ShardFormatError:
    return ShardFormatError(
        f"corrupt tar header ({why}); rebuild or re-download the shard", shard=shard, offset=offset
    )


def _truncated(
    end: int, inside: str, *, shard: str | None, member: str | None = None
) -> ShardFormatError:
    return ShardFormatError(
        f"truncated shard: the data ends at byte {end}, inside {inside}; rebuild or re-download it",
        shard=shard,
        member=member,
        offset=end,
    )


def _parse_header(block: bytes, *, shard: str | None, offset: int) -> tarfile.TarInfo:
    """Parse one 512-byte header block with `tarfile` (checksum, octal / base-256 numbers)."""
    try:
        info = tarfile.TarInfo.frombuf(block, _ENCODING, _ERRORS)
    except tarfile.HeaderError as exc:
        raise _corrupt(exc, shard=shard, offset=offset) from None
    if info.size < 0:
        raise _corrupt(f"negative size {info.size}", shard=shard, offset=offset)
    return info


def _parse_extended(blocks: bytes, *, shard: str | None, offset: int) -> tarfile.TarInfo:
    """Parse extension headers, their records and the header they describe with `tarfile`.

    `blocks` runs from the first extension header to the end of the described header; the
    returned `offset_data` is relative to its start.
    """
    try:
        with tarfile.open(
            fileobj=io.BytesIO(blocks), mode="r:", encoding=_ENCODING, errors=_ERRORS
        ) as tar:
            info = tar.next()
    except (tarfile.TarError, ValueError, EOFError) as exc:
        raise _corrupt(f"extension header: {exc}", shard=shard, offset=offset) from None
    if info is None or info.offset_data != len(blocks) or info.size < 0:
        raise _corrupt(
            "extension header does not describe the next member", shard=shard, offset=offset
        )
    return info


def iter_tar_members(
    source: bytes | memoryview | IO[bytes],
    *,
    base_offset: int = 0,
    shard: str | None = None,
    read_data: bool = True,
) -> Iterator[TarMember]:
    """Yield the entries of a tar archive (or of a sample's byte range) in order.

    Headers are parsed by `tarfile` (`TarInfo.frombuf`; PAX and GNU long-name extensions with
    `tarfile.open` over the few header blocks only); member data are never copied from a buffer.

    Args:
        source: a buffer holding whole tar entries (data are yielded as views into it, no
            copy) or a readable binary stream positioned at an entry's header.
        base_offset: shard byte offset of the source's first byte.
        shard: shard name for error messages.
        read_data: False skips member data (`TarMember.data` is None).

    Yields:
        `TarMember` per entry except extension headers (their `path` names the next member).
        Stops at an all-zero block (end of archive) or at the end of the source.

    Raises:
        ShardFormatError: a header with a bad checksum, number field or extension record, a
            negative size, a member name that is not UTF-8, or a header or member data cut
            short (truncated shard: the offset is where the data ends); names shard, member
            and byte offset.
    """
    reader = (
        _Buffer(source) if isinstance(source, bytes | bytearray | memoryview) else _Stream(source)
    )
    pos = base_offset
    while True:
        header = bytes(reader.read(BLOCK_SIZE))
        if not header or header == _ZERO_BLOCK:
            return
        if len(header) < BLOCK_SIZE:
            raise _truncated(pos + len(header), "a tar header", shard=shard)
        info, start, blocks = _parse_header(header, shard=shard, offset=pos), pos, [header]
        while info.type in _EXTENSIONS:  # gather records + the described header for tarfile
            size = info.size
            records = reader.read(padded_size(size)) if size <= _MAX_EXTENSION_BYTES else b""
            end = pos + BLOCK_SIZE + len(records)
            if size > _MAX_EXTENSION_BYTES or len(records) < padded_size(size):
                why = "too long" if size > _MAX_EXTENSION_BYTES else "truncated shard"
                raise ShardFormatError(
                    f"tar extension header of {size} bytes ({why}): the data ends at byte "
                    f"{end}; rebuild or re-download the shard",
                    shard=shard,
                    offset=end,
                )
            pos, following = end, bytes(reader.read(BLOCK_SIZE))
            if len(following) < BLOCK_SIZE:
                raise _truncated(pos + len(following), "a tar header", shard=shard)
            if following == _ZERO_BLOCK:
                raise _corrupt("extension header without a member", shard=shard, offset=pos)
            blocks += [bytes(records), following]
            if sum(map(len, blocks)) > 2 * _MAX_EXTENSION_BYTES:
                raise _corrupt("too many extension headers", shard=shard, offset=start)
            info = _parse_header(following, shard=shard, offset=pos)
            if info.type not in _EXTENSIONS:
                info = _parse_extended(b"".join(blocks), shard=shard, offset=start)
        data_offset, size, name = pos + BLOCK_SIZE, info.size, info.name
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raw = name.encode("utf-8", "surrogateescape")
            raise ShardFormatError(
                f"the tar member name {raw!r} is not valid UTF-8; rebuild the "
                "shard with `drivetrain data build` (keys are ASCII)",
                shard=shard,
                member=raw.decode("utf-8", "replace"),
                offset=data_offset,
            ) from None
        data = reader.read(size) if read_data else None
        got = len(data) if data is not None else reader.skip(size)
        if got < size:
            end = data_offset + got
            raise _truncated(end, f"this member's {size} bytes", shard=shard, member=name)
        padding = padded_size(size) - size
        skipped = reader.skip(padding)
        if skipped < padding:  # a member is always padded to a whole block
            end = data_offset + size + skipped
            inside = f"the padding after this member's {size} bytes"
            raise _truncated(end, inside, shard=shard, member=name)
        yield TarMember(name, info.type, start, data_offset, size, data)
        pos = data_offset + padded_size(size)
