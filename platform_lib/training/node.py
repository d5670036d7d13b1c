r"""One host's part of a multi-node run: a torch elastic agent running `train()` on its workers.

    python -m platform_lib.training.node --nnodes 2 --nproc-per-node 1 \
        --rdzv-endpoint 10.0.0.1:29400 --run-id job-7 --max-restarts 2 \
        --preset small --overrides '{"checkpoint.folder": "s3://bucket/job-7/ckpt"}' \
        --dataset /data/ds --output /scratch/job-7

Start it once per host with the same rendezvous endpoint and run id, as the Flyte PyTorch
plugin does in each pod of an elastic PyTorchJob; restarts, replacement hosts and what it
writes and prints: `run_node`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from platform_lib.training.config import TrainConfig
from platform_lib.training.launch import fresh_store_per_restart
from platform_lib.training.overrides import resolve_train_config
from platform_lib.training.train import train

__all__ = ["main", "node_worker", "run_node"]


def node_worker(cfg: TrainConfig, dataset_dir: str, output_dir: str) -> dict[str, Any]:
    """Worker body: record this worker's rank assignment, then `train()`.

    Returns:
        {"rank": global rank, "result": TrainResult as a dict on rank 0, else None}.
    """
    env = {
        k: os.environ.get(k, "")
        for k in (
            "RANK",
            "LOCAL_RANK",
            "GROUP_RANK",
            "WORLD_SIZE",
            "LOCAL_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "TORCHELASTIC_RESTART_COUNT",
        )
    }
    rank, attempt = int(env["RANK"]), int(env["TORCHELASTIC_RESTART_COUNT"] or 0)
    folder = Path(output_dir) / "ranks"
    folder.mkdir(parents=True, exist_ok=True)
    record = {"hostname": socket.gethostname(), "pid": os.getpid(), **env}
    (folder / f"attempt-{attempt}-rank-{rank}.json").write_text(json.dumps(record, sort_keys=True))
    result = train(cfg, dataset_dir, output_dir)
    return {"rank": rank, "result": dataclasses.asdict(result) if result is not None else None}


def run_node(
    cfg: TrainConfig,
    dataset_dir: str,
    output_dir: str,
    *,
    nnodes: int,
    nproc_per_node: int,
    rdzv_endpoint: str,
    run_id: str,
    max_restarts: int,
    rdzv_host: bool | None = None,
    local_addr: str | None = None,
    rdzv_timeout_s: int = 300,
) -> list[dict[str, Any]]:
    """Run this host's elastic agent until the job finishes; return its workers' returns.

    The c10d rendezvous assigns node ranks in join order and global ranks node by node. When
    any worker or a whole host dies, the surviving agents stop their workers and rendezvous
    again (up to `max_restarts` times); a replacement host (the same command started again)
    joins and every worker resumes from the newest complete checkpoint in
    `checkpoint.folder`, which must therefore be storage every host reaches (object storage).
    Each worker records its rank assignment in `<output>/ranks/attempt-<A>-rank-<R>.json`;
    `main` prints one JSON line `{"node": ..., "workers": [{"rank", "result"}]}`: the
    TrainResult of global rank 0 where it runs, None for every other rank.

    Args:
        cfg: the training config.
        dataset_dir: the published dataset (same on every host).
        output_dir: the run folder (shared by the hosts, or per host for local checkpoints).
        nnodes: hosts in the job.
        nproc_per_node: worker processes per host (one per accelerator).
        rdzv_endpoint: host:port of the c10d rendezvous store.
        run_id: the job's id, the same on every host.
        max_restarts: worker-group restarts before giving up.
        rdzv_host: this agent serves the c10d store at `rdzv_endpoint`. None lets torch
            decide by matching the endpoint against this machine's hostname and addresses,
            which fails for an address that the hostname does not resolve to (e.g. one
            assigned inside a network namespace).
        local_addr: the address other hosts reach this one at; the host of global rank 0
            publishes it as MASTER_ADDR. None: this machine's fully qualified hostname.
        rdzv_timeout_s: how long to wait for the other hosts to join, in s.

    Raises:
        torch.distributed.elastic.multiprocessing.errors.ChildFailedError: the workers kept
            failing after `max_restarts` restarts (the message holds their tracebacks).
        torch.distributed.elastic.rendezvous.RendezvousTimeoutError: the other hosts did not
            join within `rdzv_timeout_s`.
    """
    config = LaunchConfig(
        min_nodes=nnodes,
        max_nodes=nnodes,
        nproc_per_node=nproc_per_node,
        run_id=run_id,
        rdzv_backend="c10d",
        rdzv_endpoint=rdzv_endpoint,
        rdzv_configs={
            "timeout": rdzv_timeout_s,
            "join_timeout": rdzv_timeout_s,
            **({} if rdzv_host is None else {"is_host": rdzv_host}),
        },
        max_restarts=max_restarts,
        monitor_interval=0.5,
        start_method="spawn",
        local_addr=local_addr,
    )
    from platform_lib.training import node  # by module name, also under `python -m`

    # a fresh rendezvous store per round: without it a surviving rank-0 agent never publishes
    # the new round's MASTER_ADDR/PORT and a replacement host waits forever (launch.py)
    with fresh_store_per_restart():
        results = elastic_launch(config, node.node_worker)(cfg, str(dataset_dir), str(output_dir))
    return [results[local_rank] for local_rank in sorted(results)]


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line (see the module docstring), run the agent, print its JSON line."""
    parser = argparse.ArgumentParser(
        prog="python -m platform_lib.training.node", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--nnodes", type=int, required=True, help="hosts in the job")
    parser.add_argument("--nproc-per-node", type=int, default=1, help="workers on this host")
    parser.add_argument("--rdzv-endpoint", required=True, help="HOST:PORT of the c10d store")
    parser.add_argument("--run-id", required=True, help="job id shared by every host")
    parser.add_argument("--max-restarts", type=int, default=1, help="worker-group restarts")
    parser.add_argument(
        "--rdzv-host",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="this host serves the c10d store (default: decided by torch)",
    )
    parser.add_argument(
        "--local-addr",
        default=None,
        help="address other hosts reach this one at (default: its hostname)",
    )
    parser.add_argument("--preset", default="small", help="training preset")
    parser.add_argument("--overrides", default="", help="JSON object of config overrides")
    parser.add_argument("--seed", type=int, default=0, help="training seed")
    parser.add_argument("--dataset", required=True, help="published dataset folder or URL")
    parser.add_argument("--output", required=True, help="this host's run folder")
    args = vars(parser.parse_args(argv))  # the options left after these are run_node's keywords
    cfg = resolve_train_config(args.pop("preset"), args.pop("overrides"), args.pop("seed"))
    workers = run_node(cfg, args.pop("dataset"), args.pop("output"), **args)
    print(json.dumps({"node": socket.gethostname(), "workers": workers}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
