"""Epoch orders computed once in the main process and mapped read-only by the workers.

The main process writes each epoch's (source, unit) order once into a file in the loader's
tmpfs folder (`LoaderConfig.shm_dir`, beside the ring) and keeps it mapped; persistent workers
map the same file read-only, so its pages stay shared and a worker's private memory does not
grow with the index. A file is written completely before the workers are told its epoch
(`BatchStream.start`) and never changes; the two latest epochs are kept (the one being
consumed and the one the workers run ahead on), older ones are unlinked (a worker that still
maps one keeps its pages), and the files of a killed loader are removed by the next loader on
the node (`ring.claim_owner`).

File layout: (2, P) int64, row 0 the source index and row 1 the unit id of each global position
(`EpochOrders`, byte for byte).
"""

from __future__ import annotations

import errno
import mmap
import os
import weakref
from typing import Any

import numpy as np

from platform_lib.loading.errors import RingError
from platform_lib.loading.mixing import EpochOrders
from platform_lib.loading.ring import Owner, claim_owner, release_owner
from platform_lib.loading.transport import check_space, too_small

__all__ = ["SharedOrders"]

#: Epoch files whose names the main process keeps (current + the one run ahead).
_KEEP = 2


class SharedOrders:
    """Epoch orders in shared memory: `publish` in the main process, `get` in the workers.

    Args:
        orders: the order of any epoch (computed in the main process only).
        shm_dir: tmpfs folder for the order files.

    Raises:
        RingError (from `publish`): `shm_dir` lacks the space for one epoch's order.
    """

    def __init__(self, orders: EpochOrders, *, shm_dir: str) -> None:
        self.orders, self.shm_dir = orders, shm_dir
        # owned under the loaders' liveness rule: files of a killed process are swept later
        self.prefix, owner = claim_owner(shm_dir, "order")
        # main process: epoch -> its mapped (source, unit); worker: the latest epoch it mapped
        self._published: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._mapped: tuple[int, np.ndarray, np.ndarray] | None = None
        self._names: list[str] = []
        self._finalizer = weakref.finalize(self, _unlink_all, self._names, owner, os.getpid())

    def path(self, epoch: int) -> str:
        """File of `epoch`'s order."""
        return f"{self.prefix}-e{int(epoch)}"

    def publish(self, epoch: int) -> None:
        """Main process: write `epoch`'s order into its file (once), before the workers run it."""
        if epoch in self._published:
            return
        source, unit = self.orders(epoch)
        size = 2 * len(unit) * 8
        what = f"epoch order of {len(unit)} positions"
        path = self.path(epoch)
        check_space(self.shm_dir, size, what)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        self._names.append(path)
        try:
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise RingError(too_small(self.shm_dir, size, what)) from exc
                raise
            mapped = np.frombuffer(mmap.mmap(fd, size), dtype=np.int64).reshape(2, -1)
        finally:
            os.close(fd)
        mapped[0], mapped[1] = source, unit
        self._published[epoch] = (mapped[0], mapped[1])
        while len(self._names) > _KEEP:  # older epochs: no worker opens them any more
            _unlink(self._names.pop(0))
        for old in sorted(self._published)[:-_KEEP]:
            del self._published[old]

    def get(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Worker: map `epoch`'s published order read-only: (source, unit), (P,) int64 each.

        Raises:
            RingError: the file is gone (the main process published two later epochs since).
        """
        if self._mapped is not None and self._mapped[0] == epoch:
            return self._mapped[1], self._mapped[2]
        try:
            fd = os.open(self.path(epoch), os.O_RDONLY)
        except FileNotFoundError:
            raise RingError(
                f"the order of epoch {epoch} ({self.path(epoch)}) is no longer published; the main "
                "process moved on to later epochs (a stale worker iteration)"
            ) from None
        try:
            mapped = np.frombuffer(
                mmap.mmap(fd, 0, access=mmap.ACCESS_READ), dtype=np.int64
            ).reshape(2, -1)
        finally:
            os.close(fd)
        self._mapped = (epoch, mapped[0], mapped[1])
        return mapped[0], mapped[1]

    def close(self) -> None:
        """Unlink every order file (mappings go with their last reference)."""
        if self._finalizer is not None:
            self._finalizer()

    def __getstate__(self) -> dict[str, Any]:  # spawned workers open the files by name
        return {
            **self.__dict__,
            "_published": {},
            "_mapped": None,
            "_finalizer": None,
            "_names": [],
        }


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _unlink_all(names: list[str], owner: Owner, pid: int) -> None:
    if os.getpid() != pid:  # a forked worker's copy: the files belong to the main process
        return
    for path in names:
        _unlink(path)
    names.clear()
    release_owner(owner)
