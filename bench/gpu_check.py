"""Device check of one accelerator: versions, nvJPEG decode, an FSDP bf16 step and its MFU, layouts.

A prepared script for a borrowed GPU machine (under 10 minutes). It runs the named checks of
`CHECKS` (versions, decode, fsdp_step, train_decode, layouts; each described in its
function's docstring), each in its own child process under its own deadline.
Prints one line per check and the JSON of all results (also written to --json, default
$OUT/gpu_check.json when $OUT is set); exits 1 when any check failed or ran past its deadline.
`--dry-run` runs the same checks on the CPU with tiny sizes: what CI smoke-tests
(tests/integration/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python bench/gpu_check.py` from anywhere
    sys.path.insert(0, str(REPO))

#: the PandaSet sample: shared/ inside the checkout (the device machine) or beside it
_FRAME_DIRS = (
    REPO / "shared" / "data" / "pandaset" / "002" / "camera",
    REPO.parent / "shared" / "data" / "pandaset" / "002" / "camera",
)


@dataclass(frozen=True)
class Check:
    """One named check: `run(args)` returns its figures (a JSON-able dict) or raises."""

    name: str
    run: Callable[[argparse.Namespace], dict[str, Any]]
    deadline_s: float
    """wall-clock limit of its child process, in s (the whole run stays under 5 minutes)"""


def _device(args: argparse.Namespace) -> Any:
    import torch

    if args.dry_run:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device (torch.cuda.is_available() is False); use --dry-run")
    return torch.device("cuda", 0)


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


# -- versions ------------------------------------------------------------------------------
def check_versions(args: argparse.Namespace) -> dict[str, Any]:
    """torch, CUDA, cuDNN, NCCL, driver, device name and torchvision (or why it is absent)."""
    import torch

    out: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
    }
    try:
        import torchvision

        out["torchvision"] = torchvision.__version__
    except ImportError as exc:
        out["torchvision"] = f"absent ({exc}); install the `gpu` extra"
    if torch.cuda.is_available():
        out["device"] = torch.cuda.get_device_name(0)
        out["devices"] = torch.cuda.device_count()
        out["cudnn"] = torch.backends.cudnn.version()
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        out["driver"] = _driver_version()
    elif not args.dry_run:
        raise RuntimeError("torch sees no CUDA device")
    return out


def _driver_version() -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
        return done.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError) as exc:
        return f"unknown ({type(exc).__name__})"


# -- decode --------------------------------------------------------------------------------
def _frames(args: argparse.Namespace) -> list[bytes]:
    roots = [Path(args.frames)] if args.frames else [d for d in _FRAME_DIRS if d.is_dir()]
    if not roots or not roots[0].is_dir():
        raise FileNotFoundError(f"no PandaSet camera folder: give --frames (looked in {roots})")
    files = sorted(roots[0].glob("*/*.jpg"))
    if not files:
        raise FileNotFoundError(f"no */*.jpg under {roots[0]}")
    return [f.read_bytes() for f in files[: 2 if args.dry_run else len(files)]]


#: mean absolute difference (uint8 levels) allowed between the GPU and CPU 704x256 decodes
#: (tests/unit/test_loading_decode.py's tolerance against a Lanczos reference)
_MAX_MEAN_ABS_DIFF = 3.0


def _rate(fn: Callable[[], Any], frames: int, device: Any, min_s: float) -> dict[str, float]:
    """Run `fn` (decodes `frames` frames) once to warm up, then until `min_s` has passed."""
    fn()
    _sync(device)
    runs, start = 0, time.perf_counter()
    while True:
        fn()
        _sync(device)
        runs += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_s:
            return {"frames_per_s": round(runs * frames / elapsed, 1), "runs": runs}


def check_decode(args: argparse.Namespace) -> dict[str, Any]:
    """The sample's full-size camera frames: nvJPEG batched vs simplejpeg on the CPU, frames/s.

    Then both at the 704x256 model input through the platform's decoders
    (`decode_jpegs_gpu` / `decode_jpeg_cpu`) with their mean absolute difference; fails above
    3 levels (the unit tests' tolerance).
    """
    import numpy as np
    import simplejpeg

    from platform_lib.imaging.decode import CameraResize, decode_jpeg_cpu, decode_jpegs_gpu

    device = _device(args)
    datas = _frames(args)
    height, width, _, _ = simplejpeg.decode_jpeg_header(datas[0])
    mb = sum(len(d) for d in datas) / 1e6
    min_s = 0.2 if args.dry_run else 5.0
    out: dict[str, Any] = {
        "frames": len(datas),
        "size": f"{width}x{height}",
        "jpeg_mb": round(mb, 3),
        "cpu": f"simplejpeg (libjpeg-turbo), 1 thread of {os.cpu_count()} cores",
    }

    def cpu_full() -> None:
        for d in datas:
            simplejpeg.decode_jpeg(d, colorspace="RGB")

    out["cpu_full"] = _rate(cpu_full, len(datas), device, min_s)
    bev = CameraResize(width=704, height=256, anchor_y=0.5)
    out["cpu_704x256"] = _rate(
        lambda: [decode_jpeg_cpu(d, bev) for d in datas], len(datas), device, min_s
    )
    if device.type != "cuda":
        out["nvjpeg"] = "skipped: --dry-run (CPU only)"
        return out
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg

    encoded = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in datas]
    out["nvjpeg_full"] = _rate(
        lambda: decode_jpeg(encoded, mode=ImageReadMode.RGB, device="cuda"),
        len(datas),
        device,
        min_s,
    )
    out["nvjpeg_704x256"] = _rate(lambda: decode_jpegs_gpu(datas, bev), len(datas), device, min_s)
    gpu = decode_jpegs_gpu(datas, bev)
    errors = [
        float(
            np.abs(
                g.permute(1, 2, 0).cpu().numpy().astype(np.int16) - decode_jpeg_cpu(d, bev)
            ).mean()
        )
        for g, d in zip(gpu, datas, strict=True)
    ]
    out["mean_abs_diff_704x256"] = round(max(errors), 3)
    if max(errors) > _MAX_MEAN_ABS_DIFF:
        raise AssertionError(
            f"nvJPEG + device resize differ from the CPU decode by {max(errors):.2f} levels "
            f"(mean abs), more than {_MAX_MEAN_ABS_DIFF}: {out}"
        )
    for size in ("full", "704x256"):
        out[f"nvjpeg_over_cpu_{size}"] = round(
            out[f"nvjpeg_{size}"]["frames_per_s"] / out[f"cpu_{size}"]["frames_per_s"], 2
        )
    return out


# -- one FSDP bf16 step --------------------------------------------------------------------
def _random_batch(model: Any, batch: int, device: Any) -> dict[str, Any]:
    import torch

    from bench.model_cost import random_inputs

    cfg, keys = model.cfg, model.input_keys
    samples = [random_inputs(model, torch.float32) for _ in range(batch)]
    out = {k: torch.cat([s[i] for s in samples]).to(device) for i, k in enumerate(keys)}
    g = cfg.grid
    out[model.target_key] = (torch.rand(batch, 3, g.height, g.width, device=device) > 0.9).float()
    return out


def check_fsdp_step(args: argparse.Namespace) -> dict[str, Any]:
    """bev_fusion_base under FSDP2 with bf16 mixed precision on one rank: step time and MFU.

    Warm-up steps, then the timed steps' median, samples/s, FLOPs per sample (`telemetry.mfu`)
    and MFU against the device's data-sheet peak.
    """
    import torch
    import torch.distributed as dist

    from platform_lib.models.catalog import build_model
    from platform_lib.telemetry.mfu import count_flops_per_sample, resolve_peak_flops
    from platform_lib.training.distributed import DistContext
    from platform_lib.training.loop import compute_loss, run_model
    from platform_lib.training.parallel import apply_fsdp, build_mesh, build_mp_policy

    device = _device(args)
    preset: Any = "bev_fusion_base"
    if args.dry_run:  # bev_fusion_small on a 16 x 16 grid with 16 x 32 cameras: a CPU second
        from platform_lib.models.presets import get_model_config

        preset = dataclasses.replace(
            get_model_config("bev_fusion_small"),
            **{"x_min": -6.4, "x_max": 6.4, "y_min": -6.4, "y_max": 6.4},
            camera_height=16,
            camera_width=32,
        )
    batch, warmup, timed = (1, 1, 1) if args.dry_run else (args.batch_size, 3, 10)
    backend = "nccl" if device.type == "cuda" else "gloo"
    # one rank: an in-process store, no port to find
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        torch.manual_seed(0)
        model = build_model(preset).to(device)  # FLOPs counted on the device, then sharded
        data = _random_batch(model, batch, device)
        flops = count_flops_per_sample(
            lambda: compute_loss(run_model(model, data), data[model.target_key], 3.0).backward(),
            batch,
        )
        model.zero_grad(set_to_none=True)
        ctx = DistContext(
            rank=0, world_size=1, local_rank=0, device=device, backend=backend, owns_group=True
        )
        model = apply_fsdp(model, build_mesh(ctx), build_mp_policy(True))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        times = []
        for step in range(warmup + timed):
            _sync(device)
            start = time.perf_counter()
            loss = compute_loss(run_model(model, data), data[model.target_key], 3.0)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            _sync(device)
            if step >= warmup:
                times.append(time.perf_counter() - start)
        if not torch.isfinite(loss.detach()):
            raise FloatingPointError(f"loss is {float(loss.detach())}")
        step_s = statistics.median(times)
        peak = resolve_peak_flops(device, num_threads=torch.get_num_threads())
        achieved = flops * batch / step_s
        return {
            "model": model.cfg.name,
            "batch": batch,
            "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
            "step_s_median": round(step_s, 4),
            "step_s_min": round(min(times), 4),
            "samples_per_s": round(batch / step_s, 2),
            "flops_per_sample": flops,
            "achieved_tflops": round(achieved / 1e12, 3),
            "peak": peak,
            "mfu": round(achieved / peak["peak_flops"], 4) if peak["peak_flops"] else None,
            "max_memory_gb": (
                round(torch.cuda.max_memory_allocated(device) / 1e9, 2)
                if device.type == "cuda"
                else None
            ),
            "loss": round(float(loss.detach()), 4),
        }
    finally:
        dist.destroy_process_group()


# -- training steps with camera_decode="device" -------------------------------------------
def check_train_decode(args: argparse.Namespace) -> dict[str, Any]:
    """3 training steps of bev_fusion_small with data.camera_decode="device": decode ms per batch.

    The PandaSet sample is built into a dataset (in a temporary folder), read by 2 loader
    workers that send each batch's JPEGs through the ring; the training process decodes them
    (`training.data.decode_camera_batch`: nvJPEG + on-device resize on CUDA, the CPU decoder
    with --dry-run), then forward, backward and an AdamW step. Reports the decode time of each
    batch (device synchronised), the same batches' CPU-decoder time, the step times and the
    largest difference from the CPU decode in uint8 levels (fails above 3, the unit tests'
    tolerance).
    """
    import tempfile

    import torch

    from platform_lib.loading.config import LoaderConfig
    from platform_lib.loading.loader import build_loader
    from platform_lib.models.bev_fusion.prepare import build_sample_transform, camera_resize
    from platform_lib.models.catalog import build_model
    from platform_lib.models.presets import get_model_config
    from platform_lib.shards.build import BuildConfig, build_dataset
    from platform_lib.training.config import ModelConfig, OptimizerConfig
    from platform_lib.training.data import decode_camera_batch
    from platform_lib.training.loop import build_optimizer, forward_backward, next_batch

    device = _device(args)
    camera_dir = Path(args.frames) if args.frames else next(d for d in _FRAME_DIRS if d.is_dir())
    model_cfg = get_model_config("bev_fusion_small")
    if args.dry_run:  # the fsdp_step dry-run's 16 x 16 grid with 16 x 32 cameras: CPU seconds
        model_cfg = dataclasses.replace(
            model_cfg,
            **{"x_min": -6.4, "x_max": 6.4, "y_min": -6.4, "y_max": 6.4},
            camera_height=16,
            camera_width=32,
        )
    batch_size, steps = (1, 3) if args.dry_run else (args.batch_size, 3)
    resize = camera_resize(model_cfg)
    cpu = torch.device("cpu")
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        root = Path(tmp) / "ds"
        build_dataset("pandaset", camera_dir.parents[1], root, BuildConfig(progress=False))
        loader = build_loader(
            str(root),
            rank=0,
            world_size=1,
            batch_size=batch_size,
            num_workers=2,
            seed=0,
            decode="none",
            config=LoaderConfig(
                sample_transform=build_sample_transform(model_cfg, "device"),
                multiprocessing_context="fork",
            ),
        )
        torch.manual_seed(0)
        model = build_model(model_cfg).to(device)
        optimizer = build_optimizer(model, OptimizerConfig())
        decode_ms, cpu_ms, step_s, diffs = [], [], [], []
        batches = iter(loader)
        try:
            for _ in range(steps):
                host = next(batches)
                start = time.perf_counter()
                reference = decode_camera_batch(host, cpu, resize=resize)["camera_images"]
                cpu_ms.append((time.perf_counter() - start) * 1e3)
                _sync(device)
                start = time.perf_counter()
                batch, _ = next_batch(
                    iter([host]), device, lambda b, d: decode_camera_batch(b, d, resize=resize)
                )
                _sync(device)
                decode_ms.append((time.perf_counter() - start) * 1e3)
                diffs.append(float((batch["camera_images"].cpu() - reference).abs().mean() * 255))
                start = time.perf_counter()
                loss = forward_backward(model, batch, ModelConfig())
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                _sync(device)
                step_s.append(time.perf_counter() - start)
        finally:
            loader.close()
    if not torch.isfinite(loss):
        raise FloatingPointError(f"loss is {float(loss)}")
    out = {
        "model": model_cfg.name,
        "camera": f"{resize.width}x{resize.height}",
        "batch": batch_size,
        "cameras_per_batch": int(batch["camera_images"].abs().sum(dim=(2, 3, 4)).gt(0).sum()),
        "decoder": "nvjpeg" if device.type == "cuda" else "cpu (--dry-run)",
        "decode_ms_per_batch": [round(v, 2) for v in decode_ms],
        "decode_ms_median": round(statistics.median(decode_ms), 2),
        "cpu_decode_ms_median": round(statistics.median(cpu_ms), 2),
        "step_s": [round(v, 4) for v in step_s],
        "mean_abs_diff_levels": round(max(diffs), 3),
        "loss": round(float(loss), 4),
    }
    if max(diffs) > _MAX_MEAN_ABS_DIFF:
        raise AssertionError(
            f"camera_decode='device' differs from the CPU decode by {max(diffs):.2f} levels "
            f"(mean abs), more than {_MAX_MEAN_ABS_DIFF}: {out}"
        )
    return out


# -- layouts: the world model under FSDP, FSDP x TP, PP x FSDP --------------------------------
#: steps per layout
_LAYOUT_STEPS = 5


def _layouts_global_batch(world: int) -> int:
    """Samples per step on `world` ranks: 8, or 2 per rank (every layout's dp degree divides it)."""
    return max(8, 2 * world)


#: largest |layout loss - single-process fp32 loss| / |single-process loss| per step, by precision
_LAYOUT_RTOL = {"bf16": 3e-2, "fp32": 1e-5}


def _layouts_model(dry_run: bool) -> Any:
    """The world model of the check: `world_model_small` on the CPU; ~0.1 B parameters on a GPU."""
    from platform_lib.models.world_model.config import WorldModelConfig

    if dry_run:
        return WorldModelConfig(name="world_model_small")
    # 128 x 128 cells, 4 context frames: 4 x 256 tokens per sample, 8 blocks of width 1024
    return WorldModelConfig(
        name="world_model_small",  # a size of the family, not a preset (the losses' pos_weight)
        x_min=-51.2,
        x_max=51.2,
        y_min=-51.2,
        y_max=51.2,
        context_frames=4,
        dim=1024,
        layers=8,
        heads=16,
        mlp_hidden=2816,
    )


def _layouts_batch(cfg: Any, step: int, device: Any, size: int) -> dict[str, Any]:
    """The global batch of `step` (1-based): random BEV frames, ego motion, sparse target; seeded."""
    import torch

    g = torch.Generator().manual_seed(1000 + step)
    b, t, h, w = size, cfg.temporal_frames, cfg.grid.height, cfg.grid.width
    batch = {
        "lidar_bev": torch.rand(b, t, cfg.input_features - 2, h, w, generator=g),
        "radar_bev": torch.rand(b, t, 2, h, w, generator=g),
        "ego_motion": torch.eye(4).repeat(b, t, 1, 1) + 0.1 * torch.randn(b, t, 4, 4, generator=g),
        "target": (torch.rand(b, cfg.num_classes, h, w, generator=g) < 0.05).float(),
    }
    return {k: v.to(device) for k, v in batch.items()}


def _train_layout(degrees: dict[str, Any], dry_run: bool) -> dict[str, Any]:
    """On this torchrun-style rank: `_LAYOUT_STEPS` steps under `degrees`; this rank's figures."""
    import torch

    from platform_lib.models.catalog import build_model
    from platform_lib.training.config import ModelConfig, OptimizerConfig, ParallelConfig
    from platform_lib.training.distributed import destroy_distributed, init_distributed
    from platform_lib.training.layout import resolve_layout
    from platform_lib.training.loop import (
        build_optimizer,
        optimizer_step,
        reduce_mean,
        seed_everything,
    )
    from platform_lib.training.parallel import parallelize

    backend: Literal["gloo", "nccl"] = "gloo" if dry_run else "nccl"
    parallel = ParallelConfig(backend=backend, mixed_precision=not dry_run, **degrees)
    ctx = init_distributed(backend, 120.0)
    try:
        cfg = _layouts_model(dry_run)
        size = _layouts_global_batch(ctx.world_size)
        dp = ctx.world_size // (parallel.tp * parallel.pp)
        layout = resolve_layout(parallel, ctx.world_size, ctx.world_size, batch_size=size // dp)
        seed_everything(0)
        run = parallelize(
            build_model(cfg).to(ctx.device),
            layout,
            ctx,
            parallel,
            ModelConfig(name="world_model_small"),  # the loss's pos_weight only
        )
        opt_cfg = OptimizerConfig(warmup_steps=1, max_steps=10)
        optimizer = build_optimizer(run.model, opt_cfg)
        if ctx.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(ctx.device)
        local, losses, times = size // layout.dp, [], []
        for step in range(1, _LAYOUT_STEPS + 1):
            batch = {
                k: v[run.dp_rank * local : (run.dp_rank + 1) * local]
                for k, v in _layouts_batch(cfg, step, ctx.device, size).items()
            }
            _sync(ctx.device)
            start = time.perf_counter()
            loss = run.forward_backward(batch)
            optimizer_step(run.model, optimizer, step, opt_cfg, run.clip_grad_norm)
            _sync(ctx.device)
            times.append(time.perf_counter() - start)
            losses.append(reduce_mean(loss))
        return {
            "layout": layout.describe(),
            "losses": losses,
            "step_s_median": round(statistics.median(times[1:]), 4),  # step 1 warms up
            "param_bytes": sum(
                (p.to_local() if hasattr(p, "to_local") else p).numel() * p.element_size()
                for p in run.model.parameters()
            ),
            "peak_memory_gb": (
                round(torch.cuda.max_memory_allocated(ctx.device) / 1e9, 3)
                if ctx.device.type == "cuda"
                else None
            ),
        }
    finally:
        destroy_distributed(ctx)


def _layout_rank(
    rank: int, world: int, port: int, degrees: dict, dry_run: bool, queue: Any
) -> None:
    """Spawned rank `rank` of `world`: run `_train_layout` and put (rank, figures or error)."""
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
    )
    try:
        queue.put((rank, _train_layout(degrees, dry_run)))
    except BaseException as exc:
        queue.put((rank, {"error": f"{type(exc).__name__}: {exc}"}))
        raise


def _spawn_layout(degrees: dict[str, Any], world: int, dry_run: bool, deadline_s: float) -> list:
    """Run `degrees` on `world` spawned ranks; return their figures by rank.

    Raises:
        RuntimeError: a rank failed (its error), or not all reported within `deadline_s`.
    """
    import queue as queues
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_layout_rank, args=(r, world, port, degrees, dry_run, out))
        for r in range(world)
    ]
    for proc in procs:
        proc.start()
    results: dict[int, dict[str, Any]] = {}
    end = time.monotonic() + deadline_s
    try:
        while len(results) < world:
            if time.monotonic() > end:
                raise RuntimeError(
                    f"{degrees}: ranks {sorted(set(range(world)) - set(results))} "
                    f"did not report within {deadline_s:.0f} s"
                )
            try:
                rank, figures = out.get(timeout=1.0)
            except queues.Empty:
                if any(p.exitcode not in (None, 0) for p in procs):
                    codes = [p.exitcode for p in procs]
                    raise RuntimeError(f"{degrees}: a rank died (exit codes {codes})") from None
                continue
            if "error" in figures:
                raise RuntimeError(f"{degrees}: rank {rank}: {figures['error']}")
            results[rank] = figures
        for proc in procs:
            proc.join(timeout=max(1.0, end - time.monotonic()))
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
    return [results[r] for r in range(world)]


