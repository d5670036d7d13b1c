"""Node-local cache tier for remote shards: one download per node, published atomically.

All ranks and workers of a node share one cache folder, laid out as
`<cache_dir>/<dataset_hash[:16]>/shards/shard-NNNNNN.tar`. A shard is downloaded once per node
(one GET) under a per-shard file lock, into a temporary file published by rename; beyond
`limit_bytes`, least-recently-used shards (mtime) are evicted, only in folders carrying the
cache marker. Shard paths must be `shards/shard-NNNNNN.tar` (checked before any open), cached
shards are opened only as regular files, and a temporary file is swept only when its
download's lock is free (`fsguard.remove_if_orphaned`, safe across PID namespaces).
"""

from __future__ import annotations

import errno
import fcntl
import os
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import filelock

from platform_lib.fsguard import ensure_inside, open_regular, remove_if_orphaned
from platform_lib.loading.errors import (
    CacheFullError,
    ManifestError,
    ObjectStoreUnreachableError,
    ShardFormatError,
)
from platform_lib.shards.manifest import check_shard_path
from platform_lib.storage import StorageUnreachableError, call_with_retries, resolve_fs

__all__ = ["CACHE_MARKER", "CacheStats", "ShardCache", "evict_lru", "resolve_cache_dir"]

K = TypeVar("K")

#: File marking a folder as ours; eviction never walks a folder without it.
CACHE_MARKER = ".drivetrain-shard-cache"
_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
#: Longest wait for another process's download or eviction lock on this node, in s.
LOCK_WAIT_S = 600.0


def resolve_cache_dir(cache_dir: str | None) -> Path:
    """Return the cache folder: `cache_dir`, else `$DRIVETRAIN_CACHE`, else ~/.cache/drivetrain/shards."""
    default = os.environ.get("DRIVETRAIN_CACHE", str(Path.home() / ".cache/drivetrain/shards"))
    return Path(cache_dir or default)


def _create_locked(path: Path) -> int:
    """Create `path` exclusively and return its fd with an exclusive flock held on it."""
    while True:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:  # a sweep may have deleted it between create and lock: start again
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def evict_lru(
    cached: Iterable[tuple[float, int, K]],
    *,
    limit_bytes: int,
    keep: K,
    remove: Callable[[K], bool],
) -> list[K]:
    """Evict least-recently-used shards until the cache holds at most `limit_bytes`.

    The node cache's eviction rule, free of files so that `platform_lib.loading.fleet` runs it
    too: oldest last use first, never `keep` (the shard just opened); a shard `remove` cannot
    delete (in use) is skipped and still counts.

    Args:
        cached: (last use, size in bytes, shard) of every cached shard; last use in any unit
            that orders (mtime in ns, simulated s).
        limit_bytes: most bytes the cache may hold.
        keep: the shard never evicted.
        remove: deletes a shard; returns False when it is in use (then it stays).

    Returns:
        The shards removed, oldest first.
    """
    entries = sorted(cached)
    total = sum(size for _, size, _ in entries)
    removed: list[K] = []
    for _, size, shard in entries:
        if total <= limit_bytes:
            break
        if shard == keep or not remove(shard):
            continue
        total -= size
        removed.append(shard)
    return removed


def _remove_unless_locked(path: Path) -> bool:
    """Delete a cached shard unless it is being downloaded or opened right now (its lock is held)."""
    try:
        with filelock.FileLock(f"{path}.lock", timeout=0):
            path.unlink(missing_ok=True)
    except filelock.Timeout:
        return False
    return True


@dataclass
class CacheStats:
    """Counters of node cache use: one process's, or summed over a rank's workers (`LoaderStats`)."""

    requests: int = 0
    """object-store GET requests of shards issued (including retries)"""
    downloads: int = 0
    """shards downloaded into the node cache"""
    bytes_downloaded: int = 0
    """bytes downloaded into the node cache"""
    cache_hits: int = 0
    """shard opens served from the node cache without a download"""
    evictions: int = 0
    """shards evicted from the node cache"""


