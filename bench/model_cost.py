"""Size and cost of a model preset: parameters, FLOPs per sample, activation memory (docs/models.md).

Builds the preset's network on CPU, feeds one sample of random inputs of the preset's shapes
(every pillar slot full), and prints its parameters per top-level part; the FLOPs of one
forward and one forward + backward counted by `torch.utils.flop_counter.FlopCounterMode`
(matmuls and convolutions only: norms, activations and the lift's gather are not counted);
and the bytes autograd keeps for backward in bf16 compute (parameters excluded), per
parallelism block (`training.parallel.list_blocks`) and outside them, from which the
activation memory with activation checkpointing is estimated (inputs of the blocks + the
part outside them + the largest block, recomputed one at a time).

    python bench/model_cost.py [--model bev_fusion_base] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
from typing import cast

import torch
from torch.utils.flop_counter import FlopCounterMode

from platform_lib.models.bev_fusion.config import BEVFusionConfig
from platform_lib.models.catalog import build_model
from platform_lib.models.presets import get_model_config
from platform_lib.training.parallel import list_blocks


def random_inputs(model: torch.nn.Module, dtype: torch.dtype) -> list[torch.Tensor]:
    """Return one sample (batch 1) of random inputs in `model.input_keys` order."""
    cfg = cast(BEVFusionConfig, model.cfg)
    g, n = cfg.grid, cfg.max_cameras
    slots = cfg.camera_columns * cfg.lift_depth_bins
    by_key = {
        "lidar_bev": lambda: torch.rand(1, cfg.lidar_features, g.height, g.width, dtype=dtype),
        "lidar_pillars": lambda: torch.randn(
            1, cfg.max_pillars, cfg.max_points_per_pillar, 9, dtype=dtype
        ),
        "lidar_pillar_index": lambda: torch.stack(
            [
                torch.randperm(g.height * g.width)[: cfg.max_pillars],
                torch.full((cfg.max_pillars,), cfg.max_points_per_pillar),
            ],
            dim=1,
        ).unsqueeze(0),
        "radar_bev": lambda: torch.rand(1, 2, g.height, g.width, dtype=dtype),
        "camera_images": lambda: torch.rand(
            1, n, 3, cfg.camera_height, cfg.camera_width, dtype=dtype
        ),
        "camera_index": lambda: torch.randint(-1, slots, (1, n, g.height, g.width)),
    }
    return [by_key[k]() for k in cast(tuple[str, ...], model.input_keys)]


def count_flops(model: torch.nn.Module) -> tuple[int, int]:
    """Return (forward, forward + backward) FLOPs of one sample."""
    inputs = random_inputs(model, torch.float32)
    with FlopCounterMode(display=False) as forward:
        out = model(*inputs)
    with FlopCounterMode(display=False) as backward:
        out.float().mean().backward()
    return forward.get_total_flops(), forward.get_total_flops() + backward.get_total_flops()


def saved_bytes(model: torch.nn.Module) -> dict[str, int]:
    """Return bytes saved for backward in bf16 per block ("<root>": outside the blocks, "<inputs>": block inputs)."""
    model = model.to(torch.bfloat16)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    blocks = list_blocks(model)
    current: list[str] = ["<root>"]
    seen: set[int] = set()
    totals: dict[str, int] = {name: 0 for name in ["<root>", "<inputs>", *blocks]}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params and storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            totals[current[-1]] += storage.nbytes()
        return t

    def enter(name: str):
        def hook(module, args):
            current.append(name)
            totals["<inputs>"] += sum(a.nbytes for a in args if isinstance(a, torch.Tensor))

        return hook

    def leave(*_: object) -> None:
        current.pop()

    for name in blocks:
        block = model.get_submodule(name)
        block.register_forward_pre_hook(enter(name))
        block.register_forward_hook(leave)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(*random_inputs(model, torch.bfloat16)).float().mean()
    return totals


def main() -> None:
    """Print the cost table of one model preset."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", default="bev_fusion_base")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_model(get_model_config(args.model))
    total = sum(p.numel() for p in model.parameters())
    print(f"{args.model}: {total:,} parameters")
    for name, child in model.named_children():
        print(f"  {name:<16} {sum(p.numel() for p in child.parameters()):>12,}")
    fwd, step = count_flops(model)
    print(f"FLOPs per sample: forward {fwd / 1e9:.1f} G, forward + backward {step / 1e9:.1f} G")
    saved = saved_bytes(model)
    blocks = {k: v for k, v in saved.items() if not k.startswith("<")}
    full = sum(blocks.values()) + saved["<root>"]
    ac = saved["<inputs>"] + saved["<root>"] + max(blocks.values())
    print(f"activations saved for backward (bf16, per sample): {full / 2**20:,.0f} MiB")
    print(f"  with activation checkpointing (estimate): {ac / 2**20:,.0f} MiB")
    for name, size in sorted(saved.items(), key=lambda kv: -kv[1])[:6]:
        print(f"  {name:<36} {size / 2**20:>8,.0f} MiB")
    print(f"load average {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
