"""`build_loader`: the streaming loader the training loop iterates.

Chain: dataset URL(s) -> `DatasetView` (manifest + index) -> units (frames or temporal
windows) -> epoch order (seed, epoch) [-> weighted mix] -> equal per-rank batches ->
DataLoader workers (read, verify, decode, transform, collate) -> batches with "__key__".
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import multiprocessing as mp
import os
import reprlib
import signal
import sys
import threading
import time
import weakref
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, ValidationError
from torch.utils.data import DataLoader
from torch.utils.data._utils import signal_handling

from platform_lib.imaging.decode import decode_batch_cameras_gpu, gpu_decode_available
from platform_lib.loading.cache import CacheStats
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.dataset import STATS_KEY, BatchStream
from platform_lib.loading.errors import (
    CacheFullError,
    ObjectStoreUnreachableError,
    ResumeStateError,
    WorkerTimeoutError,
)
from platform_lib.loading.mixing import EpochOrders
from platform_lib.loading.partition import EpochPlan, plan_epoch, positions_for_batch
from platform_lib.loading.prefetch import iterate_in_background
from platform_lib.loading.ring import Ring, aligned, check_budget, node_shm_budget, unpack_batch
from platform_lib.loading.shared_order import SharedOrders
from platform_lib.loading.transport import WorkerFailure
from platform_lib.loading.windows import build_units
from platform_lib.shards.view import DatasetView, load_view
from platform_lib.storage import StorageUnreachableError, call_with_retries

__all__ = ["LoaderState", "LoaderStats", "StreamingLoader", "build_loader", "resolve_decode"]

DatasetSpec = str | os.PathLike | list[tuple[str | os.PathLike, float]]
#: Longest wait for the one-unit output measurement, in s.
_MEASURE_TIMEOUT_S = 300
_STATE_VERSION = 2
#: One round of waiting for a worker's batch, in s (torch checks worker liveness between rounds).
_POLL_S = 5.0


@dataclass
class LoaderStats(CacheStats):
    """What the loader did on this rank; counts are cumulative over the loader's life.

    The node cache counters (`CacheStats`) are summed over this rank's workers.
    """

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
    shards_hashed: int = 0
    """whole-shard sha256 checks this rank's workers ran (verify="shard"; once per node and
    shard, in the background, the rest are read from the record)"""
    interim_checked: int = 0
    """samples read with per-member sha256 checks while their shard's whole-shard check was
    still running (verify="shard")"""
    ring_fallbacks: int = 0
    """batches that found no room in the ring and travelled in a private shared-memory block"""
    shm_peak_bytes: int = 0
    """/dev/shm bytes of the ring at its peak (pages are allocated when first written and kept
    for reuse until the loader closes; at most header + `LoaderConfig.shm_budget_bytes`)"""
    ring_peak_bytes_in_flight: int = 0
    """most bytes of batches in flight at once (reserved in the ring by a worker until the
    last view of the batch is gone), in bytes"""
    ring_bytes_in_flight: int = 0
    """bytes of batches in flight now, in bytes"""


#: LoaderStats fields the workers count (as deltas riding along with batches).
_COUNTERS = (
    *(f.name for f in fields(CacheStats)),
    "shards_hashed",
    "interim_checked",
    "ring_fallbacks",
)


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


def _measure_child(stream: BatchStream, conn: Any) -> None:
    try:
        conn.send(stream.output_bytes_per_unit())
    except BaseException:  # noqa: BLE001 - the workers raise it again, with context
        conn.send((0, {}))
    finally:
        conn.close()


@contextlib.contextmanager
def _children_leave_parents_garbage() -> Iterator[None]:
    """Fork children that never collect the garbage they inherit (`gc.freeze` around the fork).

    A forked child inherits the parent's uncollected reference cycles. Collected there, their
    finalizers run in a process without the parent's threads: a gloo process group left over
    from an earlier run joins threads that do not exist and the worker dies of SIGSEGV. Frozen
    objects are never collected by the child's GC (they are freed by the parent), and the child
    writes fewer of the parent's pages. Python docs, `gc.freeze`; cheap (lists are spliced).
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def _sigchld_handler_kept() -> Iterator[None]:
    """Keep the process's SIGCHLD handler while DataLoader workers start on the main thread.

    torch installs one there (once per process) that raises a dead worker's error in whatever
    the main thread runs at that moment: another loader's decode, `close()`, a sleep. This
    loader notices dead workers in its own receive rounds and raises there.
    """
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGCHLD) if main else None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGCHLD, previous)


