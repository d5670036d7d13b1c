"""Checkpoint blocking time: synchronous vs async DCP save, against limits and a peer.

Runs `--world-size` gloo ranks on this machine (torch.multiprocessing, c10d on 127.0.0.1). For
each workload (the BEV-fusion presets and an MLP sized by `--mlp-mb` of fp32 parameters), after
one AdamW step (so the optimizer holds two moments per parameter), it times `--reps` saves of:

    sync DCP        Checkpointer(async_save=False).save: the loop is blocked for the whole write
    async DCP       Checkpointer(async_save=True).save: blocked while the state is staged into
                    host memory (pinned with CUDA); `complete` = until the background write ends
    peer torch.save full state dict gathered to rank 0, written to one file (no sharding)

and, as limits measured in the same run on the same rank-local bytes:

    copy limit      copy every local tensor into a preallocated buffer (memcpy: the least
                    staging can cost; the async stager reuses its buffers across saves too)
    write limit     write the same bytes to one file and fsync (the least a durable write costs)

Blocking time is the max over ranks (the next collective waits for the slowest rank).
Printed: median ms per save and ratios to the limits. With `--matmuls N`, a fixed compute
workload (N 512x512 fp32 matmuls per rank) is also timed while an async save writes in the
background, against the same workload idle: what the background thread costs the training
step on this host's cores.

Usage: python bench/checkpoint.py [--world-size 2] [--mlp-mb 64] [--reps 3] [--matmuls 0] [--dir /tmp/x]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from platform_lib.models.registry import build_model
from platform_lib.training.checkpoint import Checkpointer
from platform_lib.training.distributed import DistContext
from platform_lib.training.launch import find_free_port
from platform_lib.training.parallel import apply_fsdp, build_mesh, build_mp_policy


def build_workload(name: str, mlp_mb: int) -> nn.Module:
    """Return the model of workload `name` (a model preset or "mlp")."""
    if name != "mlp":
        return build_model(name)
    width = 2048
    layers = max(1, mlp_mb * 2**20 // (4 * width * width))
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])


def _local_tensors(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    tensors = [p.to_local() if hasattr(p, "to_local") else p for p in model.parameters()]
    for state in optimizer.state.values():
        tensors += [
            v.to_local() if hasattr(v, "to_local") else v
            for v in state.values()
            if torch.is_tensor(v)
        ]
    return [t.detach() for t in tensors]


def _max_over_ranks(seconds: float) -> float:
    value = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value)


def _compute(matmuls: int) -> float:
    """Run `matmuls` 512x512 fp32 matmuls (+tanh); return the seconds it took."""
    a = torch.randn(512, 512)
    start = time.perf_counter()
    for _ in range(matmuls):
        a = torch.tanh(a @ a)
    return time.perf_counter() - start


def _time_saves(ckpt: Checkpointer, model, optimizer, reps: int) -> dict[str, float]:
    """Median blocking and until-complete seconds of `reps` saves (max over ranks)."""
    blocking, complete = [], []
    for rep in range(reps):
        dist.barrier()
        start = time.perf_counter()
        saved = ckpt.save(rep + 1, model, optimizer, {"step": rep + 1})
        blocking.append(_max_over_ranks(saved.blocking_s))
        ckpt.wait()
        complete.append(_max_over_ranks(time.perf_counter() - start))
    return {"blocking": statistics.median(blocking), "complete": statistics.median(complete)}


def _compute_during_writes(ckpt: Checkpointer, model, optimizer, reps: int, matmuls: int) -> float:
    """Median seconds of the compute workload run right after an async save returned."""
    times = []
    for rep in range(reps):
        dist.barrier()
        ckpt.save(100 + rep, model, optimizer, {"step": 100 + rep})
        times.append(_max_over_ranks(_compute(matmuls)))
        ckpt.wait()
    return statistics.median(times)


def _worker(rank: int, world_size: int, port: int, args: argparse.Namespace, queue) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    torch.set_num_threads(1)
    ctx = DistContext(
        rank=rank,
        local_rank=rank,
        world_size=world_size,
        backend="gloo",
        device=torch.device("cpu"),
        owns_group=True,
    )
    rows = []
    for name in args.workloads:
        torch.manual_seed(0)
        model = apply_fsdp(
            build_workload(name, args.mlp_mb), build_mesh(ctx), build_mp_policy(False)
        )
        optimizer = torch.optim.AdamW(model.parameters(), foreach=False)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        optimizer.step()
        local = _local_tensors(model, optimizer)
        local_bytes = sum(t.numel() * t.element_size() for t in local)
        total_mb = _max_over_ranks(local_bytes) * world_size / 2**20
        work = Path(args.dir) / name
        idle = (
            statistics.median(_max_over_ranks(_compute(args.matmuls)) for _ in range(args.reps))
            if args.matmuls
            else 0.0
        )

        buffers = [torch.empty_like(t) for t in local]
        copy_times = []
        for _ in range(args.reps + 1):  # the first pass faults the buffers' pages in
            start = time.perf_counter()
            for dst, src in zip(buffers, local, strict=True):
                dst.copy_(src)
            copy_times.append(_max_over_ranks(time.perf_counter() - start))
        copy_s = statistics.median(copy_times[1:])
        del buffers
        raw = work / f"raw-rank{rank}.bin"
        raw.parent.mkdir(parents=True, exist_ok=True)
        dist.barrier()
        start = time.perf_counter()
        with open(raw, "wb") as f:
            for t in local:
                f.write(t.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
            f.flush()
            os.fsync(f.fileno())
        write_s = _max_over_ranks(time.perf_counter() - start)

        sync = _time_saves(Checkpointer(work / "sync", keep=1), model, optimizer, args.reps)
        async_ckpt = Checkpointer(work / "async", keep=1, async_save=True)
        asyn = _time_saves(async_ckpt, model, optimizer, args.reps)
        busy = (
            _compute_during_writes(async_ckpt, model, optimizer, args.reps, args.matmuls)
            if args.matmuls
            else 0.0
        )
        async_ckpt.close()

        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        peer = []
        for _ in range(args.reps):
            dist.barrier()
            start = time.perf_counter()
            full = get_state_dict(
                model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
            )
            if rank == 0:
                with open(work / "peer.pt", "wb") as f:
                    torch.save(full, f)
                    f.flush()
                    os.fsync(f.fileno())
            peer.append(_max_over_ranks(time.perf_counter() - start))
        rows.append(
            {
                "workload": name,
                "mb": total_mb,
                "copy": copy_s,
                "write": write_s,
                "sync": sync,
                "async": asyn,
                "peer": statistics.median(peer),
                "idle_compute": idle,
                "busy_compute": busy,
            }
        )
        dist.barrier()
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def print_table(rows: list[dict], args: argparse.Namespace) -> None:
    """Print one line per (workload, method): ms per save and ratios to the limits."""
    print(
        f"world size {args.world_size} (gloo, CPU), {args.reps} saves each, median; cpus={os.cpu_count()}; "
        f"torch {torch.__version__}"
    )
    header = (
        f"{'workload':<18}{'state MB':>9}  {'method':<15}{'blocking ms':>12}{'complete ms':>12}"
        f"{'x copy':>8}{'x write':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        lines = [
            ("copy limit", r["copy"], r["copy"]),
            ("write limit", r["write"], r["write"]),
            ("sync DCP", r["sync"]["blocking"], r["sync"]["complete"]),
            ("async DCP", r["async"]["blocking"], r["async"]["complete"]),
            ("peer torch.save", r["peer"], r["peer"]),
        ]
        for method, blocking, complete in lines:
            print(
                f"{r['workload']:<18}{r['mb']:>9.1f}  {method:<15}{blocking * 1e3:>12.1f}{complete * 1e3:>12.1f}"
                f"{blocking / r['copy']:>8.1f}{blocking / r['write']:>8.2f}"
            )
    for r in rows:
        cut = 1 - r["async"]["blocking"] / r["sync"]["blocking"]
        line = f"{r['workload']}: async save blocks {cut:.0%} less than sync"
        if args.matmuls:
            line += (
                f"; {args.matmuls} matmuls took {r['busy_compute'] * 1e3:.0f} ms during the background "
                f"write vs {r['idle_compute'] * 1e3:.0f} ms idle ({r['busy_compute'] / r['idle_compute']:.2f}x)"
            )
        print(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument(
        "--workloads", nargs="+", default=["bev_fusion_small", "bev_fusion_large", "mlp"]
    )
    parser.add_argument(
        "--mlp-mb", type=int, default=64, help="fp32 parameter MB of the mlp workload"
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--matmuls",
        type=int,
        default=0,
        help="time this many 512x512 matmuls per rank during async writes and idle",
    )
    parser.add_argument(
        "--dir", default=None, help="checkpoint folder (default: a temporary folder)"
    )
    args = parser.parse_args(argv)
    temporary = args.dir is None
    args.dir = args.dir or tempfile.mkdtemp(prefix="drivetrain-bench-ckpt-")
    try:
        queue = mp.get_context("spawn").SimpleQueue()
        mp.spawn(
            _worker, args=(args.world_size, find_free_port(), args, queue), nprocs=args.world_size
        )
        print_table(queue.get(), args)
    finally:
        if temporary:
            shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
