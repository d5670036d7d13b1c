"""Zero-copy hand-off of batches from loader workers to the main process: a shared-memory ring.

One sparse file in /dev/shm per loader, at most `LoaderConfig.shm_budget_bytes` large; each
batch takes an extent of it sized by its actual bytes (first fit, in step order), pages are
allocated (`posix_fallocate`) only when first written and kept for reuse, and workers send a small skeleton whose arrays are `_Ref`s into the extent
(layout and life cycle: `Ring`). A full /dev/shm is a `RingError`, never a SIGBUS; a batch
finding no room travels in a private shared-memory block (`LoaderStats.ring_fallbacks`).
Files in the tmpfs folder carry their owner's lock (`claim_owner`), so a new ring first sweeps
the files of loaders whose owner is gone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import re
import time
import uuid
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from platform_lib.fsguard import hold_owner_lock, remove_if_orphaned
from platform_lib.loading.errors import RingError
from platform_lib.loading.transport import (
    _SmallTensor,
    check_space,
    pack_arrays,
    restore_small,
    to_small_tensor,
    too_small,
    unpack_arrays,
)

__all__ = [
    "RING_KEY",
    "Extent",
    "Ring",
    "SlotWriter",
    "aligned",
    "check_budget",
    "claim_owner",
    "node_shm_budget",
    "release_owner",
    "sweep_orphans",
    "unpack_batch",
]

RING_KEY = "__ring__"
_ALIGN = 64
_HEADER_INTS = 16  # int64 control words: [0] generation, [1]-[2] dataset.py, [4]-[8] below
#: Control words the main process sets while it waits for a batch: the awaited worker + 1
#: (0: none; -1: unknown) and since when (CLOCK_MONOTONIC, ns; system-wide).
_AWAITED, _AWAITED_SINCE = 4, 5
#: Control words: the step whose worker reserves next; bytes of the arena allocated.
_NEXT_STEP, _GROWN = 6, 7
#: Control word: the generation whose batches the main process will not receive (0: none).
_ABANDONED = 8
_MIN_BYTES = 4096  # smaller arrays travel by pickle
#: Pages are allocated in steps of this many bytes (fewer syscalls and CUDA registrations).
_GROW_STEP = 1 << 20
#: madvise advice that maps allocated pages into a process at once (Linux >= 5.14)
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
#: A worker finding no room gives up waiting (the batch takes the fallback block) once the
#: main process has waited this long for that worker's batch with no release in between, in s.
_STALL_S = 0.5
#: Longest wait for the ring's lock (held for a few word writes), in s.
_LOCK_TIMEOUT_S = 30.0
#: Default budget rule: a quarter of the memory the pod may use, capped, in bytes.
_BUDGET_CAP = 5 * 2**29  # 2.5 GiB
_BUDGET_SHARE = 4


def aligned(n: int) -> int:
    """`n` bytes rounded up to the ring's 64-byte alignment."""
    return -(-n // _ALIGN) * _ALIGN


_align = aligned


def _cgroup_memory_limit() -> int | None:
    """The memory limit of this process's cgroup (v2 `memory.max`, else v1), in bytes; None: none."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path, encoding="ascii") as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:  # "max" / v1's "no limit" (~2**63)
            return int(text)
    return None


def node_shm_budget(shm_dir: str) -> int:
    """The default `LoaderConfig.shm_budget_bytes`: this rank's share of the node, in bytes.

    min(size of the `shm_dir` tmpfs, a quarter of the cgroup memory limit (on Kubernetes a
    memory-backed /dev/shm counts against it)) / LOCAL_WORLD_SIZE (ranks on the node, default
    1), capped at 2.5 GiB.
    """
    try:
        st = os.statvfs(shm_dir)
        node = st.f_blocks * st.f_frsize
    except OSError:
        node = _BUDGET_CAP
    limit = _cgroup_memory_limit()
    if limit is not None:
        node = min(node, limit // _BUDGET_SHARE)
    try:
        ranks = max(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), 1)
    except ValueError:
        ranks = 1
    return max(min(node // ranks, _BUDGET_CAP), 1)


def check_budget(budget: int, *, batch_size: int, sample_bytes: int, raw_bytes: int) -> None:
    """Raise `RingError` when `budget` cannot hold one batch.

    Args:
        budget: the ring's budget, in bytes.
        batch_size: samples per batch.
        sample_bytes: the largest sample's bytes in the ring (read + computed), in bytes.
        raw_bytes: of which read from the shards, in bytes.

    Raises:
        RingError: names the budget, the sample's bytes and the smallest budget that works.
    """
    need = batch_size * sample_bytes
    if budget >= need:
        return
    what = (
        f"too small for one sample ({sample_bytes} bytes: {raw_bytes} read + "
        f"{sample_bytes - raw_bytes} decoded/transformed)"
        if budget < sample_bytes
        else f"too small for one batch ({batch_size} samples of up to {sample_bytes} bytes)"
    )
    raise RingError(
        f"the loader's shared-memory budget (LoaderConfig.shm_budget_bytes) of {budget} "
        f"bytes is {what}; set shm_budget_bytes to at least {need} bytes (a few batches let "
        "workers prepare batches ahead), or lower batch_size"
    )


class Extent(NamedTuple):
    """The part of the ring one batch took."""

    slot: int
    """its state word in the ring header"""
    offset: int
    """byte offset from the start of the ring"""
    capacity: int
    """its size, in bytes (the batch may use less)"""


@dataclass(frozen=True, slots=True)
class _Ref:
    """Where an array of a batch lives in the ring."""

    offset: int
    """byte offset from the start of the ring"""
    shape: tuple[int, ...]
    dtype: str
    kind: str
    """"ndarray", "tensor" or "buffer" (a read-only memoryview, e.g. JPEG bytes)"""


class Ring:
    """The shared-memory ring of one loader.

    One sparse /dev/shm file of header + `budget_bytes`, mapped by the main process and
    inherited by forked workers. Each batch takes an extent of the arena sized by its actual
    bytes (`reserve`): the first gap by address between the batches in flight, so pages
    allocated earlier are reused first. Pages are allocated (`posix_fallocate`, in
    `_GROW_STEP`s) only when first written and stay for the next batches, epochs and
    restarted workers: /dev/shm holds about the most bytes ever in flight, never more than the
    budget. With CUDA the allocated pages are page-locked once (cudaHostRegister), so
    `.to("cuda", non_blocking=True)` copies straight from them. Extent layout:

        [ raw area: the batch's sample byte ranges, read by `preadv` straight from the shards |
          output area: arrays the worker computed (decoded images, transform outputs, collated
          tensors stacked in place) ]

    Workers reserve in step order (control word `_NEXT_STEP`: only the worker of that step
    allocates, so no lock is needed, and the batch the main process needs next is never
    starved of room by batches made ahead of it). Header: control words; per slot an int32
    state, its extent's offset and length (int64); per worker the generation it works in.
    Worker w owns slots [w * D, (w + 1) * D), D = `slots_per_worker`. Slot life cycle: 0 free
    -> g (> 0, reserved by a worker in iteration generation g) -> -1 (delivered to the main
    process) -> 0 (every view of the batch is gone: a finalizer on the extent's base array).
    A slot still marked with an older generation was filled but never delivered (an
    abandoned epoch): free again once its worker works in a newer generation.

    Args:
        num_workers: worker processes (at least 1; the in-process loader uses one).
        slots_per_worker: batches each worker may have in the ring at once.
        budget_bytes: most bytes of the batches in the ring together, in bytes.
        batch_bytes: bytes of the largest batch; /dev/shm must have this much free before
            the ring is made, in bytes.
        shm_dir: tmpfs folder for the ring file.
        keep_name: keep the file name until `close` (spawned workers reopen it by name);
            False unlinks it at once (forked workers inherit the mapping).
        pin: page-lock the allocated pages when CUDA is available (at delivery).

    Raises:
        RingError: `shm_dir` lacks the space for one batch (names its size, its free space
            and the fix), or the file size limit is below the budget.
    """

    def __init__(
        self,
        *,
        num_workers: int,
        slots_per_worker: int,
        budget_bytes: int,
        batch_bytes: int,
        shm_dir: str = "/dev/shm",
        keep_name: bool = False,
        pin: bool = True,
    ) -> None:
        self.num_workers, self.slots_per_worker, self.pin = (
            max(num_workers, 1),
            slots_per_worker,
            pin,
        )
        self.shm_dir = shm_dir
        self.num_slots = self.num_workers * slots_per_worker
        self.budget_bytes = budget_bytes // mmap.PAGESIZE * mmap.PAGESIZE
        self.header_bytes = _page(8 * _HEADER_INTS + 20 * self.num_slots + 8 * self.num_workers)
        self.size = self.header_bytes + self.budget_bytes
        check_space(shm_dir, self.header_bytes + batch_bytes, self._describe())
        # sweeps the files of dead loaders first
        self.path: str | None
        self._owner: Owner | None
        self.path, self._owner = claim_owner(shm_dir, "ring")
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except BaseException:
            release_owner(self._owner)
            raise
        try:
            try:
                os.ftruncate(fd, self.size)  # sparse: pages come with `grow`
            except OSError as exc:
                if exc.errno != errno.EFBIG:
                    raise
                raise RingError(
                    f"the loader's shared-memory ring ({self.size} bytes, {self._describe()}) "
                    "exceeds this process's file size limit (RLIMIT_FSIZE, `ulimit -f`); raise "
                    "the limit or lower LoaderConfig.shm_budget_bytes"
                ) from exc
            _fallocate(fd, 0, self.header_bytes, shm_dir, self._describe())
            self._mm = mmap.mmap(fd, self.size)
        except BaseException:
            os.close(fd)
            os.unlink(self.path)
            release_owner(self._owner)
            raise
        self._fd = fd  # workers allocate pages through it (forked: inherited)
        if not keep_name:  # forked workers inherit the mapping: no name, no owner lock
            os.unlink(self.path)
            self.path = None
            release_owner(self._owner)
            self._owner = None
        self._finalizer: weakref.finalize | None = weakref.finalize(
            self, _cleanup, self.path, self._owner, fd, os.getpid()
        )
        self._attach()
        self.control[0] = 1  # generation 1: a state of 0 always means free

    def _describe(self) -> str:
        return f"up to {self.budget_bytes} bytes, LoaderConfig.shm_budget_bytes"

    def _attach(self) -> None:
        self._all = np.frombuffer(self._mm, dtype=np.uint8)
        self._base = int(self._all.ctypes.data)
        n, at = self.num_slots, 8 * _HEADER_INTS
        self.control = np.frombuffer(self._mm, dtype=np.int64, count=_HEADER_INTS)
        self.offsets = np.frombuffer(self._mm, dtype=np.int64, count=n, offset=at)
        self.lengths = np.frombuffer(self._mm, dtype=np.int64, count=n, offset=at + 8 * n)
        self.worker_generations = np.frombuffer(
            self._mm, dtype=np.int64, count=self.num_workers, offset=at + 16 * n
        )
        self.states = np.frombuffer(
            self._mm, dtype=np.int32, count=n, offset=at + 16 * n + 8 * self.num_workers
        )
        self._pinned = self.header_bytes  # main process: ring offset pinned up to
        self._registered: list[int] = []  # main process: start addresses of pinned ranges
        #: this process: which `_GROW_STEP`s of the ring it has mapped (`map_pages`)
        self._mapped = bytearray(-(-self.size // _GROW_STEP))
        #: main process: most bytes reserved at once (`LoaderStats.ring_peak_bytes_in_flight`)
        self.peak_in_use = 0

    def __getstate__(self) -> dict[str, Any]:  # spawned workers reopen the file by name
        if self.path is None:
            raise RingError(
                "the loader's ring was unlinked (fork mode); spawned workers need "
                "LoaderConfig.multiprocessing_context set before the loader is built"
            )
        skip = {"_mm", "_all", "_base", "control", "offsets", "lengths", "states", "_fd"}
        skip |= {"worker_generations", "_finalizer", "_pinned", "_registered", "peak_in_use"}
        skip |= {"_owner"}
        return {k: v for k, v in self.__dict__.items() if k not in skip}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        assert self.path is not None  # pickled only when named (__getstate__)
        self._fd = os.open(self.path, os.O_RDWR)
        self._mm = mmap.mmap(self._fd, self.size)
        self._owner = None
        self._finalizer = weakref.finalize(self, os.close, self._fd)
        self._attach()

    def close(self) -> None:
        """Unlink the ring's file (if named); the mapping goes with the last reference."""
        self._unpin()
        if self._finalizer is not None:
            self._finalizer()

    # -- layout ---------------------------------------------------------------------------
    def view(self, offset: int, nbytes: int) -> np.ndarray:
        """(nbytes,) uint8 view of the ring from `offset`."""
        return self._all[offset : offset + nbytes]

    def shm_bytes(self) -> int:
        """Bytes of the ring file allocated in /dev/shm (header + pages of the arena)."""
        return self.header_bytes + int(self.control[_GROWN])

    def in_use(self) -> int:
        """Bytes of the batches reserved and not yet released (being made, in flight, held)."""
        return int(self.lengths[self._live()].sum())

    def _live(self) -> np.ndarray:
        """(num_slots,) bool: slots whose extent is in use.

        Delivered, or reserved in a generation its worker has not left: a worker still
        writing a batch of an abandoned iteration keeps its extent until it moves on.
        """
        moved_on = np.repeat(self.worker_generations, self.slots_per_worker)
        return (self.states == -1) | ((self.states > 0) & (self.states >= moved_on))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the ring's lock (a POSIX record lock: per process, so also between forked ones).

        Held for a few word writes only; waited for at most `_LOCK_TIMEOUT_S`.

        Raises:
            RingError: another process held it that long (a stopped worker).
        """
        deadline = time.monotonic() + _LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
                break
            except OSError as exc:
                if exc.errno not in (errno.EACCES, errno.EAGAIN):
                    raise
                if time.monotonic() >= deadline:
                    raise RingError(
                        f"a loader process held the shared-memory ring's lock for over "
                        f"{_LOCK_TIMEOUT_S:g} s (a stopped or hung worker); check the loader's "
                        "worker processes and restart the loader"
                    ) from None
                time.sleep(0.001)
        try:
            yield
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, 0)

    # -- worker side ----------------------------------------------------------------------
    @property
    def generation(self) -> int:
        """The current iteration generation (control word 0)."""
        return int(self.control[0])

    def begin_iteration(self, start_step: int = 0) -> int:
        """Main process: start a new iteration generation at `start_step`.

        Older undelivered slots become free; the next reservation is `start_step`'s.
        """
        with self._locked():
            self.control[_NEXT_STEP] = start_step
            self.control[0] += 1
            return int(self.control[0])

    def abandon(self, generation: int) -> None:
        """Main process: no batch of iteration `generation` will be received any more.

        Its workers stop making them (`is_current`) instead of finishing them privately and
        shipping them in fallback blocks nobody reads; their extents stay reserved until the
        workers enter a newer generation. A no-op for a generation already left.
        """
        self.control[_ABANDONED] = generation

    def is_current(self, generation: int) -> bool:
        """Worker: True while batches of iteration `generation` are still wanted."""
        return self.generation == generation and int(self.control[_ABANDONED]) != generation

    def enter(self, worker_id: int) -> int:
        """Worker: note that it works in the current generation now; return that generation.

        Its batches of older generations are finished, so their extents are free.
        """
        generation = self.generation
        self.worker_generations[worker_id % self.num_workers] = generation
        return generation

    def reserve(
        self, worker_id: int, step: int, nbytes: int, *, generation: int, timeout_s: float
    ) -> Extent | None:
        """Worker: return an extent of at least `nbytes` for batch `step`, or None.

        Waits for the reservations of the steps before (only the worker of the next step
        allocates), then for the first gap (by address) between the batches in flight that
        holds `nbytes`: when none does, for the main process to release batches, so prefetch
        adapts to the budget. None (the batch takes the fallback block) when the worker
        already has `slots_per_worker` batches in the ring, the batch exceeds the budget,
        the main process waits for this worker's batch while the training loop holds the
        rest (`_STALL_S` without a release), or after `timeout_s`; None also when the
        iteration (`generation`) ended or was abandoned (`is_current`: make no batch then).
        """
        nbytes = aligned(max(nbytes, 1))
        first = (worker_id % self.num_workers) * self.slots_per_worker
        began = progress = time.monotonic()
        delay, held = 0.0002, -1
        try:
            while self.is_current(generation):
                next_step = int(self.control[_NEXT_STEP])
                if next_step > step:  # not ours to allocate any more (a restart moved on)
                    return None
                now = time.monotonic()
                if next_step == step:
                    if nbytes > self.budget_bytes:
                        return None
                    extent = self._claim(first, nbytes, generation)
                    if extent is not None:
                        return extent if extent.slot >= 0 else None
                    live = int(self._live().sum())
                    if live != held:
                        held, progress = live, now
                    if self._stalled(worker_id, progress, now):
                        return None
                if now - began >= timeout_s:
                    return None
                time.sleep(delay)
                # The turn of a step comes within a batch's read time: poll it finely (a late
                # start idles the worker); room waits on the training loop: poll coarsely.
                delay = min(delay * 2, 0.005 if next_step == step else 0.001)
            return None
        finally:
            with self._locked():  # never undoes a `begin_iteration` made meanwhile
                if int(self.control[_NEXT_STEP]) == step and self.generation == generation:
                    self.control[_NEXT_STEP] = step + 1  # the next step's turn

    def _claim(self, first: int, nbytes: int, generation: int) -> Extent | None:
        """Take the first gap of at least `nbytes` and a free slot of slots [first, first + D).

        None: no gap yet; `_NO_SLOT`: every slot of the worker is in use.
        """
        live = self._live()
        free = np.flatnonzero(~live[first : first + self.slots_per_worker])
        if not len(free):
            return _NO_SLOT
        at, end = self.header_bytes, self.header_bytes + self.budget_bytes
        gap = None
        extents = zip(self.offsets[live].tolist(), self.lengths[live].tolist(), strict=True)
        for offset, length in sorted(extents):
            if offset - at >= nbytes:
                gap = (at, offset - at)
                break
            at = max(at, offset + length)
        if gap is None:
            if end - at < nbytes:
                return None
            gap = (at, end - at)
        slot = first + int(free[0])
        self.offsets[slot], self.lengths[slot] = gap[0], nbytes
        self.states[slot] = generation
        # never more than `nbytes`: the next worker may reserve right after it meanwhile
        return Extent(slot, gap[0], nbytes)

    def _stalled(self, worker_id: int, progress: float, now: float) -> bool:
        """True when the main process has waited `_STALL_S` for `worker_id`'s batch.

        Counted from the later of the wait's start and `progress` (the last release); a wait
        for an unknown worker counts as a wait for this one.
        """
        awaited = int(self.control[_AWAITED])
        if awaited not in (worker_id % self.num_workers + 1, -1):
            return False
        since = max(int(self.control[_AWAITED_SINCE]) / 1e9, progress)
        return now - since >= _STALL_S

    def grow(self, end: int) -> None:
        """Worker: allocate the arena's pages up to ring offset `end` (beyond: sparse).

        Raises:
            RingError: /dev/shm is full (names the sizes and the fix), never a SIGBUS later.
        """
        have = self.header_bytes + int(self.control[_GROWN])
        if end <= have:
            return
        want = min(-(-end // _GROW_STEP) * _GROW_STEP, self.size)
        what = (
            f"the ring growing from {have} to {want} bytes of at most {self.size} "
            "(header + LoaderConfig.shm_budget_bytes)"
        )
        _fallocate(self._fd, have, want - have, self.shm_dir, what)
        # two workers may grow at once: the word only ever understates the pages allocated
        self.control[_GROWN] = max(int(self.control[_GROWN]), want - self.header_bytes)

    def map_pages(self, offset: int, nbytes: int) -> None:
        """Worker: map the allocated pages of [offset, offset + nbytes) into this process at once.

        Extents move between workers, so a worker would otherwise take a page fault for each
        4 KiB page the first time it writes where another worker allocated; one
        `MADV_POPULATE_WRITE` per `_GROW_STEP` does that work without the faults. Call after
        `grow(offset + nbytes)`: only allocated pages are mapped, the ring never grows here.
        An optimisation: a kernel without the advice takes the faults as before.
        """
        first, last = offset // _GROW_STEP, -(-(offset + nbytes) // _GROW_STEP)
        if 0 not in self._mapped[first:last]:
            return
        start = first * _GROW_STEP
        end = min(last * _GROW_STEP, self.header_bytes + int(self.control[_GROWN]))
        with contextlib.suppress(OSError):
            self._mm.madvise(_MADV_POPULATE_WRITE, start, end - start)
        self._mapped[first:last] = b"\x01" * (last - first)

    # -- main side ------------------------------------------------------------------------
    def await_worker(self, worker_id: int | None) -> None:
        """Main process: note that it waits for a batch of `worker_id` (-1: unknown; None: done)."""
        if worker_id is None:
            self.control[_AWAITED] = 0
            return
        self.control[_AWAITED_SINCE] = time.monotonic_ns()
        self.control[_AWAITED] = worker_id + 1 if worker_id >= 0 else -1

    def deliver(self, slot: int, offset: int, length: int) -> np.ndarray:
        """Main process: mark `slot` held and return the (length,) base view of its extent.

        The slot is freed when the base view and every view made from it are gone.
        """
        self.states[slot] = -1
        self.peak_in_use = max(self.peak_in_use, self.in_use())
        if self.pin:
            self._pin()
        # Built over a memoryview (not a view of `_all`) so that numpy's view-chain collapsing
        # stops here: every array made from `base` keeps `base` alive, and the slot is freed
        # only when the last of them is gone.
        base = np.frombuffer(memoryview(self._mm)[offset : offset + length], dtype=np.uint8)
        weakref.finalize(base, _release, self.states, slot)
        return base

    def _pin(self) -> None:
        """Page-lock the pages allocated since the last call (CUDA only; an optimisation)."""
        if not torch.cuda.is_available():
            self.pin = False
            return
        have = self.shm_bytes()
        if have > self._pinned:
            start = self._pinned
            try:
                status = torch.cuda.cudart().cudaHostRegister(self._base + start, have - start, 0)
            except Exception:  # noqa: BLE001 - unpinned still works
                status = -1
            if int(status) != 0:  # cudaSuccess; else stop pinning (copies stay correct, slower)
                self.pin = False
                return
            self._registered.append(self._base + start)
            self._pinned = have

    def _unpin(self) -> None:
        """Unregister the page-locked ranges (before the mapping can go)."""
        while self._registered:
            with contextlib.suppress(Exception):
                torch.cuda.cudart().cudaHostUnregister(self._registered.pop())


_NO_SLOT = Extent(-1, 0, 0)


def _page(n: int) -> int:
    return -(-n // mmap.PAGESIZE) * mmap.PAGESIZE


def _fallocate(fd: int, offset: int, nbytes: int, shm_dir: str, what: str) -> None:
    """Allocate [offset, offset + nbytes) of the ring file.

    Raises:
        RingError: no space in `shm_dir` or over the file size limit (names sizes and the fix).
    """
    try:
        os.posix_fallocate(fd, offset, nbytes)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise RingError(too_small(shm_dir, nbytes, what, lower=_LOWER)) from exc
        if exc.errno == errno.EFBIG:
            raise RingError(
                f"the loader's shared-memory ring ({what}) exceeds this process's file size "
                f"limit at {offset + nbytes} bytes (RLIMIT_FSIZE, `ulimit -f`); raise the "
                "limit or lower LoaderConfig.shm_budget_bytes"
            ) from exc
        raise


_LOWER = "lower LoaderConfig.shm_budget_bytes, batch_size or num_workers"


def _release(states: np.ndarray, slot: int) -> None:
    states[slot] = 0


def _cleanup(path: str | None, owner: Owner | None, fd: int, pid: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
    if os.getpid() != pid:  # a forked worker's copy: the file belongs to the main process
        return
    if path is not None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    if owner is not None:
        release_owner(owner)


# -- owner locks: files of a killed loader are swept by the next one ----------------------
#: (lock path, fd) of the owner locks this process holds.
Owner = tuple[str, int]
_OWNER_LOCK = re.compile(r"drivetrain-owner-(\d+-[0-9a-f]{12})\.lock")
_HELD: set[int] = set()


def _drop_inherited_locks() -> None:
    """In a forked child: close the inherited lock descriptors.

    flock belongs to the open file: a worker keeping a copy would keep a dead main process's
    files "owned" for as long as the worker lives.
    """
    for fd in _HELD:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_drop_inherited_locks)


def claim_owner(shm_dir: str, kind: str) -> tuple[str, Owner]:
    """Sweep `shm_dir` of dead loaders' files, then return (name, owner lock) for new ones.

    The name is `<shm_dir>/drivetrain-<kind>-<pid>-<random>`; the caller names its files that
    or that plus `-<suffix>`, and holds the returned lock
    (`platform_lib.fsguard.hold_owner_lock`) for as long as the files exist; `release_owner`
    drops it. A process killed with its files in place loses the lock with its life, and the
    next `claim_owner` in any process (any PID namespace) sharing `shm_dir` removes them.
    """
    sweep_orphans(shm_dir)
    token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    lock = os.path.join(shm_dir, f"drivetrain-owner-{token}.lock")
    fd = hold_owner_lock(lock)
    _HELD.add(fd)
    return os.path.join(shm_dir, f"drivetrain-{kind}-{token}"), (lock, fd)


def release_owner(owner: Owner) -> None:
    """Remove the owner lock file, then release the lock (after the caller removed its files)."""
    lock, fd = owner
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lock)
    if fd in _HELD:
        _HELD.discard(fd)
        os.close(fd)


def sweep_orphans(shm_dir: str) -> list[str]:
    """Remove the files of loaders whose owner lock no process holds; return the owners removed.

    Only files named `drivetrain-<kind>-<token>[-<suffix>]` of a lock
    `drivetrain-owner-<token>.lock` are touched (`fsguard.remove_if_orphaned`: the one liveness rule).
    """
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return []
    removed = []
    for name in names:
        match = _OWNER_LOCK.fullmatch(name)
        if match is None:
            continue
        owned = re.compile(rf"drivetrain-[a-z]+-{match.group(1)}(-[\w.]+)?")
        files = [os.path.join(shm_dir, n) for n in names if owned.fullmatch(n)]
        if remove_if_orphaned(os.path.join(shm_dir, name), *files):
            removed.append(match.group(1))
            for late in os.listdir(shm_dir):  # made by the owner after the listing above
                if owned.fullmatch(late):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(shm_dir, late))
    return removed


class SlotWriter:
    """Worker side of one batch: reads land in its extent's raw area, arrays in its output area.

    Without an extent (no room in the ring) every buffer is private memory and `pack` sends
    the batch the slow way (one private shared block per batch).

    Args:
        ring: the loader's ring, or None (in-process loading, output measurement).
        extent: the batch's extent (`Ring.reserve`), or None.
        raw_bytes: size of the raw area: the batch's sample bytes, each 64-byte aligned.
    """

    def __init__(self, ring: Ring | None, extent: Extent | None, raw_bytes: int = 0) -> None:
        self.ring, self.extent = ring, extent
        self._raw_bytes = _align(raw_bytes)
        self._raw_used = self._out_used = 0
        self._refs = 0  # refs and by-value tensors made so far: what the main process restores
        self.overflowed = False
        #: (address, size) of the raw buffers handed out without an extent
        self.private_raw: list[tuple[int, int]] = []

    @property
    def slot(self) -> int | None:
        """The batch's slot in the ring header, or None without an extent."""
        return None if self.extent is None else self.extent.slot

    def _take(self, start: int, nbytes: int) -> np.ndarray:
        """The (nbytes,) view of the extent from `start` (relative), its pages allocated first."""
        assert self.ring is not None and self.extent is not None  # only with an extent
        offset = self.extent.offset + start
        self.ring.grow(offset + nbytes)
        self.ring.map_pages(offset, nbytes)
        return self.ring.view(offset, nbytes)

    def raw_buffer(self, size: int, *, what: str) -> memoryview:
        """Return a writable buffer of `size` bytes for sample bytes.

        Raises:
            RingError: the batch's samples exceed the raw area sized from the index (the
                index changed under the loader), or /dev/shm is full; names `what`.
        """
        if self.extent is None:
            buffer = np.empty(size, dtype=np.uint8)
            self.private_raw.append((int(buffer.ctypes.data), size))
            return buffer.data
        start, end = self._raw_used, self._raw_used + size
        if end > self._raw_bytes:
            raise RingError(
                f"{what} ({size} bytes) does not fit the batch's raw area in the ring "
                f"({self._raw_bytes} bytes, {self._raw_used} used): the index changed "
                "under the loader; run `drivetrain data validate` and rebuild the loader"
            )
        self._raw_used = _align(end)
        return self._take(start, size).data

    def holds_raw(self, address: int) -> bool:
        """True when `address` lies in a raw buffer this writer handed out without a slot."""
        return any(start <= address < start + size for start, size in self.private_raw)

    def output_array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        """Return an uninitialised array in the output area, or None when the extent is full.

        Raises:
            RingError: /dev/shm is full (the pages are allocated before the array is returned).
        """
        if self.extent is None:
            return None
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        start = self._raw_bytes + self._out_used
        if start + nbytes > self.extent.capacity:
            self.overflowed = True
            return None
        self._out_used = _align(self._out_used + nbytes)
        return self._take(start, nbytes).view(dtype).reshape(shape)

    def stack_tensors(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """`torch.stack` into the output area (collate without a fresh allocation)."""
        first = tensors[0]
        dtype = torch.empty(0, dtype=first.dtype).numpy().dtype
        out = self.output_array((len(tensors), *first.shape), dtype)
        if out is None:
            return torch.stack(tensors, 0)
        return torch.stack(tensors, 0, out=torch.from_numpy(out))

    def pack(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Return the batch skeleton to send through the worker pipe.

        Arrays in the extent become refs; large arrays elsewhere are copied into the output
        area (or, when it is full, the whole batch goes through a private shared block). The
        extent shrinks to the bytes the batch used.
        """
        if self.ring is None or self.extent is None:
            return pack_arrays(_buffers_to_arrays(batch))
        packed, restore = {}, []
        for key, value in batch.items():
            made = self._refs
            packed[key] = self._replace(value)
            if self._refs > made:
                restore.append(key)
        slot, offset, _ = self.extent
        if self.overflowed:
            self.ring.states[slot] = 0  # give the extent back: this batch goes the slow way
            return pack_arrays(_buffers_to_arrays(batch))
        length = self._raw_bytes + self._out_used
        self.ring.lengths[slot] = length
        packed[RING_KEY] = (slot, offset, length, tuple(restore))
        return packed

    def _ref(self, address: int, nbytes: int, shape, dtype: str, kind: str) -> _Ref | None:
        assert self.ring is not None and self.extent is not None  # only with an extent
        offset = address - self.ring._base
        start = self.extent.offset
        if not (start <= offset and offset + nbytes <= start + self.extent.capacity):
            return None
        self._refs += 1
        return _Ref(offset, tuple(shape), dtype, kind)

    def _replace(self, obj: Any) -> Any:
        if isinstance(obj, np.ndarray) and obj.dtype != object:
            return self._array(obj, "ndarray")
        if isinstance(obj, torch.Tensor):
            return self._array(obj.numpy(), "tensor") if obj.device.type == "cpu" else obj
        if isinstance(obj, memoryview):
            array = np.frombuffer(obj, dtype=np.uint8)
            ref = self._ref(int(array.ctypes.data), array.nbytes, array.shape, "|u1", "buffer")
            return ref if ref is not None else bytes(obj)
        if isinstance(obj, dict):
            return {k: self._replace(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self._replace(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self._replace(v) for v in obj)
        return obj

    def _array(self, array: np.ndarray, kind: str) -> Any:
        if array.flags.c_contiguous and array.nbytes:
            ref = self._ref(
                int(array.ctypes.data), array.nbytes, array.shape, array.dtype.str, kind
            )
            if ref is not None:
                return ref
        if array.nbytes < _MIN_BYTES:  # by value: torch would share a tensor in the feeder thread
            if kind != "tensor":
                return array
            self._refs += 1
            return to_small_tensor(torch.from_numpy(array))
        out = self.output_array(array.shape, array.dtype)
        if out is None:
            return array
        out[...] = array
        return self._ref(int(out.ctypes.data), out.nbytes, out.shape, out.dtype.str, kind)


def _buffers_to_arrays(obj: Any) -> Any:
    """Slow path: copy every buffer out of the slot.

    Memoryviews cannot be pickled, and the worker's pipe pickles after the slot may be reused.
    """
    if isinstance(obj, memoryview):
        return obj.tobytes()
    if isinstance(obj, np.ndarray):
        return obj.copy()
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, dict):
        return {k: _buffers_to_arrays(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_buffers_to_arrays(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_buffers_to_arrays(v) for v in obj)
    return obj


def unpack_batch(batch: dict[str, Any], ring: Ring | None) -> dict[str, Any]:
    """Main process: turn refs into views of the batch's extent (or unpack a slow-path batch).

    Only the top-level entries the worker put refs in are walked (`SlotWriter.pack` names
    them): a batch's cuboid lists alone are thousands of objects.
    """
    where = batch.pop(RING_KEY, None)
    if where is None or ring is None:
        return unpack_arrays(batch)
    slot, offset, length, restore = where
    base = ring.deliver(slot, offset, length)
    for key in restore:
        batch[key] = _restore(batch[key], base, offset)
    return batch


def _restore(obj: Any, base: np.ndarray, start: int) -> Any:
    if isinstance(obj, _Ref):
        dtype = np.dtype(obj.dtype)
        count = int(np.prod(obj.shape, dtype=np.int64))
        begin = obj.offset - start
        array = base[begin : begin + count * dtype.itemsize].view(dtype).reshape(obj.shape)
        if obj.kind == "tensor":
            return torch.from_numpy(array)
        if obj.kind == "buffer":
            return array.data.toreadonly()
        return array
    if isinstance(obj, _SmallTensor):
        return restore_small(obj)
    if isinstance(obj, dict):
        return {k: _restore(v, base, start) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_restore(v, base, start) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_restore(v, base, start) for v in obj)
    return obj
