"""The task image: defined once, with pinned dependencies, used by every Flyte task.

`pyflyte register` / `pyflyte run --remote` build it (flytekit's default Docker builder) and
push it to `DRIVETRAIN_IMAGE_REGISTRY` unless an image with the same content hash exists;
local runs ignore it. The project's own code is not baked in: Flyte's fast registration
(`--copy auto`, the default) ships it with each registered version, and the elastic launcher
hands it to its spawned workers.

`PINNED` holds one exact version per runtime dependency of pyproject.toml, each within the
range pyproject allows (tests/unit/test_flyte_spec.py); the PyPI torch wheel is the CUDA build.
`GPU_TASK_IMAGE` adds pyproject's `gpu` extra (`GPU_PINNED`: torchvision, whose nvJPEG decode
`decode="gpu"`/`"auto"` uses); `task_image` picks it for tasks placed on accelerators.
"""

from __future__ import annotations

import os

from flytekit import ImageSpec

__all__ = ["GPU_PINNED", "GPU_TASK_IMAGE", "PINNED", "TASK_IMAGE", "task_image"]

#: Exact versions installed in the task image (one per runtime dependency of pyproject.toml).
PINNED = (
    "torch==2.13.0",
    "flytekit==1.16.31",
    "flytekitplugins-kfpytorch==1.16.31",
    "mlflow==3.17.2",
    "pyarrow==25.0.1",
    "pandas==3.1.1",
    "numpy==2.4.6",
    "pandera==0.35.0",
    "pillow==13.0.0",
    "simplejpeg==1.9.0",
    "fsspec==2026.9.0",
    "s3fs==2026.9.0",
    "filelock==4.3.1",
    "tqdm==4.70.1",
    "safetensors==0.8.0",
    "tenacity==9.2.1",
    "croniter==7.0.0",
    "pydantic==2.14.4",
    "xxhash==4.1.0",
    "matplotlib==3.11.2",
    "google-re2==1.1.20251105",
)

TASK_IMAGE = ImageSpec(
    name="drivetrain",
    python_version="3.11",
    packages=list(PINNED),
    registry=os.environ.get("DRIVETRAIN_IMAGE_REGISTRY", "localhost:30000"),
    builder="default",
)

#: Exact versions of pyproject's `gpu` extra: torchvision built against torch 2.13.0.
GPU_PINNED = ("torchvision==0.28.0",)

#: The task image of accelerator nodes: TASK_IMAGE plus the `gpu` extra (nvJPEG decode).
GPU_TASK_IMAGE = TASK_IMAGE.with_packages(list(GPU_PINNED))


def task_image(accelerator_resource: str | None) -> ImageSpec:
    """Return the image for a task placed on `accelerator_resource` (e.g. "nvidia.com/gpu").

    None (CPU worker processes) gets `TASK_IMAGE`; any accelerator gets `GPU_TASK_IMAGE`.
    """
    return GPU_TASK_IMAGE if accelerator_resource else TASK_IMAGE
