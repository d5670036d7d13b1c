"""Shard files of one dataset in one process: open, verify once per node, read into buffers.

Shards are opened in place or through the node cache, once per process and shard, and only
as regular files (`fsguard.open_regular`: a FIFO, device, socket or folder raises
`ShardNotRegularError`, never a hang); a sample's byte range is read straight into a caller's
buffer. The verify policies ("shard", "member", "none": `LoaderConfig.verify`) are described
in the package README.md, "Verify once": under "shard" a `ShardHasher` thread checks each
shard's sha256 in the background while its samples are read with the per-member sha256 checks
of the index (itself in the manifest's sha256 chain, so the same trust), then xxh3.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock

from platform_lib.fsguard import NotRegularFileError, open_regular
from platform_lib.loading.cache import ShardCache, resolve_cache_dir
from platform_lib.loading.errors import LoaderError
from platform_lib.shards.errors import ShardFormatError
from platform_lib.shards.manifest import ShardEntry, check_shard_path
from platform_lib.shards.sample import (
    Check,
    hash_shard,
    read_sample_into,
    read_verdict,
    verify_sample,
    write_verdict,
)
from platform_lib.shards.view import DatasetView

__all__ = [
    "ShardFiles",
    "ShardHasher",
    "ShardNotRegularError",
    "ShardVerifications",
    "VERIFY_POLICIES",
]

log = logging.getLogger(__name__)

VERIFY_POLICIES = ("shard", "member", "none")
#: Name of a `ShardHasher`'s thread.
HASH_THREAD = "drivetrain-shard-hash"
#: How often an idle hasher looks again at shards another process is checking, in s.
_POLL_S = 0.05


class ShardNotRegularError(LoaderError, NotRegularFileError):
    """A shard is a FIFO, device, socket or folder: always raised, never skipped.

    A `NotRegularFileError` (one line: what, the path, what to do) that is also a
    `DatasetError` rebuilt from its message alone, which is how `torch.utils.data` re-raises a
    worker's error in the main process.
    """

    def __init__(self, path: str, kind: str = "") -> None:
        if kind:
            super().__init__(path, kind)
            return
        Exception.__init__(self, path)  # rebuilt from a message: `path` is the whole message
        self.path, self.kind = path, kind
        self.what, self.culprit, self.fix = path, "", ""


@dataclass
class _Job:
    """One shard's whole-file check, queued in a `ShardHasher`."""

    record: Path
    stamp: dict[str, Any]
    fd: int  # the hasher's own descriptor of the shard (closed when settled)
    label: str


