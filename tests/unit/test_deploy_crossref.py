"""deploy/ against itself and the placement catalog: flavors, queues, quotas, cohorts, config."""

from __future__ import annotations

from tasks.placement import ACCELERATORS, TEAMS
from tests.support.deploy import load_check, mutate

check = load_check()
DOCS = check.load_documents()


def _set_gpus(docs: list, queue: str, flavor: str, **fields) -> list:
    """`docs` with the nvidia.com/gpu entry of ClusterQueue `queue`, flavor `flavor` updated."""

    def change(obj: dict) -> None:
        (group,) = obj["spec"]["resourceGroups"]
        (entry,) = [f for f in group["flavors"] if f["name"] == flavor]
        (gpu,) = [r for r in entry["resources"] if r["name"] == "nvidia.com/gpu"]
        gpu.update(fields)

    return mutate(docs, "ClusterQueue", queue, change)


def test_cross_references_hold() -> None:
    assert check.crossref_errors(DOCS) == []
    # and they are about the catalog the training task is built from
    local_queues = {
        (d.obj["metadata"]["namespace"], d.name) for d in DOCS if d.kind == "LocalQueue"
    }
    assert {(ns, t.local_queue) for t in TEAMS.values() for ns in t.namespaces} == local_queues
    flavors = {d.name for d in DOCS if d.kind == "ResourceFlavor"}
    assert flavors == {a.flavor for a in ACCELERATORS.values()}


def test_a_broken_quota_is_caught() -> None:
    # planning's 24 A100s raised to 40: with perception's 40 the pool's 64 GPUs are oversold
    assert check.kueue_errors(_set_gpus(DOCS, "planning", "a100-80gb", nominalQuota=40)) == [
        "quota: flavor a100-80gb nvidia.com/gpu: nominal quotas add up to 80, more than the "
        "pool's capacity 64"
    ]


def test_lending_more_than_the_nominal_quota_is_caught() -> None:
    (error,) = check.kueue_errors(_set_gpus(DOCS, "perception", "h100-80gb", lendingLimit=33))
    assert (
        "ClusterQueue/perception: flavor h100-80gb nvidia.com/gpu: lendingLimit 33 exceeds" in error
    )


def test_an_unknown_flavor_is_caught() -> None:
    def rename(obj: dict) -> None:
        obj["spec"]["resourceGroups"][0]["flavors"][1]["name"] = "a100-40gb"

    errors = check.kueue_errors(mutate(DOCS, "ClusterQueue", "planning", rename))
    assert (
        "kueue/cluster-queues.yaml#1 ClusterQueue/planning: unknown flavor 'a100-40gb' "
        "(defined: a100-80gb, cpu-standard, h100-80gb)" in errors
    )
    # the catalog lets planning request A100s, which the queue no longer holds quota for
    assert any("team 'planning' may request a100-80gb but its nominal quota" in e for e in errors)


def test_a_team_without_its_queue_in_a_namespace_is_caught() -> None:
    kept = [
        d
        for d in DOCS
        if not (
            d.kind == "LocalQueue"
            and d.name == "planning"
            and d.obj["metadata"]["namespace"] == "drivetrain-staging"
        )
    ]
    assert check.kueue_errors(kept) == [
        "team 'planning': unknown queue, no LocalQueue 'planning' in namespace 'drivetrain-staging'"
    ]


def test_quota_that_the_catalog_does_not_grant_is_caught() -> None:
    # 8 of planning's A100s move to mapping, whose jobs the catalog keeps on CPUs
    def grant_gpus(obj: dict) -> None:
        obj["spec"]["resourceGroups"][0]["flavors"].append(
            {
                "name": "a100-80gb",
                "resources": [
                    {"name": "cpu", "nominalQuota": 0},
                    {"name": "memory", "nominalQuota": 0},
                    {"name": "nvidia.com/gpu", "nominalQuota": 8},
                ],
            }
        )

    moved = _set_gpus(
        mutate(DOCS, "ClusterQueue", "mapping", grant_gpus),
        "planning",
        "a100-80gb",
        nominalQuota=16,
    )
    assert check.kueue_errors(moved) == [
        "kueue/cluster-queues.yaml#2 ClusterQueue/mapping: quota in flavor a100-80gb but the "
        "catalog does not let team 'mapping' request a100-80gb"
    ]