def _reference_losses(cfg: Any, device: Any, size: int) -> tuple[list[float], float | None]:
    """One process, no parallelism, fp32: the per-step losses of the same global batches."""
    import torch

    from platform_lib.models.catalog import build_model
    from platform_lib.training.config import ModelConfig, OptimizerConfig
    from platform_lib.training.loop import (
        build_optimizer,
        forward_backward,
        optimizer_step,
        seed_everything,
    )

    seed_everything(0)
    model = build_model(cfg).to(device)
    opt_cfg = OptimizerConfig(warmup_steps=1, max_steps=10)
    optimizer = build_optimizer(model, opt_cfg)
    model_cfg = ModelConfig(name="world_model_small")
    losses = []
    for step in range(1, _LAYOUT_STEPS + 1):
        loss = forward_backward(model, _layouts_batch(cfg, step, device, size), model_cfg)
        optimizer_step(model, optimizer, step, opt_cfg)
        losses.append(float(loss))
    peak = None
    if device.type == "cuda":
        peak = round(torch.cuda.max_memory_allocated(device) / 1e9, 3)
        del model, optimizer
        torch.cuda.empty_cache()
    return losses, peak


def check_layouts(args: argparse.Namespace) -> dict[str, Any]:
    """The world model's GPU path (NCCL, bf16) under each layout that fits the device's GPUs.

    5 steps of the same global batches under FSDP over all ranks, FSDP x TP 2 and PP 2 x FSDP
    (the last two need >= 2 ranks, an even count), against one process without parallelism in
    fp32: per-step losses within 3 % (bf16), the median step time, parameter bytes per rank and
    peak CUDA memory per rank. One GPU runs world size 1 (FSDP only). `--dry-run`: the CPU,
    gloo, 2 ranks, `world_model_small`, fp32 (losses within 1e-5).
    """
    import torch

    device = _device(args)
    world = 2 if args.dry_run else torch.cuda.device_count()
    cfg = _layouts_model(args.dry_run)
    precision = "fp32" if args.dry_run else "bf16"
    reference, reference_peak = _reference_losses(cfg, device, _layouts_global_batch(world))
    layouts: dict[str, dict[str, Any]] = {"fsdp": {}}
    if world >= 2 and world % 2 == 0:
        layouts |= {"fsdp_tp2": {"tp": 2}, "pp2_fsdp": {"pp": 2}}
    out: dict[str, Any] = {
        "model": f"world_model (dim {cfg.dim}, {cfg.layers} blocks)",
        "params_m": round(cfg.count_parameters() / 1e6, 2),
        "model_bytes": cfg.count_parameters() * 4,
        "ranks": world,
        "backend": "gloo" if args.dry_run else "nccl",
        "precision": precision,
        "global_batch": _layouts_global_batch(world),
        "reference_losses": [round(x, 6) for x in reference],
        "reference_peak_memory_gb": reference_peak,
    }
    if len(layouts) == 1:
        out["skipped"] = f"FSDP x TP 2 and PP 2 x FSDP need an even count >= 2 of GPUs, not {world}"
    rtol, worst = _LAYOUT_RTOL[precision], {}
    for name, degrees in layouts.items():
        ranks = _spawn_layout(
            degrees, world, args.dry_run, deadline_s=180.0 if args.dry_run else 70.0
        )
        losses = ranks[0]["losses"]
        worst[name] = max(abs(a - b) / abs(b) for a, b in zip(losses, reference, strict=True))
        out[name] = {
            "layout": ranks[0]["layout"],
            "losses": [round(x, 6) for x in losses],
            "max_rel_loss_diff": float(f"{worst[name]:.2e}"),
            "step_s_median": max(r["step_s_median"] for r in ranks),
            "param_bytes_per_rank": [r["param_bytes"] for r in ranks],
            "peak_memory_gb_per_rank": [r["peak_memory_gb"] for r in ranks],
        }
    bad = {n: w for n, w in worst.items() if not w <= rtol}
    if bad:
        raise AssertionError(
            f"losses differ from the single-process fp32 run by more than {rtol:g} (relative, "
            f"{precision}): {bad}: {out}"
        )
    return out