class ShardHasher:
    """Whole-shard sha256 checks of one process, run by one background thread.

    Shards are checked in the order they were submitted, each at most once per node and file
    version: one process holds the record's lock and hashes, the others move on to their next
    shard and read its verdict later (`sample.read_verdict`). Nothing runs before `release`
    (the loader releases it once the first batch is out); `stop` ends the thread within one
    8 MiB chunk or lock poll and records nothing half-done.

    Attributes:
        hashed: whole-shard hashes this process ran (the rest were read from records).
    """

    def __init__(self) -> None:
        self.hashed = 0
        self.pid = os.getpid()  # a forked copy is not this process's hasher
        self._jobs: list[_Job] = []  # waiting, in submission order
        self._verdicts: dict[Path, bool] = {}  # record -> verdict of settled checks
        self._current: Path | None = None  # record of the shard being hashed
        self._reported = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._released = False

    def submit(self, fd: int, record: Path, stamp: dict[str, Any], label: str) -> None:
        """Queue the whole-shard check of open shard `fd` (duplicated: the caller keeps its own)."""
        with self._cond:
            if (
                self._stop.is_set()
                or record in self._verdicts
                or record == self._current
                or any(job.record == record for job in self._jobs)
            ):
                return
            self._jobs.append(_Job(record, stamp, os.dup(fd), label))
            self._start()
            self._cond.notify_all()

    def verdict(self, record: Path) -> bool | None:
        """Return the settled verdict of the check recorded at `record` (None: not yet)."""
        return self._verdicts.get(record)

    @property
    def released(self) -> bool:
        """True once checking has started (`release`)."""
        return self._released

    def wait_for(self, record: Path, timeout_s: float) -> bool | None:
        """Check the shard recorded at `record` next and return its verdict.

        Returns None when none came within `timeout_s` (e.g. another process's check of the
        shard is stuck) or the hasher stopped.
        """
        self.release()
        deadline = time.monotonic() + timeout_s
        with self._cond:
            job = next((j for j in self._jobs if j.record == record), None)
            if job is not None:  # to the front of the queue
                self._jobs.remove(job)
                self._jobs.insert(0, job)
            while record not in self._verdicts:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return None
                self._cond.wait(left)
            return self._verdicts[record]

    def release(self) -> None:
        """Start checking (idempotent)."""
        with self._cond:
            self._released = True
            self._start()

    def _start(self) -> None:
        """Start the thread when checks are due and none runs (call under `_cond`).

        The thread ends when nothing is left to check: an idle hasher holds no thread.
        """
        if self._released and self._jobs and self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._run, name=HASH_THREAD, daemon=True)
            self._thread.start()

    def take_hashed(self) -> int:
        """Return the hashes run since the previous call (counters ride along with batches)."""
        with self._cond:
            new, self._reported = self.hashed - self._reported, self.hashed
        return new

    def drain(self, timeout_s: float) -> bool:
        """Check every queued shard now (releasing the thread); return False past `timeout_s`."""
        self.release()
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._jobs or self._current is not None:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return False
                self._cond.wait(left)
        return True

    def stop(self, timeout_s: float = 10.0) -> None:
        """End the thread (within `timeout_s`) and close the queued shards' descriptors."""
        with self._cond:
            self._stop.set()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
        with self._cond:
            if self._thread is None:  # else the thread closes them as it ends
                self._close_jobs()

    def _close_jobs(self) -> None:
        for job in self._jobs:
            os.close(job.fd)
        self._jobs.clear()

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    picked = None
                    while not self._stop.is_set() and self._jobs:
                        picked = self._next_free()
                        if picked is not None:
                            break
                        self._cond.wait(_POLL_S)  # every queued shard is hashed elsewhere
                    if picked is None:  # stopped, or nothing left to check
                        return
                    self._current = picked[0].record
                job, lock = picked
                ok = None
                try:
                    ok = self._check(job, lock)
                finally:
                    with self._cond:
                        self._current = None
                        if ok is None:  # stopped mid-hash: nothing recorded, nothing settled
                            self._jobs.insert(0, job)
                        else:
                            self._settle(job, ok)
        finally:
            with self._cond:
                self._thread = None
                if self._stop.is_set():
                    self._close_jobs()
                self._start()  # a job submitted while this thread was ending
                self._cond.notify_all()

    def _next_free(self) -> tuple[_Job, filelock.FileLock | None] | None:
        """Pop the first queued shard no other process is checking, its record lock held.

        Shards whose verdict another process recorded meanwhile are settled on the way; the
        lock is None when the record folder cannot be made (the shard is checked unrecorded).
        """
        for job in list(self._jobs):
            ok = read_verdict(job.record, job.stamp)
            if ok is not None:
                self._jobs.remove(job)
                self._settle(job, ok)
                continue
            lock = filelock.FileLock(f"{job.record}.lock")
            try:
                job.record.parent.mkdir(parents=True, exist_ok=True)
                lock.acquire(timeout=0)
            except filelock.Timeout:
                continue  # another process is checking it: its record will tell
            except OSError:
                self._jobs.remove(job)
                return job, None
            self._jobs.remove(job)
            return job, lock
        return None

    def _check(self, job: _Job, lock: filelock.FileLock | None) -> bool | None:
        """Hash `job`'s shard and record the verdict (under `lock`); None when stopped.

        A shard that cannot be read is False here and recorded nowhere: the reads of its
        samples (per-member sha256 checks) report where it fails.
        """
        try:
            ok = read_verdict(job.record, job.stamp) if lock is not None else None
            if ok is None:
                ok = self._hash(job)
                if ok is not None and lock is not None:
                    write_verdict(job.record, job.stamp, ok)
            return ok
        except OSError as exc:
            log.warning("%s: not checked, reading it failed: %s", job.label, exc)
            return False
        finally:
            if lock is not None:
                lock.release()

    def _hash(self, job: _Job) -> bool | None:
        digest, size = hash_shard(job.fd, stop=self._stop)
        if self._stop.is_set():
            return None
        self.hashed += 1
        return size == job.stamp["size"] and digest == job.stamp["sha256"]

    def _settle(self, job: _Job, ok: bool) -> None:
        """Record `job`'s verdict for the readers and wake `drain` (call under `_cond`)."""
        os.close(job.fd)
        self._verdicts[job.record] = ok
        self._cond.notify_all()


