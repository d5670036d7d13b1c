"""Shard files of one dataset in one process: open, verify once per node, read into buffers.

Shards are opened in place or through the node cache, once per process and shard, and only
as regular files (`fsguard.open_regular`: a FIFO, device, socket or folder raises
`ShardNotRegularError`, never a hang); a sample's byte range is read straight into a caller's
buffer. The verify policies ("shard", "member", "none": `LoaderConfig.verify`) are described
in the package README.md, "Verify once".
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import OrderedDict
from pathlib import Path

from platform_lib.fsguard import NotRegularFileError, open_regular
from platform_lib.loading.cache import ShardCache, resolve_cache_dir
from platform_lib.loading.errors import LoaderError
from platform_lib.shards.errors import ShardFormatError
from platform_lib.shards.manifest import ShardEntry, check_shard_path
from platform_lib.shards.sample import (
    Check,
    check_once,
    hash_shard,
    read_sample_into,
    verify_sample,
)
from platform_lib.shards.view import DatasetView

__all__ = ["ShardFiles", "ShardNotRegularError", "ShardVerifications", "VERIFY_POLICIES"]

log = logging.getLogger(__name__)

VERIFY_POLICIES = ("shard", "member", "none")


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


class ShardVerifications:
    """Node-wide record of whole-shard sha256 checks of one dataset (see module docstring)."""

    def __init__(self, cache_dir: str | None, dataset_hash: str) -> None:
        self.folder = resolve_cache_dir(cache_dir) / dataset_hash[:16] / "verified"
        self.hashed = 0  # shards this process hashed (the rest came from the record)

    def check(self, fd: int, path: Path, entry: ShardEntry) -> bool:
        """Return True when the open shard `fd` (the file at `path`) has the manifest's size and sha256.

        Hashes at most once per node and file version; later calls read the record. Each
        copy of the dataset on the node (its shard's real path) keeps its own record, so
        loaders reading two copies of one dataset never overwrite each other's verdicts.
        """
        place = hashlib.sha256(os.fsencode(os.path.realpath(path))).hexdigest()[:16]
        record = self.folder / place / f"{check_shard_path(entry.path)}.json"
        st = os.fstat(fd)
        stamp = {
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "inode": st.st_ino,
            "device": st.st_dev,
            "sha256": entry.sha256,
        }
        ok, hashed = check_once(
            record,
            stamp,
            lambda: st.st_size == entry.bytes and hash_shard(fd)[0] == entry.sha256,
        )
        self.hashed += hashed and st.st_size == entry.bytes
        if not ok:
            log.warning(
                "%s: size or sha256 differs from the manifest; reading its samples with "
                "per-member sha256 checks",
                path,
            )
        return ok


class ShardFiles:
    """Reads samples of one `DatasetView`, keeping a few shard files open (per process).

    Args:
        view: the dataset view.
        cache: node cache for a remote dataset, None for a local one (read in place).
        verify: "shard", "member" or "none" (module docstring).
        cache_dir: node cache folder (also holds the shard verification record).
        max_open: shard files kept open, in files.
    """

    def __init__(
        self,
        view: DatasetView,
        *,
        cache: ShardCache | None,
        verify: str,
        cache_dir: str | None,
        max_open: int = 8,
    ) -> None:
        self.view, self.cache, self.verify, self.max_open = view, cache, verify, max_open
        self.verifications = (
            ShardVerifications(cache_dir, view.dataset_hash) if verify == "shard" else None
        )
        self._fds: OrderedDict[int, int] = OrderedDict()
        self._checks: dict[int, Check] = {}
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
        check: Check = (
            "sha256" if self.verify == "member" else "none" if self.verify == "none" else "xxh3"
        )
        try:
            if self.verifications is not None and not self.verifications.check(fd, path, entry):
                check = "sha256"
        except BaseException:
            os.close(fd)
            raise
        self._checks[shard] = check
        return fd

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
        data = read_sample_into(fd, self.view, i, out, shard=self.label(shard))
        verify_sample(self.view, i, data, check=self._checks[shard], shard=self.label(shard))
        return data
