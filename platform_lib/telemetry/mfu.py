"""Model FLOPs utilisation (MFU): counted model FLOPs, achieved FLOP/s and the device peak.

FLOPs per sample are counted once per workload with `torch.utils.flop_counter.FlopCounterMode`
over one forward + backward of the real model on a real batch (matmuls, convolutions and
attention as PyTorch's flop counter defines them: 2 FLOPs per multiply-add), not with an
LLM-style 6N formula. Achieved FLOP/s = FLOPs per sample x samples/s; MFU = achieved /
(peak per device x devices), as in PaLM (Chowdhery et al. 2022, appendix B) and torchtitan.

Peaks: dense bf16 tensor-core FLOP/s from the vendors' data sheets (`PEAK_FLOPS`, extend it
with `register_peak`). CPUs have no data-sheet figure here: their peak is measured by a
matmul probe (`measure_cpu_peak`) and recorded with its method.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

__all__ = [
    "PEAK_FLOPS",
    "count_flops_per_sample",
    "measure_cpu_peak",
    "register_peak",
    "resolve_peak_flops",
]

#: Dense bf16 peak FLOP/s per device (NVIDIA A100/H100/H200/B200 data sheets, without sparsity).
PEAK_FLOPS: dict[str, float] = {
    "A100": 312e12,
    "H100": 989e12,
    "H200": 989e12,
    "B200": 2.25e15,
}


def register_peak(device_name_part: str, flops: float) -> None:
    """Add or replace a peak: devices whose name contains `device_name_part` get `flops` FLOP/s.

    Raises:
        ValueError: if `flops` <= 0.
    """
    if not flops > 0:
        raise ValueError(f"peak FLOP/s must be > 0, got {flops}")
    PEAK_FLOPS[device_name_part] = float(flops)


def measure_cpu_peak(
    num_threads: int, size: int = 512, repeats: int = 5, dtype: torch.dtype = torch.float32
) -> dict[str, Any]:
    """Measure this CPU's matmul FLOP/s with `num_threads` threads (the peak MFU is measured against).

    Runs `repeats` timed `torch.mm` of two (size, size) matrices after one warm-up and keeps
    the best (2 * size^3 FLOPs each). Restores the caller's thread count.

    Returns:
        {"peak_flops": FLOP/s, "method": "...", "device": "cpu"}.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        a = torch.randn(size, size, dtype=dtype, generator=torch.Generator().manual_seed(0))
        b = torch.randn(size, size, dtype=dtype, generator=torch.Generator().manual_seed(1))
        torch.mm(a, b)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(previous)
    flops = 2.0 * size**3 / best
    method = (
        f"matmul probe: torch.mm {size}x{size} {str(dtype).removeprefix('torch.')}, "
        f"{num_threads} thread(s), best of {repeats}"
    )
    return {"peak_flops": flops, "method": method, "device": "cpu"}


def resolve_peak_flops(device: torch.device, num_threads: int = 1) -> dict[str, Any]:
    """Return the peak FLOP/s of one `device` and how it was obtained.

    CUDA: the first `PEAK_FLOPS` entry whose key is in `torch.cuda.get_device_name`; an
    unknown GPU gets peak_flops None (MFU is then not reported). CPU: `measure_cpu_peak`.
    """
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, flops in PEAK_FLOPS.items():
            if key in name:
                return {
                    "peak_flops": flops,
                    "method": f"data sheet, dense bf16 ({key})",
                    "device": name,
                }
        return {
            "peak_flops": None,
            "method": f"unknown device {name!r}: add it with register_peak",
            "device": name,
        }
    return measure_cpu_peak(num_threads)


def count_flops_per_sample(run_step: Callable[[], Any], batch_size: int) -> float:
    """Count the FLOPs of `run_step()` (one forward + backward on a batch) per sample.

    Args:
        run_step: runs forward and backward once, on a model that is not being trained
            (the count must not disturb training state).
        batch_size: samples in that batch.

    Raises:
        ValueError: if `batch_size` < 1.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    counter = FlopCounterMode(display=False)
    with counter:
        run_step()
    return counter.get_total_flops() / batch_size
