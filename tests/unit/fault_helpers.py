"""Run `launch_local` in a child process, as a pod's entrypoint runs the elastic agent.

The child is the agent (SIGTERM to it is a pod eviction) and its combined stdout/stderr is the
log a user would read (`kubectl logs`); the fault tests assert on both and feed the triage
corpus from them. Used as `python fault_helpers.py '<json request>'`.
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

from platform_lib.training.config import TrainConfig
from platform_lib.training.faults import ENV_VAR


@dataclasses.dataclass
class LaunchOutcome:
    """What the child left: exit status, log, rank 0's TrainResult fields (when it finished)."""

    returncode: int
    log: str
    result: dict[str, Any] | None
    wall_s: float


def run_launcher(cfg: TrainConfig, dataset: Path, out: Path, *, nproc: int = 2, max_restarts: int = 0,
                 faults: list[dict[str, Any]] | None = None, timeout_s: float = 240) -> LaunchOutcome:
    """Run launch_local(cfg, dataset, out, nproc, max_restarts) in a child with `faults` injected."""
    request = {"config": cfg.to_dict(), "dataset": str(dataset), "out": str(out), "nproc": nproc,
               "max_restarts": max_restarts}
    env = {**os.environ, ENV_VAR: json.dumps(faults or []), "PYTHONUNBUFFERED": "1"}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, __file__, json.dumps(request)], env=env, capture_output=True,
                          text=True, timeout=timeout_s, check=False)
    log = proc.stdout + proc.stderr
    result = next((json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines()
                   if line.startswith("RESULT ")), None)
    return LaunchOutcome(proc.returncode, log, result, time.monotonic() - start)


def _main(request: dict[str, Any]) -> None:
    from platform_lib.training.launch import launch_local

    result = launch_local(TrainConfig.from_dict(request["config"]), request["dataset"], request["out"],
                          nproc=request["nproc"], max_restarts=request["max_restarts"])
    print("RESULT " + json.dumps(dataclasses.asdict(result)), flush=True)


if __name__ == "__main__":
    _main(json.loads(sys.argv[1]))