def test_a_job_naming_an_unknown_queue_is_caught() -> None:
    relabel = mutate(
        DOCS,
        "PyTorchJob",
        "drivetrain-train-example",
        lambda o: o["metadata"]["labels"].update({"kueue.x-k8s.io/queue-name": "mapping-gpu"}),
    )
    assert check.kueue_errors(relabel) == [
        "training-operator/pytorchjob-example.yaml#0 PyTorchJob/drivetrain-train-example: "
        "queue-name 'mapping-gpu' is not a LocalQueue in namespace 'drivetrain-development'"
    ]


def test_a_pod_larger_than_its_node_is_caught(monkeypatch) -> None:
    import dataclasses

    h100 = dataclasses.replace(ACCELERATORS["h100-80gb"], cpu_per_accelerator=24)
    monkeypatch.setitem(check.ACCELERATORS, "h100-80gb", h100)
    assert check.kueue_errors(DOCS) == [
        "accelerator 'h100-80gb': a full node's pod requests 192 cpu, more than a node's "
        "allocatable 180 (tasks/placement.py)"
    ]


def test_resources_out_of_covered_order_are_caught() -> None:
    def swap(obj: dict) -> None:
        resources = obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
        resources[0], resources[1] = resources[1], resources[0]

    assert check.kueue_errors(mutate(DOCS, "ClusterQueue", "mapping", swap)) == [
        "kueue/cluster-queues.yaml#2 ClusterQueue/mapping: flavor cpu-standard lists ['memory', "
        "'cpu', 'nvidia.com/gpu'], not the coveredResources ['cpu', 'memory', 'nvidia.com/gpu'] "
        "in order"
    ]


def test_cohorts_must_form_one_tree() -> None:
    cycle = mutate(DOCS, "Cohort", "drivetrain", lambda o: o["spec"].update(parentName="autonomy"))
    errors = check.kueue_errors(cycle)
    assert "kueue/cohorts.yaml#0 Cohort/drivetrain: cohort cycle through 'drivetrain'" in errors
    assert "cohorts: expected one root Cohort, found []" in errors
    orphan = mutate(DOCS, "ClusterQueue", "mapping", lambda o: o["spec"].update(cohortName="maps"))
    assert check.kueue_errors(orphan) == [
        "kueue/cluster-queues.yaml#2 ClusterQueue/mapping: cohortName 'maps' is not a Cohort"
    ]


def test_flavor_node_labels_must_match_the_catalog() -> None:
    relabel = mutate(
        DOCS,
        "ResourceFlavor",
        "h100-80gb",
        lambda o: o["spec"].update(nodeLabels={"nvidia.com/gpu.product": "NVIDIA-H100-SXM5-80GB"}),
    )
    (error,) = check.kueue_errors(relabel)
    assert error.startswith("kueue/resource-flavors.yaml#2 ResourceFlavor/h100-80gb: nodeLabels")


def test_kueue_config_enables_gang_admission_and_both_integrations() -> None:
    import yaml

    values = check.load_yaml("kueue/values.yaml")
    assert check.kueue_config_errors(values) == []
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    del config["waitForPodsReady"]
    config["integrations"]["frameworks"].remove("pod")
    values["managerConfig"]["controllerManagerConfigYaml"] = yaml.safe_dump(config)
    assert check.kueue_config_errors(values) == [
        "kueue/values.yaml managerConfig: integrations.frameworks lacks 'pod'",
        "kueue/values.yaml managerConfig: waitForPodsReady.timeout is not set (gang admission of "
        "PyTorchJobs)",
    ]


def test_flyte_task_limits_admit_every_placement() -> None:
    values = check.load_yaml("flyte/values.yaml")
    attributes = check.load_yaml("flyte/task-resource-attributes.yaml")
    assert check.flyte_errors(values, attributes) == []
    attributes["limits"]["memory"] = "256Gi"
    errors = check.flyte_errors(values, attributes)
    assert (
        "flyte/task-resource-attributes.yaml: limits.memory=256Gi is below the 1760Gi a full "
        "h100-80gb node's pod requests" in errors
    )
