"""Placement catalog: where a task runs on the cluster, and through which Kueue queue.

A user asks for N accelerators of a type in a team's queue, never for a node; `Placement`
turns such a request into resources, node selector + tolerations, the
`kueue.x-k8s.io/queue-name` label and the elastic shape (`nnodes` x `nproc_per_node`) with the layout of its ranks (`LAYOUT_FIELDS`: pipeline stages
across nodes, tensor parallel inside a node, data parallel over the rest; torchtitan's mesh order).
Invalid requests fail when the task is built with a `PlacementError` naming the field and the
valid choices; the training task's placement comes from the environment (`placement_from_env`,
docs/cluster.md). `LAUNCH_RECIPES` give each accelerator type a default layout per model preset.
`deploy/kueue/` must agree with this catalog (`tests/unit/test_deploy_crossref.py`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from platform_lib.training.config import ParallelConfig, TrainConfig

__all__ = [
    "ACCELERATORS",
    "DEFAULT_PLACEMENT",
    "FLAT_FSDP",
    "FLYTE_PROJECT",
    "LAUNCH_RECIPES",
    "LAYOUT_FIELDS",
    "NAMESPACES",
    "PLACEMENT_ENV",
    "QUEUE_LABEL",
    "TEAMS",
    "AcceleratorType",
    "Placement",
    "PlacementError",
    "Team",
    "flyte_namespace",
    "format_layout",
    "main",
    "parse_layout",
    "placement_from_env",
]

#: The label Kueue reads to find a workload's LocalQueue (Kueue docs, "Run a PyTorchJob").
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

#: Flyte project of Drivetrain (deploy/flyte/project.yaml); Flyte runs the tasks of a
#: project-domain in the namespace "<project>-<domain>" (flyteadmin's default namespace template).
FLYTE_PROJECT = "drivetrain"
NAMESPACES = tuple(f"{FLYTE_PROJECT}-{d}" for d in ("development", "staging", "production"))

#: Environment variables holding the placement of the training task (serialisation time and pod).
PLACEMENT_ENV = {
    "team": "DRIVETRAIN_TEAM",
    "accelerator": "DRIVETRAIN_ACCELERATOR",
    "accelerator_count": "DRIVETRAIN_ACCELERATOR_COUNT",
    "layout": "DRIVETRAIN_LAYOUT",
}

#: Degrees of a layout, outermost mesh dimension first (`ParallelConfig`, training/layout.py):
#: pipeline stages, replicated and sharded data parallel, tensor parallel. Their product is the
#: number of ranks; `dp_shard` = -1 takes whatever the others leave.
LAYOUT_FIELDS = ("pp", "dp_replicate", "dp_shard", "tp")
#: The layout when none is asked for: FSDP over every rank.
FLAT_FSDP: Mapping[str, int] = {"pp": 1, "dp_replicate": 1, "dp_shard": -1, "tp": 1}
#: Longest `DRIVETRAIN_LAYOUT` value, in characters.
MAX_LAYOUT_CHARS = 200

_TEMPLATE = re.compile(r"\{\{.*\}\}")  # `pyflyte package` leaves project/domain as templates


class PlacementError(ValueError):
    """An impossible placement request; `field` names the offending input."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


@dataclass(kw_only=True, frozen=True)
class AcceleratorType:
    """One accelerator type: its node pool and its Kueue ResourceFlavor."""

    name: str
    """accelerator type as users write it (`Placement.accelerator`)"""
    resource: str | None
    """extended resource counted per accelerator (requests = limits); None: CPU worker processes"""
    per_node: int
    """accelerators per node (GPUs; for "cpu": training worker processes per node)"""
    cpu_per_accelerator: int
    """host CPU cores requested per accelerator"""
    memory_gib_per_accelerator: int
    """host memory requested per accelerator, in GiB"""
    flavor: str
    """Kueue ResourceFlavor of the pool (deploy/kueue/resource-flavors.yaml)"""
    node_labels: Mapping[str, str]
    """node selector of the pool (= the flavor's spec.nodeLabels)"""
    tolerations: tuple[Mapping[str, str], ...] = ()
    """tolerations of the pool's taints (= the flavor's spec.tolerations), Kubernetes field names"""
    nodes: int
    """nodes in the pool: the capacity the ClusterQueues' nominal quotas must add up to"""
    node_cpu: int
    """allocatable CPU cores per node"""
    node_memory_gib: int
    """allocatable memory per node, in GiB"""

    @property
    def capacity(self) -> dict[str, int]:
        """Pool capacity per resource (cpu in cores, memory in GiB, accelerators)."""
        out = {"cpu": self.nodes * self.node_cpu, "memory": self.nodes * self.node_memory_gib}
        if self.resource:
            out[self.resource] = self.nodes * self.per_node
        return out


