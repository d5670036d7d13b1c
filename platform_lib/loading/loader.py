"""`build_loader`: the streaming loader the training loop iterates.

Chain: dataset URL(s) -> `DatasetView` (manifest + index) -> units (frames or temporal
windows) -> epoch order (seed, epoch) [-> weighted mix] -> equal per-rank batches ->
DataLoader workers (read, verify, decode, transform, collate) -> batches with "__key__".
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.dataset import STATS_KEY, BatchStream
from platform_lib.loading.decode import decode_batch_cameras_gpu, gpu_decode_available
from platform_lib.loading.errors import CacheFullError, ResumeStateError
from platform_lib.loading.mixing import build_mixed_order
from platform_lib.loading.order import build_epoch_order
from platform_lib.loading.partition import EpochPlan, plan_epoch
from platform_lib.loading.prefetch import iterate_in_background
from platform_lib.loading.source import DatasetView, load_dataset_view
from platform_lib.loading.transport import unpack_arrays
from platform_lib.loading.windows import build_units

__all__ = ["LoaderStats", "StreamingLoader", "build_loader", "resolve_decode"]

DatasetSpec = str | os.PathLike | list[tuple[str | os.PathLike, float]]
_STATE_VERSION = 1


@dataclass
class LoaderStats:
    """What the loader did on this rank; counts are cumulative over the loader's life."""

    epoch: int = 0
    """epoch the loader is in"""
    steps_per_epoch: int = 0
    """batches per rank per epoch (`len(loader)`)"""
    padded: int = 0
    """samples this rank repeats in the current epoch to keep batches equal (pad policy)"""
    padded_global: int = 0
    """samples repeated over all ranks in the current epoch"""
    dropped_global: int = 0
    """samples left out of the current epoch over all ranks (drop policy)"""
    skipped: int = 0
    """samples skipped by this rank under error_policy 'skip' (read, integrity, decode)"""
    skipped_samples: list[tuple[str, str]] = field(default_factory=list)
    """(key, reason) of every skipped sample on this rank"""
    index_skipped: list[tuple[str, str]] = field(default_factory=list)
    """(key, reason) of index rows left out when the dataset was opened"""
    requests: int = 0
    """object-store GET requests of shards issued by this rank's workers"""
    downloads: int = 0
    """shards this rank's workers downloaded into the node cache"""
    bytes_downloaded: int = 0
    """bytes downloaded by this rank's workers"""
    cache_hits: int = 0
    """shard opens served from the node cache"""
    evictions: int = 0
    """shards evicted from the node cache by this rank's workers"""


def _keep_as_is(batch: Any) -> Any:
    """Collate of the DataLoader: batches are built in the workers; keep ndarrays as ndarrays."""
    return batch


def _init_worker(worker_id: int) -> None:
    """Set a short GIL switch interval in a worker.

    The thread that hands a batch's shared-memory block to the main process must not wait
    behind a decoding thread (5 ms by default).
    """
    sys.setswitchinterval(0.0005)


def _start_method(cfg: LoaderConfig) -> str | None:
    """Fork where available (workers start in milliseconds; they never touch CUDA), else the default."""
    if cfg.multiprocessing_context is not None:
        return cfg.multiprocessing_context
    return "fork" if "fork" in mp.get_all_start_methods() else None


def _as_sources(dataset: DatasetSpec) -> list[tuple[str, float]]:
    if isinstance(dataset, list | tuple):
        if not dataset:
            raise ValueError("dataset: the list of (dataset, weight) pairs is empty")
        return [(os.fspath(d), float(w)) for d, w in dataset]
    return [(os.fspath(dataset), 1.0)]


def resolve_decode(decode: str, cfg: LoaderConfig) -> str:
    """Return the decode mode to run ("none", "cpu" or "gpu") for the `decode` argument.

    Raises:
        ValueError: unknown mode, or "gpu" with a sample_transform (the transform runs in the
            forked workers, which never touch CUDA) or without a usable CUDA + torchvision.
    """
    if decode not in ("cpu", "none", "gpu", "auto"):
        raise ValueError(f"decode must be 'cpu', 'gpu', 'auto' or 'none', got {decode!r}")
    if decode == "auto":
        return "gpu" if cfg.sample_transform is None and gpu_decode_available() else "cpu"
    if decode == "gpu" and cfg.sample_transform is not None:
        raise ValueError("decode='gpu' decodes whole batches in the main process, after the workers' "
                         "sample_transform; use decode='cpu' (or 'none' and decode in the model step)")
    if decode == "gpu" and not gpu_decode_available():
        raise ValueError("decode='gpu' needs a CUDA device and torchvision (nvJPEG); use decode='cpu' or 'auto'")
    return decode


