"""Pipeline parallelism: a model cut into stages at its split points, run by a 1F1B schedule.

Stages keep the whole model's parameter names (checkpoints reshard) and follow torchtitan's
looped assignment: rank r of the "pp" mesh dimension holds stages r, r + pp, .... The
schedules are `torch.distributed.pipelining`'s (Narayanan et al. 2021); docs/parallelism.md.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B

from platform_lib.errors import UserError
from platform_lib.training.config import ModelConfig
from platform_lib.training.layout import Layout, stages_per_rank
from platform_lib.training.loop import compute_loss, resolve_batch_keys

__all__ = [
    "build_pipeline_step",
    "merge_stages",
    "split_stages",
    "stage_boundaries",
    "stage_indices",
]


def stage_indices(layout: Layout, pp_rank: int) -> list[int]:
    """Return the pipeline stages `pp_rank` holds (looped: pp_rank, pp_rank + pp, ...)."""
    return [pp_rank + i * layout.pp for i in range(stages_per_rank(layout.pp_schedule))]


def stage_boundaries(model: nn.Module, num_stages: int) -> list[int]:
    """Return the block index each stage starts at (len num_stages), blocks spread evenly.

    Raises:
        UserError: the model has fewer split points than num_stages - 1 (naming `parallel.pp`).
    """
    points = list(getattr(model, "pipeline_split_points", lambda: [])())
    blocks = list(cast(Any, model).blocks()) if hasattr(model, "blocks") else []
    if num_stages - 1 > len(points):
        raise UserError(
            f"{num_stages} pipeline stages need {num_stages - 1} split points but model "
            f"{type(model).__name__} has {len(points)}",
            "parallel.pp",
            f"set parallel.pp so that stages (pp x stages per rank) are at most {len(points) + 1}",
        )
    cuts = [points[round(s * (len(points) + 1) / num_stages) - 1] for s in range(1, num_stages)]
    return [0, *(blocks.index(c) for c in cuts)]


def split_stages(model: nn.Module, layout: Layout, pp_rank: int) -> list[nn.Module]:
    """Return the stage modules `pp_rank` holds: copies of `model` without the other stages' parts.

    A stage keeps the blocks from its start to the next stage's (`stage_boundaries`); the
    modules the model lists in `pipeline_first` (before the first block) stay on stage 0
    only, those in `pipeline_last` (after the last block) on the last stage only.
    """
    blocks = list(cast(Any, model).blocks())
    starts = [*stage_boundaries(model, layout.num_stages), len(blocks)]
    stages = []
    for index in stage_indices(layout, pp_rank):
        stage = copy.deepcopy(model)
        keep = set(blocks[starts[index] : starts[index + 1]])
        for name in blocks:
            if name not in keep:
                parent, _, attr = name.rpartition(".")
                delattr(stage.get_submodule(parent), attr)
        if index > 0:
            for name in getattr(model, "pipeline_first", ()):
                setattr(stage, name, None)
        if index < layout.num_stages - 1:
            for name in getattr(model, "pipeline_last", ()):
                setattr(stage, name, None)
        stages.append(stage)
    return stages


def merge_stages(stages: list[nn.Module]) -> nn.Module:
    """Return one module holding this rank's stages' parts under the whole model's names.

    One stage is returned as is. Several (interleaved) share their submodules with an empty
    module of the model's class, block containers (`nn.ModuleDict`) merged, so optimizer
    state and checkpoints name parameters as the whole model does (`layers.3.w`, not
    `1.layers.3.w`) and reshard to other layouts. The stages keep running the schedule.
    """
    if len(stages) == 1:
        return stages[0]
    holder = nn.Module()
    for stage in stages:
        for name, child in stage.named_children():
            if not isinstance(child, nn.ModuleDict):
                holder.add_module(name, child)
            elif isinstance(getattr(holder, name, None), nn.ModuleDict):
                cast(nn.ModuleDict, getattr(holder, name)).update(dict(child.items()))
            else:
                holder.add_module(name, nn.ModuleDict(dict(child.items())))
    return holder


def build_pipeline_step(
    stages: list[nn.Module],
    layout: Layout,
    pp_mesh: DeviceMesh,
    device: torch.device,
    model_cfg: ModelConfig,
) -> Callable[[dict[str, Any]], torch.Tensor]:
    """Return batch -> loss: one pipelined forward and backward of this rank's batch.

    `Schedule1F1B` (one stage per rank) or `ScheduleInterleaved1F1B` cut the batch into
    `layout.pp_microbatches` microbatches along dim 0; the loss is the loop's `compute_loss`
    per microbatch and gradients are averaged over them (`scale_grads`), so a step equals
    one on the whole batch.

    The returned loss is the mean of the microbatch losses of the last stage, sent to every
    stage of the pipeline (one broadcast), so every rank reports the loss of its batch.
    """
    pp_rank, group = pp_mesh.get_local_rank(), pp_mesh.get_group()
    indices = stage_indices(layout, pp_rank)
    pipeline_stages: list[Any] = [
        PipelineStage(module, index, layout.num_stages, device, group=group)
        for module, index in zip(stages, indices, strict=True)
    ]
    inputs, target = resolve_batch_keys(stages[0])

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return compute_loss(logits, labels, model_cfg.pos_weight)

    if layout.pp_schedule == "Interleaved1F1B":
        schedule: Any = ScheduleInterleaved1F1B(
            pipeline_stages, layout.pp_microbatches, loss_fn=loss_fn
        )
    else:
        schedule = Schedule1F1B(pipeline_stages[0], layout.pp_microbatches, loss_fn=loss_fn)
    first, last = 0 in indices, layout.num_stages - 1 in indices
    last_rank = dist.get_global_rank(group, (layout.num_stages - 1) % layout.pp)

    def forward_backward(batch: dict[str, Any]) -> torch.Tensor:
        losses: list[torch.Tensor] = []
        args = tuple(batch[k] for k in inputs) if first else ()
        if last:
            schedule.step(*args, target=batch[target], losses=losses)
            loss = torch.stack([x.detach().float() for x in losses]).mean()
        else:
            schedule.step(*args)
            loss = torch.zeros((), dtype=torch.float32, device=device)
        dist.broadcast(loss, src=last_rank, group=group)
        return loss

    return forward_backward
