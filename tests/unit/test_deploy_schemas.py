"""deploy/ against the unmodified CRD schemas (+ CEL rules) and the Kubernetes OpenAPI schemas."""

from __future__ import annotations

import pytest

from tests.support.deploy import load_check, mutate

check = load_check()
DOCS = check.load_documents()


def test_every_object_validates() -> None:
    kinds = {(d.obj["apiVersion"], d.kind) for d in DOCS}
    # every custom kind deploy/ relies on is present and checked against its CRD
    assert {
        ("kueue.x-k8s.io/v1beta2", k)
        for k in ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")
    } <= kinds
    assert ("kubeflow.org/v1", "PyTorchJob") in kinds
    assert {("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"), ("v1", "Service")} <= kinds
    crds = check.load_crds()
    assert ("kueue.x-k8s.io/v1beta2", "ClusterQueue") in crds
    assert ("kubeflow.org/v1", "PyTorchJob") in crds
    assert check.schema_errors(DOCS) == []


@pytest.mark.parametrize(
    ("kind", "name", "change", "expected"),
    [
        (
            "ClusterQueue",
            "mapping",
            lambda o: o["spec"].update(nominalQuota=1),
            "Additional properties are not allowed ('nominalQuota' was unexpected)",
        ),
        (
            "ClusterQueue",
            "planning",
            lambda o: o["spec"]["resourceGroups"][0]["flavors"][1]["resources"][2].update(
                nominalQuota="24 GPUs"
            ),
            "nominalQuota: '24 GPUs' does not match",
        ),
        (
            "ClusterQueue",
            "planning",
            lambda o: o["spec"]["preemption"].update(reclaimWithinCohort="Sometimes"),
            "'Sometimes' is not one of",
        ),
        (
            "LocalQueue",
            "perception",
            lambda o: o["spec"].update(clusterQueue="Perception_GPU"),
            "clusterQueue: 'Perception_GPU' does not match",
        ),
        (
            "PyTorchJob",
            "drivetrain-train-example",
            lambda o: o["spec"]["elasticPolicy"].update(minReplicas="two"),
            "'two' is not of type 'integer'",
        ),
    ],
)
def test_schema_violations_are_caught(kind, name, change, expected) -> None:
    errors = check.schema_errors(mutate(DOCS, kind, name, change))
    assert errors and all(f"{kind}/{name}" in e and expected in e for e in errors), errors


@pytest.mark.parametrize(
    ("kind", "name", "change", "rule_message"),
    [
        # a queue outside any cohort cannot borrow
        (
            "ClusterQueue",
            "mapping",
            lambda o: o["spec"].pop("cohortName"),
            "borrowingLimit must be nil when cohort is empty",
        ),
        (
            "ClusterQueue",
            "mapping",
            lambda o: o["spec"]["resourceGroups"][0]["flavors"][0]["resources"].pop(),
            "flavors must have the same number of resources as the coveredResources",
        ),
        (
            "ResourceFlavor",
            "a100-80gb",
            lambda o: o["spec"]["tolerations"][0].update(value="present"),
            "a value must be empty when 'operator' is 'Exists'",
        ),
        (
            "ClusterQueue",
            "planning",
            lambda o: o["spec"]["preemption"].update(
                reclaimWithinCohort="Never", borrowWithinCohort={"policy": "LowerPriority"}
            ),
            "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
        ),
    ],
)
def test_cel_rules_of_the_crds_are_enforced(kind, name, change, rule_message) -> None:
    errors = check.schema_errors(mutate(DOCS, kind, name, change))
    assert len(errors) == 1 and rule_message in errors[0], errors


@pytest.mark.parametrize(
    ("kind", "name", "change", "expected"),
    [
        (
            "Deployment",
            "mlflow",
            lambda o: o["spec"]["template"]["spec"].update(nodeSelectors={}),
            "'nodeSelectors' was unexpected",
        ),
        (
            "StatefulSet",
            "mlflow-postgres",
            lambda o: o["spec"].update(replicas="1"),
            "'1' is not of type 'integer'",
        ),
        (
            "Service",
            "mlflow",
            lambda o: o["spec"]["ports"][0].update(port="http"),
            "'http' is not of type 'integer'",
        ),
    ],
)
def test_builtin_kind_violations_are_caught(kind, name, change, expected) -> None:
    errors = check.schema_errors(mutate(DOCS, kind, name, change))
    assert len(errors) == 1 and expected in errors[0], errors
