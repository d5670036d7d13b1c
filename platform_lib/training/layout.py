"""The layout of a run: how its ranks split into pipeline, data-parallel and tensor-parallel groups.

`resolve_layout` turns `ParallelConfig`'s degrees into a `Layout` whose product is the world
size, or raises a one-line `UserError` naming the field and the valid choices. Mesh
dimensions follow torchtitan (`MESH_DIMS`, outermost first; TP innermost, inside a node).
No torch here: placement checks a layout at serialisation with this module alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from platform_lib.errors import UserError

if TYPE_CHECKING:
    from platform_lib.training.config import ParallelConfig

__all__ = ["MESH_DIMS", "Layout", "resolve_layout", "stages_per_rank"]

#: Device-mesh dimension names, outermost first (`Layout.mesh_shape` follows this order).
MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "tp")
#: Pipeline stages each rank holds, by schedule.
_STAGES_PER_RANK = {"1F1B": 1, "Interleaved1F1B": 2}


def stages_per_rank(schedule: str) -> int:
    """Return the pipeline stages one rank holds under `schedule` ("1F1B": 1, "Interleaved1F1B": 2)."""
    return _STAGES_PER_RANK[schedule]


@dataclass(kw_only=True, frozen=True)
class Layout:
    """Resolved degrees of a run; their product is the world size."""

    dp_replicate: int
    """model replicas (HSDP's replicate dimension), in ranks"""
    dp_shard: int
    """FSDP sharding degree, in ranks"""
    tp: int
    """tensor-parallel degree, in ranks"""
    pp: int
    """pipeline-parallel degree, in ranks"""
    cp: int = 1
    """context-parallel degree (always 1: a seam)"""
    pp_schedule: str = "1F1B"
    """pipeline schedule name (`ParallelConfig.pp_schedule`)"""
    pp_microbatches: int = 1
    """microbatches per rank batch under pp > 1 (1 without pipelining)"""

    @property
    def world_size(self) -> int:
        """Ranks of the run: the product of the degrees."""
        return self.dp_replicate * self.dp_shard * self.tp * self.pp * self.cp

    @property
    def dp(self) -> int:
        """Data-parallel degree: ranks that see different samples (dp_replicate x dp_shard)."""
        return self.dp_replicate * self.dp_shard

    @property
    def num_stages(self) -> int:
        """Pipeline stages of the model (pp x stages per rank)."""
        return self.pp * stages_per_rank(self.pp_schedule) if self.pp > 1 else 1

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        """Sizes of the device-mesh dimensions `MESH_DIMS`."""
        return (self.pp, self.dp_replicate, self.dp_shard, self.tp)

    @property
    def is_fsdp_only(self) -> bool:
        """True for plain FSDP over the whole world (the layout of every run before layouts)."""
        return self.dp_replicate == self.tp == self.pp == 1

    def describe(self) -> str:
        """Return the layout in one line, e.g. "pp=2 x dp_replicate=1 x dp_shard=2 x tp=1"."""
        return " x ".join(f"{n}={s}" for n, s in zip(MESH_DIMS, self.mesh_shape, strict=True))

    def coordinates(self, rank: int) -> dict[str, int]:
        """Return `rank`'s index along each mesh dimension (row-major over `mesh_shape`)."""
        coords: dict[str, int] = {}
        for name, size in reversed(list(zip(MESH_DIMS, self.mesh_shape, strict=True))):
            coords[name] = rank % size
            rank //= size
        return {n: coords[n] for n in MESH_DIMS}

    def dp_rank(self, rank: int) -> int:
        """Return the data-parallel rank of global `rank`: which slice of the global batch it loads."""
        c = self.coordinates(rank)
        return c["dp_replicate"] * self.dp_shard + c["dp_shard"]


def resolve_layout(
    parallel: ParallelConfig,
    world_size: int,
    local_world_size: int,
    *,
    model_name: str | None = None,
    batch_size: int | None = None,
) -> Layout:
    """Return the layout `parallel` asks for on `world_size` ranks, `local_world_size` per node.

    `dp_shard=-1` takes what the other degrees leave of the world size. With `model_name`,
    the model's TP plan and pipeline split points are checked too; with `batch_size` (samples
    per data-parallel rank, `data.batch_size`), that the microbatches divide it.

    Raises:
        UserError: one line naming the field (`parallel.<degree>`) and the valid choices:
            cp > 1; degrees whose product is not the world size; tp > local_world_size;
            tp asked of a model without a TP plan or not dividing its heads; pp (times the
            stages per rank) above the model's split points + 1; microbatches that do not
            divide the batch or are fewer than pp.
    """
    if parallel.cp != 1:
        raise UserError(
            f"context parallelism (cp={parallel.cp}) is not supported yet",
            "parallel.cp",
            "set parallel.cp to 1",
        )
    fixed = parallel.dp_replicate * parallel.tp * parallel.pp
    dp_shard = parallel.dp_shard
    if dp_shard == -1:
        if world_size % fixed:
            raise UserError(
                f"dp_replicate={parallel.dp_replicate} x tp={parallel.tp} x pp={parallel.pp} = "
                f"{fixed} does not divide the world size {world_size}",
                "parallel.dp_replicate x parallel.tp x parallel.pp",
                f"choose degrees whose product divides {world_size} "
                f"(divisors: {', '.join(map(str, _divisors(world_size)))})",
            )
        dp_shard = world_size // fixed
    if fixed * dp_shard != world_size:
        raise UserError(
            f"dp_replicate={parallel.dp_replicate} x dp_shard={dp_shard} x tp={parallel.tp} x "
            f"pp={parallel.pp} = {fixed * dp_shard} is not the world size {world_size}",
            "parallel.dp_shard",
            f"set parallel.dp_shard to -1 (what is left) or to "
            f"{world_size // fixed if world_size % fixed == 0 else 'a value'} so the product is "
            f"{world_size}",
        )
    if parallel.tp > local_world_size:
        raise UserError(
            f"tp={parallel.tp} exceeds the {local_world_size} ranks of a node (TP stays inside a node)",
            "parallel.tp",
            f"set parallel.tp to one of {', '.join(map(str, _divisors(local_world_size)))}",
        )
    microbatches = 1
    if parallel.pp > 1:
        stages = parallel.pp * stages_per_rank(parallel.pp_schedule)
        microbatches = parallel.pp_microbatches or stages
        if microbatches < parallel.pp:
            raise UserError(
                f"{microbatches} microbatches cannot keep pp={parallel.pp} stages busy",
                "parallel.pp_microbatches",
                f"set parallel.pp_microbatches to at least {parallel.pp} (or leave it unset)",
            )
        if parallel.pp_schedule == "Interleaved1F1B" and microbatches % parallel.pp:
            raise UserError(
                f"Interleaved1F1B needs microbatches ({microbatches}) that are a multiple of "
                f"pp={parallel.pp}",
                "parallel.pp_microbatches",
                f"set parallel.pp_microbatches to a multiple of {parallel.pp}",
            )
        if batch_size is not None and batch_size % microbatches:
            raise UserError(
                f"{microbatches} microbatches do not divide data.batch_size={batch_size}",
                "parallel.pp_microbatches",
                f"choose one of {', '.join(map(str, _divisors(batch_size)))} "
                "(or change data.batch_size)",
            )
    if model_name is not None:
        _check_model(parallel, model_name)
    return Layout(
        dp_replicate=parallel.dp_replicate,
        dp_shard=dp_shard,
        tp=parallel.tp,
        pp=parallel.pp,
        pp_schedule=parallel.pp_schedule,
        pp_microbatches=microbatches,
    )


def _check_model(parallel: ParallelConfig, model_name: str) -> None:
    """Raise when model preset `model_name` cannot run the TP / PP degrees of `parallel`."""
    from platform_lib.models.presets import get_model_config

    spec = get_model_config(model_name)
    divisor: int | None = getattr(spec, "tp_divisor", None)
    if parallel.tp > 1 and divisor is None:
        raise UserError(
            f"model {model_name!r} declares no tensor-parallel plan",
            "parallel.tp",
            "set parallel.tp to 1, or pick a model with a TP plan (world_model_*)",
        )
    if divisor is not None and divisor % parallel.tp:
        raise UserError(
            f"tp={parallel.tp} does not divide the {divisor} attention heads of {model_name!r}",
            "parallel.tp",
            f"set parallel.tp to one of {', '.join(map(str, _divisors(divisor)))}",
        )
    splits: int = getattr(spec, "num_split_points", 0)
    stages = parallel.pp * stages_per_rank(parallel.pp_schedule) if parallel.pp > 1 else 1
    if stages > splits + 1:
        most = (splits + 1) // stages_per_rank(parallel.pp_schedule)
        raise UserError(
            f"pp={parallel.pp} with {parallel.pp_schedule} needs {stages} stages but model "
            f"{model_name!r} has {splits} split points ({splits + 1} stages at most)",
            "parallel.pp",
            f"set parallel.pp to at most {max(most, 1)}"
            + (" (this model cannot be pipelined: 1)" if splits == 0 else ""),
        )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
