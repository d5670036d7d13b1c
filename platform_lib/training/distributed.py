"""Process group setup: one backend switch (gloo on CPU, nccl on CUDA) and device selection.

`init_distributed` reads the torchrun / torch elastic environment (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT). Without it, it starts a single-process group
(world size 1) in the calling process, so `train()` also runs directly in a test or notebook.
"""

from __future__ import annotations

import atexit
import functools
import gc
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = [
    "DistContext",
    "destroy_distributed",
    "init_distributed",
    "resolve_backend",
    "resolve_device",
    "skip_collection_at_exit",
]


@dataclass(kw_only=True, frozen=True)
class DistContext:
    """Where this process sits in the job."""

    rank: int
    """global rank, 0 .. world_size - 1"""
    local_rank: int
    """rank on this node (selects the CUDA device)"""
    world_size: int
    """number of processes in the job"""
    backend: str
    """process group backend, "gloo" or "nccl"."""
    device: torch.device
    """device of this rank's model and batches"""
    owns_group: bool
    """True when `init_distributed` created the process group (and must destroy it)"""

    @property
    def is_main(self) -> bool:
        """True on rank 0, the rank that writes metrics and returns results."""
        return self.rank == 0


def resolve_backend(backend: str = "auto") -> str:
    """Return the process group backend for `backend` ("auto", "gloo" or "nccl").

    "auto" picks nccl when CUDA is available and gloo otherwise.

    Raises:
        ValueError: for an unknown name, or "nccl" without a CUDA device.
    """
    if backend == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', got {backend!r}")
    if backend == "nccl" and not torch.cuda.is_available():
        raise ValueError("backend 'nccl' needs a CUDA device; use backend='gloo' or 'auto' on CPU")
    return backend


def resolve_device(backend: str, local_rank: int) -> torch.device:
    """Return cuda:<local_rank> for nccl, cpu for gloo."""
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init_distributed(backend: str = "auto", timeout_s: float | None = None) -> DistContext:
    """Join (or create) the default process group and pick this rank's device.

    Reuses an already initialised default group. Otherwise uses the torchrun environment
    when RANK and WORLD_SIZE are set, else creates a world-size-1 group in this process.
    `timeout_s` bounds every collective of the group (None: torch's default, 10 min for
    nccl, 30 min for gloo).

    Raises:
        ValueError: from `resolve_backend`.
    """
    name = resolve_backend(backend)
    owns_group = not dist.is_initialized()
    launched = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if not owns_group:
        name = dist.get_backend()
    local_rank = int(os.environ.get("LOCAL_RANK", "0")) if launched or not owns_group else 0
    device = resolve_device(name, local_rank)
    if owns_group and launched:
        skip_collection_at_exit()  # a launcher's worker: it exits when the run ends
        dist.init_process_group(
            name,
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
            device_id=device if device.type == "cuda" else None,
            timeout=None if timeout_s is None else timedelta(seconds=timeout_s),
        )
    elif owns_group:
        dist.init_process_group(name, store=dist.HashStore(), rank=0, world_size=1)
    return DistContext(
        rank=dist.get_rank(),
        local_rank=local_rank,
        world_size=dist.get_world_size(),
        backend=name,
        device=device,
        owns_group=owns_group,
    )


def destroy_distributed(ctx: DistContext) -> None:
    """Destroy the default process group if `init_distributed` created it."""
    if ctx.owns_group and dist.is_initialized():
        dist.destroy_process_group()


@functools.cache  # registered once per process
def skip_collection_at_exit() -> None:
    """At interpreter exit, keep the garbage collector off the objects alive at that moment.

    CPython's finalisation runs full collections over every object a worker created (torch,
    flytekit, MLflow: millions) after the last atexit handler, and the elastic agent returns
    only after every worker has exited (docs/performance-history.md). `gc.freeze()` moves them
    to the permanent generation, which those collections skip (Python docs, `gc.freeze`).
    Objects left in reference cycles are then not finalised, so files must be closed
    explicitly (the run's writers use `with` blocks).
    """
    atexit.register(gc.freeze)
