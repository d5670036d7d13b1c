"""The per-rank batch stream: a torch IterableDataset run by each DataLoader worker.

Worker w of n produces its rank's batches w, w + n, ... of the epoch plan (see
`partition.py`). Each batch: read the units' byte ranges in shard-offset order (sequential
I/O), verify, decode, apply `sample_transform`, then collate. Counters (skipped samples,
object-store requests, downloads) ride along in `batch["__stats__"]`, which the loader
removes before the batch reaches the training loop.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset, default_collate, get_worker_info

from platform_lib.loading.cache import ShardCache
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.decode import CameraResize, decode_sample_cameras
from platform_lib.loading.errors import SampleDecodeError, SampleIntegrityError, ShardReadError
from platform_lib.loading.partition import EpochPlan, positions_for_batch, steps_for_worker
from platform_lib.loading.reader import ShardReader
from platform_lib.loading.source import DatasetView
from platform_lib.loading.transport import pack_arrays

__all__ = ["BatchStream", "STATS_KEY"]

#: Batch entry carrying worker counters; popped by the loader.
STATS_KEY = "__stats__"
#: Bad-data errors that error_policy="skip" skips; outages and full disks always raise.
_SKIPPABLE = (ShardReadError, SampleIntegrityError, SampleDecodeError)


def _decode(members: dict[str, bytes], decode: str, key: str, where: str,
            resize: CameraResize | None = None) -> dict[str, Any]:
    from platform_lib.shards.codec import decode_sample  # the shards package owns the codec

    try:
        sample = decode_sample(members, decode="none")  # JPEGs: below, at the configured size
        if decode == "cpu":
            sample = decode_sample_cameras(sample, resize)
    except Exception as exc:  # any decoder failure becomes a named, skippable error
        raise SampleDecodeError(
            f"{where}: sample {key} could not be decoded ({type(exc).__name__}: {exc}); "
            "rebuild the shard or use error_policy='skip'"
        ) from exc
    return sample


class BatchStream(IterableDataset):
    """Yields one rank's batches for one epoch, from `start_step` on.

    Args:
        views: the datasets (one unless mixing).
        units: per view, (U, k) int64 index rows of each unit (k frames per unit).
        order_source: (P,) int64 view index of each global position.
        order_unit: (P,) int64 unit id of each global position.
        plan: the epoch plan (steps, padding).
        rank: this rank.
        batch_size: samples per batch on this rank.
        start_step: first global step to produce (resume), in steps.
        decode: "cpu" (JPEG -> (H, W, 3) uint8 at `config.camera_resize`) or "none" (JPEG
            bytes; also for "gpu", which the main process decodes).
        config: loader options.
    """

    def __init__(
        self, *, views: list[DatasetView], units: list[np.ndarray], order_source: np.ndarray,
        order_unit: np.ndarray, plan: EpochPlan, rank: int, batch_size: int, start_step: int,
        decode: str, config: LoaderConfig,
    ) -> None:
        super().__init__()
        self.views, self.units = views, units
        self.order_source, self.order_unit = order_source, order_unit
        self.plan, self.rank, self.batch_size = plan, rank, batch_size
        self.start_step, self.decode, self.config = start_step, decode, config

    def _open_readers(self) -> list[ShardReader]:
        cfg, readers = self.config, []
        for view in self.views:
            cache = None
            if not view.is_local:
                cache = ShardCache(
                    url=view.store_url, root=view.root, storage_options=view.storage_options,
                    files=dict(zip(view.shard_paths, view.shard_files, strict=True)),
                    dataset_hash=view.dataset_hash, cache_dir=cfg.cache_dir,
                    limit_bytes=cfg.cache_limit_bytes, max_retries=cfg.max_retries,
                    backoff_s=cfg.retry_backoff_s,
                )
            readers.append(ShardReader(view, cache=cache, verify=cfg.verify))
        return readers

    def _load_frame(self, reader: ShardReader, row: int) -> dict[str, Any]:
        view = reader.view
        key, shard = str(view.key[row]), view.shard_paths[int(view.shard_id[row])]
        sample = _decode(reader.read_members(row), self.decode, key, f"{view.url}/{shard}",
                         self.config.camera_resize)
        sample["__key__"], sample["__shard__"] = key, shard
        return sample

    def _load_unit(self, reader: ShardReader, rows: np.ndarray) -> tuple[str, Any]:
        frames = [self._load_frame(reader, int(r)) for r in rows]
        if len(frames) == 1:
            sample = frames[0]
        else:
            sample = {"__key__": frames[-1]["__key__"], "__keys__": [f["__key__"] for f in frames],
                      "frames": frames}
        key = sample["__key__"]
        if self.config.sample_transform is not None:
            sample = self.config.sample_transform(sample)
            if not isinstance(sample, dict):
                raise TypeError(f"sample_transform must return a dict, got {type(sample).__name__} for {key}")
        return key, sample

    def __iter__(self):
        info = get_worker_info()
        worker_id, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        readers = self._open_readers()
        remote = any(reader.cache is not None for reader in readers)
        prefetcher = ThreadPoolExecutor(1) if remote and self.config.shards_ahead else None
        try:
            for step in steps_for_worker(self.plan, start_step=self.start_step,
                                         worker_id=worker_id, num_workers=num_workers):
                if prefetcher is not None:
                    self._prefetch(prefetcher, readers, step + num_workers)
                positions, padded = positions_for_batch(self.plan, step=step, rank=self.rank,
                                                        batch_size=self.batch_size)
                sources, unit_ids = self.order_source[positions], self.order_unit[positions]
                first_rows = np.array([self.units[s][u, 0] for s, u in zip(sources, unit_ids, strict=True)])
                offsets = np.array([self.views[s].sample_offset[r] for s, r in zip(sources, first_rows, strict=True)])
                shards = np.array([self.views[s].shard_id[r] for s, r in zip(sources, first_rows, strict=True)])
                loaded: dict[int, tuple[str, Any]] = {}
                skipped: list[tuple[str, str]] = []
                for i in np.lexsort((offsets, shards, sources)):  # sequential reads
                    s, u = int(sources[i]), int(unit_ids[i])
                    try:
                        loaded[int(i)] = self._load_unit(readers[s], self.units[s][u])
                    except _SKIPPABLE as exc:
                        if self.config.error_policy == "raise":
                            raise
                        key = str(self.views[s].key[self.units[s][u, 0]])
                        skipped.append((key, f"{type(exc).__name__}: {exc}"))
                kept = [i for i in range(len(positions)) if i in loaded]
                batch = self._collate([loaded[i] for i in kept], padded[kept])
                batch[STATS_KEY] = self._stats(worker_id, readers, skipped)
                yield pack_arrays(batch) if info is not None else batch
        finally:
            if prefetcher is not None:
                prefetcher.shutdown(wait=True, cancel_futures=True)
            for reader in readers:
                reader.close()

    def _prefetch(self, pool: ThreadPoolExecutor, readers: list[ShardReader], step: int) -> None:
        """Fetch the first `shards_ahead` not-yet-open remote shards of this worker's next batch."""
        if step >= self.plan.steps:
            return
        positions, _ = positions_for_batch(self.plan, step=step, rank=self.rank, batch_size=self.batch_size)
        wanted: dict[tuple[int, int], None] = {}
        for s, u in zip(self.order_source[positions], self.order_unit[positions], strict=True):
            for row in self.units[s][u]:
                wanted[(int(s), int(self.views[s].shard_id[row]))] = None
        fresh = [(s, shard) for s, shard in wanted if readers[s].cache is not None and not readers[s].is_open(shard)]
        for s, shard in fresh[: self.config.shards_ahead]:
            view = self.views[s]
            cache = readers[s].cache
            assert cache is not None  # `fresh` holds readers with a cache only
            pool.submit(cache.prefetch, view.shard_paths[shard], int(view.shard_bytes[shard]))

    def _collate(self, items: list[tuple[str, Any]], padded: np.ndarray) -> dict[str, Any]:
        keys = [key for key, _ in items]
        samples = [sample for _, sample in items]
        if self.config.sample_transform is not None and samples:
            batch = default_collate(samples)
        else:
            fields = dict.fromkeys(f for sample in samples for f in sample if f != "__key__")
            batch = {f: [sample.get(f) for sample in samples] for f in fields}
        batch["__key__"] = keys
        batch["__padded__"] = np.asarray(padded, dtype=bool)  # a tensor in the main process
        return batch

    @staticmethod
    def _stats(worker_id: int, readers: list[ShardReader], skipped: list[tuple[str, str]]) -> dict[str, Any]:
        counters: dict[str, int] = {}
        for reader in readers:
            if reader.cache is not None:
                for name, value in asdict(reader.cache.stats).items():
                    counters[name] = counters.get(name, 0) + value
        return {"worker": worker_id, "counters": counters, "skipped": skipped}
