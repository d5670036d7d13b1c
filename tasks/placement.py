"""Placement catalog: where a task runs on the cluster, and through which Kueue queue.

A user asks for N accelerators of a type in a team's queue, never for a node; `Placement`
turns such a request into resources, node selector + tolerations, the
`kueue.x-k8s.io/queue-name` label and the elastic shape (`nnodes` x `nproc_per_node`).
Invalid requests fail when the task is built with a `PlacementError` naming the field; the
training task's placement comes from the environment (`placement_from_env`, docs/cluster.md).
`deploy/kueue/` must agree with this catalog (`tests/unit/test_deploy_crossref.py`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "ACCELERATORS",
    "DEFAULT_PLACEMENT",
    "FLYTE_PROJECT",
    "NAMESPACES",
    "PLACEMENT_ENV",
    "QUEUE_LABEL",
    "TEAMS",
    "AcceleratorType",
    "Placement",
    "PlacementError",
    "Team",
    "flyte_namespace",
    "main",
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
}

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
            queue, a team without quota for the type, or a count that does not divide into
            nodes (more than one node's worth must be a multiple of `per_node`).
    """

    team: str = "perception"
    """team whose Kueue LocalQueue admits the job (a key of `TEAMS`)"""
    accelerator: str = "cpu"
    """accelerator type (a key of `ACCELERATORS`)"""
    accelerator_count: int = 2
    """accelerators in total over all nodes (for "cpu": worker processes)"""
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
        return {
            PLACEMENT_ENV["team"]: self.team,
            PLACEMENT_ENV["accelerator"]: self.accelerator,
            PLACEMENT_ENV["accelerator_count"]: str(self.accelerator_count),
        }

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
    """Return the `Placement` named by `DRIVETRAIN_TEAM/ACCELERATOR/ACCELERATOR_COUNT`.

    Unset variables keep `DEFAULT_PLACEMENT`'s value (local runs: 2 CPU workers).

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
    try:
        return Placement(
            team=env.get(PLACEMENT_ENV["team"], DEFAULT_PLACEMENT.team),
            accelerator=env.get(PLACEMENT_ENV["accelerator"], DEFAULT_PLACEMENT.accelerator),
            accelerator_count=count_value,
        )
    except PlacementError as exc:
        raise PlacementError(exc.field, f"{PLACEMENT_ENV[exc.field]}: {exc}") from None


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
