"""Offline validation of deploy/: schemas, CEL rules and cross-references.

    python deploy/check.py            # exit 1 and one line per problem, or "deploy/ OK ..."

What is checked, without a cluster:

1. Every custom resource (Kueue, training-operator) against the OpenAPI v3 schema of its served
   version in the unmodified CRD files of `../shared/k8s-schemas/` (jsonschema), with unknown
   fields rejected as `kubectl apply --validate=strict` would, schema defaults applied first
   (as the API server does), then the CRD's CEL rules (`x-kubernetes-validations`, evaluated
   with cel-python; transition rules that read `oldSelf` only run on update and are skipped).
2. Every built-in kind (Namespace, ConfigMap, Service, Deployment, ...) against the Kubernetes
   OpenAPI schemas shipped by `kubernetes-validate` (strict: unknown fields are errors).
3. Cross-references between deploy/ and the placement catalog (`tasks/placement.py`): every
   flavor a ClusterQueue names is defined and matches its accelerator's node labels and
   tolerations; every team's LocalQueue exists in each namespace the catalog lists, points at
   the team's ClusterQueue, and that ClusterQueue admits the namespace; each team holds quota
   for exactly the accelerator types the catalog lets it request; the nominal quotas of each
   flavor add up to at most the pool's capacity; lending limits stay within nominal quotas;
   cohorts form one tree; the Kueue manager config enables pod + PyTorchJob integrations,
   waitForPodsReady and fair sharing; Flyte enables its pytorch plugin and its task limits
   admit the largest pod a placement asks for.

Helm values and the kustomization are not cluster objects; the parts of them that matter are
checked in (3).
"""

from __future__ import annotations

import copy
import functools
import sys
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import yaml
from kubernetes.utils.quantity import parse_quantity

DEPLOY = Path(__file__).resolve().parent
REPO = DEPLOY.parent
sys.path.insert(0, str(REPO))  # tasks.placement, when run as a script from a bare checkout

from tasks.placement import ACCELERATORS, NAMESPACES, TEAMS, placement_from_env  # noqa: E402

#: CRD files (unmodified upstream releases) beside the repository.
SCHEMAS = REPO.parent / "shared" / "k8s-schemas"
#: Kubernetes minor version the built-in kinds are validated against.
KUBERNETES_VERSION = "1.33"
#: YAML files that are tool inputs, not cluster objects (checked semantically instead).
NOT_OBJECTS = {"kueue/values.yaml", "flyte/values.yaml", "training-operator/kustomization.yaml"}
#: flytectl attribute files: Flyte admin objects, not Kubernetes ones.
FLYTECTL_FILES = {
    "flyte/project.yaml",
    "flyte/task-resource-attributes.yaml",
    "flyte/cluster-resource-attributes.yaml",
}
GI = Decimal(2**30)


@dataclass(frozen=True)
class Document:
    """One YAML document of deploy/: `where` is "<file relative to deploy/>#<index>"."""

    where: str
    obj: dict[str, Any]

    @property
    def kind(self) -> str:
        return self.obj.get("kind", "")

    @property
    def name(self) -> str:
        return self.obj.get("metadata", {}).get("name", "")

    @property
    def spec(self) -> dict[str, Any]:
        return self.obj.get("spec") or {}


def load_documents(root: Path = DEPLOY) -> list[Document]:
    """Return every Kubernetes object under `root` (YAML files, all documents)."""
    docs = []
    for path in sorted(root.rglob("*.yaml")):
        rel = path.relative_to(root).as_posix()
        if rel in NOT_OBJECTS or rel in FLYTECTL_FILES:
            continue
        for i, obj in enumerate(yaml.safe_load_all(path.read_text())):
            if obj is not None:
                docs.append(Document(f"{rel}#{i}", obj))
    return docs


def load_yaml(rel: str, root: Path = DEPLOY) -> Any:
    """Return the single YAML document `root/rel`."""
    return yaml.safe_load((root / rel).read_text())


# --- 1. custom resources: CRD OpenAPI schemas + CEL ------------------------------------------


