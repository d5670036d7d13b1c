"""`pyflyte --pkgs workflows package` run for real (what `pyflyte register` uploads): every entity
serialises, an unknown queue is refused, `make register` checks the queue first; the in-process serialisation tests are in
tests/unit/test_flyte_spec.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from flyteidl.admin.launch_plan_pb2 import LaunchPlan as LaunchPlanPb
from flyteidl.admin.task_pb2 import TaskSpec

from tasks.image import TASK_IMAGE
from tasks.placement import QUEUE_LABEL
from tests.support.parallel import run_concurrently

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/drivetrain:dev"
#: Never cached, by design: the change probes, and the failure node (it records a failure).
PROBES = {
    "hash_raw_logs",
    "list_raw_logs",
    "record_pipeline_failure",
    "check_fault_switch",  # the fault switch: read from each run's environment
    "warn_skipped_faults",
    "resolve_model",  # the evaluation workflow's probes: an alias, a dataset, a spec file
    "hash_dataset",
    "resolve_slice_spec",
}
#: The launch plans' workflows.
PLAN_WORKFLOWS = {
    "drivetrain_scheduled_retrain": "workflows.training_pipeline.training_pipeline",
    "drivetrain_on_demand": "workflows.training_pipeline.training_pipeline",
    "drivetrain_champion_eval": "workflows.evaluation.evaluate_champion_on_raw_logs",
}


def _short(name: str) -> str:
    """Task name without module, map tasks without their hash suffix."""
    return re.sub(r"^(map_.+)_[0-9a-f]{32}-arraynode$", r"\1", name.split(".")[-1])


def _image(template) -> str:
    """The image of a task template: its container, or its pod template's primary container."""
    if template.HasField("container"):
        return template.container.image
    (container,) = template.k8s_pod.pod_spec["containers"]
    return container["image"]


def _pyflyte_package(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    pyflyte = str(Path(sys.executable).parent / "pyflyte")
    return subprocess.run(
        [
            pyflyte,
            "--pkgs",
            "workflows",
            "package",
            "--image",
            IMAGE,
            "--output",
            str(tmp_path / "flyte-package.tgz"),
            "--force",
        ],
        cwd=REPO,
        env={**os.environ, "HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """name -> (finished packaging, its output folder): both packagings started together."""
    envs = {
        "planning": {
            "DRIVETRAIN_TEAM": "planning",
            "DRIVETRAIN_ACCELERATOR": "a100-80gb",
            "DRIVETRAIN_ACCELERATOR_COUNT": "16",
        },
        "unknown_queue": {"DRIVETRAIN_TEAM": "robotics"},
    }
    folders = {name: tmp_path_factory.mktemp(name) for name in envs}
    results = run_concurrently(
        {name: lambda name=name: _pyflyte_package(folders[name], **envs[name]) for name in envs}
    )
    return {name: (results[name], folders[name]) for name in envs}


def test_pyflyte_package_serialises_every_entity(packaged: dict) -> None:
    result, tmp_path = packaged["planning"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    specs, plans = {}, {}
    with tarfile.open(tmp_path / "flyte-package.tgz") as tar:
        names = sorted(tar.getnames())
        task_files = [n for n in names if "_tasks." in n]
        # 17 steps and the failure node; the evaluation workflows: 6 tasks and their own map task
        assert len(task_files) == 25
        assert sum("workflows.training_pipeline.training_pipeline" in n for n in names) == 2
        for name in task_files:
            spec = TaskSpec()
            spec.ParseFromString(tar.extractfile(name).read())
            specs[_short(spec.template.id.name)] = spec.template
        for name in names:
            if name.endswith("_3.pb"):  # launch plans (flytekit's package: 1 task, 2 wf, 3 lp)
                plan = LaunchPlanPb()
                plan.ParseFromString(tar.extractfile(name).read())
                plans[plan.id.name] = plan
    # the training task: 16 A100s = a PyTorchJob of 2 nodes x 8, in planning's queue
    train = specs["train_model"]
    assert train.type == "pytorch"
    assert train.custom["elasticConfig"] == {
        "rdzvBackend": "c10d",
        "minReplicas": 2,
        "maxReplicas": 2,
        "nprocPerNode": 8,
        "maxRestarts": 1,
    }
    assert train.custom["workerReplicas"] == {"replicas": 2}
    assert dict(train.metadata.metadata.labels) == {QUEUE_LABEL: "planning"}
    pod = train.k8s_pod.pod_spec
    assert pod["containers"][0]["resources"]["requests"] == {
        "cpu": "80",
        "memory": "880Gi",
        "gpu": "8",
    }
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    # no other task enters a Kueue queue (manageJobsWithoutQueueName is off)
    assert [n for n, t in specs.items() if t.metadata.metadata.labels] == ["train_model"]
    # one image for every CPU task and the GPU image (+ the gpu extra) for training on A100s:
    # the ImageSpecs (tag = their content hash), not the --image default
    (image,) = {_image(t) for n, t in specs.items() if n != "train_model"}
    gpu_image = _image(train)
    assert image.startswith(f"{TASK_IMAGE.registry}/drivetrain:") and image != IMAGE
    assert gpu_image.startswith(f"{TASK_IMAGE.registry}/drivetrain:") and gpu_image != image
    assert {n for n, t in specs.items() if t.metadata.discoverable} == set(specs) - PROBES
    # the launch plans run the same workflow; the scheduled one carries its cron schedule
    assert set(PLAN_WORKFLOWS) <= set(plans)
    for name, workflow in PLAN_WORKFLOWS.items():
        assert plans[name].spec.workflow_id.name == workflow
    schedule = plans["drivetrain_scheduled_retrain"].spec.entity_metadata.schedule
    assert schedule.cron_schedule.schedule == "0 3 * * *"


def test_pyflyte_package_refuses_an_unknown_queue(packaged: dict) -> None:
    result, tmp_path = packaged["unknown_queue"]
    assert result.returncode != 0
    assert "DRIVETRAIN_TEAM: team='robotics': unknown queue" in " ".join(
        (result.stdout + result.stderr).split()
    )
    assert not (tmp_path / "flyte-package.tgz").exists()


def test_make_register_checks_the_queue_before_registering() -> None:
    dry = subprocess.run(
        ["make", "-n", "register", "PROJECT=drivetrain", "DOMAIN=production", "VERSION=v1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    check = next(i for i, line in enumerate(dry) if "-m tasks.placement" in line)
    register = next(i for i, line in enumerate(dry) if "pyflyte register" in line)
    assert check < register
    assert "--project drivetrain --domain production" in dry[check]
    assert "--project drivetrain --domain production --version v1" in dry[register]
