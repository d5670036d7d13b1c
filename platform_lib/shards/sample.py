"""Read one sample's byte range and verify it: the one sample verifier of the code base.

A sample is the byte range [sample_offset, sample_offset + sample_size) of its shard, read by
one `preadv` straight into a caller's buffer (e.g. a slot of the loader's shared-memory ring)
and checked by `verify_sample` ("sha256", "xxh3" or "none"); errors name shard, member
(`<key>.<ext>`) and byte offset. `check_once` hashes whole files (a shard, the index) at most
once per node and file version.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import filelock
import xxhash

from platform_lib.fsguard import read_regular
from platform_lib.shards.errors import SampleIntegrityError, ShardFormatError
from platform_lib.shards.tar import iter_tar_members

if TYPE_CHECKING:  # view.py reads the index through index.py, which uses `check_once`
    from platform_lib.shards.view import DatasetView

__all__ = [
    "Check",
    "check_once",
    "hash_shard",
    "read_sample_into",
    "read_verdict",
    "verification_folder",
    "verify_sample",
    "write_verdict",
]

Check = Literal["sha256", "xxh3", "none"]
_CHUNK = 8 << 20
#: Longest wait for another process's hash of the same file, in s; then this one hashes too.
_RECORD_WAIT_S = 600.0
#: Largest verification record read back, in bytes (a record is a few hundred).
_MAX_RECORD_BYTES = 64 * 1024


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

    `out` is a writable buffer of at least the row's `sample_size` bytes (filled in place, no
    copy); `shard` names the shard in errors.

    Raises:
        ShardFormatError: the shard ends inside the sample (offset = where the data ends).
    """
    lo, size = int(view.sample_offset[i]), int(view.sample_size[i])
    target, done = out[:size], 0
    while done < size:
        try:
            n = os.preadv(fd, [target[done:]], lo + done)
        except BlockingIOError:  # a non-blocking kernel file that `open_regular` did not know
            raise ShardFormatError(
                "reads of this shard would block: it is not a data file; restore the shard",
                shard=shard,
                offset=lo + done,
            ) from None
        if n == 0:
            raise _truncated(view, i, lo + done, shard)
        done += n
    return target


def verify_sample(view: DatasetView, i: int, data: memoryview, *, check: Check, shard: str) -> None:
    """Check row `i`'s sample bytes `data` (its whole byte range) against the index.

    Checks, by strength:
        "sha256"  tar headers at the index offsets name `<key>.<member>` with the index size,
                  and each member's sha256 matches the index (what `verify="member"` does)
        "xxh3"    each member's xxh3_64 matches the index (XXH3 64-bit, seed 0; the per-read
                  check of `verify="shard"` once the whole shard's sha256 was checked on the
                  node); a dataset built without xxh3 gets no per-read check here
        "none"    nothing (a truncated shard is still reported)

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


def hash_shard(fd: int, *, stop: threading.Event | None = None) -> tuple[str, int]:
    """Return (sha256 hex, size in bytes) of the open file `fd`, read in 8 MiB chunks.

    Reads at most the file's `fstat` size (the size it had when called). `stop`, checked
    between chunks, ends the hash early: the size returned is then short of the file's.

    Raises:
        BlockingIOError: a read would block (`fd` is no data file).
    """
    digest, offset, size = hashlib.sha256(), 0, os.fstat(fd).st_size
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    while offset < size and not (stop is not None and stop.is_set()):
        n = os.preadv(fd, [view[: min(_CHUNK, size - offset)]], offset)
        if n == 0:
            break
        digest.update(view[:n])
        offset += n
    return digest.hexdigest(), offset


def verification_folder(cache_dir: str | None, dataset_hash: str) -> Path:
    """Return the node's verification-record folder of a dataset.

    `<cache_dir>/<dataset_hash[:16]>/verified`; `cache_dir` None: `$DRIVETRAIN_CACHE`, else
    ~/.cache/drivetrain/shards (the node cache of `platform_lib.loading`).
    """
    default = os.environ.get("DRIVETRAIN_CACHE", str(Path.home() / ".cache/drivetrain/shards"))
    return Path(cache_dir or default) / dataset_hash[:16] / "verified"


def check_once(
    record: Path | None, stamp: dict[str, Any], check: Callable[[], bool]
) -> tuple[bool, bool]:
    """Return a whole-file check's verdict, running `check` at most once per node and stamp.

    One process runs `check` under a file lock and writes `{**stamp, "ok": verdict}` to
    `record` (temporary name + rename); later calls with the same stamp read the verdict.
    Without a usable record (None, unwritable folder, a lock held past 600 s) `check` runs here.

    Args:
        record: the record file (JSON), or None for no record.
        stamp: what identifies the file version and the expected content (JSON values), e.g.
            size, mtime_ns, inode, device and the manifest's sha256.
        check: returns True when the file is good (e.g. hashes it against the manifest).

    Returns:
        (ok, ran): the verdict, and whether this call ran `check`.
    """
    if record is None:
        return check(), True
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(f"{record}.lock", timeout=_RECORD_WAIT_S)
        lock.acquire()
    except (OSError, filelock.Timeout):
        return check(), True
    try:
        saved = read_verdict(record, stamp)
        if saved is not None:
            return saved, False
        ok = check()
        write_verdict(record, stamp, ok)
        return ok, True
    finally:
        lock.release()


def read_verdict(record: Path, stamp: dict[str, Any]) -> bool | None:
    """Return the verdict `record` holds for `stamp` (`check_once`); None: none for this stamp.

    Needs no lock: records are only ever published whole (rename). A missing, planted,
    garbled or oversized record, or one for another stamp, reads as None.
    """
    try:
        saved = json.loads(read_regular(record, max_bytes=_MAX_RECORD_BYTES))
        if {k: saved.get(k) for k in stamp} == stamp and isinstance(saved.get("ok"), bool):
            return saved["ok"]
    except (OSError, ValueError, AttributeError):
        pass
    return None


def write_verdict(record: Path, stamp: dict[str, Any], ok: bool) -> None:
    """Publish `{**stamp, "ok": ok}` as `record` (temporary name + rename; call under its lock).

    A folder that cannot be written leaves no record (the check runs again next time).
    """
    tmp = record.with_name(f"{record.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(json.dumps({**stamp, "ok": ok}))
        os.replace(tmp, record)
    except OSError:
        tmp.unlink(missing_ok=True)