@dataclass(kw_only=True, frozen=True)
class Team:
    """A team: its Kueue queues and the accelerator types it holds quota for."""

    name: str
    """team name as users write it (`Placement.team`)"""
    local_queue: str
    """LocalQueue name (the `kueue.x-k8s.io/queue-name` label value) in each namespace"""
    cluster_queue: str
    """ClusterQueue holding the team's quota (deploy/kueue/cluster-queues.yaml)"""
    accelerators: frozenset[str]
    """accelerator types with a nominal quota in the team's ClusterQueue"""
    namespaces: tuple[str, ...] = NAMESPACES
    """Flyte project-domain namespaces that hold the team's LocalQueue"""


def _nvidia_pool(
    name: str, product: str, *, cpu: int, memory_gib: int, nodes: int, node: tuple[int, int]
) -> AcceleratorType:
    """An 8-GPU NVIDIA node pool: GPU feature discovery's product label, the GPU taint.

    `cpu`/`memory_gib` are requested per GPU; `node` is (allocatable cores, GiB) per node.
    """
    return AcceleratorType(
        name=name,
        resource="nvidia.com/gpu",
        per_node=8,
        cpu_per_accelerator=cpu,
        memory_gib_per_accelerator=memory_gib,
        flavor=name,
        node_labels={"nvidia.com/gpu.product": product},
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
        nodes=nodes,
        node_cpu=node[0],
        node_memory_gib=node[1],
    )


#: Accelerator types by name. "cpu" trains with gloo on CPU worker processes.
ACCELERATORS: dict[str, AcceleratorType] = {
    a.name: a
    for a in (
        AcceleratorType(
            name="cpu",
            resource=None,
            per_node=8,
            cpu_per_accelerator=1,
            memory_gib_per_accelerator=4,
            flavor="cpu-standard",
            node_labels={"drivetrain.io/node-pool": "cpu-standard"},
            nodes=8,
            node_cpu=32,
            node_memory_gib=128,
        ),
        _nvidia_pool(
            "a100-80gb", "NVIDIA-A100-SXM4-80GB", cpu=10, memory_gib=110, nodes=8, node=(96, 1100)
        ),
        _nvidia_pool(
            "h100-80gb", "NVIDIA-H100-80GB-HBM3", cpu=22, memory_gib=220, nodes=4, node=(180, 1900)
        ),
    )
}

#: Teams by name; each has one LocalQueue per namespace listed.
TEAMS: dict[str, Team] = {
    t.name: t
    for t in (
        Team(
            name="perception",
            local_queue="perception",
            cluster_queue="perception",
            accelerators=frozenset({"cpu", "a100-80gb", "h100-80gb"}),
        ),
        Team(
            name="planning",
            local_queue="planning",
            cluster_queue="planning",
            accelerators=frozenset({"cpu", "a100-80gb"}),
        ),
        Team(
            name="mapping",
            local_queue="mapping",
            cluster_queue="mapping",
            accelerators=frozenset({"cpu"}),
            namespaces=NAMESPACES[:2],
        ),
    )
}


#: Launch recipes: per accelerator type, the default layout of each model preset (model zoo,
#: `platform_lib.models.presets`) that needs more than `FLAT_FSDP`; unlisted presets train flat.
#: Tensor parallel spans a node's NVLink domain, pipeline stages cross nodes (docs/parallelism.md).
LAUNCH_RECIPES: dict[str, dict[str, Mapping[str, int]]] = {
    "cpu": {"world_model_small": {"tp": 2}},
    "a100-80gb": {"world_model_large": {"tp": 8}},
    "h100-80gb": {"world_model_large": {"tp": 4}},
}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _choices(values: list[int]) -> str:
    return ", ".join(map(str, values)) or "none"