class ShardCache:
    """Opens shards of one remote dataset through the node-local cache folder."""

    def __init__(
        self,
        *,
        url: str,
        root: str,
        storage_options: dict,
        dataset_hash: str,
        cache_dir: str | None,
        limit_bytes: int,
        max_retries: int,
        backoff_s: float,
        files: dict[str, str] | None = None,
    ) -> None:
        self.url, self.root, self.storage_options = url, root, storage_options
        self.files = files or {}  # shard path -> object inside url's filesystem (merged datasets)
        self.base = resolve_cache_dir(cache_dir)
        self.folder = self.base / dataset_hash[:16]
        self.limit_bytes = limit_bytes
        self.max_retries, self.backoff_s = max_retries, backoff_s
        self.stats = CacheStats()
        self._fs = None
        self._failed: dict[str, ShardFormatError] = {}  # bad objects: fetched once, not per sample

    def _filesystem(self):
        if self._fs is None:  # created lazily: after fork, in the worker that uses it
            self._fs = resolve_fs(self.url, self.storage_options)[0]
        return self._fs

    def open(self, shard_path: str, expected_bytes: int) -> int:
        """Return a read-only file descriptor of the cached shard, downloading it when absent.

        Raises:
            ManifestError: `shard_path` is not `shards/shard-NNNNNN.tar` (checked before any
                file is touched).
            CacheFullError: the cache disk is full (ENOSPC, EDQUOT, EFBIG).
            ObjectStoreUnreachableError: the download kept failing after retries.
            ShardFormatError: the object's size differs from the manifest.
            NotRegularFileError: the cached file is not a regular file.
            PathOutsideRootError: the cached file (or a folder on its way) is a link out of
                the cache folder (planted there); names it and the cache folder.
        """
        try:
            check_shard_path(shard_path)
        except ValueError as exc:
            raise ManifestError(f"{self.url}: {exc}; refusing to cache it") from None
        if shard_path in self._failed:
            raise self._failed[shard_path]
        local = self.folder / shard_path
        ensure_inside(local, self.base)  # one resolve per open: no link out of the cache
        local.parent.mkdir(parents=True, exist_ok=True)
        (self.folder / CACHE_MARKER).touch(exist_ok=True)
        try:
            lock = filelock.FileLock(f"{local}.lock", timeout=LOCK_WAIT_S)
            lock.acquire()
        except filelock.Timeout:
            raise ObjectStoreUnreachableError(
                f"{self.url}/{shard_path}: another process on this node has held its download "
                f"lock {local}.lock for {LOCK_WAIT_S:g} s; find that process (a stopped or hung "
                "loader) and end it, or delete the lock file if none holds it"
            ) from None
        try:
            if shard_path in self._failed:  # failed in the prefetch thread while we waited
                raise self._failed[shard_path]
            if local.exists() and local.stat().st_size == expected_bytes:
                self.stats.cache_hits += 1
            else:
                self._download(shard_path, local, expected_bytes)
            os.utime(local)
            fd = open_regular(local)
        finally:
            lock.release()
        self._evict(keep=local)
        return fd

    def prefetch(self, shard_path: str, expected_bytes: int) -> None:
        """Download the shard into the cache if absent (from a background thread).

        Errors are left for the later `open` of the same shard to raise.
        """
        try:
            os.close(self.open(shard_path, expected_bytes))
        except Exception:  # noqa: BLE001 - the reading path retries and reports
            pass

    def _download(self, shard_path: str, local: Path, expected_bytes: int) -> None:
        remote = self.files.get(shard_path) or f"{self.root}/{shard_path}"
        tmp = local.with_name(f".{local.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        lock_fd = _create_locked(tmp)  # held until the rename: tells the sweep we are alive

        def fetch() -> None:
            self.stats.requests += 1
            self._filesystem().get_file(remote, str(tmp))

        try:
            call_with_retries(
                fetch,
                what="downloading",
                url=f"{self.url}/{shard_path}",
                max_retries=self.max_retries,
                backoff_s=self.backoff_s,
            )
            size = tmp.stat().st_size
            if size != expected_bytes:
                self._failed[shard_path] = ShardFormatError(
                    f"{self.url}/{shard_path}: object has {size} bytes, the manifest says "
                    f"{expected_bytes} (truncated or replaced); rebuild or re-upload the dataset"
                )
                raise self._failed[shard_path]
            os.replace(tmp, local)
        except StorageUnreachableError as exc:
            raise ObjectStoreUnreachableError(f"{exc}; or raise LoaderConfig.max_retries") from exc
        except OSError as exc:
            if exc.errno in _DISK_FULL:
                raise CacheFullError(
                    f"cache folder {self.folder} is full ({os.strerror(exc.errno)}) while writing "
                    f"{shard_path} ({expected_bytes} bytes): free disk space, point "
                    "LoaderConfig.cache_dir at a larger disk, or lower cache_limit_bytes"
                ) from exc
            raise
        finally:
            tmp.unlink(missing_ok=True)
            os.close(lock_fd)
        self.stats.downloads += 1
        self.stats.bytes_downloaded += expected_bytes

    def _evict(self, *, keep: Path) -> None:
        """Delete least-recently-used cached shards until the cache holds <= limit_bytes.

        Also deletes temporary files left by crashed downloads.
        """
        try:
            lock = filelock.FileLock(str(self.base / ".evict.lock"), timeout=LOCK_WAIT_S)
            lock.acquire()
        except filelock.Timeout:  # another process is evicting (or stuck): evict next time
            return
        try:
            cached = []
            for marker in self.base.glob(f"*/{CACHE_MARKER}"):
                for path in marker.parent.rglob("*.tar*"):
                    if path.name.startswith(".") and ".tar.tmp-" in path.name:
                        remove_if_orphaned(path)  # the download's own file is its lock
                    elif path.name.endswith(".tar") and not path.name.startswith("."):
                        st = path.stat()
                        cached.append((st.st_mtime_ns, st.st_size, path))
            removed = evict_lru(
                cached, limit_bytes=self.limit_bytes, keep=keep, remove=_remove_unless_locked
            )
            self.stats.evictions += len(removed)
        finally:
            lock.release()
