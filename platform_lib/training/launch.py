"""Run `train()` on N local processes with torch elastic (tests and the CLI, no Flyte needed)."""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Iterator

from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from platform_lib.training.config import TrainConfig
from platform_lib.training.train import TrainResult, train

__all__ = ["DISABLE_SHARED_STORE", "find_free_port", "fresh_store_per_restart", "launch_local"]


def find_free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_local(
    cfg: TrainConfig, dataset_dir: str, output_dir: str, nproc: int = 2, max_restarts: int = 0
) -> TrainResult:
    """Train with `nproc` spawned worker processes on this machine (c10d rendezvous on 127.0.0.1).

    Workers import `platform_lib` from the installed package (spawn start method), so the
    current folder does not matter. When a worker fails, torch elastic stops all of them and
    starts the group again, up to `max_restarts` times; `train()` resumes from the last
    complete checkpoint. On SIGTERM the agent forwards it to the workers, which save a final
    checkpoint (`cfg.checkpoint.preemption_grace_s`) before the agent kills them
    (its shutdown timeout is the grace period + 5 s).

    Returns:
        Rank 0's TrainResult.

    Raises:
        ValueError: if `nproc` < 1 or `max_restarts` < 0.
        torch.distributed.elastic.multiprocessing.errors.ChildFailedError: a worker failed
            (after the restarts); the message holds its traceback.
        torch.distributed.elastic.multiprocessing.api.SignalException: this process got
            SIGTERM/SIGINT (the workers were preempted).
    """
    if nproc < 1 or max_restarts < 0:
        raise ValueError(f"nproc must be >= 1 and max_restarts >= 0, got {nproc}, {max_restarts}")
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=f"drivetrain-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint=f"127.0.0.1:{find_free_port()}",
        rdzv_configs={"timeout": 120},
        max_restarts=max_restarts,
        monitor_interval=0.5,
        start_method="spawn",
        shutdown_timeout=int(cfg.checkpoint.preemption_grace_s) + 5,
    )
    with fresh_store_per_restart():
        results = elastic_launch(config, train)(cfg, str(dataset_dir), str(output_dir))
    return results[0]


#: torch elastic's c10d rendezvous shares its TCPStore with the workers by default, without a
#: per-restart key prefix: after an elastic restart, gloo/NCCL of the new workers can read the
#: old workers' addresses and fail ("Gloo connectFullMesh failed ... Connection refused").
#: torch's documented workaround (pytorch/pytorch#135712) is this variable: each rendezvous
#: round then gets a fresh store, hosted by rank 0.
DISABLE_SHARED_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


@contextlib.contextmanager
def fresh_store_per_restart() -> Iterator[None]:
    """Set DISABLE_SHARED_STORE=1 for the elastic agent started inside (restored afterwards)."""
    previous = os.environ.get(DISABLE_SHARED_STORE)
    os.environ[DISABLE_SHARED_STORE] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(DISABLE_SHARED_STORE, None)
        else:
            os.environ[DISABLE_SHARED_STORE] = previous
