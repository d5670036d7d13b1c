"""Read one sample's member bytes with a single ranged read, and check them against the index.

A sample is the byte range [sample_offset, sample_offset + sample_size) of its shard: one
`os.pread` on a local (or cached) shard. With `verify`, the tar headers inside that range are
parsed and must name `<key>.<member>` at the index's data offsets (UTF-8), and each member's
sha256 must match the index.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict

from platform_lib.loading.cache import ShardCache
from platform_lib.loading.errors import SampleIntegrityError, ShardReadError
from platform_lib.loading.source import DatasetView

__all__ = ["ShardReader", "parse_tar_members"]

_BLOCK = 512
_ZERO_BLOCK = bytes(_BLOCK)


def _padded(size: int) -> int:
    return -(-size // _BLOCK) * _BLOCK


def _pax_path(buf: bytes) -> bytes | None:
    """Return the raw `path` value of a PAX extended header block, if any."""
    path, pos = None, 0
    while pos < len(buf) and buf[pos] != 0:
        space = buf.index(b" ", pos)
        length = int(buf[pos:space])
        record = buf[space + 1 : pos + length - 1]
        key, _, value = record.partition(b"=")
        if key == b"path":
            path = value
        pos += length
    return path


def _octal(field: bytes, where: int) -> int:
    if field[:1] and field[0] & 0x80:  # GNU base-256 for sizes >= 8 GiB
        return int.from_bytes(field[1:], "big")
    try:
        return int(field.rstrip(b"\0 ").lstrip(b" ") or b"0", 8)
    except ValueError as exc:
        raise ShardReadError(f"bad tar header at byte offset {where}: size field {field!r}") from exc


def parse_tar_members(data: bytes, base_offset: int) -> list[tuple[bytes, int, int]]:
    """Return (raw name, absolute data offset, size) of each regular member in `data`.

    A minimal ustar/PAX header walk (checksum, size, type, name, prefix, PAX `path`), about
    10x faster than `tarfile.TarInfo.frombuf` per member.

    Args:
        data: bytes of whole tar entries (headers + padded data), as a sample range is.
        base_offset: absolute shard offset of data[0], in bytes.

    Raises:
        ShardReadError: a header has a bad checksum or size (message gives the byte offset).
    """
    members, pos, pax_name = [], 0, None
    while pos + _BLOCK <= len(data):
        header = data[pos : pos + _BLOCK]
        where = base_offset + pos
        if header == _ZERO_BLOCK:
            break
        stored = _octal(header[148:156], where)
        if stored != sum(header[:148]) + 256 + sum(header[156:]):
            raise ShardReadError(f"bad tar header at byte offset {where}: checksum mismatch")
        size, kind = _octal(header[124:136], where), header[156:157]
        start = pos + _BLOCK
        if kind in (b"x", b"g"):
            pax_name = _pax_path(data[start : start + size]) or pax_name
        elif kind in (b"0", b"\0", b"7"):
            name = header[0:100].split(b"\0", 1)[0]
            prefix = header[345:500].split(b"\0", 1)[0]
            raw = pax_name if pax_name is not None else (prefix + b"/" + name if prefix else name)
            members.append((raw, base_offset + start, size))
            pax_name = None
        pos = start + _padded(size)
    return members


class ShardReader:
    """Reads samples of one `DatasetView`, keeping a few shard files open (per process)."""

    def __init__(self, view: DatasetView, *, cache: ShardCache | None, verify: bool, max_open: int = 8) -> None:
        self.view, self.cache, self.verify, self.max_open = view, cache, verify, max_open
        self._fds: OrderedDict[int, int] = OrderedDict()
        self._failed: dict[int, ShardReadError] = {}  # shards that cannot be opened: no retry per sample

    def close(self) -> None:
        """Close every open shard file."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def is_open(self, shard: int) -> bool:
        """Return True when the shard's file is open in this process."""
        return shard in self._fds

    def _where(self, shard: int) -> str:
        return f"{self.view.url}/{self.view.shard_paths[shard]}"

    def _fd(self, shard: int) -> int:
        if shard in self._fds:
            self._fds.move_to_end(shard)
            return self._fds[shard]
        if shard in self._failed:
            raise self._failed[shard]
        path = self.view.shard_paths[shard]
        try:
            if self.cache is not None:
                fd = self.cache.open(path, int(self.view.shard_bytes[shard]))
            else:
                try:
                    fd = os.open(self.view.shard_files[shard], os.O_RDONLY)
                except FileNotFoundError as exc:
                    raise ShardReadError(f"shard {self._where(shard)} is missing; rebuild the dataset") from exc
        except ShardReadError as exc:
            self._failed[shard] = exc
            raise
        self._fds[shard] = fd
        if len(self._fds) > self.max_open:
            os.close(self._fds.popitem(last=False)[1])
        return fd

    def read_members(self, row: int) -> dict[str, bytes]:
        """Return {member name (e.g. "lidar.npy"): bytes} of index row `row`.

        Raises:
            ShardReadError: the shard is missing or truncated, or a tar header does not match
                the index (name, offset, non-UTF-8 name); the message names shard, member, offset.
            SampleIntegrityError: a member's sha256 differs from the index (verify only).
        """
        v = self.view
        shard, key = int(v.shard_id[row]), v.key[row]
        lo, size = int(v.sample_offset[row]), int(v.sample_size[row])
        fd = self._fd(shard)
        data = os.pread(fd, size, lo)
        m0, m1 = int(v.member_start[row]), int(v.member_start[row + 1])
        if len(data) < size:
            end = lo + len(data)
            cut = next((m for m in range(m0, m1) if v.member_offset[m] + v.member_size[m] > end), m0)
            raise ShardReadError(
                f"shard {self._where(shard)} is truncated: it ends at byte {end}, but member "
                f"{key}.{v.member_name[cut]} spans bytes [{v.member_offset[cut]}, "
                f"{v.member_offset[cut] + v.member_size[cut]}); rebuild or re-download the shard"
            )
        if self.verify:
            self._check_headers(data, row, shard)
        members = {}
        for m in range(m0, m1):
            start = int(v.member_offset[m]) - lo
            blob = data[start : start + int(v.member_size[m])]
            if self.verify and hashlib.sha256(blob).hexdigest() != v.member_sha256[m]:
                raise SampleIntegrityError(
                    f"shard {self._where(shard)} member {key}.{v.member_name[m]} at byte offset "
                    f"{v.member_offset[m]} ({v.member_size[m]} bytes): sha256 differs from the index "
                    "(tampered or corrupted); rebuild the shard or use error_policy='skip'"
                )
            members[v.member_name[m]] = blob
        return members

    def _check_headers(self, data: bytes, row: int, shard: int) -> None:
        v, lo = self.view, int(self.view.sample_offset[row])
        try:
            found = {offset: (raw, size) for raw, offset, size in parse_tar_members(data, lo)}
        except ShardReadError as exc:
            raise ShardReadError(f"shard {self._where(shard)}, sample {v.key[row]}: {exc}") from exc
        for m in range(int(v.member_start[row]), int(v.member_start[row + 1])):
            offset, expected = int(v.member_offset[m]), f"{v.key[row]}.{v.member_name[m]}"
            raw, size = found.get(offset, (None, None))
            where = f"shard {self._where(shard)} member {expected} at byte offset {offset}"
            if raw is None:
                raise ShardReadError(f"{where}: no tar member starts there; the index does not match the shard")
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ShardReadError(
                    f"{where}: the tar member name {raw!r} is not valid UTF-8; rebuild the shard "
                    "with `drivetrain data build` (keys are ASCII)"
                ) from exc
            if name != expected or size != int(v.member_size[m]):
                raise ShardReadError(
                    f"{where}: the tar header says {name!r} ({size} bytes), the index "
                    f"{expected!r} ({v.member_size[m]} bytes); rebuild the index"
                )
