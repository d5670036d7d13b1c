"""Parallelism applied from outside the model: the layout's device mesh, PP, TP, FSDP2, mixed precision.

`parallelize` applies a `Layout` as torchtitan does (pipeline stages, `parallelize_module`
with the model's `tp_plan()`, then FSDP2 / HSDP over the data-parallel mesh dimensions) and
returns the layout's step function, so one train loop serves every layout. Plain FSDP keeps
the 1-D mesh and step of every run before layouts. Details: docs/parallelism.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import parallelize_module

from platform_lib.errors import UserError
from platform_lib.training import loop, pipeline
from platform_lib.training.config import ModelConfig, ParallelConfig
from platform_lib.training.distributed import DistContext
from platform_lib.training.layout import MESH_DIMS, Layout

__all__ = [
    "ParallelModel",
    "apply_activation_checkpointing",
    "apply_fsdp",
    "apply_tp",
    "build_device_mesh",
    "build_mesh",
    "build_mp_policy",
    "clip_grad_norm",
    "gather_full_state_dict",
    "list_blocks",
    "parallelize",
]


def build_mesh(ctx: DistContext) -> DeviceMesh:
    """Return a 1-D device mesh over all `ctx.world_size` ranks (data-parallel sharding)."""
    return init_device_mesh(ctx.device.type, (ctx.world_size,), mesh_dim_names=("dp",))


def build_mp_policy(enabled: bool) -> MixedPrecisionPolicy:
    """Return bf16-params / fp32-reduce when `enabled`, else a full-fp32 policy."""
    if enabled:
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)


def list_blocks(model: nn.Module) -> list[str]:
    """Return the dotted names of `model`'s parallelism units.

    Those the model names (`model.blocks()`: disjoint submodules, e.g. each ResNet stage),
    else its top-level children that hold parameters.
    """
    blocks = getattr(model, "blocks", None)
    if callable(blocks):
        return list(blocks())
    return [n for n, child in model.named_children() if any(True for _ in child.parameters())]


def apply_activation_checkpointing(model: nn.Module) -> nn.Module:
    """Wrap each block of `model` (`list_blocks`) in place with `checkpoint_wrapper`; return `model`.

    Call before `apply_fsdp`. Non-reentrant torch.utils.checkpoint: a block keeps only its
    input in forward and recomputes its activations in backward (~1/3 more compute; the same
    loss and gradients). State-dict keys do not change (DCP's state-dict helpers drop the
    wrapper's prefix).
    """
    for name in list_blocks(model):
        parent, _, attr = name.rpartition(".")
        owner = model.get_submodule(parent)
        owner.register_module(attr, checkpoint_wrapper(owner.get_submodule(attr)))
    return model


def apply_fsdp(
    model: nn.Module,
    mesh: DeviceMesh,
    mp_policy: MixedPrecisionPolicy,
    *,
    reshard_after_forward: bool = True,
) -> nn.Module:
    """Shard `model` (unsharded, on `mesh`'s device type) in place with FSDP2; return it.

    Each block (`list_blocks`) is one FSDP unit, then the root takes the rest; the module is
    then an FSDPModule whose parameters are DTensors. Master weights, gradients and optimizer
    state stay fp32 whatever `mp_policy` computes in. `reshard_after_forward` frees each
    block's gathered parameters after its forward (least memory; backward gathers them
    again); False keeps them until backward: one all-gather per block per step instead of
    two (faster for small models).
    """
    for name in list_blocks(model):
        fully_shard(
            model.get_submodule(name),
            mesh=mesh,
            mp_policy=mp_policy,
            reshard_after_forward=reshard_after_forward,
        )
    fully_shard(model, mesh=mesh, mp_policy=mp_policy, reshard_after_forward=reshard_after_forward)
    return model


def build_device_mesh(layout: Layout, device_type: str) -> DeviceMesh:
    """Return the layout's device mesh: dims `MESH_DIMS`, or a 1-D "dp_shard" mesh for plain FSDP."""
    if layout.is_fsdp_only:
        return init_device_mesh(device_type, (layout.dp_shard,), mesh_dim_names=("dp_shard",))
    return init_device_mesh(device_type, layout.mesh_shape, mesh_dim_names=MESH_DIMS)


def dp_mesh(mesh: DeviceMesh, layout: Layout) -> DeviceMesh:
    """Return the data-parallel part of `mesh`: ("dp_replicate", "dp_shard") for HSDP, else "dp_shard"."""
    if layout.dp_replicate > 1:
        return mesh["dp_replicate", "dp_shard"]
    return mesh["dp_shard"]


def apply_tp(model: nn.Module, tp_mesh: DeviceMesh) -> nn.Module:
    """Apply the model's tensor-parallel plan (`model.tp_plan()`) over `tp_mesh`, in place.

    Raises:
        UserError: the model declares no `tp_plan` (naming `parallel.tp`).
    """
    plan = getattr(model, "tp_plan", None)
    if not callable(plan):
        raise UserError(
            f"model {type(model).__name__} declares no tensor-parallel plan",
            "parallel.tp",
            "set parallel.tp to 1, or pick a model with a TP plan (world_model_*)",
        )
    return parallelize_module(model, tp_mesh, plan())


def clip_grad_norm(
    params: Iterable[torch.Tensor], max_norm: float, pp_group: dist.ProcessGroup | None = None
) -> torch.Tensor:
    """Clip gradients to a global L2 norm `max_norm` over every layout; return the norm before.

    Gradients are grouped by device mesh (under TP, block weights live on the (dp, tp) mesh,
    embedding and head on the dp mesh), each group's norm made whole (`full_tensor`), and
    the squares summed over the pipeline stages (`pp_group`). Same formula as
    `torch.nn.utils.clip_grad_norm_`: grads scale by min(1, max_norm / (norm + 1e-6)).

    Returns:
        The global gradient norm (fp32 scalar, plain tensor, equal on every rank).
    """
    grads = [p.grad for p in params if p.grad is not None]
    groups: dict[Any, list[torch.Tensor]] = {}
    for grad in grads:
        groups.setdefault(grad.device_mesh if isinstance(grad, DTensor) else None, []).append(grad)
    device = grads[0].device if grads else torch.device("cpu")
    total_sq = torch.zeros((), dtype=torch.float32, device=device)
    for grads in groups.values():
        norm = torch.nn.utils.get_total_norm(grads, 2.0)
        norm = norm.full_tensor() if isinstance(norm, DTensor) else norm
        total_sq = total_sq + norm.float() ** 2
    if pp_group is not None:
        dist.all_reduce(total_sq, group=pp_group)
    total = total_sq.sqrt()
    coef = float(torch.clamp(max_norm / (total + 1e-6), max=1.0))
    with torch.no_grad():
        for grad in grads:
            grad.mul_(coef)
    return total


@dataclass(kw_only=True, frozen=True)
class ParallelModel:
    """A model under a layout, with the layout's step function (what the train loop calls)."""

    layout: Layout
    """the resolved degrees"""
    model: nn.Module
    """this rank's parameters: the whole model, or its pipeline stage(s)"""
    forward_backward: Callable[[dict[str, Any]], torch.Tensor]
    """batch -> forward and backward of this rank's part; returns the detached loss of the
    rank's batch (under PP every stage returns the last stage's)"""
    clip_grad_norm: Callable[[float], torch.Tensor] | None
    """max norm -> clip and return the global norm; None: torch's (plain FSDP, as before layouts)"""
    dp_rank: int
    """which slice of the global batch this rank loads (TP and PP peers load the same)"""


def parallelize(
    model: nn.Module,
    layout: Layout,
    ctx: DistContext,
    parallel: ParallelConfig,
    model_cfg: ModelConfig,
) -> ParallelModel:
    """Apply `layout` to `model` (unsharded, on `ctx.device`, same weights on every rank).

    Order as torchtitan: pipeline stages, TP, activation checkpointing, FSDP2 over the
    data-parallel mesh dimensions. Plain FSDP keeps the loop's own `forward_backward` and
    torch's clipping, so its losses are those of every run before layouts.

    Raises:
        UserError: TP asked of a model without a TP plan.
    """
    mesh = build_device_mesh(layout, ctx.device.type)
    policy = build_mp_policy(parallel.mixed_precision)
    coords = layout.coordinates(ctx.rank)
    parts = pipeline.split_stages(model, layout, coords["pp"]) if layout.pp > 1 else [model]
    for part in parts:
        if layout.tp > 1:
            apply_tp(part, mesh["tp"])
        if parallel.activation_checkpointing:
            apply_activation_checkpointing(part)
        apply_fsdp(
            part,
            dp_mesh(mesh, layout),
            policy,
            reshard_after_forward=parallel.reshard_after_forward,
        )
    if layout.pp > 1:
        step = pipeline.build_pipeline_step(parts, layout, mesh["pp"], ctx.device, model_cfg)
        holder = pipeline.merge_stages(parts)
        pp_group = mesh["pp"].get_group()
        return ParallelModel(
            layout=layout,
            model=holder,
            forward_backward=step,
            clip_grad_norm=lambda m: clip_grad_norm(holder.parameters(), m, pp_group),
            dp_rank=layout.dp_rank(ctx.rank),
        )
    return ParallelModel(
        layout=layout,
        model=model,
        forward_backward=lambda batch: loop.forward_backward(model, batch, model_cfg),
        clip_grad_norm=None
        if layout.is_fsdp_only
        else (lambda m: clip_grad_norm(model.parameters(), m)),
        dp_rank=layout.dp_rank(ctx.rank),
    )


def gather_full_state_dict(run: ParallelModel) -> dict[str, torch.Tensor] | None:
    """Return the whole model's full fp32 CPU state dict on rank 0 under PP; collective.

    Each stage gathers its full weights (over its dp and tp ranks), the first rank of each
    stage sends them to rank 0, which merges them under the whole model's names. Returns
    None without PP (`export_weights` gathers then) and on ranks other than 0. Sized for
    models whose full weights fit rank 0's host memory.
    """
    if run.layout.pp == 1:
        return None
    options = StateDictOptions(full_state_dict=True, cpu_offload=False)
    state = get_model_state_dict(run.model, options=options)
    coords = run.layout.coordinates(dist.get_rank())
    first_of_stage = all(v == 0 for n, v in coords.items() if n != "pp")
    mine = (
        {k: cast(torch.Tensor, v).detach().float().cpu() for k, v in state.items()}
        if first_of_stage
        else None
    )
    stages: list[Any] = [None] * dist.get_world_size() if dist.get_rank() == 0 else []
    dist.gather_object(mine, stages if dist.get_rank() == 0 else None, dst=0)
    if dist.get_rank() != 0:
        return None
    return {k: v for part in stages if part for k, v in part.items()}