def parse_layout(text: str) -> dict[str, int]:
    """Parse a layout written as `name=degree` pairs, e.g. "tp=2,pp=2" (`DRIVETRAIN_LAYOUT`).

    Names are `LAYOUT_FIELDS`, each at most once; degrees are integers (range checks are
    `Placement`'s). An empty text is the flat layout's `{}`.

    Raises:
        PlacementError: naming `layout` (malformed text, unknown or repeated name) or the
            degree that is not an integer.
    """
    if len(text) > MAX_LAYOUT_CHARS:
        raise PlacementError(
            "layout", f"layout of {len(text)} characters: at most {MAX_LAYOUT_CHARS}"
        )
    degrees: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in LAYOUT_FIELDS:
            raise PlacementError(
                "layout",
                f"layout part {part[:40]!r}: write name=degree with a name among "
                f"{', '.join(LAYOUT_FIELDS)}, e.g. tp=2,pp=2",
            )
        if name in degrees:
            raise PlacementError("layout", f"layout names {name} twice")
        if not re.fullmatch(r"-?[0-9]{1,6}", value.strip()):
            raise PlacementError(f"layout.{name}", f"{name}={value.strip()[:20]!r}: not an integer")
        degrees[name] = int(value)
    return degrees


def format_layout(layout: Mapping[str, int]) -> str:
    """Return `layout` as `parse_layout` reads it, in `LAYOUT_FIELDS` order ("pp=1,dp_replicate=1,...")."""
    return ",".join(f"{name}={layout[name]}" for name in LAYOUT_FIELDS if name in layout)


def flyte_namespace(project: str | None, domain: str | None) -> str | None:
    """Return the Kubernetes namespace of a Flyte project-domain, None while unset or templated."""
    if not project or not domain or _TEMPLATE.search(project) or _TEMPLATE.search(domain):
        return None
    return f"{project}-{domain}"


