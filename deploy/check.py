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


def kueue_errors(docs: list[Document]) -> list[str]:
    """Flavors, queues, cohorts and quotas against each other and the placement catalog."""
    errors = []
    flavors, cohorts = _by_kind(docs, "ResourceFlavor"), _by_kind(docs, "Cohort")
    queues, local_queues = _by_kind(docs, "ClusterQueue"), _by_kind(docs, "LocalQueue")
    for accel in ACCELERATORS.values():
        pod = {
            "cpu": accel.cpu_per_accelerator * accel.per_node,
            "memory": accel.memory_gib_per_accelerator * accel.per_node,
        }
        node = {"cpu": accel.node_cpu, "memory": accel.node_memory_gib}
        for resource in ("cpu", "memory"):
            if pod[resource] > node[resource]:
                errors.append(
                    f"accelerator {accel.name!r}: a full node's pod requests "
                    f"{pod[resource]} {resource}, more than a node's allocatable "
                    f"{node[resource]} (tasks/placement.py)"
                )
        flavor = flavors.get(accel.flavor)
        if flavor is None:
            errors.append(
                f"accelerator {accel.name!r}: ResourceFlavor {accel.flavor!r} is not defined"
            )
            continue
        if flavor.spec.get("nodeLabels") != dict(accel.node_labels):
            errors.append(
                f"{flavor.where} ResourceFlavor/{flavor.name}: nodeLabels "
                f"{flavor.spec.get('nodeLabels')} != catalog {dict(accel.node_labels)}"
            )
        if (flavor.spec.get("tolerations") or []) != [dict(t) for t in accel.tolerations]:
            errors.append(
                f"{flavor.where} ResourceFlavor/{flavor.name}: tolerations differ from "
                f"the catalog's {list(accel.tolerations)}"
            )
    # every flavor referenced is defined; lending within nominal quota
    unknown = set()
    for doc, flavor, res in _quotas(docs):
        where = f"{doc.where} {doc.kind}/{doc.name}"
        if flavor not in flavors and (where, flavor) not in unknown:
            unknown.add((where, flavor))
            errors.append(
                f"{where}: unknown flavor {flavor!r} (defined: {', '.join(sorted(flavors))})"
            )
        nominal = parse_quantity(res["nominalQuota"])
        if "lendingLimit" in res and parse_quantity(res["lendingLimit"]) > nominal:
            errors.append(
                f"{where}: flavor {flavor} {res['name']}: lendingLimit "
                f"{res['lendingLimit']} exceeds nominalQuota {res['nominalQuota']}"
            )
    # quotas add up: per flavor and resource, sum of nominal quotas <= pool capacity
    totals: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for _, flavor, res in _quotas(docs):
        totals[(flavor, res["name"])] += _in_units(res["name"], res["nominalQuota"])
    capacity = {
        (a.flavor, r): Decimal(v) for a in ACCELERATORS.values() for r, v in a.capacity.items()
    }
    for (flavor, resource), total in sorted(totals.items()):
        limit = capacity.get((flavor, resource), Decimal(0))
        if total > limit:
            unit = "Gi" if resource == "memory" else ""
            errors.append(
                f"quota: flavor {flavor} {resource}: nominal quotas add up to "
                f"{total}{unit}, more than the pool's capacity {limit}{unit}"
            )
    # cohorts form one tree: parents exist, no cycles, one root; queues name existing cohorts
    for doc in cohorts.values():
        parent = doc.spec.get("parentName")
        if parent is not None and parent not in cohorts:
            errors.append(f"{doc.where} Cohort/{doc.name}: parentName {parent!r} is not a Cohort")
        seen, node = {doc.name}, parent
        while node in cohorts:
            if node in seen:
                errors.append(f"{doc.where} Cohort/{doc.name}: cohort cycle through {node!r}")
                break
            seen.add(node)
            node = cohorts[node].spec.get("parentName")
    roots = sorted(n for n, d in cohorts.items() if d.spec.get("parentName") is None)
    if len(roots) != 1:
        errors.append(f"cohorts: expected one root Cohort, found {roots}")
    for doc in queues.values():
        cohort = doc.spec.get("cohortName")
        if cohort is not None and cohort not in cohorts:
            errors.append(
                f"{doc.where} ClusterQueue/{doc.name}: cohortName {cohort!r} is not a Cohort"
            )
    for doc in docs:  # example jobs in deploy/ name existing LocalQueues of their namespace
        queue = (doc.obj.get("metadata", {}).get("labels") or {}).get("kueue.x-k8s.io/queue-name")
        namespace = doc.obj.get("metadata", {}).get("namespace")
        if queue is not None and f"{namespace}/{queue}" not in local_queues:
            errors.append(
                f"{doc.where} {doc.kind}/{doc.name}: queue-name {queue!r} is not a "
                f"LocalQueue in namespace {namespace!r}"
            )
    for doc in local_queues.values():
        if doc.spec.get("clusterQueue") not in queues:
            errors.append(
                f"{doc.where} LocalQueue/{doc.name}: clusterQueue "
                f"{doc.spec.get('clusterQueue')!r} is not defined"
            )
    # the catalog's teams: queues where it says, quota for exactly its accelerators
    for team in TEAMS.values():
        cq = queues.get(team.cluster_queue)
        if cq is None:
            errors.append(f"team {team.name!r}: ClusterQueue {team.cluster_queue!r} is not defined")
            continue
        for namespace in team.namespaces:
            lq = local_queues.get(f"{namespace}/{team.local_queue}")
            if lq is None:
                errors.append(
                    f"team {team.name!r}: unknown queue, no LocalQueue "
                    f"{team.local_queue!r} in namespace {namespace!r}"
                )
            elif lq.spec.get("clusterQueue") != team.cluster_queue:
                errors.append(
                    f"{lq.where} LocalQueue/{lq.name}: points at "
                    f"{lq.spec.get('clusterQueue')!r}, the catalog says {team.cluster_queue!r}"
                )
            if not _selects_namespace(cq.spec.get("namespaceSelector"), namespace):
                errors.append(
                    f"{cq.where} ClusterQueue/{cq.name}: namespaceSelector does not "
                    f"admit {namespace!r} where team {team.name!r} submits"
                )
        quota: dict[str, dict[str, Decimal]] = defaultdict(dict)
        for _, flavor, res in _quotas([cq]):
            quota[flavor][res["name"]] = _in_units(res["name"], res["nominalQuota"])
        for accel in ACCELERATORS.values():
            need = {
                "cpu": accel.cpu_per_accelerator * accel.per_node,
                "memory": accel.memory_gib_per_accelerator * accel.per_node,
            }
            if accel.resource:
                need[accel.resource] = accel.per_node
            has = quota.get(accel.flavor, {})
            counted = accel.resource or "cpu"
            if accel.name in team.accelerators:
                short = [r for r, v in need.items() if has.get(r, Decimal(0)) < v]
                if short:
                    errors.append(
                        f"{cq.where} ClusterQueue/{cq.name}: team {team.name!r} may "
                        f"request {accel.name} but its nominal quota in flavor "
                        f"{accel.flavor} cannot admit one node's pod ({need}): {short}"
                    )
            elif has.get(counted, Decimal(0)) > 0:
                errors.append(
                    f"{cq.where} ClusterQueue/{cq.name}: quota in flavor {accel.flavor} "
                    f"but the catalog does not let team {team.name!r} request {accel.name}"
                )
    return errors


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
