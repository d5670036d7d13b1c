"""Read one sample's byte range and verify it: the one sample verifier of the code base.

A sample is the byte range [sample_offset, sample_offset + sample_size) of its shard: one
`preadv` straight into a caller's buffer (e.g. a slot of the loader's shared-memory ring).
Checks, by strength:
    "sha256"  tar headers at the index offsets name `<key>.<member>` with the index size, and
              each member's sha256 matches the index (what `verify="member"` does per read)
    "xxh3"    each member's xxh3_64 matches the index (XXH3 64-bit, seed 0; the per-read check
              of `verify="shard"` once the whole shard's sha256 was checked on the node); a
              dataset built without xxh3 gets no per-read check here
    "none"    nothing (a truncated shard is still reported)
Errors name shard, member (`<key>.<ext>`) and byte offset.
"""

from __future__ import annotations

import hashlib
import os
from typing import Literal

import xxhash

from platform_lib.shards.errors import SampleIntegrityError, ShardFormatError
from platform_lib.shards.tar import iter_tar_members
from platform_lib.shards.view import DatasetView

__all__ = ["Check", "hash_shard", "read_sample_into", "verify_sample"]

Check = Literal["sha256", "xxh3", "none"]
_CHUNK = 8 << 20


def _truncated(view: DatasetView, i: int, end: int, shard: str) -> ShardFormatError:
    members = view.members_of(i)
    cut = next(
        (m for m in members if view.member_offset[m] + view.member_size[m] > end), members[0]
    )
    key, lo = view.key(i), int(view.member_offset[cut])
    return ShardFormatError(
        f"truncated shard: the data ends at byte {end}, inside sample {key} (member bytes "
        f"[{lo}, {lo + int(view.member_size[cut])})); rebuild or re-download the shard",
        shard=shard,
        member=f"{key}.{view.member_name(cut)}",
        offset=end,
    )


def read_sample_into(
    fd: int, view: DatasetView, i: int, out: memoryview, *, shard: str
) -> memoryview:
    """Read row `i`'s sample bytes from open shard `fd` into `out`; return the filled view.

    Args:
        fd: read-only file descriptor of the row's shard.
        view: the dataset view.
        i: row of `view`.
        out: writable buffer of at least `sample_size` bytes (written in place, no copy).
        shard: shard name for error messages.

    Raises:
        ShardFormatError: the shard ends inside the sample (offset = where the data ends).
    """
    lo, size = int(view.sample_offset[i]), int(view.sample_size[i])
    target, done = out[:size], 0
    while done < size:
        n = os.preadv(fd, [target[done:]], lo + done)
        if n == 0:
            raise _truncated(view, i, lo + done, shard)
        done += n
    return target


def verify_sample(view: DatasetView, i: int, data: memoryview, *, check: Check, shard: str) -> None:
    """Check row `i`'s sample bytes `data` (its whole byte range) against the index.

    Raises:
        ShardFormatError: (sha256) a tar header that does not match the index row (name,
            offset, size, not UTF-8, bad checksum).
        SampleIntegrityError: a member whose sha256 / xxh3_64 differs from the index.
    """
    if check == "none" or (check == "xxh3" and view.member_xxh3 is None):
        return
    key, lo = view.key(i), int(view.sample_offset[i])
    if check == "sha256":
        found = {
            m.data_offset: m
            for m in iter_tar_members(data, base_offset=lo, shard=shard, read_data=False)
        }
    for m in view.members_of(i):
        name, offset, size = (
            view.member_name(m),
            int(view.member_offset[m]),
            int(view.member_size[m]),
        )
        member = f"{key}.{name}"
        blob = data[offset - lo : offset - lo + size]
        if check == "sha256":
            header = found.get(offset)
            if header is None:
                raise ShardFormatError(
                    "no tar member starts here; the index does not match the "
                    "shard: rebuild the dataset",
                    shard=shard,
                    member=member,
                    offset=offset,
                )
            if header.name != member or header.size != size:
                raise ShardFormatError(
                    f"the tar header says {header.name!r} ({header.size} bytes), "
                    f"the index {member!r} ({size} bytes); rebuild the index",
                    shard=shard,
                    member=member,
                    offset=offset,
                )
            ok = hashlib.sha256(blob).digest() == view.member_sha256[m].tobytes()
        else:
            assert view.member_xxh3 is not None  # checked above
            ok = xxhash.xxh3_64_intdigest(blob) == int(view.member_xxh3[m])
        if not ok:
            algo = "sha256" if check == "sha256" else "xxh3_64"
            raise SampleIntegrityError(
                f"sample {key}: {algo} of the member's {size} bytes differs from the index "
                "(corrupt or tampered bytes); run `drivetrain data validate`, rebuild or "
                "re-download the shard, or load with error_policy='skip'",
                shard=shard,
                member=member,
                offset=offset,
            )


def hash_shard(fd: int) -> tuple[str, int]:
    """Return (sha256 hex, size in bytes) of the open file `fd`, read in 8 MiB chunks."""
    digest, offset = hashlib.sha256(), 0
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    while True:
        n = os.preadv(fd, [view], offset)
        if n == 0:
            return digest.hexdigest(), offset
        digest.update(view[:n])
        offset += n