def _measure_outputs(stream: BatchStream, start_method: str) -> tuple[int, dict[str, int]]:
    """Bytes a unit's decode + transform produce, measured on one unit (`output_bytes_per_unit`).

    Measured in a child process started like the workers (`start_method`): the user's
    transform never runs in the training process, and a failing one fails later in a worker,
    with its traceback. A failed
    measurement gives 0: batches then travel through private shared blocks (slower, correct).

    Returns:
        (bytes per unit, counters of the measurement's reads: a shard it downloaded or hashed).
    """
    ctx: Any = mp.get_context(start_method)
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(
        target=_measure_child, args=(stream, sender), daemon=True, name="drivetrain-measure-outputs"
    )
    with _children_leave_parents_garbage():
        child.start()
    sender.close()
    try:
        return receiver.recv() if receiver.poll(_MEASURE_TIMEOUT_S) else (0, {})
    except EOFError:  # the child died (e.g. the transform exited the process)
        return 0, {}
    finally:
        receiver.close()
        child.join(timeout=5)
        if child.is_alive():
            child.kill()
            child.join()


def _measure_from_headers(stream: BatchStream) -> tuple[int, dict[str, int]]:
    """`_measure_outputs` without a `sample_transform`, in this process: no child, no decode.

    The decoded cameras' sizes come from the JPEG headers of one unit
    (`output_bytes_per_unit(from_headers=True)`). A failed measurement gives 0, as in
    `_measure_outputs`: the unit's error is raised by the worker that reads it.
    """
    try:
        return stream.output_bytes_per_unit(from_headers=True)
    except Exception:  # noqa: BLE001 - the workers raise it again, with context
        return 0, {}


def _kill_workers(data_iter: Any) -> None:
    """SIGKILL the workers of a DataLoader iterator (after a missed deadline).

    Their pids leave torch's SIGCHLD watch first: a killed worker must not be reported as a
    crash in the main thread.
    """
    if getattr(data_iter, "_worker_pids_set", False):
        signal_handling._remove_worker_pids(id(data_iter))
        data_iter._worker_pids_set = False
    for worker in getattr(data_iter, "_workers", []):
        if worker.is_alive():
            worker.kill()
            worker.join(timeout=5)


def _as_sources(dataset: DatasetSpec) -> list[tuple[str, float]]:
    if isinstance(dataset, list | tuple):
        if not dataset:
            raise ValueError("dataset: the list of (dataset, weight) pairs is empty")
        return [(os.fspath(d), float(w)) for d, w in dataset]
    return [(os.fspath(dataset), 1.0)]


def _open_view(url: str, split: str | None, cfg: LoaderConfig) -> DatasetView:
    """Load the view of `url` once in the main process (workers inherit it), retrying outages.

    Raises:
        ObjectStoreUnreachableError: the store did not answer after `cfg.max_retries` retries.
    """
    options = dict(cfg.storage_options)
    try:
        return call_with_retries(
            lambda: load_view(
                url,
                split=split,
                storage_options=options,
                error_policy=cfg.error_policy,
                cache_dir=cfg.cache_dir,
            ),
            what="reading",
            url=f"{url}/manifest.json",
            max_retries=cfg.max_retries,
            backoff_s=cfg.retry_backoff_s,
        )
    except StorageUnreachableError as exc:
        raise ObjectStoreUnreachableError(f"{exc}; or raise LoaderConfig.max_retries") from exc


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
        raise ValueError(
            "decode='gpu' decodes whole batches in the main process, after the workers' "
            "sample_transform; use decode='cpu' (or 'none' and decode in the model step)"
        )
    if decode == "gpu" and not gpu_decode_available():
        raise ValueError(
            "decode='gpu' needs a CUDA device and torchvision (nvJPEG); use decode='cpu' or 'auto'"
        )
    return decode


