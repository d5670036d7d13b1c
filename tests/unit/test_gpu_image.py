"""The `gpu` extra (torchvision for nvJPEG) and the accelerator task image that installs it."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from tasks.image import GPU_PINNED, GPU_TASK_IMAGE, PINNED, TASK_IMAGE, task_image
from tasks.placement import Placement
from tasks.train import build_train_task

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_gpu_extra_is_the_torchvision_of_the_pinned_torch():
    extra = [Requirement(r) for r in PROJECT["optional-dependencies"]["gpu"]]
    assert [str(r) for r in extra] == list(GPU_PINNED)
    (vision,) = extra
    (torch_pin,) = [Requirement(p) for p in PINNED if p.startswith("torch==")]
    torch_minor = int(next(iter(torch_pin.specifier)).version.split(".")[1])
    # torchvision 0.N ships with torch 2.(N - 15) (0.16 <-> 2.1 ... 0.28 <-> 2.13)
    assert vision.name == "torchvision"
    assert next(iter(vision.specifier)).version.startswith(f"0.{torch_minor + 15}.")


def test_torchvision_stays_out_of_the_main_and_dev_installs():
    names = {Requirement(r).name for r in PROJECT["dependencies"]}
    names |= {Requirement(r).name for r in PROJECT["optional-dependencies"]["dev"]}
    assert "torchvision" not in names
    assert "[gpu]" not in (REPO / "Makefile").read_text()


def test_accelerator_tasks_run_in_the_image_with_the_gpu_extra():
    assert GPU_TASK_IMAGE.packages == [*PINNED, *GPU_PINNED]
    assert GPU_TASK_IMAGE.python_version == TASK_IMAGE.python_version
    assert task_image(None) is TASK_IMAGE and task_image("nvidia.com/gpu") is GPU_TASK_IMAGE
    gpu = build_train_task(Placement(team="planning", accelerator="a100-80gb", accelerator_count=8))
    cpu = build_train_task(Placement(accelerator="cpu", accelerator_count=2))
    assert gpu.container_image is GPU_TASK_IMAGE
    assert cpu.container_image is TASK_IMAGE