@functools.cache
def load_crds(schema_dir: Path = SCHEMAS) -> dict[tuple[str, str], dict[str, Any]]:
    """Return {(apiVersion, kind): openAPIV3Schema} for every served version of every CRD."""
    crds = {}
    for path in sorted(schema_dir.rglob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
            continue
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                crds[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
    if not crds:
        raise FileNotFoundError(f"no CustomResourceDefinition under {schema_dir}")
    return crds


def _strict(schema: Any) -> Any:
    """Copy of a structural schema that rejects unknown fields (kubectl --validate=strict)."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _apply_defaults(obj: Any, schema: dict[str, Any]) -> Any:
    """Fill in schema `default`s the way the API server does before validation."""
    if isinstance(obj, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key not in obj and "default" in sub:
                obj[key] = copy.deepcopy(sub["default"])
            if key in obj:
                obj[key] = _apply_defaults(obj[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in obj:
                obj[key] = _apply_defaults(obj[key], extra)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [_apply_defaults(item, schema["items"]) for item in obj]
    return obj


@functools.cache
def _cel_program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def _cel_errors(obj: Any, schema: dict[str, Any], path: str) -> Iterator[str]:
    """Evaluate every `x-kubernetes-validations` rule of `schema` on `obj`, recursively."""
    for rule in schema.get("x-kubernetes-validations", ()):
        if "oldSelf" in rule["rule"]:
            continue  # transition rule: evaluated on update only
        result = _cel_program(rule["rule"]).evaluate({"self": celpy.json_to_cel(obj)})
        if result is not True and not (isinstance(result, celpy.celtypes.BoolType) and result):
            yield f"{path}: {rule.get('message', rule['rule'])} (CEL rule {rule['rule']!r})"
    if isinstance(obj, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in obj:
                yield from _cel_errors(obj[key], sub, f"{path}.{key}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            yield from _cel_errors(item, schema["items"], f"{path}[{i}]")


def custom_resource_errors(doc: Document, schema: dict[str, Any]) -> list[str]:
    """Validate one custom resource against its CRD schema and CEL rules."""
    obj = _apply_defaults(copy.deepcopy(doc.obj), schema)
    validator = jsonschema.Draft4Validator(_strict(schema))
    errors = [
        f"{doc.where} {doc.kind}/{doc.name}: {'.'.join(map(str, e.absolute_path)) or '<root>'}: "
        f"{e.message}"
        for e in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.path)))
    ]
    if not errors:  # CEL rules assume a schema-valid object
        errors += [f"{doc.where} {doc.kind}/{doc.name}: {e}" for e in _cel_errors(obj, schema, "")]
    return errors


# --- 2. built-in kinds: Kubernetes OpenAPI schemas --------------------------------------------


def builtin_errors(doc: Document, version: str = KUBERNETES_VERSION) -> list[str]:
    """Validate one built-in object against the Kubernetes schemas (strict)."""
    try:
        kubernetes_validate.validate(doc.obj, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = ".".join(map(str, e.path)) or "<root>"
        return [f"{doc.where} {doc.kind}/{doc.name}: {path}: {e.message}"]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [f"{doc.where} {doc.kind}/{doc.name}: {e.message} (and no CRD for it)"]
    return []


def schema_errors(docs: list[Document]) -> list[str]:
    """Schema (and CEL) errors of every document: CRDs first, then built-in kinds."""
    crds, errors = load_crds(), []
    for doc in docs:
        schema = crds.get((doc.obj.get("apiVersion", ""), doc.kind))
        errors += custom_resource_errors(doc, schema) if schema else builtin_errors(doc)
    return errors


# --- 3. cross-references -----------------------------------------------------------------------


def _by_kind(docs: list[Document], kind: str) -> dict[str, Document]:
    out = {}
    for doc in docs:
        if doc.kind == kind:
            key = (
                doc.name
                if kind != "LocalQueue"
                else f"{doc.obj['metadata']['namespace']}/{doc.name}"
            )
            out[key] = doc
    return out


def _selects_namespace(selector: Mapping[str, Any] | None, namespace: str) -> bool:
    """Whether a LabelSelector matches a namespace by its `kubernetes.io/metadata.name` label."""
    if selector is None:
        return False  # ClusterQueue without namespaceSelector admits no namespace
    labels = {"kubernetes.io/metadata.name": namespace}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or ():
        value, op = labels.get(expr["key"]), expr["operator"]
        if (
            (op == "In" and value not in expr["values"])
            or (op == "NotIn" and value in expr["values"])
            or (op == "Exists" and value is None)
            or (op == "DoesNotExist" and value is not None)
        ):
            return False
    return True


def _quotas(docs: list[Document]) -> Iterator[tuple[Document, str, dict[str, Any]]]:
    """(queue or cohort, flavor name, resource entry) for every quota in ClusterQueues/Cohorts."""
    for doc in docs:
        if doc.kind in ("ClusterQueue", "Cohort"):
            for group in doc.spec.get("resourceGroups") or ():
                for flavor in group["flavors"]:
                    for res in flavor["resources"]:
                        yield doc, flavor["name"], res


def _in_units(resource: str, quantity: Any) -> Decimal:
    """A quantity in the catalog's units: GiB for memory, cores / devices otherwise."""
    value = parse_quantity(quantity)
    return value / GI if resource == "memory" else value


def _node_pod(accel: Any) -> dict[str, int]:
    """What a pod with one node's worth of `accel` requests (cpu cores, memory GiB, devices)."""
    pod = {
        "cpu": accel.cpu_per_accelerator * accel.per_node,
        "memory": accel.memory_gib_per_accelerator * accel.per_node,
    }
    if accel.resource:
        pod[accel.resource] = accel.per_node
    return pod


def _flavor_errors(flavors: dict[str, Document]) -> Iterator[str]:
    """Each accelerator's pod fits its node; its flavor exists with the catalog's labels."""
    for accel in ACCELERATORS.values():
        pod, node = _node_pod(accel), {"cpu": accel.node_cpu, "memory": accel.node_memory_gib}
        for resource in ("cpu", "memory"):
            if pod[resource] > node[resource]:
                yield (
                    f"accelerator {accel.name!r}: a full node's pod requests {pod[resource]} "
                    f"{resource}, more than a node's allocatable {node[resource]} "
                    "(tasks/placement.py)"
                )
        flavor = flavors.get(accel.flavor)
        if flavor is None:
            yield f"accelerator {accel.name!r}: ResourceFlavor {accel.flavor!r} is not defined"
            continue
        if flavor.spec.get("nodeLabels") != dict(accel.node_labels):
            yield (
                f"{flavor.where} ResourceFlavor/{flavor.name}: nodeLabels "
                f"{flavor.spec.get('nodeLabels')} != catalog {dict(accel.node_labels)}"
            )
        if (flavor.spec.get("tolerations") or []) != [dict(t) for t in accel.tolerations]:
            yield (
                f"{flavor.where} ResourceFlavor/{flavor.name}: tolerations differ from the "
                f"catalog's {list(accel.tolerations)}"
            )


def _group_errors(docs: list[Document]) -> Iterator[str]:
    """The Kueue webhook's structural rules: each flavor lists the covered resources in
    order; a resource and a flavor appear in one resource group of a queue only."""
    for doc in (d for d in docs if d.kind in ("ClusterQueue", "Cohort")):
        where, covered_seen, flavors_seen = f"{doc.where} {doc.kind}/{doc.name}", set(), set()
        for group in doc.spec.get("resourceGroups") or ():
            covered = list(group["coveredResources"])
            if covered_seen & set(covered):
                yield f"{where}: {sorted(covered_seen & set(covered))} in two resource groups"
            covered_seen |= set(covered)
            for flavor in group["flavors"]:
                names = [r["name"] for r in flavor["resources"]]
                if names != covered:
                    yield (
                        f"{where}: flavor {flavor['name']} lists {names}, not the "
                        f"coveredResources {covered} in order"
                    )
                if flavor["name"] in flavors_seen:
                    yield f"{where}: flavor {flavor['name']} appears twice"
                flavors_seen.add(flavor["name"])


def _quota_errors(docs: list[Document], flavors: dict[str, Document]) -> Iterator[str]:
    """Flavors referenced exist; lending within nominal quota; quotas add up per pool."""
    unknown = set()
    totals: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for doc, flavor, res in _quotas(docs):
        where = f"{doc.where} {doc.kind}/{doc.name}"
        if flavor not in flavors and (where, flavor) not in unknown:
            unknown.add((where, flavor))
            yield f"{where}: unknown flavor {flavor!r} (defined: {', '.join(sorted(flavors))})"
        if "lendingLimit" in res and (
            parse_quantity(res["lendingLimit"]) > parse_quantity(res["nominalQuota"])
        ):
            yield (
                f"{where}: flavor {flavor} {res['name']}: lendingLimit {res['lendingLimit']} "
                f"exceeds nominalQuota {res['nominalQuota']}"
            )
        totals[(flavor, res["name"])] += _in_units(res["name"], res["nominalQuota"])
    capacity = {
        (a.flavor, r): Decimal(v) for a in ACCELERATORS.values() for r, v in a.capacity.items()
    }
    for (flavor, resource), total in sorted(totals.items()):
        limit = capacity.get((flavor, resource), Decimal(0))
        if total > limit:
            unit = "Gi" if resource == "memory" else ""
            yield (
                f"quota: flavor {flavor} {resource}: nominal quotas add up to {total}{unit}, "
                f"more than the pool's capacity {limit}{unit}"
            )


def _cohort_errors(cohorts: dict[str, Document], queues: dict[str, Document]) -> Iterator[str]:
    """Cohorts form one tree (parents exist, no cycle, one root); queues name cohorts."""
    for doc in cohorts.values():
        parent = doc.spec.get("parentName")
        if parent is not None and parent not in cohorts:
            yield f"{doc.where} Cohort/{doc.name}: parentName {parent!r} is not a Cohort"
        seen, node = {doc.name}, parent
        while node in cohorts:
            if node in seen:
                yield f"{doc.where} Cohort/{doc.name}: cohort cycle through {node!r}"
                break
            seen.add(node)
            node = cohorts[node].spec.get("parentName")
    roots = sorted(n for n, d in cohorts.items() if d.spec.get("parentName") is None)
    if len(roots) != 1:
        yield f"cohorts: expected one root Cohort, found {roots}"
    for doc in queues.values():
        cohort = doc.spec.get("cohortName")
        if cohort is not None and cohort not in cohorts:
            yield f"{doc.where} ClusterQueue/{doc.name}: cohortName {cohort!r} is not a Cohort"


def _queue_errors(
    docs: list[Document], queues: dict[str, Document], local_queues: dict[str, Document]
) -> Iterator[str]:
    """Queue-name labels and LocalQueues point at queues that exist."""
    for doc in docs:  # example jobs in deploy/ name existing LocalQueues of their namespace
        queue = (doc.obj.get("metadata", {}).get("labels") or {}).get("kueue.x-k8s.io/queue-name")
        namespace = doc.obj.get("metadata", {}).get("namespace")
        if queue is not None and f"{namespace}/{queue}" not in local_queues:
            yield (
                f"{doc.where} {doc.kind}/{doc.name}: queue-name {queue!r} is not a "
                f"LocalQueue in namespace {namespace!r}"
            )
    for doc in local_queues.values():
        if doc.spec.get("clusterQueue") not in queues:
            yield (
                f"{doc.where} LocalQueue/{doc.name}: clusterQueue "
                f"{doc.spec.get('clusterQueue')!r} is not defined"
            )


def _team_errors(queues: dict[str, Document], local_queues: dict[str, Document]) -> Iterator[str]:
    """The catalog's teams: LocalQueues where it says, quota for exactly its accelerators."""
    for team in TEAMS.values():
        cq = queues.get(team.cluster_queue)
        if cq is None:
            yield f"team {team.name!r}: ClusterQueue {team.cluster_queue!r} is not defined"
            continue
        for namespace in team.namespaces:
            lq = local_queues.get(f"{namespace}/{team.local_queue}")
            if lq is None:
                yield (
                    f"team {team.name!r}: unknown queue, no LocalQueue {team.local_queue!r} "
                    f"in namespace {namespace!r}"
                )
            elif lq.spec.get("clusterQueue") != team.cluster_queue:
                yield (
                    f"{lq.where} LocalQueue/{lq.name}: points at "
                    f"{lq.spec.get('clusterQueue')!r}, the catalog says {team.cluster_queue!r}"
                )
            if not _selects_namespace(cq.spec.get("namespaceSelector"), namespace):
                yield (
                    f"{cq.where} ClusterQueue/{cq.name}: namespaceSelector does not admit "
                    f"{namespace!r} where team {team.name!r} submits"
                )
        quota: dict[str, dict[str, Decimal]] = defaultdict(dict)
        for _, flavor, res in _quotas([cq]):
            quota[flavor][res["name"]] = _in_units(res["name"], res["nominalQuota"])
        for accel in ACCELERATORS.values():
            need, has = _node_pod(accel), quota.get(accel.flavor, {})
            if accel.name in team.accelerators:
                short = [r for r, v in need.items() if has.get(r, Decimal(0)) < v]
                if short:
                    yield (
                        f"{cq.where} ClusterQueue/{cq.name}: team {team.name!r} may request "
                        f"{accel.name} but its nominal quota in flavor {accel.flavor} cannot "
                        f"admit one node's pod ({need}): {short}"
                    )
            elif has.get(accel.resource or "cpu", Decimal(0)) > 0:
                yield (
                    f"{cq.where} ClusterQueue/{cq.name}: quota in flavor {accel.flavor} but "
                    f"the catalog does not let team {team.name!r} request {accel.name}"
                )


def kueue_errors(docs: list[Document]) -> list[str]:
    """Flavors, queues, cohorts and quotas against each other and the placement catalog."""
    flavors, cohorts = _by_kind(docs, "ResourceFlavor"), _by_kind(docs, "Cohort")
    queues, local_queues = _by_kind(docs, "ClusterQueue"), _by_kind(docs, "LocalQueue")
    return [
        *_flavor_errors(flavors),
        *_group_errors(docs),
        *_quota_errors(docs, flavors),
        *_cohort_errors(cohorts, queues),
        *_queue_errors(docs, queues, local_queues),
        *_team_errors(queues, local_queues),
    ]


def kueue_config_errors(values: Mapping[str, Any]) -> list[str]:
    """The Kueue manager Configuration inside the Helm values (deploy/kueue/values.yaml)."""
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    where, errors = "kueue/values.yaml managerConfig", []
    if (
        config.get("apiVersion") != "config.kueue.x-k8s.io/v1beta2"
        or config.get("kind") != "Configuration"
    ):
        errors.append(f"{where}: expected a config.kueue.x-k8s.io/v1beta2 Configuration")
    frameworks = set((config.get("integrations") or {}).get("frameworks") or ())
    for needed in ("pod", "kubeflow.org/pytorchjob"):
        if needed not in frameworks:
            errors.append(f"{where}: integrations.frameworks lacks {needed!r}")
    if "timeout" not in (config.get("waitForPodsReady") or {}):
        errors.append(
            f"{where}: waitForPodsReady.timeout is not set (gang admission of PyTorchJobs)"
        )
    if not (config.get("fairSharing") or {}).get("preemptionStrategies"):
        errors.append(f"{where}: fairSharing is not enabled, yet queues set fair-sharing weights")
    if config.get("manageJobsWithoutQueueName", False):
        errors.append(f"{where}: manageJobsWithoutQueueName would queue every Flyte task pod")
    for namespace in NAMESPACES:
        if not _selects_namespace(config.get("managedJobsNamespaceSelector"), namespace):
            errors.append(f"{where}: managedJobsNamespaceSelector excludes {namespace!r}")
    return errors


def flyte_errors(values: Mapping[str, Any], attributes: Mapping[str, Any]) -> list[str]:
    """flyte-binary values enable the pytorch plugin; task limits admit every placement's pod."""
    errors = []
    plugins = values["configuration"]["inline"]["tasks"]["task-plugins"]
    if (
        "pytorch" not in plugins["enabled-plugins"]
        or plugins["default-for-task-types"].get("pytorch") != "pytorch"
    ):
        errors.append(
            "flyte/values.yaml: the pytorch task plugin is not enabled for task type pytorch"
        )
    limits = attributes["limits"]
    for accel in ACCELERATORS.values():
        placement = placement_from_env(
            {
                "DRIVETRAIN_TEAM": next(
                    t.name for t in TEAMS.values() if accel.name in t.accelerators
                ),
                "DRIVETRAIN_ACCELERATOR": accel.name,
                "DRIVETRAIN_ACCELERATOR_COUNT": str(accel.per_node),
            }
        )
        pod = placement.pod_resources
        checks = [("cpu", pod["cpu"], limits["cpu"]), ("memory", pod["memory"], limits["memory"])]
        if accel.resource:
            checks.append(("gpu", pod[accel.resource], limits["gpu"]))
        for name, asked, limit in checks:
            if parse_quantity(asked) > parse_quantity(limit):
                errors.append(
                    f"flyte/task-resource-attributes.yaml: limits.{name}={limit} is below "
                    f"the {asked} a full {accel.name} node's pod requests"
                )
    return errors


def crossref_errors(docs: list[Document], root: Path = DEPLOY) -> list[str]:
    """All cross-reference checks over deploy/ and the placement catalog."""
    return (
        kueue_errors(docs)
        + kueue_config_errors(load_yaml("kueue/values.yaml", root))
        + flyte_errors(
            load_yaml("flyte/values.yaml", root),
            load_yaml("flyte/task-resource-attributes.yaml", root),
        )
    )


def main() -> int:
    docs = load_documents()
    errors = schema_errors(docs) + crossref_errors(docs)
    for error in errors:
        print(error)
    if not errors:
        print(
            f"deploy/ OK: {len(docs)} objects valid (CRDs from {SCHEMAS}, Kubernetes "
            f"{KUBERNETES_VERSION}), cross-references consistent with tasks/placement.py"
        )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
