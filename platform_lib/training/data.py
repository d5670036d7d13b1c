"""Batches for training and evaluation, built from a published dataset.

Both go through the streaming loader (`platform_lib.loading.loader.build_loader`):
`build_train_loader` is the one place training obtains batches: it receives the data section
(`DataConfig`) whole (the run's dataset, `data.mix`, windows) and sets the loader's options
from it. `build_eval_loader` reads one split of one dataset in
index order. Batches are dicts of stacked tensors from the model's sample transform plus
"__key__" (B sample keys; a window's is its last frame's) and "__source__" (0 the run's own
dataset, i the i-th of `data.mix`). With `data.camera_decode` "device" the workers send camera
JPEGs and `decode_camera_batch` decodes them in the training process (nvJPEG on CUDA).
"""

from __future__ import annotations

import functools
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from platform_lib.imaging.decode import (
    CameraResize,
    decode_jpeg_cpu,
    decode_jpegs_gpu,
    plan_camera_resize,
)
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import DatasetSpec, StreamingLoader, build_loader
from platform_lib.models.bev_fusion.config import BEVFusionConfig
from platform_lib.models.bev_fusion.prepare import (
    build_sample_transform,
    camera_resize,
    normalise_camera,
)
from platform_lib.models.catalog import build_model_transform
from platform_lib.models.presets import ModelSpec
from platform_lib.shards.reader import DatasetReader, open_dataset
from platform_lib.training.config import ConfigError, DataConfig, normalise_dataset

__all__ = [
    "BatchDecode",
    "build_eval_loader",
    "build_train_transform",
    "camera_batch_decoder",
    "decode_camera_batch",
    "dataset_sources",
    "build_train_loader",
    "iterate_epochs",
    "split_keys",
    "warn_if_batch_exceeds_split",
]

#: Loader workers are forked: ranks started by torch elastic with the "spawn" method inherit
#: "spawn" as the default, and spawning re-imports torch in every worker of every epoch
#: (seconds each on a small CPU). Workers never touch CUDA, so fork is safe.
_WORKER_START: Literal["fork"] = "fork"

Transform = Callable[[Mapping[str, Any]], dict[str, Any]]
#: A hook run on each host batch in the training process before it moves to the device.
BatchDecode = Callable[[dict[str, Any], torch.device], dict[str, Any]]


def build_train_transform(model_cfg: ModelSpec, data: DataConfig) -> Transform:
    """Return the loader workers' sample transform for `data.camera_decode`.

    Raises:
        ConfigError: camera_decode "device" for a model other than a single-frame BEV
            fusion model (field data.camera_decode).
    """
    if data.camera_decode == "worker":
        return build_model_transform(model_cfg)
    if not isinstance(model_cfg, BEVFusionConfig) or model_cfg.temporal_frames > 1:
        raise ConfigError(
            f"data.camera_decode='device' is not supported for model {model_cfg.name!r} "
            "(only single-frame BEV fusion models)",
            "data.camera_decode",
            "set data.camera_decode='worker'",
            fields=("data.camera_decode",),
        )
    return build_sample_transform(model_cfg, camera_decode="device")


def camera_batch_decoder(model_cfg: ModelSpec, data: DataConfig) -> BatchDecode | None:
    """Return the training process's batch hook for `data.camera_decode` (None for "worker")."""
    if data.camera_decode == "worker" or not isinstance(model_cfg, BEVFusionConfig):
        return None
    return functools.partial(decode_camera_batch, resize=camera_resize(model_cfg))


