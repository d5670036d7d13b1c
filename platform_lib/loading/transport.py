"""Move a batch's arrays and tensors from a worker to the main process through one shared-memory block.

Pickling decoded images through the worker pipe costs two copies and a pipe transfer per
array, so the worker copies every ndarray and CPU tensor of at least `MIN_BYTES` into one
shared-memory uint8 tensor (the "arena") and leaves a small `_Slot` in its place; the main
process turns the slots back into zero-copy views of the arena (the views keep it alive).
Smaller tensors travel by value (`_SmallTensor`), everything else by pickle. No tensor is left
for the pipe's pickler, which would move it to shared memory in the queue's feeder thread
where a full /dev/shm loses the batch: every block is allocated here, in the worker, after a
free-space check, and a full /dev/shm is a `RingError` naming the size and the fix, re-raised
in the main process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from platform_lib.loading.errors import RingError
from schemas.batch import ByteRuns

__all__ = [
    "ARENA_KEY",
    "MIN_BYTES",
    "SHM_FIX",
    "ByteRuns",
    "check_space",
    "pack_arrays",
    "restore_small",
    "to_small_tensor",
    "too_small",
    "unpack_arrays",
]

ARENA_KEY = "__arena__"
MIN_BYTES = 16 * 1024
#: Where torch allocates shared-memory blocks (`shm_open`).
TORCH_SHM_DIR = "/dev/shm"
#: How to enlarge /dev/shm, for messages.
SHM_FIX = (
    "docker run --shm-size=..., or a Kubernetes emptyDir with medium: Memory and a "
    "sizeLimit mounted at /dev/shm"
)


@dataclass(frozen=True)
class _Slot:
    offset: int
    shape: tuple[int, ...]
    dtype: str
    tensor: bool = False
    """restore as a torch.Tensor (else an ndarray)"""


@dataclass(frozen=True)
class _SmallTensor:
    """A small CPU tensor travelling by value (never through torch's shared-memory pickling)."""

    array: np.ndarray


def to_small_tensor(tensor: torch.Tensor) -> _SmallTensor:
    """Wrap a CPU tensor so that it pickles by value (a copy of its data)."""
    return _SmallTensor(tensor.detach().numpy().copy())


def restore_small(obj: _SmallTensor) -> torch.Tensor:
    """Turn a `_SmallTensor` back into a tensor (main-process side)."""
    return torch.from_numpy(obj.array)


def too_small(
    shm_dir: str,
    need: int,
    what: str,
    *,
    subject: str = "the loader's shared-memory ring",
    lower: str = "lower batch_size, num_workers or LoaderConfig.prefetch_depth",
) -> str:
    """The message for `shm_dir` lacking `need` bytes for `subject` (`what`: its layout)."""
    st = os.statvfs(shm_dir)
    total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    return (
        f"{subject} needs {need / 2**30:.2f} GiB ({need} bytes; {what}) but {shm_dir} has "
        f"{free / 2**30:.2f} GiB free of {total / 2**30:.2f} GiB: enlarge {shm_dir} "
        f"({SHM_FIX}), or {lower}"
    )


def check_space(shm_dir: str, need: int, what: str, **message: str) -> None:
    """Raise `RingError` when `shm_dir` has less than `need` bytes free (before allocating).

    Raises:
        RingError: `shm_dir` is missing or too small (names sizes and the fix; `message` goes
            to `too_small`).
    """
    try:
        st = os.statvfs(shm_dir)
    except FileNotFoundError:
        raise RingError(
            f"{shm_dir} does not exist: the loader's shared-memory ring needs a tmpfs "
            "there; set LoaderConfig.shm_dir to one"
        ) from None
    if need > st.f_bavail * st.f_frsize:
        raise RingError(too_small(shm_dir, need, what, **message))


#: `too_small` wording for a batch's private block (the ring's fallback).
_FALLBACK = {
    "subject": "a batch's private shared-memory block (no free ring slot: the training loop "
    "holds many batches, or the batch outgrew its slot)",
    "lower": "keep fewer batches alive (copy.deepcopy / .clone() the ones you keep) or lower "
    "batch_size or num_workers",
}


def _as_array(obj: Any) -> np.ndarray | None:
    """The data of an ndarray or CPU tensor (a view), else None."""
    if isinstance(obj, np.ndarray):
        return obj if obj.dtype != object else None
    if isinstance(obj, torch.Tensor) and obj.device.type == "cpu":
        return obj.detach().numpy()
    return None


def _collect(obj: Any, found: dict[int, tuple[np.ndarray, bool]]) -> None:
    """Gather (data, is a tensor) of every ndarray / CPU tensor of `MIN_BYTES` or more, by id."""
    array = _as_array(obj)
    if array is not None:
        if array.nbytes >= MIN_BYTES:
            found[id(obj)] = (array, isinstance(obj, torch.Tensor))
    elif isinstance(obj, dict):
        for value in obj.values():
            _collect(value, found)
    elif isinstance(obj, list | tuple):
        for value in obj:
            _collect(value, found)


def _replace(obj: Any, slots: dict[int, _Slot]) -> Any:
    if isinstance(obj, np.ndarray):
        return slots.get(id(obj), obj)
    if isinstance(obj, torch.Tensor):
        if id(obj) in slots:
            return slots[id(obj)]
        return to_small_tensor(obj) if obj.device.type == "cpu" else obj
    if isinstance(obj, dict):
        return {k: _replace(v, slots) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_replace(v, slots) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_replace(v, slots) for v in obj)
    return obj


def _new_shared_bytes(size: int) -> torch.Tensor:
    """Return an uninitialised (size,) uint8 tensor in shared memory (/dev/shm).

    `UntypedStorage._new_shared` allocates the shared block directly; `share_memory_()` on a
    fresh tensor would allocate privately, then fault in and copy every page (~1.6x slower for
    a 37 MB batch of 16 x 6 decoded 480x272 images). Falls back to it if the private API goes.

    Raises:
        RingError: /dev/shm lacks `size` bytes (checked first; a race with another process
            that fills it is caught from torch's allocation).
    """
    what = f"{size / 2**20:.1f} MiB of batch arrays"
    check_space(TORCH_SHM_DIR, size, what, **_FALLBACK)
    new_shared = getattr(torch.UntypedStorage, "_new_shared", None)
    try:
        if new_shared is None:
            return torch.empty(size, dtype=torch.uint8).share_memory_()
        return torch.empty(0, dtype=torch.uint8).set_(new_shared(size))
    except RuntimeError as exc:  # "unable to allocate shared memory(shm) ... No space left"
        if "space" not in str(exc):
            raise
        raise RingError(too_small(TORCH_SHM_DIR, size, what, **_FALLBACK)) from exc


def pack_arrays(batch: dict[str, Any]) -> dict[str, Any]:
    """Return `batch` with its large arrays/tensors in one shared-memory arena (worker side).

    Raises:
        RingError: /dev/shm is too full for the arena (names its size and the fix).
    """
    arrays: dict[int, tuple[np.ndarray, bool]] = {}
    _collect(batch, arrays)
    slots, offset = {}, 0
    for key, (array, tensor) in arrays.items():
        slots[key] = _Slot(offset, tuple(array.shape), array.dtype.str, tensor)
        offset += -(-array.nbytes // 64) * 64  # 64-byte aligned views
    packed = _replace(batch, slots)
    if not arrays:
        packed[ARENA_KEY] = None  # packed (small tensors by value), no arena
        return packed
    arena = _new_shared_bytes(offset)
    flat = arena.numpy()
    for key, (array, _) in arrays.items():
        start = slots[key].offset
        flat[start : start + array.nbytes] = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    packed[ARENA_KEY] = arena
    return packed


def _restore(obj: Any, flat: np.ndarray | None) -> Any:
    if isinstance(obj, _Slot) and flat is not None:
        dtype = np.dtype(obj.dtype)
        count = int(np.prod(obj.shape, dtype=np.int64))
        array = np.frombuffer(flat, dtype=dtype, count=count, offset=obj.offset).reshape(obj.shape)
        return torch.from_numpy(array) if obj.tensor else array
    if isinstance(obj, _SmallTensor):
        return restore_small(obj)
    if isinstance(obj, dict):
        return {k: _restore(v, flat) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_restore(v, flat) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_restore(v, flat) for v in obj)
    return obj


def unpack_arrays(batch: dict[str, Any]) -> dict[str, Any]:
    """Return `batch` with slots and small tensors restored, as views of its arena (main process).

    A batch `pack_arrays` never saw (no `ARENA_KEY`: read in the main process) is returned as
    is, without a walk over its objects.
    """
    if ARENA_KEY not in batch:
        return batch
    arena = batch.pop(ARENA_KEY)
    return _restore(batch, None if arena is None else arena.numpy())


class WorkerFailure:
    """A documented error raised in a loader worker, handed to the main process as data.

    torch re-raises a worker's exception with the worker's traceback folded into its message;
    a `DatasetError` or `UserError` instead travels pickled in the batch's place and is raised
    again, unchanged, by the main process (one line, its own class).
    """

    def __init__(self, error: BaseException) -> None:
        self.error = error