#: --dry-run's deadlines are this many times the device's
DRY_RUN_DEADLINE_FACTOR = 3

#: the checks, in order; deadlines add up to under 10 minutes (the device machine's command limit)
CHECKS: list[Check] = [
    Check("versions", check_versions, 30.0),
    Check("decode", check_decode, 80.0),
    Check("fsdp_step", check_fsdp_step, 130.0),
    Check("train_decode", check_train_decode, 60.0),
    Check("layouts", check_layouts, 240.0),
]


# -- runner --------------------------------------------------------------------------------
def _child(args: argparse.Namespace) -> int:
    """Run one check in this (child) process and print its result as one JSON line."""
    (check,) = [c for c in CHECKS if c.name == args.child]
    result = check.run(args)
    print(json.dumps({"result": result}, default=str))
    return 0


def run_check(check: Check, argv: list[str]) -> dict[str, Any]:
    """Run `check` in a child process under its deadline; return status, seconds, figures."""
    start = time.perf_counter()
    # --dry-run is CI's smoke test on a shared CPU, not the device's 10-minute budget
    deadline_s = check.deadline_s * (DRY_RUN_DEADLINE_FACTOR if "--dry-run" in argv else 1)
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--child", check.name, *argv],
            capture_output=True,
            text=True,
            timeout=deadline_s,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        return {
            "status": "deadline",
            "seconds": round(time.perf_counter() - start, 1),
            "error": f"ran past its deadline of {deadline_s:.0f} s",
        }
    seconds = round(time.perf_counter() - start, 1)
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"result"')]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        return {"status": "failed", "seconds": seconds, "error": " | ".join(tail)}
    return {"status": "ok", "seconds": seconds, **json.loads(lines[-1])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes (CI smoke test)")
    parser.add_argument("--frames", help="camera folder (*/*.jpg); default: the PandaSet sample")
    parser.add_argument("--json", help="write all results here (default $OUT/gpu_check.json)")
    parser.add_argument("--batch-size", type=int, default=4, help="fsdp_step batch (default 4)")
    parser.add_argument("--only", help="comma-separated check names (default: all)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args)
    wanted = args.only.split(",") if args.only else [c.name for c in CHECKS]
    unknown = set(wanted) - {c.name for c in CHECKS}
    if unknown:
        parser.error(f"unknown check(s) {sorted(unknown)}; known: {[c.name for c in CHECKS]}")
    results: dict[str, Any] = {}
    for check in (c for c in CHECKS if c.name in wanted):
        results[check.name] = run_check(check, _child_argv(args))
        r = results[check.name]
        print(
            f"{check.name:10s} {r['status']:8s} {r['seconds']:6.1f} s  "
            f"{json.dumps(r.get('result', r.get('error')), default=str)}",
            flush=True,
        )
    path = args.json or (
        os.path.join(os.environ["OUT"], "gpu_check.json") if os.environ.get("OUT") else None
    )
    if path:
        Path(path).write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(json.dumps(results, indent=2, default=str))
    failed = [name for name, r in results.items() if r["status"] != "ok"]
    if failed:
        print(f"gpu_check: FAILED {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _child_argv(args: argparse.Namespace) -> list[str]:
    out = ["--batch-size", str(args.batch_size)]
    if args.dry_run:
        out.append("--dry-run")
    if args.frames:
        out += ["--frames", args.frames]
    return out


if __name__ == "__main__":
    sys.exit(main())