def decode_camera_batch(
    batch: dict[str, Any], device: torch.device, *, resize: CameraResize
) -> dict[str, Any]:
    """Decode a batch's camera JPEGs (camera_decode "device") into its "camera_images".

    On CUDA all JPEGs of the batch go to nvJPEG in one call (`decode_jpegs_gpu`, which
    copies the bytes out of the ring first), are cropped/resized on the device
    (`resize_on_device`) and normalised as the workers do (`normalise_camera`). Elsewhere
    each camera is decoded with the workers' CPU decoder (`decode_jpeg_cpu`, DCT scaling),
    giving exactly the pixels of camera_decode "worker".

    Args:
        batch: a host batch with "camera_jpegs" {"data": (total,) uint8, "offsets": (B * N +
            1,) int64} (`loading.transport.ByteRuns`) and "camera_jpeg_size" (B, N, 2) int64
            source (height, width); empty slots have empty runs.
        device: where "camera_images" is made.
        resize: the model's camera input size (`prepare.camera_resize`).

    Returns:
        the batch without those two keys, with "camera_images" (B, N, 3, h, w) float32 in
        [-0.5, 0.5] on `device` (zero for empty slots).

    Raises:
        RuntimeError: CUDA without torchvision (`decode_jpegs_gpu`).
        ValueError: a JPEG that does not decode (the CPU decoder's error).
    """
    out = dict(batch)
    runs, sizes = out.pop("camera_jpegs"), out.pop("camera_jpeg_size")
    data, offsets = np.asarray(runs["data"]), np.asarray(runs["offsets"]).tolist()
    b, n = int(sizes.shape[0]), int(sizes.shape[1])
    filled = [i for i in range(b * n) if offsets[i + 1] > offsets[i]]
    jpegs = [data[offsets[i] : offsets[i + 1]].data for i in filled]
    images = torch.zeros(
        (b * n, 3, resize.height, resize.width), dtype=torch.float32, device=device
    )
    if jpegs and device.type == "cuda":
        pixels = torch.stack(decode_jpegs_gpu(jpegs, resize, device=str(device)))
        images[filled] = pixels.float() / 255.0 - 0.5
    elif jpegs:
        flat_sizes = np.asarray(sizes).reshape(b * n, 2)
        for i, jpeg in zip(filled, jpegs, strict=True):
            height, width = (int(v) for v in flat_sizes[i])
            plan = plan_camera_resize(width, height, resize)
            images[i] = torch.from_numpy(normalise_camera(decode_jpeg_cpu(jpeg, plan=plan)))
    out["camera_images"] = images.reshape(b, n, 3, resize.height, resize.width)
    return out


def split_keys(reader: DatasetReader, split: str) -> list[str]:
    """Return the sample keys of `split` in index order.

    Raises:
        ValueError: if the split holds no samples (names the dataset, the split and the
            splits it does have).
    """
    keys = reader.split_keys(split)
    if not keys:
        raise ValueError(
            f"dataset {reader.root} has no samples in split {split!r} (splits present: "
            f"{dict(reader.manifest.splits.counts)}); rebuild it with a {split!r} split or pick "
            "another split"
        )
    return keys


def build_eval_loader(
    dataset_dir: str | os.PathLike[str],
    split: str,
    transform: Transform,
    *,
    batch_size: int = 4,
    window_frames: int = 1,
) -> StreamingLoader:
    """Return a single-rank loader over `split` in index order (no shuffling, no workers).

    The last batch is padded with repeats of the first samples (the loader's "pad" policy);
    callers count each key once (see `platform_lib.training.evaluate`). With
    `window_frames` k > 1 (a temporal model) each sample is the window of k consecutive
    frames ending at its key (stride 1), so the first k - 1 frames of each log are not scored.

    Raises:
        ValueError: if the split is empty or (k > 1) no log has k consecutive frames; loader
            errors for a missing or damaged dataset.
    """
    split_keys(open_dataset(Path(dataset_dir)), split)  # fail fast, naming the split
    return build_loader(
        os.fspath(dataset_dir),
        rank=0,
        world_size=1,
        batch_size=batch_size,
        num_workers=0,
        seed=0,
        shuffle=False,
        decode="none",
        split=split,
        config=LoaderConfig(sample_transform=transform, window_frames=window_frames),
    )