@dataclass(kw_only=True, frozen=True)
class Placement:
    """A request for `accelerator_count` accelerators of type `accelerator` in `team`'s queue.

    Raises:
        PlacementError: (from `__post_init__`) on an unknown accelerator type, a team without a
            queue, a team without quota for the type, a count that does not divide into
            nodes (more than one node's worth must be a multiple of `per_node`), or a `layout`
            that does not fit the ranks (`check_layout`).
    """

    team: str = "perception"
    """team whose Kueue LocalQueue admits the job (a key of `TEAMS`)"""
    accelerator: str = "cpu"
    """accelerator type (a key of `ACCELERATORS`)"""
    accelerator_count: int = 2
    """accelerators in total over all nodes (for "cpu": worker processes)"""
    layout: Mapping[str, int] | None = field(default=None, hash=False)
    """degrees of the ranks' layout (`LAYOUT_FIELDS`, unnamed ones as in `FLAT_FSDP`), kept
    resolved; None: each model preset's launch recipe (`layout_for`)"""
    _accelerator_type: AcceleratorType = field(init=False, repr=False, compare=False)
    _team: Team = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.team not in TEAMS:
            raise PlacementError(
                "team",
                f"team={self.team!r}: unknown queue, no Kueue LocalQueue is defined for "
                f"this team; known teams: {', '.join(sorted(TEAMS))} (tasks/placement.py TEAMS, "
                "deploy/kueue/local-queues.yaml)",
            )
        if self.accelerator not in ACCELERATORS:
            raise PlacementError(
                "accelerator",
                f"accelerator={self.accelerator!r}: unknown accelerator type; "
                f"known: {', '.join(sorted(ACCELERATORS))} (tasks/placement.py ACCELERATORS)",
            )
        team, accel = TEAMS[self.team], ACCELERATORS[self.accelerator]
        if self.accelerator not in team.accelerators:
            raise PlacementError(
                "team",
                f"team={self.team!r} has no quota for accelerator={self.accelerator!r} "
                f"(ClusterQueue {team.cluster_queue!r} holds no nominal quota in flavor "
                f"{accel.flavor!r}); this team may request: {', '.join(sorted(team.accelerators))}",
            )
        count = self.accelerator_count
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise PlacementError(
                "accelerator_count",
                f"accelerator_count={count!r}: must be a positive integer",
            )
        if count > accel.per_node and count % accel.per_node:
            raise PlacementError(
                "accelerator_count",
                f"accelerator_count={count} does not divide into "
                f"{self.accelerator} nodes of {accel.per_node}: ask for 1..{accel.per_node} "
                f"(one node) or a multiple of {accel.per_node}",
            )
        object.__setattr__(self, "_accelerator_type", accel)
        object.__setattr__(self, "_team", team)
        if self.layout is not None:
            object.__setattr__(self, "layout", self.check_layout(self.layout, "layout"))

    @property
    def accelerator_type(self) -> AcceleratorType:
        """The catalog entry of `accelerator`."""
        return self._accelerator_type

    @property
    def nnodes(self) -> int:
        """Nodes (pods) of the job: 1 up to one node's worth, else count / per_node."""
        return max(1, self.accelerator_count // self._accelerator_type.per_node)

    @property
    def nproc_per_node(self) -> int:
        """Worker processes per node: one per accelerator."""
        return self.accelerator_count // self.nnodes

    def check_layout(
        self, degrees: Mapping[str, object], source: str = "parallel"
    ) -> dict[str, int]:
        """Check layout degrees against this placement's ranks; return them resolved.

        Degrees not in `degrees` are `FLAT_FSDP`'s; other keys (a whole `ParallelConfig` dump)
        are ignored. The ranks are `nnodes` x `nproc_per_node`, laid out as torchtitan's mesh
        ("pp", "dp_replicate", "dp_shard", "tp", the last varying fastest over local ranks):
        tensor parallel groups must stay inside a node (tp divides `nproc_per_node`), each
        pipeline stage must hold whole nodes or share one node with the other stages (pp
        divides `nnodes`, or ranks / pp divides `nproc_per_node`), and the product of the
        degrees must be the number of ranks (`dp_shard` = -1 takes the rest).

        Args:
            degrees: name -> degree, e.g. {"tp": 2, "pp": 2}.
            source: prefix of the field names in errors ("parallel", a recipe's name).

        Returns:
            Every `LAYOUT_FIELDS` degree, `dp_shard` resolved.

        Raises:
            PlacementError: naming `<source>.<degree>` and its valid choices, in one line.
        """
        ranks, nnodes, per_node = self.accelerator_count, self.nnodes, self.nproc_per_node
        shape = f"{nnodes} node(s) x {per_node} {self.accelerator}"
        out: dict[str, int] = {}
        for name in LAYOUT_FIELDS:
            value = degrees.get(name, FLAT_FSDP[name])
            if (
                not isinstance(value, int)
                or isinstance(value, bool)
                or not (value >= 1 or (name == "dp_shard" and value == -1))
            ):
                rest = " or -1 (the rest of the ranks)" if name == "dp_shard" else ""
                raise PlacementError(
                    f"{source}.{name}",
                    f"{source}.{name}={value!r}: a degree is a positive integer{rest}",
                )
            out[name] = value
        tp, pp = out["tp"], out["pp"]
        if per_node % tp:
            raise PlacementError(
                f"{source}.tp",
                f"{source}.tp={tp}: tensor parallel stays inside a node and this placement has "
                f"{shape}; valid tp: {_choices(_divisors(per_node))}",
            )
        fits = [p for p in _divisors(ranks) if nnodes % p == 0 or per_node % (ranks // p) == 0]
        if pp not in fits:
            raise PlacementError(
                f"{source}.pp",
                f"{source}.pp={pp}: each pipeline stage holds whole nodes or shares one node, "
                f"and this placement has {shape}; valid pp: {_choices(fits)}",
            )
        if ranks % (tp * pp):
            choices = [t for t in _divisors(per_node) if ranks % (t * pp) == 0]
            raise PlacementError(
                f"{source}.tp",
                f"{source}: tp x pp = {tp} x {pp} = {tp * pp} is more than the {ranks} ranks "
                f"({shape}); valid tp with pp={pp}: {_choices(choices)}",
            )
        fixed = out["dp_replicate"] * tp * pp
        if out["dp_shard"] == -1:
            if ranks % fixed:
                choices = [d for d in _divisors(ranks) if (ranks // d) % (tp * pp) == 0]
                raise PlacementError(
                    f"{source}.dp_replicate",
                    f"{source}: dp_replicate x tp x pp = {fixed} does not divide the {ranks} "
                    f"ranks ({shape}); valid dp_replicate with tp={tp}, pp={pp}: {_choices(choices)}",
                )
            out["dp_shard"] = ranks // fixed
        elif fixed * out["dp_shard"] != ranks:
            rest = f" or {ranks // fixed}" if ranks % fixed == 0 else ""
            raise PlacementError(
                f"{source}.dp_shard",
                f"{source}: pp x dp_replicate x dp_shard x tp = {pp} x {out['dp_replicate']} x "
                f"{out['dp_shard']} x {tp} = {fixed * out['dp_shard']}, not the {ranks} ranks "
                f"({shape}); valid dp_shard: -1{rest}",
            )
        return out

    def layout_for(self, model: str) -> dict[str, int]:
        """Return the layout to train `model` (a model preset) with on this placement.

        The placement's own `layout` when set, else the launch recipe of the accelerator type
        for `model` (`LAUNCH_RECIPES`), else `FLAT_FSDP`; resolved (`check_layout`) and
        checked against the model's TP plan and pipeline split points
        (`platform_lib.training.layout.resolve_layout`).

        Raises:
            PlacementError: the layout does not fit this placement or the model, naming the
                field (`layout.<degree>` or the recipe's) and the valid choices.
        """
        from platform_lib.training.config import ParallelConfig

        source = "layout"
        layout = self.layout
        if layout is None:
            source = f"LAUNCH_RECIPES[{self.accelerator!r}][{model!r}]"
            recipe = LAUNCH_RECIPES.get(self.accelerator, {}).get(model, FLAT_FSDP)
            layout = self.check_layout(recipe, source)
        self._check_model(ParallelConfig.model_validate(dict(layout)), model, source)
        return dict(layout)

    def apply_layout(self, config: TrainConfig) -> TrainConfig:
        """Return `config` laid out on this placement (what the training task trains with).

        A config whose degrees are all `FLAT_FSDP`'s gets `layout_for(config.model.name)`
        (unchanged when that is flat FSDP too); one that names degrees keeps them. Either way
        the layout is checked against the placement (`check_layout`), the model and the batch
        (`platform_lib.training.layout.resolve_layout`).

        Raises:
            UserError: one line naming the field (`parallel.<degree>`, `layout.<degree>` or the
                recipe's) and the valid choices.
        """
        from platform_lib.errors import UserError
        from platform_lib.training.config import replace

        parallel, model = config.parallel, config.model.name
        degrees = {name: getattr(parallel, name) for name in LAYOUT_FIELDS}
        try:
            if degrees == FLAT_FSDP:
                layout = self.layout_for(model)
                if layout["dp_shard"] == self.accelerator_count:  # flat FSDP: nothing to apply
                    return config
                parallel = replace(parallel, **layout)
            else:
                self.check_layout(degrees, "parallel")
            self._check_model(parallel, model, "parallel", batch_size=config.data.batch_size)
        except PlacementError as error:
            raise UserError(
                str(error),
                error.field,
                f"change the degrees or the placement ({self.accelerator} x "
                f"{self.accelerator_count}, docs/cluster.md)",
            ) from None
        return config if parallel is config.parallel else replace(config, parallel=parallel)

    def _check_model(
        self, parallel: ParallelConfig, model: str, source: str, batch_size: int | None = None
    ) -> None:
        """Raise `PlacementError` naming `<source>.<degree>` when `model` cannot run `parallel`."""
        from platform_lib.errors import UserError
        from platform_lib.training.layout import resolve_layout

        try:
            resolve_layout(
                parallel,
                self.accelerator_count,
                self.nproc_per_node,
                model_name=model,
                batch_size=batch_size,
            )
        except UserError as error:
            field_name = source + error.culprit.removeprefix("parallel")
            raise PlacementError(field_name, f"{field_name}: {error.what}: {error.fix}") from None

    @property
    def queue(self) -> str:
        """The LocalQueue name (value of the `kueue.x-k8s.io/queue-name` label)."""
        return self._team.local_queue

    @property
    def labels(self) -> dict[str, str]:
        """Labels of the object Flyte creates for the task (Pod or PyTorchJob)."""
        return {QUEUE_LABEL: self.queue}

    @property
    def pod_resources(self) -> dict[str, str]:
        """Per-pod requests as Kubernetes quantities: cpu, memory and the accelerator resource."""
        accel, n = self._accelerator_type, self.nproc_per_node
        out = {
            "cpu": str(accel.cpu_per_accelerator * n),
            "memory": f"{accel.memory_gib_per_accelerator * n}Gi",
        }
        if accel.resource:
            out[accel.resource] = str(n)
        return out

    @property
    def environment(self) -> dict[str, str]:
        """The placement as environment variables (read back by `placement_from_env`)."""
        out = {
            PLACEMENT_ENV["team"]: self.team,
            PLACEMENT_ENV["accelerator"]: self.accelerator,
            PLACEMENT_ENV["accelerator_count"]: str(self.accelerator_count),
        }
        if self.layout is not None:
            out[PLACEMENT_ENV["layout"]] = format_layout(self.layout)
        return out

    def check_namespace(self, project: str | None, domain: str | None) -> None:
        """Fail unless the team's LocalQueue exists in the project-domain's namespace.

        `pyflyte package` leaves project/domain unset (filled in by `flytectl register`): nothing
        to check then; `pyflyte register` and `pyflyte run --remote` pass real ones.

        Raises:
            PlacementError: naming `team` when the namespace has no LocalQueue for it.
        """
        namespace = flyte_namespace(project, domain)
        if namespace is not None and namespace not in self._team.namespaces:
            raise PlacementError(
                "team",
                f"team={self.team!r}: unknown queue, LocalQueue {self.queue!r} does not "
                f"exist in namespace {namespace!r} (Flyte project={project!r}, domain={domain!r}); "
                f"it exists in: {', '.join(self._team.namespaces)}",
            )


DEFAULT_PLACEMENT = Placement()


def placement_from_env(environ: Mapping[str, str] | None = None) -> Placement:
    """Return the `Placement` named by `DRIVETRAIN_TEAM/ACCELERATOR/ACCELERATOR_COUNT/LAYOUT`.

    Unset variables keep `DEFAULT_PLACEMENT`'s value (local runs: 2 CPU workers, no layout:
    each model preset's launch recipe); `DRIVETRAIN_LAYOUT` is read by `parse_layout`.

    Raises:
        PlacementError: on an invalid placement; the message names the variable to fix.
    """
    env = os.environ if environ is None else environ
    count = env.get(PLACEMENT_ENV["accelerator_count"], str(DEFAULT_PLACEMENT.accelerator_count))
    try:
        count_value = int(count)
    except ValueError:
        raise PlacementError(
            "accelerator_count",
            f"{PLACEMENT_ENV['accelerator_count']}={count!r}: not an integer",
        ) from None
    layout = env.get(PLACEMENT_ENV["layout"])
    try:
        return Placement(
            team=env.get(PLACEMENT_ENV["team"], DEFAULT_PLACEMENT.team),
            accelerator=env.get(PLACEMENT_ENV["accelerator"], DEFAULT_PLACEMENT.accelerator),
            accelerator_count=count_value,
            layout=None if layout is None else parse_layout(layout),
        )
    except PlacementError as exc:
        variable = PLACEMENT_ENV[exc.field.split(".")[0]]
        raise PlacementError(exc.field, f"{variable}: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    """`python -m tasks.placement --project P --domain D`: check the placement before registering.

    Returns 0 when the placement from the environment (`placement_from_env`) may run in the
    project-domain's namespace; else prints `error: ...` naming the field and returns 2.
    """
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m tasks.placement", description=main.__doc__)
    parser.add_argument("--project", required=True)
    parser.add_argument("--domain", required=True)
    args = parser.parse_args(argv)
    try:
        placement_from_env().check_namespace(args.project, args.domain)
    except PlacementError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
