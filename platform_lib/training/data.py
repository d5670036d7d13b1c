"""Batches for training and evaluation, built from a published dataset.

`build_train_loader` is the one place training obtains batches; `build_eval_loader` reads
one split exactly once, in index order (no padding, no shuffling), for evaluation.
Batches are dicts of stacked tensors from the model's sample transform plus "__key__"
(list of B sample keys).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from platform_lib.loading import LoaderConfig, StreamingLoader, build_loader
from platform_lib.shards.codec import decode_sample
from platform_lib.shards.reader import DatasetReader, open_dataset

__all__ = [
    "SplitDataset",
    "build_eval_loader",
    "build_train_loader",
    "iterate_epochs",
    "split_keys",
]

#: Loader workers are forked: ranks started by torch elastic with the "spawn" method inherit
#: "spawn" as the default, and spawning re-imports torch in every worker of every epoch
#: (seconds each on a small CPU). Workers never touch CUDA, so fork is safe.
_WORKER_START = "fork"

Transform = Callable[[Mapping[str, Any]], dict[str, torch.Tensor]]


def split_keys(reader: DatasetReader, split: str) -> list[str]:
    """Return the sample keys of `split` in index order.

    Raises:
        ValueError: if the split holds no samples (names the dataset, the split and the
            splits it does have).
    """
    splits = reader.index.column("split").to_pylist()
    keys = [k for k, s in zip(reader.keys, splits, strict=True) if s == split]
    if not keys:
        raise ValueError(
            f"dataset {reader.root} has no samples in split {split!r} (splits present: "
            f"{sorted(set(splits))}); rebuild it with a {split!r} split or pick another split"
        )
    return keys


class SplitDataset(Dataset):
    """Map-style dataset over the samples of one split (random access through the index).

    Picklable: each loader worker opens its own reader on first use.
    """

    def __init__(self, dataset_dir: str | os.PathLike[str], split: str, transform: Transform) -> None:
        self.dataset_dir = str(dataset_dir)
        self.keys = split_keys(open_dataset(self.dataset_dir), split)
        self.transform = transform
        self._reader: DatasetReader | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> tuple[str, dict[str, torch.Tensor]]:
        if self._reader is None:
            self._reader = open_dataset(self.dataset_dir)
        key = self.keys[i]
        return key, self.transform(decode_sample(self._reader.read_sample(key), decode="none"))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_reader": None}


def _collate(items: list[tuple[str, dict[str, torch.Tensor]]]) -> dict[str, Any]:
    batch = default_collate([outputs for _, outputs in items])
    batch["__key__"] = [key for key, _ in items]
    return batch


def build_eval_loader(
    dataset_dir: str | os.PathLike[str],
    split: str,
    transform: Transform,
    *,
    batch_size: int = 4,
    num_workers: int = 0,
) -> DataLoader:
    """Return a loader over every sample of `split` exactly once, in index order.

    Raises:
        ValueError: if the split is empty; errors of `open_dataset` for a missing dataset.
    """
    return DataLoader(
        SplitDataset(dataset_dir, split, transform), batch_size=batch_size, shuffle=False,
        num_workers=num_workers, collate_fn=_collate,
    )


def iterate_epochs(loader: Any) -> Iterator[Any]:
    """Yield batches from `loader` forever, epoch after epoch (calling `set_epoch` when present)."""
    epoch = getattr(loader, "epoch", 0)
    while True:
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        produced = False
        for batch in loader:
            produced = True
            yield batch
        if not produced:
            raise ValueError("the training loader yielded no batch in a whole epoch")
        epoch += 1


def build_train_loader(
    dataset_dir: str | os.PathLike[str],
    split: str,
    transform: Transform,
    *,
    rank: int,
    world_size: int,
    batch_size: int,
    num_workers: int,
    seed: int,
) -> StreamingLoader:
    """Return this rank's streaming training loader (`platform_lib.loading.build_loader`).

    Shuffled by (seed, epoch), equal batches on every rank, JPEGs decoded inside
    `transform` (decode="none": the model decodes straight to its small input size), and
    resumable through `state_dict` / `load_state_dict`.

    Raises:
        ValueError: if the split is empty; loader errors for a missing or damaged dataset.
    """
    split_keys(open_dataset(dataset_dir), split)  # fail fast, naming the split
    return build_loader(
        os.fspath(dataset_dir), rank=rank, world_size=world_size, batch_size=batch_size,
        num_workers=num_workers, seed=seed, shuffle=True, decode="none", split=split,
        config=LoaderConfig(sample_transform=transform, multiprocessing_context=_WORKER_START),
    )