def iterate_epochs(loader: Any, batch_delay_s: float = 0.0) -> Iterator[Any]:
    """Yield batches from `loader` forever, epoch after epoch (calling `set_epoch` when present).

    `batch_delay_s` > 0 sleeps that long before each batch (the `batch_delay` fault of
    `training.faults`: an injected, fully exposed input stall for tests of input-bound runs), in s.
    """
    epoch = getattr(loader, "epoch", 0)
    while True:
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        produced = False
        for batch in loader:
            produced = True
            if batch_delay_s:
                time.sleep(batch_delay_s)
            yield batch
        if not produced:
            raise ValueError("the training loader yielded no batch in a whole epoch")
        epoch += 1


def warn_if_batch_exceeds_split(
    batch_size: int, world_size: int, split: str, num_samples: int
) -> None:
    """Warn (one line, naming `data.batch_size`) when one global batch holds more samples than the split.

    The loader still works (its pad policy repeats samples), but every step then sees some
    samples twice.
    """
    if batch_size * world_size > num_samples:
        warnings.warn(
            f"batch of {batch_size} x world size {world_size} is larger than split {split!r} "
            f"({num_samples} samples): every step repeats samples (data.batch_size): lower "
            f"batch_size to at most {max(1, num_samples // world_size)}",
            UserWarning,
            stacklevel=3,
        )


def dataset_sources(dataset_dir: str | os.PathLike[str], data: DataConfig) -> DatasetSpec:
    """Return the `build_loader` dataset argument: the run's dataset alone, or with `data.mix`.

    Mixed: [(dataset_dir, data.dataset_weight), (mix[0].dataset, mix[0].weight), ...]; the
    loader gives each an exact share of every epoch by weight (`loading/mixing.py`).

    Raises:
        ConfigError: a `data.mix` entry names the run's own dataset (field data.mix).
    """
    own = os.fspath(dataset_dir)
    if not data.mix:
        return own
    for i, entry in enumerate(data.mix):
        if normalise_dataset(entry.dataset) == normalise_dataset(own):
            raise ConfigError(
                f"data.mix[{i}].dataset={entry.dataset!r} is the run's own dataset",
                "data.mix",
                "leave it out of data.mix and set its share with data.dataset_weight",
                fields=("data.mix",),
            )
    sources: list[tuple[str | os.PathLike, float]] = [(own, data.dataset_weight)]
    return sources + [(m.dataset, m.weight) for m in data.mix]


def build_train_loader(
    dataset_dir: str | os.PathLike[str],
    data: DataConfig,
    transform: Transform,
    *,
    rank: int,
    world_size: int,
    seed: int,
) -> StreamingLoader:
    """Return this rank's streaming loader over `data.train_split` (`loading.loader.build_loader`).

    Shuffled by (seed, epoch), `data.batch_size` samples per rank, equal batches on every
    rank, JPEGs decoded inside `transform` (decode="none": the model decodes straight to its
    small input size), and resumable through `state_dict` / `load_state_dict`. Each sample
    is a window of `data.window_frames` consecutive frames of one log (first frames
    `data.window_stride` apart); with `data.mix` the datasets are mixed by weight
    (`dataset_sources`), each read at `data.train_split`.

    Raises:
        ConfigError: `data.mix` names the run's own dataset.
        ValueError: if the split is empty, or no log has `window_frames` consecutive frames;
            loader errors for a missing or damaged dataset.
    """
    # fail fast, naming the split
    keys = split_keys(open_dataset(Path(dataset_dir)), data.train_split)
    warn_if_batch_exceeds_split(data.batch_size, world_size, data.train_split, len(keys))
    return build_loader(
        dataset_sources(dataset_dir, data),
        rank=rank,
        world_size=world_size,
        batch_size=data.batch_size,
        num_workers=data.num_workers,
        seed=seed,
        shuffle=True,
        decode="none",
        split=data.train_split,
        config=LoaderConfig(
            sample_transform=transform,
            multiprocessing_context=_WORKER_START,
            prefetch_depth=data.prefetch_depth,
            shuffle_buffer=data.shuffle_buffer,
            window_frames=data.window_frames,
            window_stride=data.window_stride,
        ),
    )