def build_loader(
    dataset: DatasetSpec, *, rank: int, world_size: int, batch_size: int, num_workers: int, seed: int,
    shuffle: bool = True, decode: str = "cpu", split: str | None = None, config: LoaderConfig | None = None,
) -> StreamingLoader:
    """Return the streaming loader of `dataset` for one rank.

    Args:
        dataset: local folder, fsspec URL (file://, s3://, ...) or list of (dataset, weight) to mix.
        rank: this process's rank in [0, world_size).
        world_size: number of ranks.
        batch_size: samples per batch on each rank.
        num_workers: DataLoader worker processes per rank (0: read in the main process).
        seed: global seed; the epoch order is a function of (seed, epoch) only.
        shuffle: False keeps the natural (shard, offset) order.
        decode: "cpu" decodes JPEGs in the workers to (H, W, 3) uint8 RGB, at
            `config.camera_resize` when set; "gpu" decodes each batch's JPEGs with nvJPEG in
            this process to (3, H, W) uint8 CUDA tensors (no sample_transform); "auto": "gpu"
            where CUDA + torchvision are present and there is no sample_transform, else "cpu";
            "none" keeps JPEG bytes.
        split: index split to load ("train", "val"); None loads every row.
        config: further options (`LoaderConfig`).

    Raises:
        ValueError: bad argument (names it). DatasetNotFoundError, DatasetIndexError,
        ObjectStoreUnreachableError: see `load_dataset_view`. CacheFullError: the cache byte
        limit is below the largest shard of a remote dataset.
    """
    cfg = config or LoaderConfig()
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
    if batch_size < 1 or num_workers < 0:
        raise ValueError(f"batch_size must be >= 1 and num_workers >= 0, got {batch_size}, {num_workers}")
    decode = resolve_decode(decode, cfg)
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    sources = _as_sources(dataset)
    views = [
        load_dataset_view(url, split=split, storage_options=cfg.storage_options, error_policy=cfg.error_policy,
                          max_retries=cfg.max_retries, backoff_s=cfg.retry_backoff_s)
        for url, _ in sources
    ]
    for (url, _), view in zip(sources, views, strict=True):
        if len(view) == 0:  # would otherwise fail cryptically when mixing
            raise ValueError(f"dataset {url} has no samples" + (f" in split {split!r}" if split else "")
                             + "; check `split` (see `drivetrain data inspect`) and the dataset path")
        largest = int(view.shard_bytes.max()) if len(view.shard_bytes) else 0
        if not view.is_local and cfg.cache_limit_bytes < largest:
            raise CacheFullError(
                f"LoaderConfig.cache_limit_bytes={cfg.cache_limit_bytes} is below the largest shard of "
                f"{view.url} ({largest} bytes); raise the limit to at least a few shards"
            )
    units = [build_units(v, window_frames=cfg.window_frames, window_stride=cfg.window_stride) for v in views]
    return StreamingLoader(views=views, units=units, weights=[w for _, w in sources], rank=rank,
                           world_size=world_size, batch_size=batch_size, num_workers=num_workers,
                           seed=seed, shuffle=shuffle, decode=decode, config=cfg)


