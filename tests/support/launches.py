"""Run `launch_local` in a child process, as a pod's entrypoint runs the elastic agent.

The child is the agent (SIGTERM to it is a pod eviction) and its combined stdout/stderr is the
log a user would read (`kubectl logs`); the fault tests assert on both and feed the triage
corpus from them. Used as `python tests/support/launches.py '<json request>'`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from platform_lib.faults import ENV_VAR
from platform_lib.training.config import TrainConfig


@dataclasses.dataclass
class LaunchOutcome:
    """What the child left: exit status, log, rank 0's TrainResult fields (when it finished)."""

    returncode: int
    log: str
    result: dict[str, Any] | None
    wall_s: float


def run_launcher(
    cfg: TrainConfig,
    dataset: Path,
    out: Path,
    *,
    nproc: int = 2,
    max_restarts: int = 0,
    faults: list[dict[str, Any]] | None = None,
    timeout_s: float = 240,
) -> LaunchOutcome:
    """Run launch_local(cfg, dataset, out, nproc, max_restarts) in a child with `faults` injected."""
    request = {
        "config": cfg.to_dict(),
        "dataset": str(dataset),
        "out": str(out),
        "nproc": nproc,
        "max_restarts": max_restarts,
    }
    env = {**os.environ, ENV_VAR: json.dumps(faults or []), "PYTHONUNBUFFERED": "1"}
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, __file__, json.dumps(request)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    log = proc.stdout + proc.stderr
    result = next(
        (
            json.loads(line[len("RESULT ") :])
            for line in proc.stdout.splitlines()
            if line.startswith("RESULT ")
        ),
        None,
    )
    return LaunchOutcome(proc.returncode, log, result, time.monotonic() - start)


def _main(request: dict[str, Any]) -> None:
    from platform_lib.training.launch import launch_local

    result = launch_local(
        TrainConfig.from_dict(request["config"]),
        request["dataset"],
        request["out"],
        nproc=request["nproc"],
        max_restarts=request["max_restarts"],
    )
    print("RESULT " + json.dumps(dataclasses.asdict(result)), flush=True)


if __name__ == "__main__":
    _main(json.loads(sys.argv[1]))


def failing_worker(mode: str) -> None:
    """An elastic worker that fails like a training rank: "preempted" (both ranks raise
    PreemptedError after a collective) or "killed" (rank 1 SIGKILLs itself, rank 0 then
    fails in the next collective)."""
    import signal

    import torch
    import torch.distributed as dist

    from platform_lib.training.preemption import PreemptedError

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.all_reduce(torch.ones(1))
    if mode == "preempted":
        raise PreemptedError(
            f"rank {rank} pid {os.getpid()}: preempted by SIGTERM after step 3; final "
            "checkpoint step-000003 complete; restart to resume (recoverable)",
            step=3,
            checkpoint="step-000003",
            signal_name="SIGTERM",
        )
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(1.0)
    dist.all_reduce(torch.ones(1))


def launch_failing(mode: str) -> BaseException:
    """Run `failing_worker(mode)` on 2 elastic ranks; return the launch's ChildFailedError."""
    import uuid

    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from platform_lib.training.launch import find_free_port, fresh_store_per_restart

    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=2,
        run_id=uuid.uuid4().hex[:8],
        rdzv_backend="c10d",
        rdzv_endpoint=f"127.0.0.1:{find_free_port()}",
        max_restarts=0,
        monitor_interval=0.2,
        start_method="spawn",
    )
    try:
        with fresh_store_per_restart():
            elastic_launch(config, failing_worker)(mode)
    except Exception as error:  # noqa: BLE001 - the failure is the result
        return error
    raise AssertionError(f"the {mode} launch did not fail")