class ShardVerifications:
    """Where the node-wide records of whole-shard sha256 checks of one dataset live."""

    def __init__(self, cache_dir: str | None, dataset_hash: str) -> None:
        self.folder = resolve_cache_dir(cache_dir) / dataset_hash[:16] / "verified"

    def record(self, fd: int, path: Path, entry: ShardEntry) -> tuple[Path, dict[str, Any]]:
        """Return (record file, stamp) of the open shard `fd` (the file at `path`).

        Each copy of the dataset on the node (its shard's real path) keeps its own record, so
        loaders reading two copies of one dataset never overwrite each other's verdicts; the
        stamp (size, mtime, inode, device and the manifest's sha256) names the file version.
        """
        place = hashlib.sha256(os.fsencode(os.path.realpath(path))).hexdigest()[:16]
        st = os.fstat(fd)
        stamp = {
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "inode": st.st_ino,
            "device": st.st_dev,
            "sha256": entry.sha256,
        }
        return self.folder / place / f"{check_shard_path(entry.path)}.json", stamp


class ShardFiles:
    """Reads samples of one `DatasetView`, keeping a few shard files open (per process).

    Args:
        view: the dataset view.
        cache: node cache for a remote dataset, None for a local one (read in place).
        verify: "shard", "member" or "none" (module docstring).
        cache_dir: node cache folder (also holds the shard verification record).
        hasher: runs the whole-shard checks of verify "shard" in the background; None: shards
            without a record are read with the per-member sha256 checks only.
        wait_s: longest wait for a pending whole-shard check once the hasher runs, in s; past
            it the shard is read with the per-member sha256 checks until its check ends.
        max_open: shard files kept open, in files.
    """

    def __init__(
        self,
        view: DatasetView,
        *,
        cache: ShardCache | None,
        verify: str,
        cache_dir: str | None,
        hasher: ShardHasher | None = None,
        wait_s: float = 60.0,
        max_open: int = 8,
    ) -> None:
        self.view, self.cache, self.verify, self.max_open = view, cache, verify, max_open
        self.hasher, self.wait_s = hasher, wait_s
        self.verifications = (
            ShardVerifications(cache_dir, view.dataset_hash) if verify == "shard" else None
        )
        self.interim = 0  # samples read with sha256 checks while their shard's check was pending
        self._fds: OrderedDict[int, int] = OrderedDict()
        self._checks: dict[int, Check] = {}
        self._pending: dict[int, Path] = {}  # shard -> record of its whole-shard check
        self._waited: set[int] = set()  # pending shards a read already waited for
        self._failed: dict[
            int, ShardFormatError
        ] = {}  # shards that cannot be opened: no retry per sample

    def close(self) -> None:
        """Close every open shard file."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def is_open(self, shard: int) -> bool:
        """Return True when the shard's file is open in this process."""
        return shard in self._fds

    def label(self, shard: int) -> str:
        """Return "<dataset url>/<shard path>" for messages."""
        return f"{self.view.url}/{self.view.shard_paths[shard]}"

    def _open(self, shard: int) -> int:
        """Open shard `shard` (regular files only) and choose its checks; return the fd.

        Raises:
            ShardNotRegularError: the shard's file is a FIFO, device, socket or folder.
            ShardFormatError: the shard's file is missing.
        """
        entry = self.view.manifest.shards[shard]
        try:
            if self.cache is not None:
                fd = self.cache.open(entry.path, entry.bytes)
                path = self.cache.folder / entry.path
            else:
                check_shard_path(entry.path)
                path = Path(self.view.shard_files[shard])
                root = None if entry.location else self.view.root  # merged: checked at resolve
                try:
                    fd = open_regular(path, root=root)
                except FileNotFoundError as exc:
                    raise ShardFormatError(
                        f"shard {self.label(shard)} is missing; rebuild the dataset or restore "
                        "the file"
                    ) from exc
        except NotRegularFileError as exc:
            raise ShardNotRegularError(exc.path, exc.kind) from None
        try:
            self._checks[shard] = self._choose_check(shard, fd, path, entry)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _choose_check(self, shard: int, fd: int, path: Path, entry: ShardEntry) -> Check:
        """Return the per-read check of open shard `fd`; queue its whole-shard check if due.

        verify "shard": "xxh3" once the shard's sha256 is recorded as good on this node;
        "sha256" (the member checks, same trust) while its check is pending or after it failed.
        """
        if self.verify != "shard":
            return "sha256" if self.verify == "member" else "none"
        assert self.verifications is not None  # made for verify "shard"
        record, stamp = self.verifications.record(fd, path, entry)
        ok = False if stamp["size"] != entry.bytes else read_verdict(record, stamp)
        if ok is None:
            if self.hasher is not None:
                self.hasher.submit(fd, record, stamp, self.label(shard))
                self._pending[shard] = record
            return "sha256"
        if not ok:
            _warn_mismatch(path)
        return "xxh3" if ok else "sha256"

    def check_ahead(self, shard: int) -> None:
        """Open local shard `shard` now so that its whole-shard check is queued before it is read.

        Errors are left for the read of one of its samples to raise.
        """
        if self.cache is not None or self.hasher is None or shard in self._checks:
            return
        try:
            self._fd(shard)
        except (ShardFormatError, NotRegularFileError):
            pass

    def _settle(self, shard: int) -> None:
        """Move a shard whose whole-shard check finished to the check its verdict allows.

        Before the hasher runs (the process's first batch) the shard is read with the
        per-member sha256 checks; afterwards a read waits for the check (at most `wait_s`,
        once): hashing the shard and sha256 of the same bytes would do the work twice.
        """
        assert self.hasher is not None  # pending only with a hasher
        record = self._pending[shard]
        ok = self.hasher.verdict(record)
        if ok is None and self.hasher.released and shard not in self._waited:
            self._waited.add(shard)
            ok = self.hasher.wait_for(record, self.wait_s)
        if ok is None:
            return
        del self._pending[shard]
        if not ok:
            _warn_mismatch(Path(self.label(shard)))
        self._checks[shard] = "xxh3" if ok else "sha256"

    def _fd(self, shard: int) -> int:
        if shard in self._fds:
            self._fds.move_to_end(shard)
            return self._fds[shard]
        if shard in self._failed:
            raise self._failed[shard]
        try:
            fd = self._open(shard)
        except ShardFormatError as exc:
            self._failed[shard] = exc
            raise
        self._fds[shard] = fd
        if len(self._fds) > self.max_open:
            os.close(self._fds.popitem(last=False)[1])
        return fd

    def read_into(self, i: int, out: memoryview) -> memoryview:
        """Read row `i`'s sample bytes into `out` (no copy) and check them; return the filled view.

        Raises:
            ShardFormatError: missing or truncated shard (offset: where the data ends), or a
                tar header that does not match the index (checks "sha256").
            SampleIntegrityError: a member's checksum differs from the index.
        """
        shard = int(self.view.shard_id[i])
        fd = self._fd(shard)
        if shard in self._pending:
            self._settle(shard)
            self.interim += shard in self._pending
        data = read_sample_into(fd, self.view, i, out, shard=self.label(shard))
        verify_sample(self.view, i, data, check=self._checks[shard], shard=self.label(shard))
        return data


def _warn_mismatch(path: Path) -> None:
    log.warning(
        "%s: size or sha256 differs from the manifest; reading its samples with "
        "per-member sha256 checks",
        path,
    )