def build_loader(
    dataset: DatasetSpec,
    *,
    rank: int,
    world_size: int,
    batch_size: int,
    num_workers: int,
    seed: int,
    shuffle: bool = True,
    decode: str = "cpu",
    split: str | None = None,
    config: LoaderConfig | None = None,
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
            "none" keeps JPEG bytes (read-only memoryviews of the ring).
        split: index split to load ("train", "val"); None loads every row.
        config: further options (`LoaderConfig`).

    Raises:
        ValueError: bad argument (names it). ManifestMissingError, ManifestError (e.g. an
        absolute or escaping shard path), DatasetIndexError: see `shards.load_view`.
        ObjectStoreUnreachableError: the store did not answer after retries. CacheFullError:
        the cache byte limit is below the largest shard of a remote dataset.
    """
    cfg = config or LoaderConfig()
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
    if batch_size < 1 or num_workers < 0:
        raise ValueError(
            f"batch_size must be >= 1 and num_workers >= 0, got {batch_size}, {num_workers}"
        )
    decode = resolve_decode(decode, cfg)
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    sources = _as_sources(dataset)
    views = [_open_view(url, split, cfg) for url, _ in sources]
    for (url, _), view in zip(sources, views, strict=True):
        if len(view) == 0:  # would otherwise fail cryptically when mixing
            raise ValueError(
                f"dataset {url} has no samples"
                + (f" in split {split!r}" if split else "")
                + "; check `split` (see `drivetrain data inspect`) and the dataset path"
            )
        largest = int(view.shard_bytes.max()) if len(view.shard_bytes) else 0
        if not view.is_local and cfg.cache_limit_bytes < largest:
            raise CacheFullError(
                f"LoaderConfig.cache_limit_bytes={cfg.cache_limit_bytes} is below the largest shard of "
                f"{view.url} ({largest} bytes); raise the limit to at least a few shards"
            )
    units = [
        build_units(v, window_frames=cfg.window_frames, window_stride=cfg.window_stride)
        for v in views
    ]
    return StreamingLoader(
        views=views,
        units=units,
        weights=[w for _, w in sources],
        rank=rank,
        world_size=world_size,
        batch_size=batch_size,
        num_workers=num_workers,
        seed=seed,
        shuffle=shuffle,
        decode=decode,
        config=cfg,
        split=split,
    )


class LoaderState(BaseModel):
    """The resumable position of a `StreamingLoader` and what it belongs to (`state_dict`).

    Identity fields must equal the resuming loader's; layout fields (world size, batch size,
    workers) may differ only where the position maps exactly (see `load_state_dict`).
    """

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    version: int
    """layout of this record (`_STATE_VERSION`)"""
    epoch: int
    """epoch of the next batch"""
    consumed_samples: int
    """global positions of that epoch already handed out, in samples"""
    global_batch: int
    """batch size x world size of the loader that saved it, in samples"""
    seed: int
    shuffle: bool
    num_positions: int
    """global positions per epoch"""
    datasets: list[str]
    """content hash of each dataset"""
    split: str | None
    """index split read ("train", "val"; None: every row)"""
    weights: list[float]
    shuffle_buffer: int
    window_frames: int
    window_stride: int
    pad_policy: str
    world_size: int
    """ranks of the loader that saved it"""
    batch_size: int
    """samples per batch per rank of the loader that saved it"""
    num_workers: int
    """worker processes per rank of the loader that saved it"""


#: Fields a resumed state must share with the loader: another value means other samples.
_IDENTITY = (
    "version",
    "datasets",
    "split",
    "seed",
    "shuffle",
    "num_positions",
    "weights",
    "shuffle_buffer",
    "window_frames",
    "window_stride",
    "pad_policy",
)
_LAYOUT = ("world_size", "batch_size", "num_workers")


def _parse_state(state: Any) -> LoaderState:
    """Return `state` as a `LoaderState`, or raise `ResumeStateError` naming the bad field."""
    if not isinstance(state, dict):
        raise ResumeStateError(
            f"loader state is a {type(state).__name__}, not the dict `state_dict()` returns: "
            "the checkpoint's loader entry is corrupt; resume from another checkpoint"
        )
    if state.get("version") != _STATE_VERSION:
        raise ResumeStateError(
            f"loader state field 'version' is {state.get('version')!r}, this loader has "
            f"{_STATE_VERSION!r}; the state was saved by another loader version: resume from "
            "a checkpoint of this version (or start the epoch afresh)"
        )
    try:
        return LoaderState.model_validate(state)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "state"
        raise ResumeStateError(
            f"loader state field {where!r} is malformed ({first['msg']}; got "
            f"{reprlib.repr(first.get('input'))}): the state is corrupt; resume from another checkpoint"
        ) from None


class StreamingLoader:
    """Iterable of one rank's batches; see `build_loader`. Resumable with `state_dict`."""

    def __init__(
        self,
        *,
        views: list[DatasetView],
        units: list[np.ndarray],
        weights: list[float],
        rank: int,
        world_size: int,
        batch_size: int,
        num_workers: int,
        seed: int,
        shuffle: bool,
        decode: str,
        config: LoaderConfig,
        split: str | None = None,
    ) -> None:
        self.views, self.units, self.weights, self.split = views, units, weights, split
        self.rank, self.world_size, self.batch_size = rank, world_size, batch_size
        self.num_workers, self.seed, self.shuffle, self.decode, self.config = (
            num_workers,
            seed,
            shuffle,
            decode,
            config,
        )
        self.num_positions = (
            (config.mix_epoch_samples or sum(len(u) for u in units))
            if len(views) > 1
            else len(units[0])
        )
        self._plan = plan_epoch(
            self.num_positions,
            batch_size=batch_size,
            world_size=world_size,
            pad_policy=config.pad_policy,
        )
        self._epoch, self._step = 0, 0
        self._orders = EpochOrders(
            unit_shards=[v.shard_id[u[:, 0]] for v, u in zip(views, units, strict=True)],
            weights=list(weights),
            seed=seed,
            shuffle=shuffle,
            shuffle_buffer=config.shuffle_buffer,
            total=self.num_positions,
        )
        self._stats = LoaderStats(index_skipped=[s for v in views for s in v.skipped])
        self._active: weakref.ref[Generator[dict[str, Any], None, None]] | None = None
        self._stream: BatchStream | None = None
        self._data_loader: DataLoader | None = None
        self._data_iter: Any = None
        self._ahead: tuple[int, int] | None = None  # (epoch, step) the workers already produce
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
        return self._orders(epoch)

    def epoch_keys(self, epoch: int) -> list[str]:
        """Return the sample key at each global position of `epoch` (for tests and audits)."""
        source, unit = self.epoch_order(epoch)
        return [
            self.views[s].key(int(self.units[s][u, -1])) for s, u in zip(source, unit, strict=True)
        ]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Yield this rank's remaining batches of the current epoch.

        Starting a new iteration ends the previous one: an older iterator that is still alive
        stops (yields nothing more) and never moves `state_dict`, which therefore always
        reflects what the newest iteration handed out.
        """
        previous = self._active() if self._active is not None else None
        if previous is not None:
            previous.close()  # stops its receiving thread; its batches are dropped
        batches = self._epoch_batches()
        self._active = weakref.ref(batches)  # no reference cycle: workers stop with the loader
        return batches

    def close(self) -> None:
        """Stop the worker processes and release the shared-memory ring.

        Also done on garbage collection; call it to free them at a known point.
        """
        previous = self._active() if self._active is not None else None
        if previous is not None:
            previous.close()
        self._active = None
        self._shutdown_workers()
        if self._stream is not None:
            self._stream.stop_hashing()  # in-process reads (workers end theirs as they exit)
        if self._stream is not None and self._stream.ring is not None:
            self._stream.ring.close()
        if self._stream is not None and self._stream.shared is not None:
            self._stream.shared.close()

    def __enter__(self) -> StreamingLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _build_stream(self) -> BatchStream:
        """Create the batch stream and, with workers, its ring, once.

        The ring's budget is `LoaderConfig.shm_budget_bytes` (default: `node_shm_budget`);
        each batch's extent is sized by its own bytes plus the outputs measured on one unit.
        """
        if self._stream is not None:
            return self._stream
        cfg = self.config
        stream = BatchStream(
            views=self.views,
            units=self.units,
            orders=self._orders,
            plan=self._plan,
            rank=self.rank,
            batch_size=self.batch_size,
            decode="none" if self.decode == "gpu" else self.decode,
            config=cfg,
        )
        if self.num_workers == 0:  # read in this process: no hand-off, no ring
            self._stream = stream
            return stream
        largest = max(int(v.sample_size.max()) if len(v) else 0 for v in self.views)
        raw = cfg.window_frames * aligned(largest)  # the largest unit's sample bytes
        computed = 0
        if cfg.sample_transform is not None:  # the user's code: never run in this process
            computed, counters = _measure_outputs(
                stream, _start_method(cfg) or mp.get_start_method()
            )
            self._absorb({"counters": counters, "skipped": []})
        elif stream.decode != "none":  # decoded sizes from the JPEG headers: no child, no decode
            computed, counters = _measure_from_headers(stream)
            self._absorb({"counters": counters, "skipped": []})
        # a margin for outputs that vary from unit to unit (more is a fallback, counted)
        stream.unit_output_bytes = aligned(computed + computed // 16 + 1024)
        sample = raw + stream.unit_output_bytes
        budget = cfg.shm_budget_bytes or node_shm_budget(cfg.shm_dir)
        check_budget(
            budget,
            batch_size=self.batch_size,
            sample_bytes=sample,
            raw_bytes=raw,
        )
        # receive queue + the loop's batches
        held = -(-(cfg.prefetch_depth + 2) // self.num_workers)
        stream.ring = Ring(
            num_workers=self.num_workers,
            slots_per_worker=cfg.prefetch_depth + held + 1,
            budget_bytes=budget,
            batch_bytes=self.batch_size * sample,
            shm_dir=cfg.shm_dir,
            pin=cfg.pin_memory,
            keep_name=_start_method(cfg) != "fork",
        )
        stream.shared = SharedOrders(self._orders, shm_dir=cfg.shm_dir)
        self._stream = stream
        return stream

    def _batches_of(self, stream: BatchStream) -> Iterator[dict[str, Any]]:
        """Raw (packed) batches of the iteration set in the ring: persistent workers, or in-process."""
        if self.num_workers == 0:
            return iter(stream)
        if self._data_loader is None:
            cfg = self.config
            self._data_loader = DataLoader(
                stream,
                batch_size=None,
                collate_fn=_keep_as_is,
                timeout=min(_POLL_S, cfg.worker_timeout_s),  # rounds of `_within_deadline`
                worker_init_fn=_init_worker,
                num_workers=self.num_workers,
                persistent_workers=True,
                prefetch_factor=cfg.prefetch_depth,
                multiprocessing_context=_start_method(cfg),
            )
        with _children_leave_parents_garbage(), _sigchld_handler_kept():
            self._data_iter = iter(self._data_loader)  # first: start workers; then: reset them
        return self._data_iter

    def _shutdown_workers(self, *, kill: bool = False) -> None:
        """Stop the worker processes; `kill`: SIGKILL them first (a stopped or hung worker never exits)."""
        if kill:
            _kill_workers(self._data_iter)
        # torch's re-raised worker exception sits in a reference cycle with its iterator, so
        # without this the workers would live until a cyclic GC (maybe in a forked child).
        shutdown = getattr(self._data_iter, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        self._data_iter = self._data_loader = None
        self._ahead = None

    def _within_deadline(
        self, batches: Iterator[Any], *, epoch: int, first_step: int
    ) -> Iterator[Any]:
        """Yield `batches` (epoch `epoch` from step `first_step` on), each within `worker_timeout_s`.

        torch's DataLoader waits in `_POLL_S` rounds (checking between them that no worker
        died); the rounds add up to the deadline.

        Raises:
            WorkerTimeoutError: a batch took longer (names the worker, its pid and shards).
        """
        if self.num_workers == 0:  # read in this process: nothing to wait for
            yield from batches
            return
        for step in itertools.count(first_step):
            began = time.monotonic()
            ring = self._stream.ring if self._stream is not None else None
            while True:
                if ring is not None:  # a worker with a full region waits only while we do not
                    ring.await_worker(self._awaited_worker())
                try:
                    batch = next(batches)
                    break
                except StopIteration:
                    return
                except RuntimeError as exc:
                    if not str(exc).startswith("DataLoader timed out"):
                        raise
                    if time.monotonic() - began >= self.config.worker_timeout_s:
                        raise self._worker_timeout(epoch, step) from None
                finally:
                    if ring is not None:
                        ring.await_worker(None)
            yield batch

    def _awaited_worker(self) -> int:
        """The worker whose batch the DataLoader returns next (-1: not known yet)."""
        it = self._data_iter
        task = getattr(it, "_task_info", {}).get(getattr(it, "_rcvd_idx", -1), ())
        return int(task[0]) if len(task) == 1 else -1

    def _worker_timeout(self, epoch: int, step: int) -> WorkerTimeoutError:
        """The error for a batch (`epoch`, `step`) no worker delivered within the deadline.

        Names the worker torch was waiting on (its pid), every worker's pid, the batch's shards
        and the fix.
        """
        it = self._data_iter
        workers = list(getattr(it, "_workers", []))
        task = getattr(it, "_task_info", {}).get(getattr(it, "_rcvd_idx", -1), ())
        awaited = (
            f"worker {task[0]} (pid {workers[task[0]].pid})"
            if task and task[0] < len(workers)
            else "a worker"
        )
        pids = ", ".join(str(w.pid) for w in workers)
        return WorkerTimeoutError(
            f"no batch from loader {awaited} of rank {self.rank} within "
            f"{self.config.worker_timeout_s:g} s: it was making epoch {epoch} step {step} "
            f"({self._shards_of(epoch, step)}; worker pids {pids}); check that worker (a stopped "
            "or hung process, a stalled object store, a slow sample_transform) or raise "
            "LoaderConfig.worker_timeout_s"
        )

    def _shards_of(self, epoch: int, step: int) -> str:
        """Name the shards of this rank's batch at (`epoch`, `step`), for messages."""
        if step >= self._plan.steps:
            return "past the epoch's last batch"
        positions, _ = positions_for_batch(
            self._plan, step=step, rank=self.rank, batch_size=self.batch_size
        )
        source, unit = self._orders(epoch)
        shards = dict.fromkeys(
            f"{self.views[s].url}/{self.views[s].shard_path(int(self.units[s][u, 0]))}"
            for s, u in zip(source[positions], unit[positions], strict=True)
        )
        named = list(shards)[:4]
        more = f" and {len(shards) - 4} more" if len(shards) > 4 else ""
        return "shards " + ", ".join(named) + more

    def _epoch_batches(self) -> Generator[dict[str, Any], None, None]:
        if self._step >= self._plan.steps:  # finished epoch: move on
            self._epoch, self._step = self._epoch + 1, 0
        epoch = self._epoch
        stream = self._build_stream()
        start = self._step
        started = self._ahead == (epoch, start) and self._data_iter is not None
        self._ahead = None
        if not started:
            if stream.ring is not None:
                stream.ring.begin_iteration(self._step)
            stream.start(epoch=epoch, start_step=self._step)
        generation = stream.ring.generation if stream.ring is not None else 0

        def receive(source: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
            try:
                for batch in self._within_deadline(source, epoch=epoch, first_step=start):
                    if isinstance(batch, WorkerFailure):
                        raise batch.error
                    batch = unpack_batch(batch, stream.ring)
                    batch["__padded__"] = torch.from_numpy(batch["__padded__"])
                    batch["__source__"] = torch.from_numpy(
                        np.asarray(batch["__source__"], dtype=np.int64)
                    )
                    yield batch
            except Exception as exc:
                # a failed iteration: start afresh next time; a timed-out worker is killed
                self._shutdown_workers(kill=isinstance(exc, WorkerTimeoutError))
                raise
            if stream.ring is not None and not stream.ring.is_current(generation):
                return  # left mid-epoch: the workers stopped, the epoch is not over
            if self.num_workers > 0:
                # Every batch of this epoch is received: start the persistent workers on the next
                # epoch now, so its first batches are made while the training loop still works on
                # this epoch's last ones (no input stall at the epoch boundary). The position
                # (`state_dict`) still moves only with consumed batches; an `__iter__` at another
                # position (set_epoch, load_state_dict) restarts the workers there.
                if stream.ring is not None:
                    stream.ring.begin_iteration(0)
                stream.start(epoch=epoch + 1, start_step=0)
                self._ahead = (epoch + 1, 0)
                self._batches_of(stream)

        self._begin_epoch_stats(epoch)
        depth = self.config.prefetch_depth
        batches: Any = None
        try:
            # Workers are started (forked) here, on the thread that iterates the loader. A fork
            # from the receive thread would delete this thread's state in every worker, running
            # the finalisers of its thread-locals there: torch's DTensor sharding cache holds
            # process groups, whose destructor joins threads the worker does not have (SIGSEGV).
            try:
                source = self._data_iter if started else self._batches_of(stream)
            except Exception:
                self._shutdown_workers()
                raise
            batches = (
                iterate_in_background(lambda: receive(source), depth=depth)
                if self.num_workers > 0
                else receive(source)
            )
            for batch in batches:
                self._absorb(batch.pop(STATS_KEY))
                if self.decode == "gpu":
                    batch = decode_batch_cameras_gpu(batch, self.config.camera_resize)
                self._step += 1
                yield batch
        finally:
            if stream.ring is not None:  # workers stop making batches nobody will receive
                stream.ring.abandon(generation)
            if batches is not None:
                batches.close()
        if self._step >= self._plan.steps and self._epoch == epoch:
            self._epoch, self._step = epoch + 1, 0

    def _begin_epoch_stats(self, epoch: int) -> None:
        plan, b = self._plan, self.batch_size
        raw = (
            (np.arange(plan.steps, dtype=np.int64) * plan.global_batch)[:, None]
            + self.rank * b
            + np.arange(b)
        )
        self._stats.epoch, self._stats.steps_per_epoch = epoch, plan.steps
        self._stats.padded = int((raw >= plan.num_positions).sum())
        self._stats.padded_global, self._stats.dropped_global = plan.padded, plan.dropped

    def _absorb(self, worker_stats: dict[str, Any]) -> None:
        counters = worker_stats["counters"]
        for name in _COUNTERS:
            setattr(self._stats, name, getattr(self._stats, name) + counters.get(name, 0))
        self._stats.skipped += len(worker_stats["skipped"])
        self._stats.skipped_samples.extend(worker_stats["skipped"])

    @property
    def stats(self) -> LoaderStats:
        """Counters so far (padding of the current epoch, skips, object-store requests, ring)."""
        stats = LoaderStats(**{**self._stats.__dict__})
        ring = self._stream.ring if self._stream is not None else None
        if ring is not None:
            stats.shm_peak_bytes = ring.shm_bytes()
            stats.ring_bytes_in_flight = ring.in_use()
            stats.ring_peak_bytes_in_flight = max(ring.peak_in_use, stats.ring_bytes_in_flight)
        return stats

    def state_dict(self) -> dict[str, Any]:
        """Return the resumable position: epoch and global samples consumed, plus what they belong to.

        The fields are those of `LoaderState`: the dataset hashes, split, seed and order
        options, and the layout (world size, batch size, workers) of this loader. Right after
        an epoch's last batch the position is the start of the next epoch, so a job resumed
        from it (e.g. `iterate_epochs` from `loader.epoch`) does not repeat one.
        """
        epoch, step = self._epoch, self._step
        if step >= self._plan.steps:
            epoch, step = epoch + 1, 0
        return {
            "version": _STATE_VERSION,
            "epoch": epoch,
            "consumed_samples": step * self._plan.global_batch,
            "global_batch": self._plan.global_batch,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "num_positions": self.num_positions,
            "datasets": [v.dataset_hash for v in self.views],
            "split": self.split,
            "weights": [float(w) for w in self.weights],
            "shuffle_buffer": self.config.shuffle_buffer,
            "window_frames": self.config.window_frames,
            "window_stride": self.config.window_stride,
            "pad_policy": self.config.pad_policy,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "num_workers": self.num_workers,
        }

    def load_state_dict(self, state: dict[str, Any], *, same_layout: bool = False) -> None:
        """Continue from `state`: the next batch holds exactly the first unseen global positions.

        A state saved with another world size, batch size or worker count resumes exactly
        when its consumed samples are a whole number of this loader's global batches (the
        order never depends on the layout); otherwise the error names each layout field
        that changed with both values.

        Args:
            state: a `state_dict()` of an earlier loader (e.g. from a checkpoint).
            same_layout: also refuse a state saved with another world size, batch size or
                worker count, even where the position maps exactly.

        Raises:
            ResumeStateError: the state is not a well-formed `LoaderState` (names the field),
                belongs to another dataset, split, seed or order (names the field and both
                values), has a negative epoch or position, or does not fit this layout.
        """
        saved = _parse_state(state)
        mine = self.state_dict()
        for name in _IDENTITY:
            if getattr(saved, name) != mine[name]:
                raise ResumeStateError(
                    f"loader state field {name!r} is {getattr(saved, name)!r}, this loader has "
                    f"{mine[name]!r}; resume with the same dataset, split, seed and order options"
                )
        consumed, epoch = saved.consumed_samples, saved.epoch
        if epoch < 0 or consumed < 0 or saved.global_batch < 1:
            raise ResumeStateError(
                f"loader state has epoch {epoch}, {consumed} consumed samples and global batch "
                f"{saved.global_batch}; they must be >= 0, >= 0 and >= 1: the state is corrupt"
            )
        changed = [
            f"{name} {getattr(saved, name)} -> {mine[name]}"
            for name in _LAYOUT
            if getattr(saved, name) != mine[name]
        ]
        if changed and (same_layout or consumed % self._plan.global_batch):
            why = (
                f"{consumed} consumed samples (global batch {saved.global_batch}) is not a "
                f"multiple of this loader's global batch {self._plan.global_batch}"
                if consumed % self._plan.global_batch
                else "same_layout=True"
            )
            raise ResumeStateError(
                f"loader state was saved with another layout ({', '.join(changed)}) and {why}; "
                "keep world_size, batch_size and num_workers when resuming (or a global batch "
                "that divides the consumed samples)"
            )
        if consumed % self._plan.global_batch:
            raise ResumeStateError(
                f"{consumed} consumed samples (global batch {saved.global_batch}) is not a "
                f"multiple of this loader's global batch {self._plan.global_batch}; the state "
                "is corrupt"
            )
        self._epoch, self._step = epoch, consumed // self._plan.global_batch
        if self._step >= self._plan.steps:  # saved right after the epoch's last batch
            self._epoch, self._step = epoch + 1, 0