class StreamingLoader:
    """Iterable of one rank's batches; see `build_loader`. Resumable with `state_dict`."""

    def __init__(
        self, *, views: list[DatasetView], units: list[np.ndarray], weights: list[float], rank: int,
        world_size: int, batch_size: int, num_workers: int, seed: int, shuffle: bool, decode: str,
        config: LoaderConfig,
    ) -> None:
        self.views, self.units, self.weights = views, units, weights
        self.rank, self.world_size, self.batch_size = rank, world_size, batch_size
        self.num_workers, self.seed, self.shuffle, self.decode, self.config = (
            num_workers, seed, shuffle, decode, config)
        self.num_positions = (config.mix_epoch_samples or sum(len(u) for u in units)) if len(views) > 1 else len(units[0])
        self._plan = plan_epoch(self.num_positions, batch_size=batch_size, world_size=world_size,
                                pad_policy=config.pad_policy)
        self._epoch, self._step = 0, 0
        self._orders: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._stats = LoaderStats(index_skipped=[s for v in views for s in v.skipped])
        self._worker_counters: dict[int, dict[str, int]] = {}
        self._begin_epoch_stats(0)

    @property
    def plan(self) -> EpochPlan:
        """The epoch plan (steps, padding) shared by all ranks."""
        return self._plan

    @property
    def epoch(self) -> int:
        """The epoch the next `__iter__` runs."""
        return self._epoch

    def __len__(self) -> int:
        return self._plan.steps

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch; a different epoch restarts at its first batch (same epoch: no-op)."""
        if epoch != self._epoch:
            self._epoch, self._step = int(epoch), 0

    def epoch_order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Return (source, unit) per global position of `epoch`: (P,) int64 each."""
        if epoch not in self._orders:
            orders = [
                build_epoch_order(self.views[s].shard_id[u[:, 0]], seed=self.seed + s * 0x9E3779B1,
                                  epoch=epoch, shuffle=self.shuffle, shuffle_buffer=self.config.shuffle_buffer)
                for s, u in enumerate(self.units)
            ]
            if len(orders) == 1:
                pair = (np.zeros(len(orders[0]), dtype=np.int64), orders[0])
            else:
                pair = build_mixed_order(orders, self.weights, seed=self.seed, epoch=epoch, total=self.num_positions)
            self._orders = {epoch: pair}  # keep only the current epoch
        return self._orders[epoch]

    def epoch_keys(self, epoch: int) -> list[str]:
        """Return the sample key at each global position of `epoch` (for tests and audits)."""
        source, unit = self.epoch_order(epoch)
        return [str(self.views[s].key[self.units[s][u, -1]]) for s, u in zip(source, unit, strict=True)]

    def __iter__(self):
        if self._step >= self._plan.steps:  # finished epoch: move on
            self._epoch, self._step = self._epoch + 1, 0
        epoch = self._epoch
        source, unit = self.epoch_order(epoch)
        stream = BatchStream(views=self.views, units=self.units, order_source=source, order_unit=unit,
                             plan=self._plan, rank=self.rank, batch_size=self.batch_size,
                             start_step=self._step, decode="none" if self.decode == "gpu" else self.decode,
                             config=self.config)
        cfg = self.config
        workers: dict[str, Any] = dict(num_workers=self.num_workers, prefetch_factor=cfg.prefetch_depth,
                       multiprocessing_context=_start_method(cfg)) if self.num_workers > 0 else {}

        def receive() -> Iterator[dict[str, Any]]:
            loader = DataLoader(stream, batch_size=None, collate_fn=_keep_as_is, timeout=cfg.worker_timeout_s,
                                worker_init_fn=_init_worker,
                                pin_memory=cfg.pin_memory and torch.cuda.is_available(), **workers)
            iterator = iter(loader)
            try:
                for batch in iterator:
                    batch = unpack_arrays(batch)
                    batch["__padded__"] = torch.from_numpy(batch["__padded__"])
                    yield batch
            finally:
                # Stop the workers now, also after a worker error or an early break: torch's
                # re-raised worker exception sits in a reference cycle with this iterator, so
                # without this the workers live until a cyclic GC (which may run in a forked child).
                shutdown = getattr(iterator, "_shutdown_workers", None)
                if shutdown is not None:
                    shutdown()

        self._begin_epoch_stats(epoch)
        batches = iterate_in_background(receive, depth=cfg.prefetch_depth) if self.num_workers > 0 else receive()
        for batch in batches:
            self._absorb(batch.pop(STATS_KEY))
            if self.decode == "gpu":
                batch = decode_batch_cameras_gpu(batch, cfg.camera_resize)
            self._step += 1
            yield batch
        self._fold_worker_counters()
        if self._step >= self._plan.steps and self._epoch == epoch:
            self._epoch, self._step = epoch + 1, 0

    def _begin_epoch_stats(self, epoch: int) -> None:
        plan, b = self._plan, self.batch_size
        raw = (np.arange(plan.steps, dtype=np.int64) * plan.global_batch)[:, None] + self.rank * b + np.arange(b)
        self._stats.epoch, self._stats.steps_per_epoch = epoch, plan.steps
        self._stats.padded = int((raw >= plan.num_positions).sum())
        self._stats.padded_global, self._stats.dropped_global = plan.padded, plan.dropped
        self._fold_worker_counters()

    def _absorb(self, worker_stats: dict[str, Any]) -> None:
        self._worker_counters[worker_stats["worker"]] = worker_stats["counters"]
        self._stats.skipped += len(worker_stats["skipped"])
        self._stats.skipped_samples.extend(worker_stats["skipped"])

    def _fold_worker_counters(self) -> None:
        names = {"requests": "requests", "downloads": "downloads", "bytes_downloaded": "bytes_downloaded",
                 "hits": "cache_hits", "evictions": "evictions"}
        for counters in self._worker_counters.values():
            for src, dst in names.items():
                setattr(self._stats, dst, getattr(self._stats, dst) + counters.get(src, 0))
        self._worker_counters = {}

    @property
    def stats(self) -> LoaderStats:
        """Counters so far (padding of the current epoch, skips, object-store requests)."""
        snapshot = LoaderStats(**{**self._stats.__dict__})
        pending = LoaderStats()
        for counters in self._worker_counters.values():
            pending.requests += counters.get("requests", 0)
            pending.downloads += counters.get("downloads", 0)
            pending.bytes_downloaded += counters.get("bytes_downloaded", 0)
            pending.cache_hits += counters.get("hits", 0)
            pending.evictions += counters.get("evictions", 0)
        for name in ("requests", "downloads", "bytes_downloaded", "cache_hits", "evictions"):
            setattr(snapshot, name, getattr(snapshot, name) + getattr(pending, name))
        return snapshot

    def state_dict(self) -> dict[str, Any]:
        """Return the resumable position: epoch and global samples consumed (plus identity checks).

        Right after an epoch's last batch the position is the start of the next epoch, so a
        job resumed from it (e.g. `iterate_epochs` from `loader.epoch`) does not repeat one.
        """
        epoch, step = self._epoch, self._step
        if step >= self._plan.steps:
            epoch, step = epoch + 1, 0
        return {
            "version": _STATE_VERSION, "epoch": epoch,
            "consumed_samples": step * self._plan.global_batch,
            "global_batch": self._plan.global_batch, "seed": self.seed, "shuffle": self.shuffle,
            "num_positions": self.num_positions, "datasets": [v.dataset_hash for v in self.views],
            "weights": list(self.weights), "shuffle_buffer": self.config.shuffle_buffer,
            "window_frames": self.config.window_frames, "window_stride": self.config.window_stride,
            "pad_policy": self.config.pad_policy,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state`: the next batch holds exactly the first unseen global positions.

        Raises:
            ResumeStateError: the state belongs to another dataset/seed/order, has a negative
                epoch or position, or its consumed samples are not a whole number of this
                loader's global batches.
        """
        mine = self.state_dict()
        for name in ("version", "seed", "shuffle", "num_positions", "datasets", "weights", "shuffle_buffer",
                     "window_frames", "window_stride", "pad_policy"):
            if state.get(name) != mine[name]:
                raise ResumeStateError(
                    f"loader state field {name!r} is {state.get(name)!r}, this loader has {mine[name]!r}; "
                    "resume with the same dataset, seed and order options"
                )
        consumed, epoch = int(state["consumed_samples"]), int(state["epoch"])
        if epoch < 0 or consumed < 0:
            raise ResumeStateError(
                f"loader state has epoch {epoch} and {consumed} consumed samples; both must be >= 0: "
                "the state is corrupt"
            )
        if consumed % self._plan.global_batch:
            raise ResumeStateError(
                f"{consumed} consumed samples (global batch {state['global_batch']}) is not a multiple of this "
                f"loader's global batch {self._plan.global_batch}; keep batch_size x world_size when resuming"
            )
        self._epoch, self._step = epoch, consumed // self._plan.global_batch
        if self._step >= self._plan.steps:  # saved right after the epoch's last batch
            self._epoch, self._step = epoch + 1, 0
