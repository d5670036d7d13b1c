"""The per-rank batch stream: a torch IterableDataset run by each (persistent) DataLoader worker.

Worker w of n produces its rank's batches w, w + n, ... of the epoch plan (see
`partition.py`), for the epoch and start step the main process wrote into the ring's control
words before starting the iteration. Each batch: reserve an extent of its actual bytes in the
ring, `preadv` the units' byte ranges into its raw area in shard-offset order (sequential I/O),
verify, parse members as views (npy header parse, JPEG bytes as memoryviews), decode (a
sample's cameras in `decode_threads` threads), apply `sample_transform`, collate (tensors
stacked straight into the extent's output area), then send the small skeleton
(`ring.SlotWriter.pack`). Counters (skipped samples, object-store requests, downloads, ring
fallbacks) ride along in `batch["__stats__"]` as deltas; the loader removes them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

import numpy as np
import simplejpeg
import torch
from torch.utils.data import IterableDataset, get_worker_info
from torch.utils.data._utils.collate import collate, default_collate_fn_map

from platform_lib.errors import UserError
from platform_lib.imaging.decode import (
    Allocate,
    CameraResize,
    adjust_calib,
    decode_sample_cameras,
    plan_camera_resize,
)
from platform_lib.loading.cache import ShardCache
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.errors import SampleDecodeError, ShardFormatError
from platform_lib.loading.files import ShardFiles, ShardHasher
from platform_lib.loading.mixing import EpochOrders
from platform_lib.loading.partition import EpochPlan, positions_for_batch, steps_for_worker
from platform_lib.loading.ring import RING_KEY, Ring, SlotWriter, aligned
from platform_lib.loading.shared_order import SharedOrders
from platform_lib.loading.transport import ByteRuns, WorkerFailure
from platform_lib.shards.codec import decode_sample
from platform_lib.shards.errors import DatasetError
from platform_lib.shards.view import DatasetView

__all__ = ["STATS_KEY", "BatchStream", "read_order", "resolve_decode_threads", "shards_to_prefetch"]

#: Batch entry carrying worker counters; popped by the loader.
STATS_KEY = "__stats__"
#: Bad-data errors that error_policy="skip" skips (integrity errors are shard format errors);
#: outages, full disks, unsafe manifests and ring errors always raise.
_SKIPPABLE = (ShardFormatError, SampleDecodeError)
#: Ring control words: [0] generation (ring.py), [1] epoch, [2] start step.
_EPOCH, _START = 1, 2
#: Batches of a worker whose shards' whole-shard checks are queued ahead of their reads.
_CHECK_AHEAD_STEPS = 8
#: Most shards a worker opens ahead of its reads to queue their checks.
_CHECK_AHEAD_SHARDS = 4
#: Most decode threads per worker by default: the cameras of one sample.
_MAX_DECODE_THREADS = 6


def resolve_decode_threads(config: LoaderConfig, num_workers: int) -> int:
    """Return the camera-decode threads of each loader process (`LoaderConfig.decode_threads`).

    Args:
        config: loader options; an explicit `decode_threads` is returned as is.
        num_workers: worker processes of this loader (0: the main process reads).

    Returns:
        with `decode_threads=None`: the CPUs this process may use (`os.sched_getaffinity`)
        divided by the loader processes on the node (max(1, num_workers) x LOCAL_WORLD_SIZE,
        the ranks torchrun starts per node), clamped to 1..6.
    """
    if config.decode_threads is not None:
        return config.decode_threads
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    local = os.environ.get("LOCAL_WORLD_SIZE", "1")
    ranks = int(local) if local.isdigit() and int(local) > 0 else 1
    return max(1, min(_MAX_DECODE_THREADS, (cpus or 1) // (max(1, num_workers) * ranks)))


def read_order(
    row_shard: list[np.ndarray],
    row_offset: list[np.ndarray],
    units: list[np.ndarray],
    sources: np.ndarray,
    unit_ids: np.ndarray,
) -> np.ndarray:
    """Return the order in which a worker reads a batch's units: by (source, shard, offset).

    Args:
        row_shard: per source, (rows,) int64 shard id of each index row.
        row_offset: per source, (rows,) int64 byte offset of each row in its shard.
        units: per source, (U, k) int64 rows of each unit.
        sources: (B,) int64 source of each unit of the batch.
        unit_ids: (B,) int64 unit id (of its source) of each unit of the batch.

    Returns:
        (B,) int64 batch indices, sequential within each shard.
    """
    if len(units) == 1:  # one dataset: no per-source gather
        first_rows = units[0][unit_ids, 0]
        return np.lexsort((row_offset[0][first_rows], row_shard[0][first_rows], sources))
    first_rows = np.empty(len(sources), dtype=np.int64)
    offsets, shards = np.empty_like(first_rows), np.empty_like(first_rows)
    for s in np.unique(sources).tolist():
        mine = sources == s
        first_rows[mine] = units[s][unit_ids[mine], 0]
        offsets[mine] = row_offset[s][first_rows[mine]]
        shards[mine] = row_shard[s][first_rows[mine]]
    return np.lexsort((offsets, shards, sources))


def shards_to_prefetch(
    row_shard: list[np.ndarray],
    units: list[np.ndarray],
    sources: np.ndarray,
    unit_ids: np.ndarray,
    *,
    skip: Callable[[int, int], bool],
    shards_ahead: int,
) -> list[tuple[int, int]]:
    """Return the (source, shard) pairs a worker fetches ahead for a coming batch.

    The first `shards_ahead` shards the batch's units read, in batch order, that `skip` does
    not rule out (a local dataset, a shard already open in the worker).
    """
    wanted: dict[tuple[int, int], None] = {}
    for s, u in zip(sources.tolist(), unit_ids.tolist(), strict=True):
        for shard in row_shard[s][units[s][u]].tolist():
            wanted[(s, shard)] = None
    return [pair for pair in wanted if not skip(*pair)][:shards_ahead]


def _decode(
    members: dict[str, Any],
    decode: str,
    key: str,
    where: str,
    resize: CameraResize | None,
    pool: ThreadPoolExecutor | None = None,
    allocate: Allocate | None = None,
) -> dict[str, Any]:
    try:
        sample = decode_sample(members, decode="none")  # JPEGs: below, at the configured size
        if decode != "cpu":
            return sample
        return decode_sample_cameras(sample, resize, pool=pool, allocate=allocate)
    except Exception as exc:  # any decoder failure becomes a named, skippable error
        raise SampleDecodeError(
            f"{where}: sample {key} could not be decoded ({type(exc).__name__}: {exc}); "
            "rebuild the shard or use error_policy='skip'"
        ) from exc


class BatchStream(IterableDataset):
    """Yields one rank's batches of the epoch set in the ring's control words.

    Args:
        views: the datasets (one unless mixing).
        units: per view, (U, k) int64 rows of each unit (k frames per unit).
        orders: the epoch order of any epoch (computed here only without `shared`).
        plan: the epoch plan (steps, padding).
        rank: this rank.
        batch_size: samples per batch on this rank.
        decode: "cpu" (JPEG -> (H, W, 3) uint8 at `config.camera_resize`) or "none" (JPEG
            bytes as memoryviews; also for "gpu", which the main process decodes).
        config: loader options.
        ring: the loader's shared-memory ring (set before the workers start); None when
            reading in the main process (no hand-off).
        shared: the epoch orders the main process publishes in shared memory (set with the
            ring); workers map them instead of computing a private copy each.
    """

    def __init__(
        self,
        *,
        views: list[DatasetView],
        units: list[np.ndarray],
        orders: EpochOrders,
        plan: EpochPlan,
        rank: int,
        batch_size: int,
        decode: str,
        config: LoaderConfig,
        ring: Ring | None = None,
        shared: SharedOrders | None = None,
    ) -> None:
        super().__init__()
        self.views, self.units, self.orders = views, units, orders
        self.plan, self.rank, self.batch_size = plan, rank, batch_size
        self.decode, self.config, self.ring, self.shared = decode, config, ring, shared
        self._control = np.zeros(4, dtype=np.int64)  # without a ring (in-process loading)
        #: bytes a unit adds in the ring's output area (measured, with a margin; set with the ring)
        self.unit_output_bytes = 0
        self._hasher: ShardHasher | None = None  # this process's background shard checks

    @property
    def control(self) -> np.ndarray:
        """Control words shared with the workers (the ring's), or this process's own."""
        return self.ring.control if self.ring is not None else self._control

    def start(self, *, epoch: int, start_step: int) -> None:
        """Main process: publish the epoch's order, set the epoch and first step of the next iteration."""
        if self.shared is not None:
            self.shared.publish(epoch)
        self.control[_EPOCH], self.control[_START] = epoch, start_step

    # -- reading ---------------------------------------------------------------------------
    def hasher(self) -> ShardHasher | None:
        """This process's background whole-shard checker (verify "shard"), made on first use.

        It outlives iterations (a check begun in one epoch finishes in the next); workers
        forked from a process that had one make their own.
        """
        if self.config.verify != "shard":
            return None
        if self._hasher is None or self._hasher.pid != os.getpid():
            self._hasher = ShardHasher()
        return self._hasher

    def stop_hashing(self) -> None:
        """End this process's background shard checks (loader close); nothing half-recorded."""
        if self._hasher is not None and self._hasher.pid == os.getpid():
            self._hasher.stop()

    def _open_files(self, hasher: ShardHasher | None = None) -> list[ShardFiles]:
        cfg, files = self.config, []
        for view in self.views:
            cache = None
            if not view.is_local:
                cache = ShardCache(
                    url=view.store_url,
                    root=view.root,
                    storage_options=view.storage_options,
                    files=dict(zip(view.shard_paths, view.shard_files, strict=True)),
                    dataset_hash=view.dataset_hash,
                    cache_dir=cfg.cache_dir,
                    limit_bytes=cfg.cache_limit_bytes,
                    max_retries=cfg.max_retries,
                    backoff_s=cfg.retry_backoff_s,
                )
            files.append(
                ShardFiles(
                    view,
                    cache=cache,
                    verify=cfg.verify,
                    cache_dir=cfg.cache_dir,
                    hasher=hasher,
                    wait_s=cfg.worker_timeout_s / 2,
                )
            )
        return files

    def _raw_bytes(self, sources: np.ndarray, unit_ids: np.ndarray) -> int:
        """Bytes of a batch's raw area: its units' frames, each 64-byte aligned."""
        return sum(
            aligned(int(self.views[s].sample_size[row]))
            for s, u in zip(sources, unit_ids, strict=True)
            for row in self.units[s][u]
        )

    def _load_frame(
        self,
        files: ShardFiles,
        row: int,
        writer: SlotWriter,
        decoders: ThreadPoolExecutor | None = None,
        decode: str | None = None,
    ) -> dict[str, Any]:
        view = files.view
        key, shard = view.key(row), view.shard_path(row)
        size, lo = int(view.sample_size[row]), int(view.sample_offset[row])
        data = files.read_into(
            row, writer.raw_buffer(size, what=f"sample {key} of {view.url}/{shard}")
        )
        members = {}
        for m in view.members_of(row):
            begin = int(view.member_offset[m]) - lo
            members[view.member_name(m)] = data[begin : begin + int(view.member_size[m])]
        sample = _decode(
            members,
            decode or self.decode,
            key,
            f"{view.url}/{shard}",
            self.config.camera_resize,
            decoders,
            # full-size images are decoded straight into the ring (none with a transform:
            # its outputs are what the batch carries)
            writer.output_array if self.config.sample_transform is None else None,
        )
        sample["__key__"], sample["__shard__"] = key, shard
        return sample

    def _load_unit(
        self,
        files: ShardFiles,
        rows: np.ndarray,
        writer: SlotWriter,
        decoders: ThreadPoolExecutor | None = None,
        *,
        decode: str | None = None,
    ) -> tuple[str, Any]:
        frames = [self._load_frame(files, int(r), writer, decoders, decode) for r in rows]
        if len(frames) == 1:
            sample = frames[0]
        else:
            sample = {
                "__key__": frames[-1]["__key__"],
                "__keys__": [f["__key__"] for f in frames],
                "frames": frames,
            }
        key = sample["__key__"]
        if self.config.sample_transform is not None:
            sample = self.config.sample_transform(sample)
            if not isinstance(sample, dict):
                raise TypeError(
                    f"sample_transform must return a dict, got {type(sample).__name__} for {key}"
                )
        return key, sample

    def output_bytes_per_unit(self, *, from_headers: bool = False) -> tuple[int, dict[str, int]]:
        """Measure the bytes a unit adds beyond its raw sample bytes (sizes the ring's output area).

        Decoded images and transform outputs, measured on the first unit of each source.

        Args:
            from_headers: without a `sample_transform` only: size the decoded images from
                their JPEG headers instead of decoding them (the same bytes, without the
                decode; `_as_decoded`).

        Returns:
            (bytes, counters of the reads it made: downloads, shard hashes, ...).
        """
        files, most = self._open_files(), 0
        headers = from_headers and self.decode == "cpu" and self.config.sample_transform is None
        try:
            for s in range(len(self.views)):
                if not len(self.units[s]):
                    continue
                writer = SlotWriter(None, None)
                try:
                    if headers:
                        _, sample = self._load_unit(
                            files[s], self.units[s][0], writer, decode="none"
                        )
                        sample = _as_decoded(sample, self.config.camera_resize)
                    else:
                        _, sample = self._load_unit(files[s], self.units[s][0], writer)
                except _SKIPPABLE:
                    continue  # a bad first sample: reported when the epoch reads it
                # a transform's outputs are all stacked into the output area, even raw views
                raw = writer if self.config.sample_transform is None else None
                most = max(most, _computed_bytes(sample, raw))
        finally:
            for f in files:
                f.close()
        return most, _counters(files)

    # -- the stream ------------------------------------------------------------------------
    def __iter__(self):
        """Return this worker's batches of the iteration the main process set up.

        The control words are read here, when torch (re)starts the worker's iteration, not at
        the first batch: a batch of an abandoned iteration made after the main process began
        a new one keeps its own generation (and can never take the new iteration's turns).
        """
        info = get_worker_info()
        epoch, start_step = int(self.control[_EPOCH]), int(self.control[_START])
        worker_id = info.id if info is not None else 0
        generation = self.ring.enter(worker_id) if self.ring is not None else 0
        order = self.shared.get(epoch) if self.shared is not None else self.orders(epoch)
        return self._batches(info, order, start_step, generation)

    def _batches(
        self, info: Any, order: tuple[np.ndarray, np.ndarray], start_step: int, generation: int
    ):
        worker_id, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        order_source, order_unit = order
        hasher = self.hasher()
        files = self._open_files(hasher)
        remote = any(f.cache is not None for f in files)
        prefetcher = ThreadPoolExecutor(1) if remote and self.config.shards_ahead else None
        threads = resolve_decode_threads(self.config, num_workers if info is not None else 0)
        decoders = (
            ThreadPoolExecutor(threads, thread_name_prefix="decode")
            if self.decode == "cpu" and threads > 1
            else None
        )
        sent: dict[str, int] = {}
        steps = steps_for_worker(
            self.plan, start_step=start_step, worker_id=worker_id, num_workers=num_workers
        )
        try:
            for step in steps:
                if prefetcher is not None:
                    self._prefetch(prefetcher, files, order, step + num_workers)
                if hasher is not None:
                    self._check_ahead(files, order, steps, step)
                positions, padded = positions_for_batch(
                    self.plan, step=step, rank=self.rank, batch_size=self.batch_size
                )
                sources, unit_ids = order_source[positions], order_unit[positions]
                extent, raw = None, self._raw_bytes(sources, unit_ids)
                if self.ring is not None:
                    need = raw + len(positions) * self.unit_output_bytes
                    extent = self.ring.reserve(
                        worker_id,
                        step,
                        need,
                        generation=generation,
                        timeout_s=self.config.worker_timeout_s,
                    )
                    if not self.ring.is_current(generation):
                        return  # abandoned: the main process will not receive this batch
                writer = SlotWriter(self.ring, extent, raw)
                loaded: dict[int, tuple[str, Any]] = {}
                skipped: list[tuple[str, str]] = []
                for i in read_order(
                    [v.shard_id for v in self.views],
                    [v.sample_offset for v in self.views],
                    self.units,
                    sources,
                    unit_ids,
                ):
                    if self.ring is not None and not self.ring.is_current(generation):
                        return  # abandoned: nobody receives this batch; stop decoding it
                    s, u = int(sources[i]), int(unit_ids[i])
                    try:
                        loaded[int(i)] = self._load_unit(
                            files[s], self.units[s][u], writer, decoders
                        )
                    except _SKIPPABLE as exc:
                        if self.config.error_policy == "raise":
                            raise
                        key = self.views[s].key(int(self.units[s][u, 0]))
                        skipped.append((key, f"{type(exc).__name__}: {exc}"))
                kept = [i for i in range(len(positions)) if i in loaded]
                batch = self._collate([loaded[i] for i in kept], padded[kept], writer)
                batch["__source__"] = sources[kept]
                if hasher is not None and step == steps[-1]:
                    # a whole pass ends with its shards' checks recorded (and counted)
                    hasher.drain(self.config.worker_timeout_s / 2)
                if self.ring is None:  # in-process: the batch's buffers are its own
                    batch[STATS_KEY] = self._stats(worker_id, files, hasher, skipped, sent, False)
                    yield batch
                else:
                    packed = writer.pack(batch)
                    slow = extent is None or RING_KEY not in packed
                    packed[STATS_KEY] = self._stats(worker_id, files, hasher, skipped, sent, slow)
                    yield packed
                if hasher is not None:  # the first batch is out: check shards from now on
                    hasher.release()
        except (DatasetError, UserError) as exc:
            if info is None:
                raise
            yield WorkerFailure(exc)  # raised as is by the main process: one line, no traceback
        finally:
            if prefetcher is not None:
                prefetcher.shutdown(wait=True, cancel_futures=True)
            if decoders is not None:
                decoders.shutdown(wait=True, cancel_futures=True)
            for f in files:
                f.close()

    def _shards_of(
        self,
        order: tuple[np.ndarray, np.ndarray],
        step: int,
        skip: Callable[[int, int], bool],
        most: int,
    ) -> list[tuple[int, int]]:
        """The first `most` (source, shard) pairs batch `step` reads that `skip` leaves."""
        positions, _ = positions_for_batch(
            self.plan, step=step, rank=self.rank, batch_size=self.batch_size
        )
        order_source, order_unit = order
        return shards_to_prefetch(
            [v.shard_id for v in self.views],
            self.units,
            order_source[positions],
            order_unit[positions],
            skip=skip,
            shards_ahead=most,
        )

    def _prefetch(
        self,
        pool: ThreadPoolExecutor,
        files: list[ShardFiles],
        order: tuple[np.ndarray, np.ndarray],
        step: int,
    ) -> None:
        """Fetch the first `shards_ahead` not-yet-open remote shards of this worker's next batch."""
        if step >= self.plan.steps:
            return
        fresh = self._shards_of(
            order,
            step,
            lambda s, shard: files[s].cache is None or files[s].is_open(shard),
            self.config.shards_ahead,
        )
        for s, shard in fresh:
            entry = self.views[s].manifest.shards[shard]
            cache = files[s].cache
            assert cache is not None  # `fresh` holds shard files with a cache only
            pool.submit(cache.prefetch, entry.path, entry.bytes)

    def _check_ahead(
        self, files: list[ShardFiles], order: tuple[np.ndarray, np.ndarray], steps: range, step: int
    ) -> None:
        """Queue the whole-shard checks of the local shards this worker reads next.

        The first `_CHECK_AHEAD_SHARDS` shards of its batches up to `_CHECK_AHEAD_STEPS`
        ahead, in read order (few enough to stay open beside the one being read): each
        worker's hasher takes the first one no other process is hashing, so the workers hash
        different shards at once, ahead of their reads.
        """
        at, most = steps.index(step), self.batch_size * self.config.window_frames
        ahead: dict[tuple[int, int], None] = {}
        for later in steps[at : at + _CHECK_AHEAD_STEPS]:
            ahead.update(dict.fromkeys(self._shards_of(order, later, lambda s, h: False, most)))
            if len(ahead) >= _CHECK_AHEAD_SHARDS:
                break
        for s, shard in list(ahead)[:_CHECK_AHEAD_SHARDS]:
            files[s].check_ahead(shard)

    def _collate(
        self, items: list[tuple[str, Any]], padded: np.ndarray, writer: SlotWriter
    ) -> dict[str, Any]:
        keys = [key for key, _ in items]
        samples = [sample for _, sample in items]
        if self.config.sample_transform is not None and samples:
            fns = {
                **default_collate_fn_map,
                torch.Tensor: lambda b, *, collate_fn_map=None: writer.stack_tensors(b),
                ByteRuns: lambda b, *, collate_fn_map=None: _concat_runs(b, writer),
            }
            batch = collate(samples, collate_fn_map=fns)
        else:
            fields = dict.fromkeys(f for sample in samples for f in sample if f != "__key__")
            batch = {f: [sample.get(f) for sample in samples] for f in fields}
        batch["__key__"] = keys
        batch["__padded__"] = np.asarray(padded, dtype=bool)  # a tensor in the main process
        return batch

    @staticmethod
    def _stats(
        worker_id: int,
        files: list[ShardFiles],
        hasher: ShardHasher | None,
        skipped: list[tuple[str, str]],
        sent: dict[str, int],
        slow: bool,
    ) -> dict[str, Any]:
        """Counters since the previous batch of this worker (workers persist across epochs)."""
        totals = _counters(files)
        totals["interim_checked"] = sum(f.interim for f in files)
        delta = {name: value - sent.get(name, 0) for name, value in totals.items()}
        sent.update(totals)
        delta["shards_hashed"] = hasher.take_hashed() if hasher is not None else 0
        delta["ring_fallbacks"] = int(slow)
        return {"worker": worker_id, "counters": delta, "skipped": skipped}


def _concat_runs(samples: list[ByteRuns], writer: SlotWriter) -> dict[str, np.ndarray]:
    """Collate B samples' `ByteRuns` into one uint8 array (in the ring's output area) + offsets.

    Raises:
        ValueError: the samples hold different numbers of runs.
    """
    counts = {len(runs) for runs in samples}
    if len(counts) != 1:
        raise ValueError(f"ByteRuns of one batch must have one length, got {sorted(counts)}")
    runs = [np.frombuffer(run, dtype=np.uint8) for sample in samples for run in sample]
    offsets = np.zeros(len(runs) + 1, dtype=np.int64)
    np.cumsum([run.nbytes for run in runs], out=offsets[1:])
    total = int(offsets[-1])
    data = writer.output_array((total,), np.dtype(np.uint8)) if total else None
    if data is None:
        data = np.empty(total, dtype=np.uint8)
    for run, start in zip(runs, offsets[:-1].tolist(), strict=True):
        data[start : start + run.nbytes] = run
    return {"data": data, "offsets": offsets}


def _counters(files: list[ShardFiles]) -> dict[str, int]:
    """Cumulative cache counters of this process's shard files (shard hashes: `ShardHasher`)."""
    totals: dict[str, int] = {"shards_hashed": 0}
    for f in files:
        if f.cache is not None:
            for name, value in asdict(f.cache.stats).items():
                totals[name] = totals.get(name, 0) + value
    return totals


def _as_decoded(sample: dict[str, Any], resize: CameraResize | None) -> dict[str, Any]:
    """Return a `decode="none"` unit as `decode_sample_cameras` makes it, images left unwritten.

    Each camera becomes an uninitialised (H, W, 3) uint8 array of its decoded size, read from
    the JPEG header (the source size, or the `resize` plan's output size; no page is touched),
    and resized cameras get `adjust_calib`'s calib entries, as decoding would give them.

    Raises:
        ValueError: a camera's bytes have no readable JPEG header (simplejpeg).
    """
    if "frames" in sample:  # a temporal window: k frames
        return {**sample, "frames": [_as_decoded(f, resize) for f in sample["frames"]]}
    cameras = {}
    for name, data in sample["cameras"].items():
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
        if resize is not None:
            plan = plan_camera_resize(width, height, resize)
            height, width = plan.height, plan.width
        cameras[name] = np.empty((height, width, 3), dtype=np.uint8)
    out = {**sample, "cameras": cameras}
    calib = (sample.get("calib") or {}).get("cameras", {})
    adjusted = {
        name: adjust_calib(calib[name], resize)
        for name in cameras
        if resize is not None and calib.get(name) is not None
    }
    if adjusted:
        out["calib"] = {**sample["calib"], "cameras": {**calib, **adjusted}}
    return out


def _computed_bytes(obj: Any, writer: SlotWriter | None) -> int:
    """Return the bytes of a sample's arrays/tensors that are not views of its raw bytes.

    Decoded images and transform outputs: what a unit adds to the ring's output area.
    `writer` None: count every array (all of them are copied).
    """
    if isinstance(obj, torch.Tensor):
        obj = obj.numpy() if obj.device.type == "cpu" else None
    if isinstance(obj, np.ndarray):
        return 0 if writer is not None and writer.holds_raw(int(obj.ctypes.data)) else obj.nbytes
    if isinstance(obj, dict):
        return sum(_computed_bytes(v, writer) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(_computed_bytes(v, writer) for v in obj)
    return 0
